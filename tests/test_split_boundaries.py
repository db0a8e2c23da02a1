"""Splitter boundaries a reader would choose: one small realistic fixture per case seen on real
files (issue 11 item 3). Each test splits through `split_file` and looks at the segment texts."""
import os

from base import HermeticTestCase

import nagent_file_split_lib as split_lib


def c_function(n):
    return (f"/* Return the checksum of block {n}. */\n"
            f"static unsigned block_sum_{n}(const unsigned char *p, size_t len)\n"
            "{\n"
            "    unsigned sum = 0;\n"
            "    for (size_t i = 0; i < len; i++) {\n"
            f"        sum = sum * 31 + p[i] + {n};\n"
            "    }\n"
            "    return sum;\n"
            "}\n\n")


class SplitCase(HermeticTestCase):
    def split(self, name, content, target=None, split_type=None):
        source = self.write_file(name, content)
        index = split_lib.split_file(source, "out", target or split_lib.DEFAULT_TARGET_BYTES,
                                     split_type)
        texts = []
        for record in index["segments"]:
            with open(os.path.join("out", record["file"]), encoding="utf-8", newline="") as handle:
                texts.append(handle.read())
        self.assertEqual("".join(texts), content)
        return index, texts

    def assertStartsAll(self, texts, prefixes, skip_first=True):
        for text in texts[1:] if skip_first else texts:
            self.assertTrue(text.startswith(prefixes), repr(text[:120]))


class CBoundaryTest(SplitCase):
    def test_preprocessor_branches_that_each_open_a_brace_keep_depth(self):
        # httplib.cpp: `#ifdef _WIN32 / if (...) { / #else / if (...) { / #endif` counted twice.
        head = ("#include <stddef.h>\n\n"
                "static int open_socket(int family)\n{\n"
                "#ifdef _WIN32\n    if (family == AF_INET6 && win_has_ipv6()) {\n"
                "#else\n    if (family == AF_INET6) {\n#endif\n"
                "        return socket6();\n    }\n    return socket4();\n}\n\n")
        index, texts = self.split("net.c", head + "".join(c_function(n) for n in range(30)), 600)
        self.assertGreater(len(texts), 5)
        self.assertStartsAll(texts, ("/* Return the checksum", "static int open_socket"))

    def test_if0_blocks_do_not_count(self):
        head = ("#if 0\nstatic void old_code(void) {\n    {\n#endif\n\n")
        index, texts = self.split("old.c", head + "".join(c_function(n) for n in range(30)), 600)
        self.assertGreater(len(texts), 5)
        self.assertStartsAll(texts, ("/* Return the checksum",))

    def test_header_with_cpp_content_is_cpp(self):
        body = ("#pragma once\n#include <vector>\n\nnamespace geo {\n\n"
                + "".join(f"class Shape{n} {{\npublic:\n    double area() const {{ return {n}.0; }}\n"
                          f"    double perimeter() const {{ return {n}.5; }}\n}};\n\n"
                          for n in range(40))
                + "}  // namespace geo\n")
        index, texts = self.split("shapes.h", body, 700)
        self.assertEqual(index["split_type"], "cpp")
        self.assertGreater(len(texts), 4)
        self.assertStartsAll(texts, ("class Shape", "namespace geo {"))
        self.assertTrue(all(r.get("inside") == "namespace geo {" for r in index["segments"][1:]))
        plain = self.write_file("plain.h", "#include <stdio.h>\nint add(int a, int b);\n")
        self.assertEqual(split_lib.split_file(plain, "out2")["split_type"], "c")

    def test_long_define_runs_are_cut_between_directives(self):
        # valgrind.h: hundreds of kB of #define lines and nothing else.
        macro = ("#define VALGRIND_DO_CLIENT_REQUEST_{n}(_zzq_rlval, _zzq_default)     \\\n"
                 "  __extension__                                                   \\\n"
                 "  ({{ volatile unsigned long int _zzq_args[6];                     \\\n"
                 "    _zzq_args[0] = (unsigned long int)({n});                      \\\n"
                 "    _zzq_result; }})\n")
        content = "#ifndef VG_H\n#define VG_H\n" + "".join(macro.format(n=n)
                                                          for n in range(900)) + "#endif\n"
        self.assertGreater(len(content), 200_000)
        index, texts = self.split("vg.h", content)
        self.assertGreater(len(texts), 10)
        for text in texts:
            self.assertLessEqual(len(text.encode()), split_lib.DEFAULT_TARGET_BYTES)
        for text in texts[1:]:
            self.assertTrue(text.startswith("#define"), repr(text[:80]))

    def test_segment_never_starts_with_a_closing_line(self):
        chunks = []
        for n in range(25):
            chunks.append(f"#ifdef HAVE_FEATURE_{n}\n" + c_function(n).rstrip("\n")
                          + f"\n#endif /* HAVE_FEATURE_{n} */\n")
        content = "NAMESPACE_BEGIN(detail)\n\n" + "".join(chunks) + "NAMESPACE_END(detail)\n\n" \
            + "".join(c_function(n) for n in range(100, 110))
        for target in (300, 700, 1500):
            index, texts = self.split("feat.cpp", content, target)
            for text in texts:
                self.assertFalse(text.startswith(("#endif", "NAMESPACE_END", "}")),
                                 (target, text[:80]))


