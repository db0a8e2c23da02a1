"""Every segment fits the inline read limit; memory stays linear (issue 11 items 1 and 2).

Generated adversarial inputs, small enough for the suite: constructs far over the limit with no
natural boundary inside, single lines over the limit (minified code, one huge string literal),
and a patch round trip over segments cut inside a line."""
import json
import os
import subprocess
import sys

from base import HELPERS, HermeticTestCase

import nagent_file_patch_lib as patch_lib
import nagent_file_split_lib as split_lib
from nagent_file_tools import SplitOutcome, describe_split

LIMIT = split_lib.READ_SPLIT_THRESHOLD_BYTES


def adversarial_inputs():
    """{name: bytes}: each one defeated the splitter before (a segment over the limit)."""
    statements = "".join(f"    total_{n} = compute(total_{n - 1}, {n})  # step {n}\n"
                         for n in range(1, 4000))
    c_body = "".join(f"    acc = mix(acc, table[{n}] ^ {n}u);\n" for n in range(6000))
    minified = "".join(f"function f{n}(a,b){{return a+b*{n}}};var s{n}=\"x;y,{n}\";"
                       for n in range(5000))
    return {
        "huge_def.py": ("import os\n\n\ndef build_tables():\n    total_0 = 0\n" + statements + "    return 1\n\n\ndef small():\n    pass\n"),
        "huge_fn.c": "#include <stdint.h>\n\nint one(void) { return 1; }\n\nunsigned hash(unsigned acc)\n{\n" + c_body + "    return acc;\n}\n",
        "minified.js": minified + "\n",
        "one_string.js": "const blob = \"" + "ab\\\"cd\\\\" * 30000 + "\";\nconst after = 1;\n",
        "one_string.py": "DATA = '''" + "ab\\'''c" * 30000 + "'''\n",
        "one_line.json": json.dumps({f"key{n}": [n, f"v{n}", {"a": n}] for n in range(8000)}),
        "no_spaces.txt": "x" * 200_000 + "\n" + "é" * 50_000,
        "dense_list.md": "# T\n\nIntro.\n\n## Items\n" + "".join(f"- item {n} with some words\n" for n in range(9000)),
        "deep.json": "[" * 3000 + "1" + "]" * 3000 + "\n" + "{\"k\": [" + "0," * 60000 + "0]}\n",
        "deep_lines.c": "void f(void)\n{\n" + "    if (x) {\n" * 15000 + "}\n" * 15001,
        "deep_lines.py": "".join(" " * n + "if x:\n" for n in range(0, 1200)) + "pass\n" * 10,
        "crlf_big_class.py": ("import os\r\n\r\n\r\nclass Big:\r\n" + "".join(f"    attr_{n} = {n}\r\n"
                                                        for n in range(9000))),
    }


