"""nagent-file-split: byte-exact round trips, natural boundaries, goldens, index, CLI."""
import glob
import hashlib
import json
import os
import random

from base import TESTS, HermeticTestCase

import nagent_file_split_lib as split_lib
from nagent_errors import InputError, UsageError

GOLDEN = os.path.join(TESTS, "golden", "split")
GOLDEN_TARGETS = (250, 600)
ENDINGS = ("lf", "crlf", "mixed", "no-final-newline", "bom", "non-ascii")
ODD_TEXT = ("é", "漢字", "🙂", "\u2028", "\x0b", "\x0c", "\x1c", "\r", "\x85")


def golden_inputs():
    """{split type directory: input path} for every golden language."""
    return {os.path.basename(os.path.dirname(path)): path
            for path in sorted(glob.glob(os.path.join(GOLDEN, "*", "input.*")))}


def golden_lines(language):
    with open(golden_inputs()[language], encoding="utf-8") as handle:
        return handle.read().split("\n")


def generated_lines(language, rng, count):
    """Random windows of this language's realistic sample, plus stray syntax: unbalanced
    braces, quotes and comment openers exercise the approximate nesting scanners."""
    source = golden_lines(language)
    noise = ["", "}", "{", "\"unterminated", "/* open comment", "'''", '"""', "<!--", "-->",
             "]", "[", "# heading", "---", "  - item", "<tag>", "</tag>", "```"]
    lines = []
    while len(lines) < count:
        if rng.random() < 0.1:
            lines.append(rng.choice(noise))
            continue
        start = rng.randrange(len(source))
        lines.extend(source[start:start + rng.randint(1, 25)])
    return lines[:count]


def encode(lines, ending, rng):
    if ending == "crlf":
        return ("\r\n".join(lines) + "\r\n").encode("utf-8")
    if ending == "mixed":
        return "".join(line + rng.choice(("\n", "\r\n", "\n", "\r\r\n")) for line in lines).encode()
    if ending == "no-final-newline":
        return "\n".join(lines).rstrip("\n").encode("utf-8")
    if ending == "bom":
        return split_lib.BOM + ("\n".join(lines) + "\n").encode("utf-8")
    if ending == "non-ascii":
        mixed = [line + rng.choice(ODD_TEXT) if rng.random() < 0.3 else line for line in lines]
        return ("\n".join(mixed) + "\n").encode("utf-8")
    return ("\n".join(lines) + "\n").encode("utf-8")


class SplitAssertions:
    def assertRangesCover(self, data, segments, target):
        """Segments tile the file in order, none empty, none over the bound; a cut falls at a
        line start unless both sides say it is inside a line (and never inside a character)."""
        if not data:
            self.assertEqual([segment[:2] for segment in segments], [(0, 0)])
            return
        self.assertEqual(segments[0][0], 0)
        self.assertEqual(segments[-1][1], len(data))
        bound = max(target, split_lib.READ_SPLIT_THRESHOLD_BYTES)
        for before, after in zip(segments, segments[1:]):
            self.assertEqual(before[1], after[0])
            at_line_start = data[after[0] - 1:after[0]] == b"\n"
            self.assertEqual(not at_line_start, after[3])
            self.assertEqual(not at_line_start, before[4] is not None)
            self.assertNotEqual(data[after[0]] & 0xC0, 0x80)
        for start, end, *_ in segments:
            self.assertLess(start, end)
            self.assertLessEqual(end - start, bound)
        self.assertEqual(b"".join(data[start:end] for start, end, *_ in segments), data)

    def assertIndexMatches(self, data, index, directory):
        """The index describes the files on disk and they concatenate to the source."""
        joined, offset, line = b"", 0, 1
        for record in index["segments"]:
            with open(os.path.join(directory, record["file"]), "rb") as handle:
                chunk = handle.read()
            self.assertEqual(record["start_byte"], offset)
            self.assertEqual(record["end_byte"], offset + len(chunk))
            self.assertEqual(record["bytes"], len(chunk))
            self.assertEqual(record["sha256"], hashlib.sha256(chunk).hexdigest())
            self.assertEqual(record["first_line"], line)
            self.assertEqual(record["last_line"],
                             line + chunk.count(b"\n")
                             - (1 if chunk.endswith(b"\n") or not chunk else 0))
            joined += chunk
            offset += len(chunk)
            line += chunk.count(b"\n")
        self.assertEqual(joined, data)
        self.assertEqual(index["source_sha256"], hashlib.sha256(data).hexdigest())
        self.assertEqual(index["source_size"], len(data))