class JavaScriptBoundaryTest(SplitCase):
    def test_regex_literal_with_slashes_is_not_a_comment(self):
        # typescript.js: `/\*\//g` read as a line comment broke the depth for 1.8 MB.
        functions = "".join(f"function strip{n}(text) {{\n"
                            f"    return text.replace(/\\*\\//g, '').replace(/[/]{{2}}/, '{n}');\n"
                            "}\n\n" for n in range(40))
        content = "'use strict';\nconst closers = /\\*\\//g;\n\n" + functions
        index, texts = self.split("strip.js", content, 400)
        self.assertGreater(len(texts), 5)
        self.assertStartsAll(texts, ("function strip",))

    def test_template_literal_with_nested_braces(self):
        functions = "".join(f"function view{n}(item) {{\n"
                            f"    return `<li class=\"${{item.ok ? `on-{{` : '}}'}}\">${{item.name}}</li>`;\n"
                            "}\n\n" for n in range(40))
        index, texts = self.split("view.js", functions, 400)
        self.assertGreater(len(texts), 5)
        self.assertStartsAll(texts, ("function view",), skip_first=False)

    def test_typescript_global_block_is_refined(self):
        members = "".join(f"    interface Window{n} {{\n        handler{n}(event: Event): void;\n"
                          f"        value{n}: string;\n    }}\n" for n in range(40))
        content = "export {};\n\ndeclare global {\n" + members + "}\n"
        index, texts = self.split("globals.d.ts", content, 600)
        self.assertGreater(len(texts), 4)
        self.assertStartsAll(texts, ("    interface Window", "declare global"))
        self.assertTrue(all(r.get("inside") == "declare global {" for r in index["segments"][2:]),
                        index["segments"])


class RustBoundaryTest(SplitCase):
    def test_macro_block_is_refined(self):
        items = "".join(f"    static ref TABLE_{n}: HashMap<u32, &'static str> = {{\n"
                        f"        let mut m = HashMap::new();\n        m.insert({n}, \"v{n}\");\n"
                        "        m\n    };\n" for n in range(40))
        content = "use std::collections::HashMap;\n\nlazy_static! {\n" + items + "}\n"
        index, texts = self.split("tables.rs", content, 700)
        self.assertGreater(len(texts), 4)
        self.assertStartsAll(texts, ("    static ref TABLE_", "lazy_static!"))


