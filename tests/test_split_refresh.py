"""Refresh and re-split never lose work (issue 11 item 4): unmerged segment edits and another
file's split are refused (exit 10, nothing changed) unless --force, which keeps a copy first."""
import json
import os

from base import HermeticTestCase

import nagent_file_split_lib as split_lib
from nagent_errors import RefusedError


def snapshot(directory):
    """{relative path: bytes} of every file under `directory`."""
    found = {}
    for root, _dirs, files in os.walk(directory):
        for name in files:
            path = os.path.join(root, name)
            with open(path, "rb") as handle:
                found[os.path.relpath(path, directory)] = handle.read()
    return found


class RefreshSafetyTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.source = self.write_file("notes.md", "".join(f"# Part {n}\n\ntext {n}\n\n"
                                                          for n in range(6)))
        self.index = split_lib.split_file(self.source, "out", 20)
        self.names = [record["file"] for record in self.index["segments"]]
        self.assertGreater(len(self.names), 3)

    def edit(self, number, text):
        path = os.path.join("out", self.names[number])
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        return path

    def test_refresh_refuses_while_segments_have_unmerged_edits(self):
        self.edit(1, "# Part 1\n\nedited but not patched\n\n")
        self.edit(3, "# Part 3\n\nalso edited\n\n")
        before = snapshot("out")
        with self.assertRaises(RefusedError) as caught:
            split_lib.refresh_split("out")
        self.assertIn(self.names[1], caught.exception.value)
        self.assertIn(self.names[3], caught.exception.value)
        self.assertNotIn(self.names[0], caught.exception.value)
        self.assertEqual(snapshot("out"), before)

    def test_cli_refresh_refusal_is_exit_10_and_names_the_segments(self):
        self.edit(2, "# Part 2\n\nmine\n\n")
        before = snapshot("out")
        proc = self.run_tool("nagent-file-split", "--output", "out", "--refresh")
        self.assertCleanError(proc, 10, "unmerged edits")
        self.assertIn(self.names[2], proc.stderr)
        self.assertIn("--force", proc.stderr)
        self.assertEqual(snapshot("out"), before)
        proc = self.run_tool("nagent-file-split", "--output", "out", "--refresh", "--json")
        self.assertEqual(proc.returncode, 10)
        self.assertEqual(json.loads(proc.stdout)["exit_code"], 10)

    def test_force_keeps_a_copy_of_each_edited_segment_first(self):
        edited = self.edit(1, "# Part 1\n\nkeep me\n\n")
        proc = self.run_tool("nagent-file-split", "--output", "out", "--refresh", "--force",
                             "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        data = json.loads(proc.stdout)
        self.assertEqual(len(data["kept_edits"]), 1)
        kept = data["kept_edits"][0]
        self.assertTrue(kept.startswith(os.path.join(self.cwd, "out", "kept", "")), kept)
        with open(kept, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "# Part 1\n\nkeep me\n\n")
        with open(edited, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "# Part 1\n\ntext 1\n\n")
        self.assertNotIn("kept_edits", split_lib.load_index("out"))
        proc = self.run_tool("nagent-file-split", "--output", "out", "--refresh", "--force")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertNotIn("kept", proc.stdout)
        self.edit(0, "changed\n")
        proc = self.run_tool("nagent-file-split", "--output", "out", "--refresh", "--force")
        self.assertIn("kept a copy of 1 edited file first: " + os.path.join(
            self.cwd, "out", "kept", ""), proc.stdout)

    def test_unchanged_segments_refresh_freely(self):
        with open(self.source, "a", encoding="utf-8") as handle:
            handle.write("# Part 6\n\nnew\n\n")
        index = split_lib.refresh_split("out")
        self.assertEqual(len(index["segments"]), len(self.names) + 1)
        self.assertNotIn("kept_edits", index)

    def test_resplit_of_the_same_source_over_edits_is_refused_too(self):
        self.edit(0, "# Part 0\n\nedited\n\n")
        before = snapshot("out")
        with self.assertRaises(RefusedError):
            split_lib.split_file(self.source, "out", 20)
        self.assertEqual(snapshot("out"), before)

    def test_splitting_another_file_into_the_directory_is_refused(self):
        other = self.write_file("other.md", "# Other\n\ntext\n")
        before = snapshot("out")
        with self.assertRaises(RefusedError) as caught:
            split_lib.split_file(other, "out", 20)
        self.assertIn(self.source, caught.exception.fix)
        self.assertEqual(snapshot("out"), before)
        proc = self.run_tool("nagent-file-split", "--file", other, "--output", "out")
        self.assertCleanError(proc, 10, "another file")
        self.assertEqual(snapshot("out"), before)

    def test_unlisted_file_with_a_segment_name_is_not_overwritten(self):
        self.write_file("fresh/0001-notes.md", "my own file\n")
        before = snapshot("fresh")
        with self.assertRaises(RefusedError):
            split_lib.split_file(self.source, "fresh", 20)
        self.assertEqual(snapshot("fresh"), before)

    def test_kept_copies_never_follow_a_symlink_out(self):
        self.edit(1, "edited\n")
        elsewhere = os.path.join(self.tmp, "elsewhere")
        os.makedirs(elsewhere)
        os.symlink(elsewhere, os.path.join("out", "kept"))
        before = snapshot("out")
        with self.assertRaises(RefusedError):
            split_lib.refresh_split("out", force=True)
        self.assertEqual(os.listdir(elsewhere), [])
        self.assertEqual(snapshot("out"), before)

    def test_force_over_another_files_split_keeps_its_index_and_edits(self):
        self.edit(0, "edited\n")
        with open(os.path.join("out", "index.json"), "rb") as handle:
            old_index = handle.read()
        other = self.write_file("other.md", "# Other\n\ntext\n")
        index = split_lib.split_file(other, "out", 20, force=True)
        self.assertEqual(index["source"], os.path.realpath(other))
        kept = {os.path.basename(path): path for path in index["kept_edits"]}
        self.assertEqual(sorted(kept), sorted([self.names[0], "index.json"]))
        with open(kept["index.json"], "rb") as handle:
            self.assertEqual(handle.read(), old_index)
        with open(kept[self.names[0]], encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "edited\n")
