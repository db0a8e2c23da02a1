"""Issue 22: snapshots of the project in a shadow store, `nagent --changes`, `nagent --rewind`.

End to end (the real bin/nagent in a real git repository against the fake vendor): the
scripted session of the issue (turn 1 edits a.py with <nagent-replace>) with a user edit between
turns, kill -9 during a snapshot and during a rewind, and $HOME refused with a clear line.
In process (the same library and command code, no model, so no SDK import per run): file
kinds, size cap, the project's hostile git config, a .gitignore excluding everything, a
symlinked root, the tree limits outside git, parallel agents and retention. `LibraryCase.turn`
plays a turn as a run takes its snapshots: start, before the action, the action, after it.
"""
import hashlib
import json
import os
import signal
import subprocess
import sys
import threading
import time

from base import BIN, HermeticTestCase
from project_fixture import ProjectFixture
from test_loop import NagentRunCase

import nagent_snapshot_commands as commands
from nagent_invocation import Invocation
from nagent_config import resolve_settings
from nagent_conversation import ConversationWriter, read_records
from nagent_errors import RefusedError, UsageError
from nagent_shadow_git import read_head
from nagent_snapshot_retention import maintain, prune
from nagent_snapshot_layout import status_of
from nagent_snapshot_store import append_journal, locked, open_store, read_journal
from nagent_snapshots import Limits, SnapshotRefused, project_scope, take_snapshot

DONE = "<nagent-response>done</nagent-response>"


def shell(script):
    return f"<nagent-shell>{script}</nagent-shell>"


class Helpers:
    CONVERSATION = "work"

    def project(self, files, commit=True):
        self.init_git()
        for path, content in files.items():
            self.write_file(path, content)
        if commit:
            self.git("add", "-A")
            self.git("commit", "-q", "-m", "start")

    def read(self, path):
        with open(os.path.join(self.cwd, path), encoding="utf-8", newline="") as handle:
            return handle.read()

    def store_path(self):
        root = os.path.join(self.home, ".nagent", "snapshots")
        names = os.listdir(root)
        self.assertEqual(len(names), 1, names)
        return os.path.join(root, names[0])

    def archived(self):
        return {os.path.relpath(os.path.join(folder, name), os.path.join(
            self.store_path(), "archive")).split("/", 1)[1]: self.read(os.path.join(folder, name))
            for folder, _, names in os.walk(os.path.join(self.store_path(), "archive"))
            for name in names}


class RewindRunCase(Helpers, ProjectFixture, NagentRunCase):
    def turn(self, prompt, *replies, cwd=None, args=()):
        for reply in replies + (DONE,):
            self.fake.reply(reply)
        proc = self.nagent("--conversation", self.CONVERSATION, *args, prompt, cwd=cwd)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc

    def command(self, *args, cwd=None, code=0):
        proc = self.nagent("--conversation", self.CONVERSATION, *args, cwd=cwd)
        self.assertEqual(proc.returncode, code, proc.stdout + proc.stderr)
        return proc

    def user_git(self):
        """Everything of the user's repository: every byte under .git, the log and the refs."""
        digest = hashlib.sha256()
        for folder, dirs, files in sorted(os.walk(os.path.join(self.cwd, ".git"))):
            dirs.sort()
            for name in sorted(files):
                with open(os.path.join(folder, name), "rb") as handle:
                    digest.update(os.path.join(folder, name).encode() + b"\0" + handle.read())
        return digest.hexdigest(), self.git("log", "--all", "--format=raw"), self.git("for-each-ref")

    def git_status(self):
        env = dict(self.env, GIT_OPTIONAL_LOCKS="0")   # the test's own status writes nothing
        return subprocess.run(["git", "status", "--porcelain=v2", "--untracked-files=all"],
                              cwd=self.cwd, env=env, capture_output=True, check=True).stdout