class PythonBoundaryTest(SplitCase):
    def test_multi_line_decorators_stay_with_their_def(self):
        handlers = "".join(f"@app.route(\n    \"/items/{n}\",\n    methods=[\"GET\", \"POST\"],\n)\n"
                           f"def handler_{n}(request):\n    return render(request, {n})\n\n\n"
                           for n in range(30))
        index, texts = self.split("views.py", "from app import app, render\n\n\n" + handlers, 300)
        self.assertGreater(len(texts), 5)
        self.assertStartsAll(texts, ("@app.route(\n",))

    def test_def_whose_first_body_line_is_class_is_not_a_container(self):
        body = "".join(f"    value_{n} = Local().compute({n})\n" for n in range(120))
        big = ("def test_local_class():\n    class Local:\n        def compute(self, n):\n"
               "            return n * 2\n" + body + "\n\n")
        content = "import unittest\n\n\n" + big + "def test_other():\n    pass\n"
        index, texts = self.split("test_abc.py", content, 400)
        self.assertIn(big, texts)

    def test_module_level_code_after_a_def_does_not_stick_to_it(self):
        calls = "".join(f"add_newdoc('numpy.core', 'thing{n}',\n    \"\"\"\n    Documentation of "
                        f"thing {n}.\n\n    Returns\n    -------\n    out : ndarray\n    \"\"\")\n\n"
                        for n in range(200))
        content = "def add_newdoc(place, name, doc):\n    pass\n\n\n" + calls
        index, texts = self.split("_add_newdocs.py", content, 2000)
        self.assertGreater(len(texts), 5)
        for text in texts:
            self.assertLessEqual(len(text.encode()), 2000)
        self.assertStartsAll(texts, ("add_newdoc('numpy.core'",))

    def test_untokenizable_files_fall_back_and_stay_exact(self):
        # Inconsistent dedent, a stray closing bracket and an unterminated triple quote.
        broken = "".join(f"def f{n}():\n    if True:\n\treturn {n}\n  x = ]\n\n\n" for n in range(40))
        content = broken + "def tail():\n    s = '''never closed\n" + "text\n" * 50
        index, texts = self.split("broken.py", content, 300)
        self.assertGreater(len(texts), 5)
        self.assertStartsAll(texts, ("def f", "def tail"))


class MarkdownBoundaryTest(SplitCase):
    def test_long_list_without_blank_lines_is_cut_between_items(self):
        items = "".join(f"- Fix #{n}: the parser no longer drops trailing comments in long "
                        f"configuration files (reported by user{n}).\n" for n in range(1500))
        content = "# Changelog\n\n## 2.0.0\n" + items
        index, texts = self.split("CHANGELOG.md", content)
        self.assertGreater(len(texts), 5)
        for text in texts:
            self.assertLessEqual(len(text.encode()), split_lib.DEFAULT_TARGET_BYTES)
        self.assertStartsAll(texts, ("- Fix #", "## 2.0.0"))


class PythonReductionTest(HermeticTestCase):
    """tokenize is fed reduced lines (nagent_split_python.reduced_line) and blank lines are
    skipped: the structure found must equal what the full lines give."""

    TRICKY = ('x = "# not a comment" + \'\\\'\' # comment "quote\n'
              's = """\n  # inside a string ( [ {\n\n  still "" inside \\""" too\n"""\n'
              '@decorate(\n\n    "arg",  # with a blank line inside\n)\ndef f(a,\n      b):\n'
              '    return (a +\n            b)  # ) ] }\n\n\nclass C:\n    ...\n'
              '    value = \\\n        3\n    def g(self): return f"{self!r}"\n'
              'if x:\n    pass\nelse:\n    y = [1,\n\n         2]\n\x0cz = rb\'\\\\\'\n'
              'css = """\n  a {color:#fff}"""\ndef after():\n    pass\n')

    def scan_both(self, data):
        import nagent_split_python as py
        from nagent_split_scan import Builder
        results = []
        for reduce in (py.reduced_line, lambda line: line):
            original, py.reduced_line = py.reduced_line, reduce
            builder = Builder()
            try:
                py._scan_tokenize(data, 0, builder)
            finally:
                py.reduced_line = original
            results.append([list(getattr(builder, name)) for name in (
                "cand_pos", "cand_level", "attach_pos", "attach_level", "mask_start",
                "mask_end")])
        return results

    def test_reduced_lines_give_the_same_structure(self):
        golden = os.path.join(os.path.dirname(__file__), "golden", "split", "python", "input.py")
        with open(golden, "rb") as handle:
            samples = [handle.read(), self.TRICKY.encode("utf-8")]
        for data in samples:
            reduced, full = self.scan_both(data)
            self.assertEqual(reduced, full)
            self.assertGreater(len(reduced[0]), 5)