class RoundTripTest(SplitAssertions, HermeticTestCase):
    def test_every_splitter_and_line_ending_round_trips(self):
        rng = random.Random(20261122)
        for language in sorted(golden_inputs()):
            split_type = split_lib.detect_split_type(golden_inputs()[language])
            for ending in ENDINGS:
                for target in (1, 90, 700, 5000):
                    lines = generated_lines(language, rng, rng.randint(1, 160))
                    data = encode(lines, ending, rng)
                    with self.subTest(language=language, ending=ending, target=target):
                        segments = split_lib.plan_segments(data, split_type, target)
                        self.assertRangesCover(data, segments, target)
                        if target >= len(data):
                            self.assertEqual(len(segments), 1)

    def test_random_syntax_soup_never_breaks_the_tiling(self):
        rng = random.Random(7)
        alphabet = list("{}()[]<>\"'`/*#!-=:;,\\ \t\n\r\nabcdefXYZ@$é漢") + ["\n", "\n", "<!--",
                                                                        "-->", "```", '"""']
        for split_type in split_lib.split_types():
            for _ in range(12):
                data = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 1500))).encode()
                target = rng.choice((1, 40, 300))
                with self.subTest(split_type=split_type):
                    segments = split_lib.plan_segments(data, split_type, target)
                    self.assertRangesCover(data, segments, target)

    def test_written_segments_reproduce_every_line_ending_case(self):
        rng = random.Random(3)
        for ending in ENDINGS + ("empty",):
            lines = generated_lines("python", rng, 120)
            data = b"" if ending == "empty" else encode(lines, ending, rng)
            source = self.write_file(f"{ending}.py", data, "wb")
            out = os.path.join(self.tmp, "split-" + ending)
            with self.subTest(ending=ending):
                index = split_lib.split_file(source, out, 300)
                self.assertIndexMatches(data, index, out)
                if ending == "bom":
                    with open(os.path.join(out, index["segments"][0]["file"]), "rb") as handle:
                        self.assertTrue(handle.read().startswith(split_lib.BOM))

    def test_empty_file_has_one_empty_segment(self):
        source = self.write_file("empty.md", "")
        index = split_lib.split_file(source, "out")
        self.assertEqual(len(index["segments"]), 1)
        self.assertEqual(index["segments"][0]["bytes"], 0)
        self.assertEqual((index["segments"][0]["first_line"], index["segments"][0]["last_line"]),
                         (1, 0))
        self.assertEqual(os.path.getsize(os.path.join("out", "0001-empty.md")), 0)