class ScriptedSessionTest(RewindRunCase):
    def test_changes_attribution_rewind_rewind_again_and_a_user_edit(self):
        self.project({"a.py": "print(1)\n", "b.py": "x = 1\n", "d.py": "old = True\n"})
        before = self.user_git()
        self.turn("edit a.py", '<nagent-replace path="a.py"><old>print(1)</old><new>print(2)</new>'
                               '</nagent-replace>')
        after_turn1 = self.git_status()
        self.fake.reply(shell("sed -i 's/1/2/' b.py"))
        self.fake.reply(shell("printf 'print(3)\\n' > c.py && rm d.py") + '\n<nagent-read path="b.py"/>')
        self.fake.reply(DONE)
        proc = self.nagent("--conversation", self.CONVERSATION, "--events", "sed, create, delete")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        events = [json.loads(line) for line in proc.stdout.splitlines()]
        snaps = [e for e in events if e["type"] == "snapshot"]
        self.assertEqual([(e["phase"], e["files"]) for e in snaps], [("after", 1), ("after", 2)])
        after_turn2 = self.git_status()

        data = json.loads(self.command("--changes", "--json").stdout)
        turns = {unit["turn"]: unit for unit in data["units"]}
        self.assertEqual(sorted(turns), [1, 2])
        self.assertEqual([(a["kind"], [f["path"] for f in a["files"]]) for a in turns[1]["actions"]],
                         [("replace", ["a.py"])])
        actions = [(a["kind"], a["summary"], [(f["status"], f["path"]) for f in a["files"]])
                   for a in turns[2]["actions"]]
        self.assertEqual(actions, [
            ("shell", "sed -i 's/1/2/' b.py", [("M", "b.py")]),
            ("shell", "printf 'print(3)\\n' > c.py && rm d.py", [("A", "c.py"), ("D", "d.py")])])
        self.assertEqual(turns[2]["outside"], [])
        seq = turns[2]["actions"][1]["seq"]
        records = {r.seq: r for r in self.records(self.named_path(self.CONVERSATION))}
        self.assertEqual((records[seq].kind, records[seq].attr("action")), ("result", "shell"))
        text = self.command("--changes", "--last", "--diff").stdout
        self.assertIn("turn 2: sed, create, delete", text)
        self.assertIn("M b.py", text)
        self.assertIn("-x = 1", text)
        self.assertNotIn("turn 1", text)

        proc = self.command("--rewind", "--turn", "2", "--dry-run")
        self.assertIn("restore  b.py", proc.stdout)
        self.assertEqual(self.git_status(), after_turn2)          # a dry run changes nothing
        proc = self.command("--rewind", "--turn", "2")
        self.assertIn("↺ rewound turn 2: 2 files restored, 1 archived", proc.stdout)
        self.assertEqual((self.read("b.py"), self.read("d.py")), ("x = 1\n", "old = True\n"))
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "c.py")))
        self.assertEqual(list(self.archived().items()), [("c.py", "print(3)\n")])
        self.assertEqual(self.git_status(), after_turn1)
        notes = [r.body for r in self.kinds(self.named_path(self.CONVERSATION), "system")]
        self.assertIn("state before turn 2", notes[-1])

        proc = self.command("--rewind")                              # undoes the rewind
        self.assertIn("↺ rewound the rewind of turn 2: 2 files restored, 1 archived", proc.stdout)
        self.assertEqual(self.git_status(), after_turn2)
        self.assertEqual((self.read("b.py"), self.read("c.py")), ("x = 2\n", "print(3)\n"))
        self.assertEqual(self.user_git(), before)   # no commit, index, ref, hook, config change

        # The user edits b.py between turns: not overwritten without --force.
        self.write_file("b.py", "x = 2\n# the user's own line\n")
        proc = self.command("--rewind", "--turn", "2", code=10)
        self.assertCleanError(proc, 10, "files changed since by someone other than the agent: b.py")
        self.assertTrue(os.path.exists(os.path.join(self.cwd, "c.py")))   # nothing changed
        proc = self.command("--rewind", "--turn", "2", "--force")
        self.assertIn("(1 kept as copies)", proc.stdout)
        self.assertEqual(self.read("b.py"), "x = 1\n")
        self.assertIn("x = 2\n# the user's own line\n", self.archived().values())