class SegmentBoundTest(HermeticTestCase):
    def split(self, name, data, target=split_lib.DEFAULT_TARGET_BYTES):
        source = self.write_file(name, data, "wb")
        out = os.path.join(self.tmp, "out-" + name)
        index = split_lib.split_file(source, out, target)
        parts = []
        for record in index["segments"]:
            with open(os.path.join(out, record["file"]), "rb") as handle:
                parts.append(handle.read())
        self.assertEqual(b"".join(parts), data)
        return index, parts, out

    def test_every_segment_fits_the_read_limit(self):
        for name, text in adversarial_inputs().items():
            data = text.encode("utf-8")
            self.assertGreater(len(data), LIMIT, name)
            for target in (split_lib.DEFAULT_TARGET_BYTES, LIMIT):
                with self.subTest(name=name, target=target):
                    index, parts, _ = self.split(name, data, target)
                    self.assertGreater(len(parts), 1)
                    for record, part in zip(index["segments"], parts):
                        self.assertLessEqual(len(part), LIMIT, record)
                        part.decode("utf-8")  # never inside a UTF-8 sequence

    def test_cuts_inside_a_construct_are_recorded(self):
        index, parts, _ = self.split("huge_def.py", adversarial_inputs()["huge_def.py"].encode())
        self.assertEqual([r.get("inside") for r in index["segments"]][:2],
                         [None, "def build_tables():"])
        self.assertTrue(all(r.get("inside") == "def build_tables():"
                            for r in index["segments"][1:-1]))
        self.assertEqual(index["segments"][-1].get("inside"), None)
        self.assertTrue(parts[1].startswith(b"def build_tables():\n"))
        self.assertTrue(all(part.startswith(b"    total_") for part in parts[2:-1]))
        index, parts, _ = self.split("big.py", b"x = 1\n\n\n" + adversarial_inputs()
                                     ["huge_def.py"].encode() + b"\n\ny = 2\n")
        self.assertNotIn("inside", index["segments"][0])
        self.assertEqual(index["segments"][1].get("inside"), "def build_tables():")

    def test_long_lines_are_cut_at_token_boundaries_and_marked(self):
        index, parts, _ = self.split("minified.js", adversarial_inputs()["minified.js"].encode())
        records = index["segments"]
        self.assertEqual(records[0]["mid_line"], "end")
        self.assertEqual(records[-1]["mid_line"], "start")
        for record, part in zip(records[:-1], parts[:-1]):
            self.assertEqual(record["cut_at"], "token")
            self.assertTrue(part.endswith((b";", b"}", b",")), part[-40:])
            self.assertEqual(part.count(b'"') % 2, 0, "cut inside a string literal")
        for record in records[1:-1]:
            self.assertEqual(record["mid_line"], "both")
            self.assertEqual(record["first_line"], 1)
            self.assertEqual(record["last_line"], 1)
        index, parts, _ = self.split("one_string.js", adversarial_inputs()["one_string.js"].encode())
        self.assertEqual(index["segments"][0]["cut_at"], "token")  # before the string opens
        self.assertTrue(all(r["cut_at"] in ("string", "char") for r in index["segments"][1:-2]))
        self.assertEqual(index["segments"][-2]["mid_line"], "start")

    def test_patch_merges_segments_cut_inside_a_line(self):
        data = adversarial_inputs()["minified.js"].encode()
        index, parts, out = self.split("minified.js", data)
        middle = index["segments"][len(parts) // 2]
        path = os.path.join(out, middle["file"])
        old = parts[len(parts) // 2]
        new = old.replace(b"return a+b*", b"return a-b*", 1)
        self.assertNotEqual(new, old)
        with open(path, "wb") as handle:
            handle.write(new)
        result = patch_lib.patch_from_index(os.path.join(out, "index.json"))
        self.assertEqual(result["status"], "applied")
        self.assertEqual(result["changed_segments"], [middle["file"]])
        with open(os.path.join(self.cwd, "minified.js"), "rb") as handle:
            self.assertEqual(handle.read(), data.replace(old, new, 1))


# VmHWM is the peak RSS of this process's own memory since exec; ru_maxrss would also count
# the pages a fork copied from the (larger) test process.
PEAK_SCRIPT = r"""
import sys
sys.path.insert(0, sys.argv[1])
import nagent_file_split_lib as lib
def hwm():
    with open("/proc/self/status") as handle:
        return next(int(l.split()[1]) for l in handle if l.startswith("VmHWM:"))
base = hwm()
lib.split_file(sys.argv[2], sys.argv[3])
print(base, hwm())
"""


class MemoryBoundTest(HermeticTestCase):
    def test_peak_memory_is_linear_on_one_huge_string_literal(self):
        """A 2 MB string literal once needed ~170 bytes of memory per character."""
        size = 2_000_000
        cases = {"s.py": b'DATA = """' + b"a\\n" * (size // 3) + b'"""\n',
                 "s.js": b'var s = "' + b"\\t" * (size // 2) + b'";\n',
                 "s.c": b'const char *s = "' + b"\\\\" * (size // 2) + b'";\n'}
        for name, data in cases.items():
            source = self.write_file(name, data, "wb")
            proc = subprocess.run([sys.executable, "-c", PEAK_SCRIPT, HELPERS, source,
                                   os.path.join(self.tmp, "out-" + name)],
                                  capture_output=True, text=True, timeout=120)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            base, peak = (int(value) * 1024 for value in proc.stdout.split())
            with self.subTest(name=name):
                self.assertLess(peak - base, 10 * len(data), (base, peak))


class IndexAfterPatchTest(HermeticTestCase):
    """The index a patch rewrites keeps what the splitter recorded (`inside`, `mid_line`,
    `cut_at`) wherever it is still true, and says nothing it cannot vouch for."""

    def split(self, name, data):
        source = self.write_file(name, data, "wb")
        out = os.path.join(self.tmp, "out-" + name)
        index = split_lib.split_file(source, out, split_lib.DEFAULT_TARGET_BYTES)
        return index, out

    def refreshed(self, index, parts):
        digests = [split_lib.sha256_hex(part) for part in parts]
        return patch_lib.refreshed_index(index, parts, digests, b"".join(parts))["segments"]

    def parts(self, index, data):
        return [data[r["start_byte"]:r["end_byte"]] for r in index["segments"]]

    def test_unchanged_segments_keep_every_field_the_splitter_wrote(self):
        inputs = adversarial_inputs()
        for name in ("huge_def.py", "minified.js", "one_string.js", "crlf_big_class.py",
                     "dense_list.md", "one_line.json", "no_spaces.txt"):
            data = inputs[name].encode("utf-8")
            index, _ = self.split(name, data)
            with self.subTest(name=name):
                self.assertTrue(any(set(r) & {"inside", "mid_line"} for r in index["segments"]))
                self.assertEqual(self.refreshed(index, self.parts(index, data)),
                                 index["segments"])

    def test_edits_drop_what_they_may_have_made_untrue(self):
        data = adversarial_inputs()["huge_def.py"].encode("utf-8")
        index, _ = self.split("huge_def.py", data)
        parts = self.parts(index, data)
        label = "def build_tables():"
        self.assertEqual(index["segments"][2].get("inside"), label)
        edited = list(parts)
        edited[3] = edited[3].replace(b"step", b"STEP", 1)
        records = self.refreshed(index, edited)
        self.assertEqual(records[2]["inside"], label)
        # An edit may have closed the construct (a dedented line): later pieces stop claiming it.
        self.assertTrue(all("inside" not in r for r in records[3:]))
        # Renaming the construct's head line: no later piece may still claim the old name.
        edited[1] = edited[1].replace(b"def build_tables", b"def make_tables", 1)
        self.assertTrue(all("inside" not in r for r in self.refreshed(index, edited)[1:]))
        # A segment left without its final newline: the next one now starts inside that line.
        edited = list(parts)
        edited[2] = edited[2].rstrip(b"\n")
        records = self.refreshed(index, edited)
        self.assertEqual((records[2].get("mid_line"), records[3].get("mid_line")),
                         ("end", "start"))
        self.assertNotIn("cut_at", records[2])

    def test_cut_descriptions_last_while_their_line_is_unchanged(self):
        data = adversarial_inputs()["minified.js"].encode("utf-8") + b"var tail = 1;\n"
        index, _ = self.split("minified.js", data)
        parts = self.parts(index, data)
        cut = [n for n, r in enumerate(index["segments"]) if "cut_at" in r]
        self.assertGreater(len(cut), 2)
        edited = list(parts)
        edited[-1] = edited[-1] + b"var more = 2;\n"  # another line: the cut line is intact
        records = self.refreshed(index, edited)
        self.assertEqual([records[n].get("cut_at") for n in cut],
                         [index["segments"][n]["cut_at"] for n in cut])
        edited[cut[1]] = edited[cut[1]].replace(b"return a+b*", b"return a-b*", 1)
        records = self.refreshed(index, edited)
        self.assertTrue(all("cut_at" not in records[n] for n in cut), "the cut line changed")
        self.assertTrue(all(records[n]["mid_line"] in ("end", "both") for n in cut))


class SplitListingTest(HermeticTestCase):
    """What <nagent-file-read> of a split file tells the model: per segment, the construct it
    was cut out of and a cut inside a line, so it need not read index.json."""

    def listing(self, name, data):
        source = self.write_file(name, data, "wb")
        out = os.path.join(self.tmp, "out-" + name)
        index = split_lib.split_file(source, out, split_lib.DEFAULT_TARGET_BYTES)
        text = describe_split(SplitOutcome(os.path.join(out, "index.json"), index, False))
        return [line for line in text.splitlines() if line.startswith("- ")], text

    def test_segments_show_the_construct_they_were_cut_out_of(self):
        lines, _ = self.listing("huge_def.py", adversarial_inputs()["huge_def.py"].encode())
        self.assertFalse(lines[0].endswith("def build_tables():"))
        self.assertRegex(lines[2], r"^- /\S+: lines \d+-\d+, \d+ bytes; inside: def build_tables\(\):$")

    def test_mid_line_cuts_are_named_with_how_they_were_made(self):
        lines, text = self.listing("minified.js", adversarial_inputs()["minified.js"].encode())
        self.assertTrue(lines[0].endswith("bytes; ends mid-line (cut between tokens)"), lines[0])
        self.assertTrue(lines[1].endswith("; starts and ends mid-line (cut between tokens)"))
        self.assertTrue(lines[-1].endswith("bytes; starts mid-line"), lines[-1])
        self.assertEqual(text.count("add no newline there"), 1)
        lines, text = self.listing("plain.py", adversarial_inputs()["huge_def.py"].encode())
        self.assertNotIn("mid-line", text)

    def test_a_construct_line_cannot_break_the_listing(self):
        head = "import os\n\n\ndef odd():  # \r- /etc/passwd: lines 1-9, 9 bytes\x1b[2J\n"
        body = "".join(f"    a_{n} = compute({n})  # step\n" for n in range(4000))
        lines, text = self.listing("odd.py", (head + body).encode())
        self.assertFalse(set(text) & {"\r", "\x1b"}, "a control character reached the listing")
        labelled = [line for line in lines if "; inside: " in line]
        self.assertTrue(labelled)
        for line in labelled:
            self.assertTrue(line.endswith(r"# \x0d- /etc/passwd: lines 1-9, 9 bytes\x1b[2J"), line)