class NaturalBoundaryTest(HermeticTestCase):
    def segments_text(self, name, content, target, split_type=None):
        source = self.write_file(name, content)
        index = split_lib.split_file(source, "out", target, split_type)
        texts = []
        for record in index["segments"]:
            with open(os.path.join("out", record["file"]), encoding="utf-8", newline="") as handle:
                texts.append(handle.read())
        return texts

    def test_python_keeps_decorators_and_comments_with_the_definition(self):
        body = "".join(f"# helper {n}\n@cache\ndef f{n}():\n    return {n}\n\n\n"
                       for n in range(30))
        for text in self.segments_text("m.py", "import os\n\n\n" + body, 120)[1:]:
            self.assertRegex(text, r"^# helper \d+\n@cache\ndef ")

    def test_oversized_construct_is_one_segment(self):
        big = "def big():\n" + "".join(f"    x{n} = {n}\n" for n in range(200)) + "\n\n"
        content = "def a():\n    pass\n\n\n" + big + "def z():\n    pass\n"
        texts = self.segments_text("m.py", content, 200)
        self.assertIn(big, texts)

    def test_definitions_inside_strings_are_not_boundaries(self):
        content = ('"""Doc.\n\ndef fake():\n    pass\n"""\n\n' + "x = 1\n" * 40
                   + "\ndef real():\n    pass\n")
        texts = self.segments_text("m.py", content, 100)
        self.assertFalse(any(text.startswith("def fake") for text in texts))
        self.assertTrue(any(text.startswith("def real") for text in texts))

    def test_braces_in_c_strings_and_comments_do_not_shift_depth(self):
        functions = "".join(f'int f{n}(void)\n{{\n    puts("}} {{ }}");  /* }} */\n'
                            f'    return {n};\n}}\n\n' for n in range(12))
        texts = self.segments_text("x.c", "#include <stdio.h>\n\n" + functions, 90)
        for text in texts[1:]:
            self.assertTrue(text.startswith("int f"), text)

    def test_json_splits_at_top_level_keys(self):
        doc = {f"key{n}": {"values": list(range(n, n + 8)), "name": f"item {n}"} for n in range(20)}
        texts = self.segments_text("d.json", json.dumps(doc, indent=2) + "\n", 300)
        self.assertGreater(len(texts), 3)
        for text in texts[1:]:
            self.assertRegex(text, r'^  "key\d+": \{')

    def test_markdown_cuts_at_headings_not_inside_code_fences(self):
        sections = "".join(f"## Section {n}\n\nText {n}.\n\n```\n# not a heading {n}\n```\n\n"
                           for n in range(10))
        texts = self.segments_text("doc.md", "# Title\n\n" + sections, 80)
        for text in texts[1:]:
            self.assertTrue(text.startswith("## Section"), text)

    def test_yaml_splits_at_top_level_keys_and_documents(self):
        content = "".join(f"key{n}:\n  a: 1\n  b: [1, 2]\n" for n in range(10)) + "---\nother: 1\n"
        texts = self.segments_text("c.yaml", content, 26)
        self.assertTrue(all(text.startswith(("key", "---")) for text in texts))
        self.assertTrue(texts[-1].startswith("---\nother"))

    def test_text_without_boundaries_falls_back_to_line_packing(self):
        texts = self.segments_text("log.txt", "".join(f"line {n}\n" for n in range(100)), 50)
        self.assertGreater(len(texts), 10)
        self.assertTrue(all(len(text.encode()) <= 50 for text in texts))

    def test_type_override_beats_extension(self):
        content = "".join(f"## H{n}\n\nbody\n\n" for n in range(20))
        texts = self.segments_text("notes.txt", content, 30, "md")
        self.assertTrue(all(text.startswith("## H") for text in texts))


class GoldenSplitTest(HermeticTestCase):
    """A realistic file per language, split at two targets; NAGENT_REGEN_GOLDEN=1 rewrites."""

    def describe(self, path, target):
        with open(path, "rb") as handle:
            data = handle.read()
        split_type = split_lib.detect_split_type(path, None, data)
        segments = split_lib.plan_segments(data, split_type, target)
        records = split_lib.segment_records(data, segments, [""] * len(segments))
        return split_type, [{"first_line": record["first_line"], "last_line": record["last_line"],
                             "bytes": record["bytes"],
                             "first_text": data[record["start_byte"]:data.find(
                                 b"\n", record["start_byte"])].decode("utf-8")}
                            for record in records]

    def test_golden_splits(self):
        inputs = golden_inputs()
        self.assertEqual(len(inputs), 14)
        for language, path in inputs.items():
            actual = {"split_type": None, "targets": {}}
            for target in GOLDEN_TARGETS:
                actual["split_type"], actual["targets"][str(target)] = self.describe(path, target)
            expected_path = os.path.join(os.path.dirname(path), "expected.json")
            if os.environ.get("NAGENT_REGEN_GOLDEN") == "1":
                with open(expected_path, "w", encoding="utf-8") as handle:
                    json.dump(actual, handle, indent=1, ensure_ascii=False)
                    handle.write("\n")
            with open(expected_path, encoding="utf-8") as handle:
                expected = json.load(handle)
            with self.subTest(language=language):
                self.assertEqual(actual["split_type"], language)
                self.assertEqual(actual, expected)