class KillTest(RewindRunCase):
    """kill -9 in the middle of a snapshot and of a rewind: a `git` first on PATH (test code)
    stops before the real one for one subcommand, holding git's index lock as a git killed
    mid-write leaves it, until the test kills the whole process group."""

    def setUp(self):
        super().setUp()
        real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True,
                              env=self.env).stdout.strip()
        folder = os.path.join(self.tmp, "fakebin")
        self.pause = os.path.join(self.tmp, "pause-on")
        self.paused = os.path.join(self.tmp, "paused")
        self.write_file(os.path.join(folder, "git"), (
            "#!/bin/sh\n"
            f'if [ -e "{self.pause}" ] && printf "%s\\n" "$@" | grep -qx "$(cat "{self.pause}")"; then\n'
            '  [ -n "$GIT_DIR" ] && touch "$GIT_DIR/index.lock"\n'
            f'  touch "{self.paused}"; sleep 60\n'
            "fi\n"
            f'exec "{real}" "$@"\n'))
        os.chmod(os.path.join(folder, "git"), 0o755)
        self.env["PATH"] = folder + os.pathsep + self.env["PATH"]

    def killed_during(self, subcommand, *args, replies=()):
        self.write_file(self.pause, subcommand + "\n")
        for reply in replies:
            self.fake.reply(reply)
        proc = subprocess.Popen([sys.executable, os.path.join(BIN, "nagent"), "--conversation",
                                 self.CONVERSATION, *args], cwd=self.cwd, env=self.env,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(self.paused):
            self.assertIsNone(proc.poll(), "nagent ended before the pause")
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.02)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        os.unlink(self.pause)
        os.unlink(self.paused)

    def test_kill_during_a_snapshot_and_during_a_rewind_the_next_command_recovers(self):
        self.project({"a.py": "a = 1\n", "b.py": "b = 1\n"})
        # The run's first snapshot is killed in git update-index: its lock file stays.
        self.killed_during("update-index", "first", replies=(shell("echo 0 > a.py"),))
        self.assertTrue(os.path.exists(os.path.join(self.store_path(), "git", "index.lock")))
        proc = self.turn("second", shell("sed -i s/.*/2/ a.py b.py && echo new > c.py"),
                         args=("-v",))
        self.assertNotIn("snapshots off", proc.stderr)
        # The rewind is killed after it archived c.py, before it restored a.py and b.py.
        self.killed_during("ls-tree", "--rewind")
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "c.py")))
        self.assertEqual(self.read("a.py"), "2\n")
        self.assertTrue(os.path.exists(os.path.join(self.store_path(), "rewind.json")))
        proc = self.command("--changes")
        self.assertIn("finished a rewind a killed nagent left: ↺ rewound turn 2: 2 files "
                      "restored, 1 archived", proc.stdout)
        self.assertIn("    A c.py | 1 +", proc.stdout)          # the changes of turn 2
        self.assertEqual((self.read("a.py"), self.read("b.py")), ("a = 1\n", "b = 1\n"))
        self.assertFalse(os.path.exists(os.path.join(self.store_path(), "rewind.json")))
        notes = [r.body for r in self.kinds(self.named_path(self.CONVERSATION), "system")]
        self.assertIn("state before turn 2", notes[-1])
        self.command("--rewind")
        self.assertEqual((self.read("a.py"), self.read("c.py")), ("2\n", "new\n"))

    def test_home_is_refused_with_a_clear_line(self):
        proc = self.turn("hi", shell("true"), cwd=self.home, args=("-v",))
        self.assertIn(f"no snapshots for --rewind here: the home directory {self.home}",
                      proc.stderr)
        proc = self.command("--changes", cwd=self.home, code=10)
        self.assertCleanError(proc, 10, "no snapshots here")
        self.assertFalse(os.path.exists(os.path.join(self.home, ".nagent", "snapshots")))


class LibraryCase(Helpers, ProjectFixture, HermeticTestCase):
    LIMITS = Limits(10 << 20, 20000, 512 << 20, 30.0, 200)

    def setUp(self):
        super().setUp()
        self.limits = self.LIMITS
        self.conversation = os.path.join(self.home, ".nagent", "conversations", self.CONVERSATION)
        self.tokens = []

    def turn(self, change, cwd=None, conversation=None, kind="shell"):
        """A turn as a run takes it: its prompt record, then snapshots at its start, before the
        action, after it. Returns the store."""
        conversation = conversation or self.conversation
        token = os.urandom(8).hex()
        with ConversationWriter(conversation) as writer:
            writer.append("prompt", f"turn {len(self.tokens) + 1}",
                          {"source": "argv", "turn_id": token})
        self.tokens.append(token)
        scope = project_scope(cwd or self.cwd, self.env, ())
        store = open_store(scope.root, self.env, ())
        meta = {"conv": conversation, "turn_id": token, "turn": len(self.tokens)}
        for phase in ("start", "action", "after"):
            if phase == "after":
                change()
            with locked(store):
                entry = take_snapshot(store, scope, self.limits, dict(
                    meta, phase=phase, kind=kind, summary=f"{phase} {kind}"))
                if phase == "action":   # its result's record number, as a run notes it
                    append_journal(store, {"id": entry["id"], "seq": 100 + len(self.tokens)})
        return store

    def command(self, name, cwd=None, **options):
        options = Invocation(**dict({"conversation": self.CONVERSATION}, **options))
        here = os.getcwd()
        with self.patched_environ():
            os.chdir(cwd or self.cwd)
            try:
                return getattr(commands, name)(options, resolve_settings({}, self.env))
            finally:
                os.chdir(here)

    def run_shell(self, script):
        return lambda: subprocess.run(["sh", "-c", script], cwd=self.cwd, check=True)


