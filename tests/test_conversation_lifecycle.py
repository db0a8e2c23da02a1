"""Tests for nagent_conversation_lifecycle: default pid and paths, name validation, archive,
save, load, branch, listing and side files."""
import os
import subprocess
import sys
import unittest

from base import HELPERS, HermeticTestCase

import nagent_conversation_lifecycle as life
from nagent_conversation import ConversationWriter, encode_record, read_records
from nagent_errors import BusyError, InputError, RefusedError, UsageError


def slurp(path):
    with open(path, "rb") as handle:
        return handle.read()


class PathsTest(HermeticTestCase):
    def test_home_and_dirs(self):
        import nagent_paths
        self.assertEqual(nagent_paths.nagent_home(self.env), os.path.join(self.home, ".nagent"))
        self.assertEqual(life.conversations_dir(self.env),
                         os.path.join(self.home, ".nagent", "conversations"))
        self.assertFalse(os.path.exists(life.conversations_dir(self.env)))

    def test_default_pid_rules(self):
        env = dict(self.env, STY="12345.pts-0.my host", WINDOW="2", BASHPID="99")
        self.assertEqual(life.default_pid(env), "screen-12345.pts-0.my_host-2")
        self.assertEqual(life.default_pid(dict(env, WINDOW="")), "screen-12345.pts-0.my_host")
        del env["STY"]
        self.assertEqual(life.default_pid(env), "99")
        self.assertEqual(life.default_pid(dict(env, BASHPID="")), str(os.getsid(0)))
        self.assertEqual(life.default_pid(self.env), str(os.getsid(0)))

    def test_selected_pid_is_the_one_rule_for_every_command(self):
        import nagent_conversation_layout as layout
        env = dict(self.env, STY="7.pts-1", WINDOW="3")
        self.assertEqual(layout.selected_pid("abc", env), "abc")
        # no --pid: this shell's, from `environ`
        self.assertEqual(layout.selected_pid(None, env), "screen-7.pts-1-3")
        for bad in ("", "../x", "a b", "-x", "x" * 65):  # "": a script's unset "$VAR"
            with self.assertRaises(UsageError):
                layout.selected_pid(bad, env)
        self.assertEqual(layout.selected_conversation(layout.Selection(), env),
                         (layout.default_conversation_path(env, pid="screen-7.pts-1-3"),
                          "screen-7.pts-1-3"))

    def test_default_pid_is_stable_through_wrappers(self):
        code = ("import sys; sys.path.insert(0, sys.argv[1]); "
                "import nagent_conversation_lifecycle as l; print(l.default_pid())")
        direct = subprocess.run([sys.executable, "-c", code, HELPERS], env=self.env,
                                capture_output=True, text=True, check=True).stdout
        # Two shells in between, like make or a script would add: getppid() changes, the
        # session id does not.
        script = 'sh -c \'"$0" -c "$1" "$2"; exit $?\' "$0" "$@"; exit $?'
        wrapped = subprocess.run(["sh", "-c", script, sys.executable, code, HELPERS],
                                 env=self.env, capture_output=True, text=True, check=True).stdout
        self.assertEqual(direct, wrapped)
        self.assertEqual(direct.strip(), str(os.getsid(0)))

    def test_default_conversation_path(self):
        folder = life.conversations_dir(self.env)
        self.assertEqual(life.default_conversation_path(self.env, pid="42", hostname="box"),
                         os.path.join(folder, "latest-box-42"))
        self.assertEqual(life.default_conversation_path(self.env, pid="a.b", hostname="my/box"),
                         os.path.join(folder, "latest-my_box-a.b"))
        self.assertEqual(life.default_conversation_path(dict(self.env, BASHPID="7"),
                                                        hostname="h"),
                         os.path.join(folder, "latest-h-7"))
        self.assertTrue(os.path.basename(life.default_conversation_path(self.env))
                        .startswith("latest-"))
        # One pid rule: a pid the user gives is checked, never silently rewritten.
        for bad in ("", "..", "-", "a/b", ".x", "x" * 65):
            with self.assertRaises(UsageError, msg=bad):
                life.default_conversation_path(self.env, pid=bad)

    def test_validate_name(self):
        # Names that were nagent's own files under the old layout are plain names now: nagent
        # keeps a conversation's state in NAME.d/, which no name can reach.
        for good in ("saved-copy", "a", "x" * 200, "Notes_2026.11", "c.lock", "c.torn-1",
                     "foo.checkpoint.md", "file-index-555.json", "_x"):
            self.assertEqual(life.validate_name(good), good)
            self.assertEqual(life.conversation_path(good, self.env),
                             os.path.join(life.conversations_dir(self.env), good))
        for bad in ("", "/", "..", ".", "/abs", "a/b", "a\0b", ".hidden", "-flag", "x" * 201,
                    "tab\tname", "c.d", "archive", "ü-name", "a b", None):
            with self.assertRaises(UsageError, msg=repr(bad)) as caught:
                life.validate_name(bad)
            self.assertTrue(caught.exception.line().startswith("Error: invalid conversation name"))
            self.assertNotIn("\0", caught.exception.line())


class LifecycleTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.folder = life.conversations_dir(self.env)
        self.current = life.default_conversation_path(self.env, pid="1", hostname="h")

    def make(self, path, turns=2, prompt="first prompt"):
        with ConversationWriter(path) as writer:
            writer.append("context", "ctx", {"part": "static"})
            for turn in range(1, turns + 1):
                writer.append("prompt", f"{prompt} {turn}", {"source": "argv"})
                writer.append("reply", f"reply {turn}", {"valid": True})
                writer.append("result", f"result {turn}", {"action": "shell"})
        return slurp(path)

    def archived(self):
        folder = os.path.join(self.folder, "archive")
        return sorted(os.listdir(folder)) if os.path.isdir(folder) else []

    def test_archive(self):
        self.assertIsNone(life.archive(self.current))
        data = self.make(self.current)
        side = life.write_side_file(self.current, "out", b"quoted by path")
        first = life.archive(self.current)
        self.assertFalse(os.path.exists(self.current))
        self.assertEqual(slurp(first), data)
        self.assertRegex(os.path.basename(first), r"^latest-h-1-\d{8}T\d{6}Z$")
        self.assertEqual(slurp(side), b"quoted by path")  # side files stay put
        self.make(self.current)
        second = life.archive(self.current)
        self.assertNotEqual(first, second)
        if os.path.basename(second).startswith(os.path.basename(first)):
            self.assertTrue(second.endswith("-2"))
        self.assertEqual(len(self.archived()), 2)

    def test_archive_refuses_a_live_conversation(self):
        self.make(self.current)
        with ConversationWriter(self.current):
            self.assertTrue(life.is_busy(self.current))
            with self.assertRaises(BusyError):
                life.archive(self.current, lock_timeout=0)
        self.assertFalse(life.is_busy(self.current))
        self.assertTrue(os.path.exists(self.current))

    def test_archive_locked_while_running_then_reopen(self):
        with ConversationWriter(self.current) as writer:
            writer.append("prompt", "old window")
            archived = life.archive_locked(self.current)
            self.assertEqual([r.body for r in read_records(archived)], ["old window"])
            life.atomic_write(self.current, encode_record(1, "context", "new window"))
            writer.reopen()
            self.assertTrue(life.is_busy(self.current))  # the lock was kept throughout
            self.assertEqual(writer.records()[0].body, "new window")
            self.assertEqual(writer.append("prompt", "next").seq, 2)
        self.assertEqual([r.body for r in read_records(self.current)], ["new window", "next"])
        self.assertEqual([r.body for r in read_records(archived)], ["old window"])

    def test_save_as(self):
        data = self.make(self.current)
        with open(self.current, "ab") as handle:
            handle.write(encode_record(99, "reply", "torn")[:25])
        os.chmod(self.current, 0o640)
        saved, archived = life.save_as(self.current, "saved-copy", environ=self.env)
        self.assertEqual((saved, archived), (os.path.join(self.folder, "saved-copy"), None))
        self.assertEqual(slurp(saved), data)  # the torn tail is left out
        self.assertEqual(os.stat(saved).st_mode & 0o777, 0o640)
        with self.assertRaises(RefusedError):
            life.save_as(self.current, "saved-copy", environ=self.env)
        os.unlink(self.current)
        self.make(self.current, turns=1)
        _, archived = life.save_as(self.current, "saved-copy", overwrite=True, environ=self.env)
        self.assertEqual(len(read_records(saved)), 4)
        self.assertEqual(self.archived(), [os.path.basename(archived)])  # the old copy is kept
        self.assertEqual(slurp(archived), data)
        with self.assertRaises(RefusedError):
            life.save_as(saved, "saved-copy", overwrite=True, environ=self.env)
        with ConversationWriter(saved):
            with self.assertRaises(BusyError):
                life.save_as(self.current, "saved-copy", overwrite=True, environ=self.env,
                             lock_timeout=0)
        for bad in ("../escape", "/tmp/x", ".x"):
            with self.assertRaises(UsageError):
                life.save_as(self.current, bad, environ=self.env)
        with self.assertRaises(InputError):
            life.save_as(os.path.join(self.folder, "missing"), "other", environ=self.env)

    def test_load(self):
        saved_data = self.make(os.path.join(self.folder, "keep"), turns=1, prompt="saved")
        current_data = self.make(self.current)
        archived_path = life.load("keep", self.current, environ=self.env)
        self.assertEqual(slurp(self.current), saved_data)
        self.assertEqual(slurp(os.path.join(self.folder, "keep")), saved_data)
        (archived,) = self.archived()
        self.assertEqual(os.path.basename(archived_path), archived)
        self.assertEqual(slurp(os.path.join(self.folder, "archive", archived)), current_data)
        with ConversationWriter(self.current) as writer:  # the loaded copy continues normally
            self.assertEqual(writer.next_seq, 5)
            with self.assertRaises(BusyError):
                life.load("keep", self.current, environ=self.env, lock_timeout=0)
        os.unlink(self.current)
        life.load("keep", self.current, environ=self.env)
        self.assertEqual(slurp(self.current), saved_data)
        with self.assertRaises(InputError):
            life.load("nope", self.current, environ=self.env)
        with self.assertRaises(UsageError):
            life.load("../x", self.current, environ=self.env)

    def test_branch(self):
        source = os.path.join(self.folder, "src")
        with ConversationWriter(source) as writer:
            writer.append("context", "ctx", {"part": "static"})
            writer.append("prompt", "p1", {"source": "argv"})
            writer.append("reply", "r1", {"valid": True})
            writer.append("result", "res1", {"action": "shell"})
            writer.append("reply", "r2", {"valid": False, "cut": 3})
            writer.append("system", "correction")
            writer.append("prompt", "p2", {"source": "next"})
            writer.append("reply", "r3")
            writer.append("prompt", "p3", {"source": "stdin"})
            writer.append("reply", "r4")
        with open(source, "ab") as handle:
            handle.write(b"a hand note\n")
        original = read_records(source)
        target = os.path.join(self.folder, "dst")
        # A turn is a user prompt and what followed it: the "next" continuation stays in turn 1.
        expected = {1: ["ctx", "p1", "r1", "res1", "r2", "correction", "p2", "r3"],
                    2: [r.body for r in original], None: [r.body for r in original]}
        for number, (turn, bodies) in enumerate(expected.items()):
            archived = life.branch(source, target, turn)
            self.assertEqual(archived is None, number == 0)
            records = read_records(target)
            self.assertEqual([r.body for r in records], bodies, turn)
            numbered = [r for r in records if r.kind != "note"]
            self.assertEqual([r.seq for r in numbered], list(range(1, len(numbered) + 1)))
            by_body = {r.body: r for r in original}
            for record in records:
                self.assertEqual((record.kind, record.attrs, record.time),
                                 (by_body[record.body].kind, by_body[record.body].attrs,
                                  by_body[record.body].time))
        self.assertEqual(len(self.archived()), 2)  # each replaced branch was archived
        for bad in (0, 4, -1, True):
            with self.assertRaises(UsageError):
                life.branch(source, target, bad)
        with ConversationWriter(target):
            with self.assertRaises(BusyError):
                life.branch(source, target, 1, lock_timeout=0)

    def test_list_conversations(self):
        self.assertEqual(life.list_conversations(self.env), [])
        long_prompt = "word   " * 30
        self.make(self.current, prompt=long_prompt)
        self.make(os.path.join(self.folder, "saved-one"), prompt="short\nprompt")
        self.write_file(os.path.join(self.folder, "empty"), "")  # nothing to list
        self.make(os.path.join(self.folder, "old"), turns=1)
        life.archive(os.path.join(self.folder, "old"))
        big = os.path.join(self.folder, "big")
        with ConversationWriter(big) as writer:
            writer.append("context", "c" * 70000)
            writer.append("prompt", "never seen")
        huge_prompt = os.path.join(self.folder, "huge-prompt")
        with ConversationWriter(huge_prompt) as writer:
            writer.append("prompt", "head of a long prompt " + "z" * 70000)
        for junk in ("x.lock", "x.torn-20260101T000000Z", "files-1.json", ".x.tmp-1", "stray"):
            self.write_file(os.path.join(self.folder, junk), "not a conversation")
        os.makedirs(os.path.join(self.folder, "x.d"))
        entries = life.list_conversations(self.env)
        by_name = {entry["name"]: entry for entry in entries}
        self.assertEqual(sorted(by_name), sorted(["latest-h-1", "saved-one", "big",
                                                  "huge-prompt", self.archived()[0]]))
        self.assertEqual([entry["kind"] for entry in entries],
                         ["latest"] + ["saved"] * 3 + ["archived"])
        self.assertEqual(by_name["latest-h-1"]["first_prompt"], ("word " * 30)[:80])
        self.assertEqual(by_name["saved-one"]["first_prompt"], "short prompt 1")
        self.assertEqual(by_name["big"]["first_prompt"], "")
        self.assertEqual(by_name["huge-prompt"]["first_prompt"],
                         ("head of a long prompt " + "z" * 80)[:80])
        entry = by_name["saved-one"]
        self.assertEqual(entry["path"], os.path.join(self.folder, "saved-one"))
        self.assertEqual(entry["size"], os.path.getsize(entry["path"]))
        self.assertRegex(entry["modified"], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")

    def test_side_files(self):
        folder = life.side_dir(self.current)
        self.assertEqual(folder, os.path.join(self.current + ".d", "side"))
        self.assertTrue(os.path.isdir(folder))
        first = life.write_side_file(self.current, "read-result-3", b"one")
        second = life.write_side_file(self.current, "read-result-3", "two")
        odd = life.write_side_file(self.current, "../../etc/passwd", b"x")
        self.assertEqual(first, os.path.join(folder, "read-result-3"))
        self.assertEqual(second, first + "-2")
        self.assertEqual((slurp(first), slurp(second)), (b"one", b"two"))
        self.assertEqual(os.path.dirname(odd), folder)
        self.assertEqual(os.stat(first).st_mode & 0o777, 0o600)
        self.assertEqual(sorted(os.listdir(folder)), sorted(map(os.path.basename,
                                                                (first, second, odd))))


if __name__ == "__main__":
    unittest.main()