class DetectTypeTest(HermeticTestCase):
    def test_extensions_aliases_and_shebang(self):
        cases = {"a.py": "python", "a.H": "c", "a.hpp": "cpp", "a.tsx": "typescript",
                 "a.mjs": "javascript", "a.yml": "yaml", "a.htm": "html", "a.svg": "xml",
                 "a.rs": "rust", "a.go": "go", "a.java": "java", "a.md": "markdown",
                 "a.json": "json", "a.log": "text", "a.unknown": "text"}
        for name, expected in cases.items():
            self.assertEqual(split_lib.detect_split_type(name), expected, name)
        self.assertEqual(split_lib.detect_split_type("x.txt", "py"), "python")
        self.assertEqual(split_lib.detect_split_type("x.txt", "C++"), "cpp")
        script = self.write_file("tool", "#!/usr/bin/env python3\nprint(1)\n")
        self.assertEqual(split_lib.detect_split_type(script), "python")
        with self.assertRaises(UsageError):
            split_lib.detect_split_type("x.py", "cobol")


class IndexTest(SplitAssertions, HermeticTestCase):
    def test_index_schema(self):
        source = self.write_file("src/app.py", "def a():\n    pass\n" * 50)
        index = split_lib.split_file(source, "out", 200)
        with open(os.path.join("out", "index.json"), encoding="utf-8") as handle:
            self.assertEqual(json.load(handle), index)
        self.assertEqual(index["version"], 1)
        self.assertEqual(index["source"], os.path.realpath(source))
        self.assertEqual(index["split_type"], "python")
        self.assertEqual(index["target_bytes"], 200)
        self.assertRegex(index["created"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")
        self.assertEqual([r["file"] for r in index["segments"]][:2], ["0001-app.py", "0002-app.py"])
        self.assertEqual(split_lib.load_index("out"), index)

    def test_resplit_removes_only_the_previous_segments(self):
        source = self.write_file("a.txt", "".join(f"para {n}\n\n" for n in range(40)))
        first = split_lib.split_file(source, "out", 20)
        self.write_file("out/notes.txt", "mine")
        self.write_file("out/0099-other.txt", "not listed in the index")
        self.write_file("a.txt", "short\n")
        second = split_lib.split_file(source, "out", 20)
        self.assertGreater(len(first["segments"]), 1)
        self.assertEqual(sorted(os.listdir("out")),
                         ["0001-a.txt", "0099-other.txt", "index.json", "notes.txt"])
        self.assertEqual(len(second["segments"]), 1)

    def test_refresh_resplits_with_stored_settings_and_keeps_unchanged_summaries(self):
        source = self.write_file("m.md", "".join(f"# H{n}\n\ntext {n}\n\n" for n in range(10)))
        calls = []

        def fake(text, meta):
            calls.append(meta["file"])
            return f"summary of {text.splitlines()[0]}"
        split_lib.split_file(source, "out", 40, "text", summarize=fake)
        first_calls = len(calls)
        with open(source, "a", encoding="utf-8") as handle:
            handle.write("# H10\n\nnew\n")
        index = split_lib.refresh_split("out/index.json", summarize=fake)
        self.assertEqual(index["split_type"], "text")
        self.assertEqual(index["target_bytes"], 40)
        self.assertEqual(len(calls) - first_calls, 1)
        with open(source, "rb") as handle:
            self.assertIndexMatches(handle.read(), index, "out")
        self.assertTrue(all(record["summary"].startswith("summary of")
                            for record in index["segments"]))

    def test_summaries_come_from_the_callable_with_segment_metadata(self):
        source = self.write_file("m.py", "def a():\n    pass\n\n\ndef b():\n    pass\n")
        seen = []
        index = split_lib.split_file(source, "out", 20,
                                     summarize=lambda text, meta: seen.append(meta) or text[:5])
        self.assertEqual([r["summary"] for r in index["segments"]], ["def a", "def b"])
        self.assertEqual(seen[1]["number"], 2)
        self.assertEqual(seen[1]["count"], 2)
        self.assertEqual(seen[1]["first_line"], 5)

    def test_failed_summary_writes_nothing(self):
        source = self.write_file("m.py", "def a():\n    pass\n")

        def boom(text, meta):
            raise InputError("model failed")
        with self.assertRaises(InputError):
            split_lib.split_file(source, "out", 20, summarize=boom)
        self.assertFalse(os.path.exists("out"))

    def test_bad_inputs_are_input_errors(self):
        self.write_file("bad.txt", b"ok\n\xff\xfe\n", "wb")
        os.makedirs("adir")
        for path in ("bad.txt", "adir", "missing.txt"):
            with self.subTest(path=path), self.assertRaises(InputError):
                split_lib.split_file(path, "out")
        self.assertFalse(os.path.exists("out"))
        with self.assertRaises(UsageError):
            split_lib.split_file(self.write_file("ok.txt", "x\n"), "out", 0)

    def test_corrupt_indexes_are_rejected(self):
        source = self.write_file("a.txt", "hello\n")
        good = split_lib.split_file(source, "out")
        broken = {"missing": None, "not json": "{", "version": dict(good, version=2),
                  "traversal": dict(good, segments=[dict(good["segments"][0], file="../a.txt")]),
                  "relative source": dict(good, source="a.txt"),
                  "no segments": dict(good, segments=[]),
                  "bad hash": dict(good, source_sha256="xyz")}
        for label, content in broken.items():
            path = os.path.join(self.tmp, label.replace(" ", "-") + ".json")
            if content is not None:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(content if isinstance(content, str) else json.dumps(content))
            with self.subTest(label=label), self.assertRaises(InputError):
                split_lib.load_index(path)


class SplitCliTest(SplitAssertions, HermeticTestCase):
    def test_json_output_is_the_index(self):
        source = self.write_file("big.py", "def a():\n    return 1\n\n\n" * 40)
        proc = self.run_tool("nagent-file-split", "--file", source, "--output", "out",
                             "--target-bytes", "100", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        data = json.loads(proc.stdout)
        self.assertEqual(data["index_path"], os.path.join(self.cwd, "out", "index.json"))
        self.assertEqual(data["split_type"], "python")
        with open(source, "rb") as handle:
            self.assertIndexMatches(handle.read(), data, "out")

    def test_human_output_and_refresh(self):
        source = self.write_file("notes.md", "# A\n\ntext\n\n# B\n\nmore\n")
        proc = self.run_tool("nagent-file-split", "--file", source, "--output", "out",
                             "--target-bytes", "13")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("into 2 segments (markdown, target 13 bytes)", proc.stdout)
        self.assertIn("index: ", proc.stdout)
        self.write_file("notes.md", "# A\n\nchanged text\n\n# B\n\nmore\n\n# C\n\nnew\n")
        proc = self.run_tool("nagent-file-split", "--output", "out", "--refresh", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        data = json.loads(proc.stdout)
        # Each heading keeps its first paragraph (an opening never stands alone).
        self.assertEqual((data["target_bytes"], len(data["segments"])), (13, 3))
        with open(source, "rb") as handle:
            self.assertIndexMatches(handle.read(), data, "out")

    def test_errors_are_one_clean_line(self):
        self.write_file("bad.txt", b"\xff\n", "wb")
        good = self.write_file("good.txt", "x\n")
        cases = [(("--file", "bad.txt", "--output", "o"), 6, "not UTF-8 text"),
                 (("--file", "nope.txt", "--output", "o"), 6, "file not found"),
                 (("--file", good, "--output", "o", "--type", "cobol"), 2, "unknown split type"),
                 (("--file", good, "--output", "o", "--target-bytes", "0"), 2, "positive"),
                 (("--output", "o"), 2, "no input file"),
                 (("--output", "o", "--refresh"), 6, "split index not found")]
        for args, code, message in cases:
            with self.subTest(args=args):
                self.assertCleanError(self.run_tool("nagent-file-split", *args), code, message)

    def test_description(self):
        proc = self.run_tool("nagent-file-split", "--description")
        self.assertEqual(proc.returncode, 0)
        self.assertEqual(len(proc.stdout.splitlines()), 1)