class FileKindsTest(LibraryCase):
    LIMITS = LibraryCase.LIMITS._replace(max_file_bytes=1000)

    def setUp(self):
        super().setUp()
        self.write_config({"snapshots": {"max_file_bytes": 1000}})   # as the commands read it

    def test_binary_links_modes_directories_odd_names_and_big_files_round_trip(self):
        outside = self.make_outside_dir()
        binary = bytes(range(256)) * 2
        self.project({"tool.sh": "echo hi\n", "x": "a file\n", "dir with space/file one.txt":
                      "one\n", "pkg/m.py": "m = 1\n", "grow.txt": "small\n"}, commit=False)
        self.write_file("bin.dat", binary, "wb")
        os.symlink("tool.sh", os.path.join(self.cwd, "link"))
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "kinds")
        self.turn(self.run_shell("\n".join([
            "printf '\\000\\377changed' > bin.dat", "chmod +x tool.sh",
            "rm link && ln -s /etc/passwd link", "rm x && mkdir x && echo y > x/y",
            "echo changed > 'dir with space/file one.txt'",
            "printf n > \"$(printf 'new\\nline.txt')\"", f"rm -r pkg && ln -s {outside} pkg",
            "head -c 3000 /dev/zero > big.bin && head -c 2000 /dev/zero >> grow.txt"])))
        data, text = self.command("rewind")
        self.assertIn("↺ rewound turn 1:", text)
        self.assertIn("new\\x0aline.txt", text)           # a name is never raw on the screen
        with open(os.path.join(self.cwd, "bin.dat"), "rb") as handle:
            self.assertEqual(handle.read(), binary)
        self.assertFalse(os.stat(os.path.join(self.cwd, "tool.sh")).st_mode & 0o111)
        self.assertEqual(os.readlink(os.path.join(self.cwd, "link")), "tool.sh")
        self.assertEqual((self.read("x"), self.read("dir with space/file one.txt")),
                         ("a file\n", "one\n"))
        self.assertFalse(os.path.lexists(os.path.join(self.cwd, "new\nline.txt")))
        self.assertFalse(os.path.islink(os.path.join(self.cwd, "pkg")))
        self.assertEqual(self.read("pkg/m.py"), "m = 1\n")
        self.assertEqual(os.listdir(outside), [])          # never written through the link
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "big.bin")))   # archived
        self.assertEqual(self.read("grow.txt"), "small\n")
        self.assertIn("big.bin", self.archived())
        data, text = self.command("rewind")                 # and back again
        # Files over snapshots.max_file_bytes were never copied: listed, and in the archive.
        self.assertIn("(2 not restorable (over the size cap))", text)
        self.assertEqual(sorted(data["unrestorable"]), ["big.bin", "grow.txt"])
        self.assertEqual(os.readlink(os.path.join(self.cwd, "link")), "/etc/passwd")
        self.assertEqual(os.readlink(os.path.join(self.cwd, "pkg")), outside)
        self.assertEqual(os.listdir(outside), [])
        self.assertTrue(os.stat(os.path.join(self.cwd, "tool.sh")).st_mode & 0o100)
        self.assertEqual(self.read("x/y"), "y\n")
        self.assertEqual(self.read("new\nline.txt"), "n")
        with open(os.path.join(self.cwd, "bin.dat"), "rb") as handle:
            self.assertEqual(handle.read(), b"\0\377changed")


