"""Per-file edit identity: file ids, the per-pid index, rename/replace resolution, locking."""
import json
import os
import re
import stat
import subprocess
import sys

from base import HELPERS, HermeticTestCase

import nagent_file_edit_lib as fe
from nagent_errors import BusyError, InputError, UsageError

PID = "4242"


class FileEditCase(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.index_path = fe.file_index_path(PID, self.env)

    def resolve(self, path, now=None, **kwargs):
        return fe.resolve_file_edit(path, PID, self.env, now=now, **kwargs)

    def index_on_disk(self):
        with open(self.index_path, encoding="utf-8") as handle:
            return json.load(handle)

    def replace_with_new_inode(self, path, content):
        temp = path + ".swp"
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write(content)
        os.replace(temp, path)


class FileIdTest(FileEditCase):
    def test_id_is_dev_inode_of_realpath(self):
        path = self.write_file("a.py", "x = 1\n")
        st = os.stat(path)
        self.assertEqual(fe.file_id_for_path(path), f"{st.st_dev}:{st.st_ino}")
        os.symlink(path, os.path.join(self.cwd, "link.py"))
        self.assertEqual(fe.file_id_for_path("link.py"), fe.file_id_for_path(path))

    def test_missing_directory_and_special_files(self):
        for path in ("missing.py", self.cwd):
            with self.assertRaises(InputError) as ctx:
                fe.file_id_for_path(path)
            self.assertEqual(ctx.exception.exit_code, 6)
        os.mkfifo(os.path.join(self.cwd, "fifo"))
        with self.assertRaisesRegex(InputError, "regular"):
            fe.file_id_for_path("fifo")


class IndexPathAndLoadTest(FileEditCase):
    def test_index_path_under_home(self):
        self.assertEqual(self.index_path,
                         os.path.join(self.home, ".nagent", "file-edits", f"index-{PID}.json"))
        for bad in ("", "../x", "a/b", "..", "x" * 100, "1 2"):
            with self.assertRaises(UsageError):
                fe.file_index_path(bad, self.env)

    def test_missing_index_is_empty_without_warning(self):
        self.assertEqual(fe.load_file_index(self.index_path), ({"version": 1, "by_file_id": {}}, None))

    def test_corrupt_index_variants_rebuilt(self):
        os.makedirs(os.path.dirname(self.index_path))
        for raw in (b"garbage", b'{"version": 1, "by_file_id": {"1:2": {"file_id"', b"[]", b"null",
                    b'{"by_file_id": []}', b'{"version": 99, "by_file_id": {}}', b"\xff\xfe"):
            with open(self.index_path, "wb") as handle:
                handle.write(raw)
            index, warning = fe.load_file_index(self.index_path)
            self.assertEqual(index, {"version": 1, "by_file_id": {}}, raw)
            self.assertRegex(warning, r"^file index was corrupt: .*; rebuilt$")

    def test_invalid_records_dropped_valid_kept(self):
        good = {"file_id": "1:2", "path": "/x/a.py", "conversation": "file-a-1", "last_used": "t"}
        text = json.dumps({"version": 1, "by_file_id": {
            "1:2": good, "3:4": {"file_id": "9:9", "path": "/x", "conversation": "c"},
            "5:6": "nope", "7:8": {"file_id": "7:8", "path": 3, "conversation": "c"},
            "9:1": {"file_id": "9:1", "path": "relative", "conversation": "c"}}})
        index, warning = fe.parse_file_index(text)
        self.assertEqual(index["by_file_id"], {"1:2": good})
        self.assertIn("4 invalid record(s) dropped", warning)

    def test_resolve_over_corrupt_index_warns_and_keeps_backup(self):
        os.makedirs(os.path.dirname(self.index_path))
        with open(self.index_path, "w", encoding="utf-8") as handle:
            handle.write('{"version": 1, "by_fi')
        record = self.resolve(self.write_file("a.py", "x"))
        self.assertIn("rebuilt", record["warning"])
        self.assertEqual(len(self.index_on_disk()["by_file_id"]), 1)
        with open(self.index_path + ".corrupt", encoding="utf-8") as handle:
            self.assertEqual(handle.read(), '{"version": 1, "by_fi')
        self.assertNotIn("warning", self.resolve("a.py"))


class ResolveTest(FileEditCase):
    def test_new_record(self):
        path = self.write_file("src/my file.py", "x = 1\n")
        record = self.resolve("src/my file.py", now=1000.0)
        self.assertEqual(record["file_id"], fe.file_id_for_path(path))
        self.assertEqual(record["path"], path)
        self.assertRegex(record["conversation"], r"^file-my-file-[0-9a-f]{12}$")
        self.assertEqual(record["created"], "1970-01-01T00:16:40.000000Z")
        self.assertEqual(record["last_used"], record["created"])
        self.assertEqual(record["size"], 6)
        self.assertEqual(record["matched_by"], "new")
        self.assertNotIn("warning", record)
        on_disk = self.index_on_disk()
        self.assertEqual(on_disk["version"], 1)
        self.assertEqual(set(on_disk["by_file_id"]), {record["file_id"]})
        self.assertNotIn("matched_by", on_disk["by_file_id"][record["file_id"]])

    def test_dirs_and_index_are_private(self):
        self.resolve(self.write_file("a.py", "x"))
        for directory in (os.path.join(self.home, ".nagent"), os.path.dirname(self.index_path)):
            self.assertEqual(stat.S_IMODE(os.stat(directory).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(self.index_path).st_mode), 0o600)
        leftovers = [n for n in os.listdir(os.path.dirname(self.index_path)) if n.endswith(".tmp")]
        self.assertEqual(leftovers, [])

    def test_same_file_same_conversation_and_updates(self):
        path = self.write_file("a.py", "x")
        first = self.resolve(path, now=1.0)
        self.write_file("a.py", "longer")   # in place: same inode
        second = self.resolve(path, now=2.0)
        self.assertEqual(second["conversation"], first["conversation"])
        self.assertEqual(second["created"], first["created"])
        self.assertEqual(second["matched_by"], "id")
        self.assertEqual(second["size"], 6)
        self.assertGreater(second["last_used"], first["last_used"])

    def test_rename_keeps_conversation(self):
        path = self.write_file("old.py", "x")
        first = self.resolve(path)
        os.rename(path, os.path.join(self.cwd, "new.py"))
        second = self.resolve("new.py")
        self.assertEqual(second["conversation"], first["conversation"])
        self.assertEqual(second["path"], os.path.join(self.cwd, "new.py"))
        self.assertEqual(second["matched_by"], "id")
        self.assertEqual(len(self.index_on_disk()["by_file_id"]), 1)

    def test_replace_by_new_inode_keeps_conversation(self):
        path = self.write_file("a.py", "x")
        first = self.resolve(path)
        self.replace_with_new_inode(path, "y = 2\n")
        self.assertNotEqual(fe.file_id_for_path(path), first["file_id"])
        second = self.resolve(path)
        self.assertEqual(second["conversation"], first["conversation"])
        self.assertEqual(second["file_id"], fe.file_id_for_path(path))
        self.assertEqual(second["matched_by"], "path")
        self.assertEqual(list(self.index_on_disk()["by_file_id"]), [second["file_id"]])

    def test_lookup_follows_the_same_rule_and_writes_nothing(self):
        path = self.write_file("a.py", "x")
        self.assertIsNone(fe.lookup_file_edit(path, PID, self.env))
        self.assertFalse(os.path.exists(os.path.dirname(self.index_path)))
        first = self.resolve(path)
        with open(self.index_path, "rb") as handle:
            before = handle.read()
        found = fe.lookup_file_edit(path, PID, self.env)
        self.assertEqual((found["conversation"], found["matched_by"]), (first["conversation"], "id"))
        self.replace_with_new_inode(path, "y = 2\n")
        found = fe.lookup_file_edit(path, PID, self.env)
        self.assertEqual((found["conversation"], found["matched_by"]), (first["conversation"], "path"))
        with open(self.index_path, "rb") as handle:
            self.assertEqual(handle.read(), before)
        for bad in ("missing.py", self.cwd):
            with self.assertRaises(InputError):
                fe.lookup_file_edit(bad, PID, self.env)

    def test_move_away_then_new_file_id_wins_first(self):
        a = self.write_file("a.py", "x")
        first = self.resolve(a)
        os.rename(a, os.path.join(self.cwd, "b.py"))
        self.write_file("a.py", "new")
        self.assertEqual(self.resolve("b.py")["conversation"], first["conversation"])
        fresh = self.resolve("a.py")
        self.assertNotEqual(fresh["conversation"], first["conversation"])
        self.assertEqual(fresh["matched_by"], "new")

    def test_symlink_resolves_to_real_file(self):
        path = self.write_file("real.py", "x")
        os.symlink(path, os.path.join(self.cwd, "alias.py"))
        self.assertEqual(self.resolve("alias.py")["conversation"], self.resolve(path)["conversation"])

    def test_missing_file_or_directory(self):
        for path in ("missing.py", self.cwd):
            with self.assertRaises(InputError):
                self.resolve(path)
        self.assertFalse(os.path.exists(self.index_path))

    def test_lock_timeout_is_busy(self):
        import fcntl
        path = self.write_file("a.py", "x")
        os.makedirs(os.path.dirname(self.index_path))
        fd = os.open(self.index_path + ".lock", os.O_RDWR | os.O_CREAT)
        self.addCleanup(os.close, fd)
        fcntl.flock(fd, fcntl.LOCK_EX)
        with self.assertRaises(BusyError) as ctx:
            self.resolve(path, lock_timeout=0.1)
        self.assertEqual(ctx.exception.exit_code, 7)
        fcntl.flock(fd, fcntl.LOCK_UN)
        self.assertEqual(self.resolve(path)["matched_by"], "new")

    def test_concurrent_processes_one_consistent_index(self):
        paths = [self.write_file(f"f{i}.py", str(i)) for i in range(10)]
        code = ("import sys; sys.path.insert(0, sys.argv[1]); import nagent_file_edit_lib as fe; "
                "fe.resolve_file_edit(sys.argv[2], sys.argv[3])")
        procs = [subprocess.Popen([sys.executable, "-c", code, HELPERS, path, PID], env=self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                 for path in paths]
        for proc in procs:
            _out, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 0, err)
        index, warning = fe.load_file_index(self.index_path)
        self.assertIsNone(warning)
        self.assertEqual(sorted(r["path"] for r in index["by_file_id"].values()), sorted(paths))
        self.assertEqual(len({r["conversation"] for r in index["by_file_id"].values()}), 10)


class ClearAndListTest(FileEditCase):
    def test_clear_gives_new_conversation(self):
        path = self.write_file("a.py", "x")
        first = self.resolve(path)
        cleared = fe.clear_file_edit(path, PID, self.env)
        self.assertEqual(cleared["old"], first["conversation"])
        self.assertNotEqual(cleared["new"], first["conversation"])
        self.assertEqual(cleared["record"]["conversation"], cleared["new"])
        self.assertEqual(self.resolve(path)["conversation"], cleared["new"])

    def test_clear_unknown_file_creates_record(self):
        cleared = fe.clear_file_edit(self.write_file("a.py", "x"), PID, self.env)
        self.assertIsNone(cleared["old"])
        self.assertTrue(re.match(r"^file-a-[0-9a-f]{12}$", cleared["new"]))

    def test_list_sorted_with_exists(self):
        self.assertEqual(fe.list_file_edits(PID, self.env), [])
        a, b, c = (self.write_file(name, name) for name in ("a.py", "b.py", "c.py"))
        self.resolve(b, now=1.0)
        self.resolve(a, now=3.0)
        self.resolve(c, now=2.0)
        os.unlink(c)
        listed = fe.list_file_edits(PID, self.env)
        self.assertEqual([r["path"] for r in listed], [a, c, b])
        self.assertEqual([r["exists"] for r in listed], [True, False, True])
        self.replace_with_new_inode(a, "new")
        self.assertFalse(fe.list_file_edits(PID, self.env)[0]["exists"])

    def test_pids_are_separate(self):
        path = self.write_file("a.py", "x")
        self.resolve(path)
        self.assertEqual(fe.list_file_edits("999", self.env), [])
