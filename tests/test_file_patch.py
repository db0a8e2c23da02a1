"""nagent-file-patch: merge segments back, patch artifacts, hash refusal, index refresh."""
import json
import os
import random
import re
import shutil
import stat

from base import HermeticTestCase

import nagent_file_patch_lib as patch_lib
import nagent_file_split_lib as split_lib
from nagent_errors import InputError, RefusedError

HUNK = re.compile(rb"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_unified(old, patch):
    """A small independent applier for the single-file unified diffs the library writes."""
    lines = patch_lib.split_lines(old)
    body = patch.split(b"\n")
    assert body[0].startswith(b"--- a/") and body[1].startswith(b"+++ b/"), body[:2]
    out, cursor, i = [], 0, 2
    while i < len(body) and body[i]:
        match = HUNK.match(body[i])
        assert match, body[i]
        start = int(match.group(1)) - (0 if match.group(2) == b"0" else 1)
        out.extend(lines[cursor:start])
        cursor = start
        i += 1
        while i < len(body) and body[i][:1] in (b" ", b"-", b"+", b"\\"):
            kind, text = body[i][:1], body[i][1:] + b"\n"
            if i + 1 < len(body) and body[i + 1].startswith(b"\\ No newline"):
                text = text[:-1]
            if kind == b"\\":
                i += 1
                continue
            if kind in (b" ", b"-"):
                assert lines[cursor] == text, (lines[cursor], text)
                cursor += 1
            if kind in (b" ", b"+"):
                out.append(text)
            i += 1
    out.extend(lines[cursor:])
    return b"".join(out)


class PatchCase(HermeticTestCase):
    def split(self, name, content, target=200):
        source = self.write_file(name, content, "wb" if isinstance(content, bytes) else "w")
        index = split_lib.split_file(source, "out", target)
        return source, index

    def segment_path(self, index, number):
        return os.path.join(self.cwd, "out", index["segments"][number]["file"])

    def read(self, path):
        with open(path, "rb") as handle:
            return handle.read()

    def edit(self, index, number, transform):
        path = self.segment_path(index, number)
        data = transform(self.read(path))
        with open(path, "wb") as handle:
            handle.write(data)


def python_module(functions=40):
    return "".join(f"def f{n}(x):\n    y = x + {n}\n    return y * 2\n\n\n"
                   for n in range(functions)).encode()


class PatchTest(PatchCase):
    def test_editing_one_segment_changes_only_that_region(self):
        source, index = self.split("m.py", python_module())
        old = self.read(source)
        target = index["segments"][3]
        self.edit(index, 3, lambda data: data.replace(b"+ ", b"- ", 1))
        result = patch_lib.patch_from_index("out/index.json")
        new = self.read(source)
        self.assertEqual(result["status"], "applied")
        self.assertEqual(result["changed_segments"], [target["file"]])
        self.assertEqual((result["added_lines"], result["removed_lines"], result["changed_lines"]),
                         (1, 1, 2))
        self.assertEqual(new[:target["start_byte"]], old[:target["start_byte"]])
        self.assertEqual(new[target["end_byte"]:], old[target["end_byte"]:])
        patch = self.read(result["patch_path"])
        starts = [int(m.group(1)) for m in re.finditer(rb"^@@ -(\d+)", patch, re.M)]
        self.assertEqual(len(starts), 1)
        self.assertTrue(target["first_line"] <= starts[0] + 3 <= target["last_line"])
        self.assertEqual(apply_unified(old, patch), new)
        self.assertTrue(result["patch_path"].startswith(os.path.join(self.cwd, "out", "patches")))
        self.assertRegex(os.path.basename(result["patch_path"]), r"^\d{8}T\d{6}Z-1\.patch$")

    def random_edit(self, index, rng, ending):
        """Edit a random subset of segments: drop/add/swap lines, empty one, strip its end."""
        for number in rng.sample(range(len(index["segments"])),
                                 rng.randint(1, len(index["segments"]))):
            edit = rng.choice(("drop", "add", "swap", "empty", "strip"))

            def change(chunk, edit=edit):
                parts = patch_lib.split_lines(chunk)
                if edit == "drop" and parts:
                    parts.pop(rng.randrange(len(parts)))
                elif edit == "add":
                    parts.insert(rng.randint(0, len(parts)), b"added" + ending)
                elif edit == "swap" and len(parts) > 1:
                    parts[0], parts[-1] = parts[-1], parts[0]
                elif edit == "empty":
                    parts = []
                elif edit == "strip":
                    return chunk.rstrip(b"\r\n")
                return b"".join(parts)
            self.edit(index, number, change)

    def test_random_edits_round_trip_through_the_patch(self):
        rng = random.Random(11)
        for case in range(25):
            ending = rng.choice((b"\n", b"\r\n"))
            lines = [f"line {n} {rng.choice('abc')}".encode() for n in range(rng.randint(1, 80))]
            data = ending.join(lines) + (ending if rng.random() < 0.7 else b"")
            shutil.rmtree("out", ignore_errors=True)  # another file's split is refused there
            source, index = self.split(f"t{case}.txt", data, rng.choice((10, 60, 200)))
            for round_number in range(2):  # the second round starts from a refreshed index
                self.random_edit(index, rng, ending)
                segments = b"".join(self.read(self.segment_path(index, n))
                                    for n in range(len(index["segments"])))
                with self.subTest(case=case, round=round_number):
                    result = patch_lib.patch_from_index("out/index.json")
                    self.assertEqual(self.read(source), segments)
                    if result["status"] == "applied":
                        self.assertEqual(apply_unified(data, self.read(result["patch_path"])),
                                         segments)
                    index = split_lib.load_index("out")
                    self.assertEqual(index["source_sha256"], split_lib.sha256_hex(segments))
                    self.assertEqual(patch_lib.patch_from_index("out")["status"], "unchanged")
                data = segments

    def test_hash_mismatch_refuses_and_leaves_everything_untouched(self):
        source, index = self.split("m.py", python_module())
        self.edit(index, 0, lambda data: b"# edited\n" + data)
        with open(source, "ab") as handle:
            handle.write(b"# changed behind our back\n")
        before, index_before = self.read(source), self.read("out/index.json")
        with self.assertRaises(RefusedError) as caught:
            patch_lib.patch_from_index("out/index.json")
        self.assertEqual(caught.exception.exit_code, 10)
        self.assertEqual(self.read(source), before)
        self.assertEqual(self.read("out/index.json"), index_before)
        self.assertFalse(os.path.exists("out/patches"))
        result = patch_lib.patch_from_index("out/index.json", force=True)
        self.assertTrue(result["forced"])
        self.assertEqual(self.read(source).splitlines()[0], b"# edited")
        self.assertNotIn(b"behind our back", self.read(source))

    def test_dry_run_writes_only_the_patch(self):
        source, index = self.split("m.py", python_module())
        before, index_before = self.read(source), self.read("out/index.json")
        self.edit(index, 1, lambda data: data + b"# more\n")
        result = patch_lib.patch_from_index("out/index.json", dry_run=True)
        self.assertEqual(result["status"], "dry-run")
        self.assertEqual(self.read(source), before)
        self.assertEqual(self.read("out/index.json"), index_before)
        segments = b"".join(self.read(self.segment_path(index, n))
                            for n in range(len(index["segments"])))
        self.assertEqual(apply_unified(before, self.read(result["patch_path"])), segments)
        self.assertIn(b"+# more", self.read(result["patch_path"]))
        second = patch_lib.patch_from_index("out/index.json", dry_run=True)
        self.assertNotEqual(second["patch_path"], result["patch_path"])

    def test_no_change_writes_nothing(self):
        source, _ = self.split("m.py", python_module())
        index_before = self.read("out/index.json")
        result = patch_lib.patch_from_index("out/index.json")
        self.assertEqual((result["status"], result["patch_path"], result["changed_lines"]),
                         ("unchanged", None, 0))
        self.assertFalse(os.path.exists("out/patches"))
        self.assertEqual(self.read("out/index.json"), index_before)

    def test_missing_segment_is_an_input_error(self):
        source, index = self.split("m.py", python_module())
        before = self.read(source)
        os.unlink(self.segment_path(index, 2))
        with self.assertRaises(InputError) as caught:
            patch_lib.patch_from_index("out/index.json")
        self.assertIn("missing", caught.exception.what)
        self.assertEqual(self.read(source), before)

    def test_symlinked_segment_is_refused(self):
        source, index = self.split("m.py", python_module())
        secret = self.write_file(os.path.join(self.tmp, "secret.txt"), "token\n")
        os.unlink(self.segment_path(index, 1))
        os.symlink(secret, self.segment_path(index, 1))
        before = self.read(source)
        with self.assertRaises(InputError):
            patch_lib.patch_from_index("out/index.json")
        self.assertEqual(self.read(source), before)

    def test_non_utf8_segment_is_refused(self):
        source, index = self.split("m.py", python_module())
        self.edit(index, 0, lambda data: data + b"\xff\n")
        with self.assertRaises(InputError):
            patch_lib.patch_from_index("out/index.json")

    def test_mode_is_kept_and_index_refreshed(self):
        source, index = self.split("m.py", python_module())
        os.chmod(source, 0o640)
        self.edit(index, 0, lambda data: b"# one\n# two\n" + data)
        patch_lib.patch_from_index("out/index.json")
        self.assertEqual(stat.S_IMODE(os.stat(source).st_mode), 0o640)
        refreshed = split_lib.load_index("out/index.json")
        data = self.read(source)
        self.assertEqual(refreshed["source_sha256"], split_lib.sha256_hex(data))
        self.assertEqual(refreshed["source_size"], len(data))
        self.assertEqual(refreshed["segments"][1]["first_line"],
                         index["segments"][1]["first_line"] + 2)
        self.assertEqual(refreshed["segments"][0]["bytes"], index["segments"][0]["bytes"] + 12)

    def test_segment_without_final_newline_joins_the_next_line(self):
        source, index = self.split("m.py", python_module(6), 60)
        self.edit(index, 0, lambda data: data.rstrip(b"\n"))
        result = patch_lib.patch_from_index("out/index.json")
        self.assertEqual(len(result["warnings"]), 1)
        refreshed = split_lib.load_index("out/index.json")
        self.assertEqual(refreshed["segments"][0]["last_line"],
                         refreshed["segments"][1]["first_line"])

    def test_crlf_and_bom_survive(self):
        data = split_lib.BOM + b"".join(b"para %d\r\n\r\n" % n for n in range(30))
        source, index = self.split("n.txt", data, 40)
        self.edit(index, 2, lambda chunk: chunk.replace(b"para", b"PARA", 1))
        result = patch_lib.patch_from_index("out/index.json")
        new = self.read(source)
        self.assertTrue(new.startswith(split_lib.BOM))
        self.assertEqual(new.count(b"\r\n"), data.count(b"\r\n"))
        self.assertIn(b"+PARA", self.read(result["patch_path"]))
        self.assertEqual(apply_unified(data, self.read(result["patch_path"])), new)

    def test_authorize_sees_the_realpath_before_any_write(self):
        source, index = self.split("real.py", python_module())
        os.symlink(source, "link.py")
        split_lib.split_file("link.py", "out")
        self.edit(index, 0, lambda data: b"# x\n" + data)
        seen = []

        def deny(path):
            seen.append(path)
            raise RefusedError("write outside the boundary", path)
        with self.assertRaises(RefusedError):
            patch_lib.patch_from_index("out/index.json", authorize=deny)
        self.assertEqual(seen, [os.path.realpath(source)])
        self.assertFalse(os.path.exists("out/patches"))
        patch_lib.patch_from_index("out/index.json", authorize=seen.append)
        self.assertTrue(os.path.islink("link.py"))
        self.assertTrue(self.read(source).startswith(b"# x\n"))

    def test_tampered_index_source_goes_through_authorize(self):
        _, index = self.split("m.py", python_module())
        victim = self.write_file(os.path.join(self.tmp, "victim.py"), python_module().decode())
        tampered = dict(index, source=victim)
        with open("out/index.json", "w", encoding="utf-8") as handle:
            json.dump(tampered, handle)
        self.edit(index, 0, lambda data: b"# evil\n" + data)
        seen = []

        def deny(path):
            seen.append(path)
            raise RefusedError("outside", path)
        with self.assertRaises(RefusedError):
            patch_lib.patch_from_index("out/index.json", authorize=deny)
        self.assertEqual(seen, [victim])
        self.assertEqual(self.read(victim), python_module())


class PatchCliTest(PatchCase):
    def test_json_result_and_human_output(self):
        source, index = self.split("m.py", python_module())
        self.edit(index, 0, lambda data: b"# hi\n" + data)
        proc = self.run_tool("nagent-file-patch", "--index", "out/index.json", "--dry-run",
                             "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        data = json.loads(proc.stdout)
        self.assertEqual((data["status"], data["changed_lines"]), ("dry-run", 1))
        self.assertTrue(os.path.isfile(data["patch_path"]))
        proc = self.run_tool("nagent-file-patch", "--index", "out")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("applied to", proc.stdout)
        self.assertIn("patch: ", proc.stdout)
        proc = self.run_tool("nagent-file-patch", "--index", "out", "--json")
        self.assertEqual(json.loads(proc.stdout)["status"], "unchanged")
        proc = self.run_tool("nagent-file-patch", "--index", "out")
        self.assertIn("no change", proc.stdout)

    def test_refusal_and_missing_index_exit_codes(self):
        source, index = self.split("m.py", python_module())
        self.edit(index, 0, lambda data: b"# hi\n" + data)
        with open(source, "ab") as handle:
            handle.write(b"# drift\n")
        before = self.read(source)
        proc = self.run_tool("nagent-file-patch", "--index", "out/index.json")
        self.assertCleanError(proc, 10, "source changed since it was split")
        self.assertEqual(self.read(source), before)
        proc = self.run_tool("nagent-file-patch", "--index", "out/index.json", "--force", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(json.loads(proc.stdout)["forced"])
        self.assertCleanError(self.run_tool("nagent-file-patch", "--index", "nope/index.json"), 6,
                              "split index not found")
        self.assertCleanError(self.run_tool("nagent-file-patch"), 2)


class ExpectFlagsTest(PatchCase):
    """--expect-source/--expect-sha256: the driver's record of the split it made decides the
    target, so an index changed in between (by the model or anyone) cannot redirect the patch."""

    def test_expect_flags_refuse_any_other_target(self):
        source, index = self.split("m.py", python_module())
        victim = self.write_file("victim.py", python_module(3).decode())
        self.edit(index, 0, lambda data: b"# hi\n" + data)
        digest = index["source_sha256"]
        before = self.read(source), self.read(victim)
        # The index is tampered after the driver recorded the split: source -> victim.
        tampered = dict(index, source=victim, source_sha256=split_lib.sha256_hex(self.read(victim)))
        split_lib.write_index(os.path.join(self.cwd, "out"), tampered)
        proc = self.run_tool("nagent-file-patch", "--index", "out", "--expect-source", source,
                             "--expect-sha256", digest, "--json")
        self.assertCleanError(proc, 10, "index does not describe the expected source")
        error = json.loads(proc.stdout)
        self.assertEqual((error["kind"], error["exit_code"]), ("refused", 10))
        self.assertEqual((self.read(source), self.read(victim)), before)
        split_lib.write_index(os.path.join(self.cwd, "out"), index)
        proc = self.run_tool("nagent-file-patch", "--index", "out", "--expect-source", source,
                             "--expect-sha256", "0" * 64)
        self.assertCleanError(proc, 10, "index does not describe the expected source")
        proc = self.run_tool("nagent-file-patch", "--index", "out", "--expect-source", victim,
                             "--expect-sha256", digest)
        self.assertCleanError(proc, 10, "index does not describe the expected source")
        self.assertEqual((self.read(source), self.read(victim)), before)
        proc = self.run_tool("nagent-file-patch", "--index", "out", "--expect-source", source,
                             "--expect-sha256", digest, "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["status"], "applied")
        self.assertTrue(self.read(source).startswith(b"# hi\n"))

    def test_expect_flags_come_together_and_are_documented(self):
        self.assertCleanError(self.run_tool("nagent-file-patch", "--index", "out", "--expect-source",
                                            "/x"), 2, "--expect-source and --expect-sha256")
        help_text = self.run_tool("nagent-file-patch", "--help").stdout
        self.assertIn("--expect-source", help_text)
        self.assertIn("--expect-sha256", help_text)

    def test_library_checks_before_anything_is_written(self):
        source, index = self.split("m.py", python_module())
        self.edit(index, 0, lambda data: b"# hi\n" + data)
        before = self.read(source)
        with self.assertRaises(RefusedError):
            patch_lib.patch_from_index("out", expect=(source, "f" * 64))
        with self.assertRaises(RefusedError):
            patch_lib.patch_from_index("out", force=True, expect=("/etc/passwd", index["source_sha256"]))
        self.assertEqual(self.read(source), before)
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "out", "patches")))