class HostileProjectTest(LibraryCase):
    HOOKS = ("post-index-change", "pre-commit", "post-commit", "post-checkout", "pre-auto-gc",
             "reference-transaction", "post-rewrite", "fsmonitor-watchman")

    def test_the_projects_git_config_runs_nothing_and_redirects_nothing(self):
        self.project({"a.py": "a = 1\n"})
        marker = os.path.join(self.tmp, "RAN")
        elsewhere = os.path.join(self.tmp, "elsewhere")
        self.write_file(os.path.join(elsewhere, "e.txt"), "e\n")
        hooks = os.path.join(self.tmp, "hooks")
        for name in self.HOOKS:
            for folder in (hooks, os.path.join(self.cwd, ".git", "hooks")):
                path = self.write_file(os.path.join(folder, name),
                                       f'#!/bin/sh\necho {name} >> "{marker}"\n')
                os.chmod(path, 0o755)
        with open(os.path.join(self.cwd, ".git", "config"), "a", encoding="utf-8") as handle:
            handle.write(f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = {hooks}/fsmonitor-watchman"
                         f"\n\tworktree = {elsewhere}\n\tuntrackedCache = true\n[diff]\n\t"
                         f"external = {hooks}/pre-commit\n[filter \"x\"]\n\tclean = {hooks}/"
                         f"pre-commit\n\trequired = true\n")
        self.write_file(".gitattributes", "* filter=x text eol=crlf\n")
        self.turn(self.run_shell("echo 2 > a.py && echo n > n.py"))
        data, _ = self.command("changes", diff=True)
        self.assertEqual(data["project"], self.cwd)
        files = [(f["status"], f["path"]) for f in data["units"][0]["actions"][0]["files"]]
        self.assertEqual(files, [("M", "a.py"), ("A", "n.py")])
        self.command("rewind")
        self.assertEqual(self.read("a.py"), "a = 1\n")      # bytes as they were: no eol, filter
        self.assertFalse(os.path.exists(marker), "a project hook, filter or fsmonitor ran")
        self.assertEqual(os.listdir(elsewhere), ["e.txt"])

    def test_a_gitignore_excluding_everything_still_covers_tracked_files_via_a_linked_root(self):
        self.project({"t.py": "t = 1\n", ".gitignore": "*\n"}, commit=False)
        self.git("add", "-f", "t.py", ".gitignore")
        self.git("commit", "-q", "-m", "ignored but tracked")
        link = os.path.join(self.tmp, "via-link")
        os.symlink(self.cwd, link)      # a symlinked project root
        self.turn(self.run_shell("echo 2 > t.py && echo n > new.txt"), cwd=link)
        data, _ = self.command("changes", cwd=link)
        self.assertEqual(data["project"], self.cwd)
        files = [(f["status"], f["path"]) for f in data["units"][0]["actions"][0]["files"]]
        self.assertEqual(files, [("M", "t.py")])   # new.txt is ignored: not covered
        self.command("rewind")                      # the same store from the real path
        self.assertEqual((self.read("t.py"), self.read("new.txt")), ("t = 1\n", "n\n"))


class RewindConversationTest(LibraryCase):
    def test_rewind_an_action_and_take_the_conversation_back_with_the_files(self):
        self.project({"a.txt": "0\n"})
        for step in (1, 2, 3):
            self.turn(self.run_shell(f"echo {step} > a.txt && echo {step} > new{step}.txt"))
        data, text = self.command("rewind", action=103)       # before turn 3's action
        self.assertIn("↺ rewound action 103 (turn 3): 1 file restored, 1 archived", text)
        self.assertEqual(self.read("a.txt"), "2\n")
        with self.assertRaises(UsageError):                  # by whole turns only
            self.command("rewind", action=102, with_conversation=True)
        data, text = self.command("rewind", turn=2, with_conversation=True)
        self.assertEqual((self.read("a.txt"), data["branched"]["turns"]), ("1\n", 1))
        records = read_records(self.conversation)
        self.assertEqual([r.body for r in records if r.kind == "prompt"], ["turn 1"])
        self.assertIn("state before turn 2", records[-1].body)
        self.assertTrue(os.path.exists(data["branched"]["archived"]))
        data, text = self.command("rewind", turn=1, with_conversation=True)
        self.assertEqual(self.read("a.txt"), "0\n")
        self.assertFalse(os.path.exists(self.conversation))   # archived: it starts afresh
        self.assertEqual(sorted(os.listdir(self.cwd)), [".git", "a.txt"])


class TreeAndStoreTest(LibraryCase):
    def test_the_scope_is_the_project_rules_root_and_never_a_git_directory(self):
        self.project({"a.py": "a = 1\n"})
        for inside in (".git", os.path.join(".git", "refs", "heads")):   # refs, HEAD: git's own
            refused = project_scope(os.path.join(self.cwd, inside), self.env, ()).refused
            self.assertIn("inside the repository directory", refused or "")
        self.git("config", "core.worktree", self.tmp)   # git names another work tree: refused
        scope = project_scope(os.path.join(self.cwd), self.env, ())
        self.assertEqual((scope.mode, scope.root, scope.refused), ("tree", self.cwd, None))

    def test_outside_git_the_tree_has_limits_and_home_and_root_are_refused(self):
        for where in (self.home, "/"):
            self.assertIsNotNone(project_scope(where, self.env, ()).refused)
            with self.assertRaises(RefusedError):
                self.command("changes", cwd=where)
        for index in range(5):
            self.write_file(f"f{index}.txt", "x\n")
        scope = project_scope(self.cwd, self.env, ())
        self.assertEqual((scope.mode, scope.root, scope.refused), ("tree", self.cwd, None))
        store = open_store(scope.root, self.env, ())
        for limits in (self.limits._replace(max_files=3), self.limits._replace(max_bytes=5)):
            with locked(store), self.assertRaises(SnapshotRefused):
                take_snapshot(store, scope, limits, {"phase": "start"})
        self.assertEqual(read_journal(store), [])
        self.turn(self.run_shell("echo y > f0.txt"))
        data, _ = self.command("changes")
        self.assertEqual(data["units"][0]["files_changed"], 1)

    def test_parallel_agents_snapshot_in_turn_and_keep_their_own_changes(self):
        self.project({"shared.txt": "s\n"})
        errors = []

        def agent(name):
            try:
                for step in range(3):
                    self.turn(self.run_shell(f"echo {step} > {name}-{step}.txt"),
                              conversation=os.path.join(os.path.dirname(self.conversation), name))
            except Exception as error:   # reported by the main thread
                errors.append(error)
        threads = [threading.Thread(target=agent, args=(name,)) for name in ("one", "two")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])
        entries = read_journal(open_store(self.cwd, self.env, ()))
        self.assertEqual([entry["id"] for entry in entries], list(range(1, 19)))
        for name in ("one", "two"):
            data, _ = self.command("changes", conversation=name)
            paths = {f["path"] for unit in data["units"] for a in unit["actions"] for f in a["files"]}
            # Its own files always; the other's only where their actions ran at the same time.
            self.assertLessEqual({f"{name}-{k}.txt" for k in range(3)}, paths)
            self.assertLessEqual(paths, {f"{who}-{k}.txt" for who in ("one", "two") for k in range(3)})

    def test_retention_prunes_old_turns_and_status_shows_the_store_size(self):
        self.project({"a.txt": "0\n"})
        for step in range(4):
            store = self.turn(self.run_shell(f"echo {step} > a.txt"))
        trees = [entry["tree"] for entry in read_journal(store)]
        with locked(store):
            self.assertEqual(prune(store, self.limits._replace(keep_turns=2), time.time()), 6)
        kept = read_journal(store)
        self.assertEqual({entry["turn_id"] for entry in kept}, set(self.tokens[2:]))
        reachable = store.git.run("rev-list", "--objects", read_head(store.git.git_dir)).decode()
        self.assertTrue(all(entry["tree"] in reachable for entry in kept))
        self.assertNotIn(trees[1], reachable)              # turn 1's tree after its action
        with locked(store):   # a day later: everything is older than keep_days
            self.assertEqual(maintain(store, self.limits._replace(keep_days=0.5),
                                      time.time() + 86400, detach=False)["pruned"], 5)
        self.assertEqual(len(read_journal(store)), 1)      # the newest always stays
        status = status_of(self.cwd, self.env)
        self.assertEqual((status["project"], status["store"]), (self.cwd, store.path))
        self.assertGreater(status["bytes"], 0)
        data, _ = self.command("rewind", dry_run=True)
        self.assertEqual(data["ops"], [])


class UsageTest(HermeticTestCase):
    def test_flags_that_go_with_changes_or_rewind_are_refused_elsewhere(self):
        for args, says in ((["--diff", "--status"], "--diff only applies to --changes"),
                           (["--conversation", "--status"], "--conversation (without a NAME) "
                                                            "only applies to --rewind"),
                           (["--rewind", "--turn", "2", "--action", "7"], "choose one of --turn"),
                           (["--dry-run", "hello"], "--dry-run only applies to --rewind")):
            proc = self.run_tool("nagent", *args)
            self.assertCleanError(proc, 2, says)
