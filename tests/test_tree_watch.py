"""A run's snapshots skip git status when nothing in the project changed (nagent_tree_watch).

The watch (real inotify on a real tree) must say "changed" for every change git status would see
(content, mode, time, names, new and moved-in directories and what is later written in them,
the project's index and info/exclude, a write through another name of a hard-linked file) and
may only say "unchanged" when nothing happened. The run (the real bin/nagent against the fake
vendor, with a `git` on PATH that logs each call) then runs git status only when the watch saw
something; where a sandboxed command could hide a change from it (a writable root holding the
project), every snapshot runs git status as before.
"""
import json
import os
import re
import select
import shutil
import stat
import subprocess
import sys
import unittest

from base import HELPERS, HermeticTestCase
from test_rewind import DONE, RewindRunCase, shell
from unprivileged import outside_dir

from nagent_write_policy import temp_roots
from nagent_tree_watch import (NETWORK_FS, TreeWatch, exposes_project, read_mounts,
                               remote_mounts)

LINUX = sys.platform.startswith("linux")
HAVE_BWRAP = shutil.which("bwrap") is not None
MACHINE_LIMITS = re.compile(r"inotify_init1|inotify_add_watch|too many directories|no inotify here|"
                            r"a mount at or inside the tree changed|the mount table changed")


def mount_of(path):
    """The mount table's line holding `path`, for a failure's message."""
    held = [mount for mount in read_mounts() if path == os.fsdecode(mount[2])
            or path.startswith(os.fsdecode(mount[2]).rstrip("/") + "/")]
    return max(held, key=lambda mount: len(mount[2]), default=None)


def watchable_under_sandbox(environ):
    """Whether a sandboxed run in `environ` may trust a watch on a path: the watch can be set up
    there, and no temp root (each writable to a sandboxed command) shares a mount region with
    it. The same two checks the run makes."""
    def accept(path):
        watch = TreeWatch.start(path, writable=temp_roots(environ))
        if watch is None:
            return False
        watch.close()
        return True
    return accept


@unittest.skipUnless(LINUX, "inotify is Linux's")
class TreeWatchTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.root = os.path.join(self.cwd, "project")
        os.makedirs(os.path.join(self.root, "src", "deep"))
        self.write_file("project/src/a.py", "a = 1\n")
        self.write_file("project/src/deep/b.py", "b = 1\n")
        self.write_file("project/README", "read me\n")

    def watch(self, **kwargs):
        watch = TreeWatch.start(self.root, **kwargs)
        self.assertIsNotNone(watch)
        self.addCleanup(watch.close)
        self.assertTrue(watch.changed())      # the first answer is always "changed"
        self.assertFalse(watch.changed())
        return watch

    def path(self, *parts):
        return os.path.join(self.root, *parts)

    def with_private_mounts(self, probe):
        """Python `probe` run as root of a private mount namespace (skipped where there is none)."""
        proc = subprocess.run(["unshare", "-rm", sys.executable, "-c", probe], capture_output=True,
                              text=True, timeout=60)
        if proc.returncode != 0 and ("unshare" in proc.stderr or "mount" in proc.stderr):
            self.skipTest(f"no private mount namespace here: {proc.stderr.strip()[:200]}")
        return proc

    def assertSeen(self, watch, change, label):
        change()
        self.assertTrue(watch.changed(), label)
        self.assertFalse(watch.changed(), label)   # each call starts a new interval

    def test_every_kind_of_change_is_seen_and_quiet_is_quiet(self):
        watch = self.watch()
        with open(self.path("src", "a.py")) as handle:
            handle.read()
        os.listdir(self.path("src", "deep"))
        os.stat(self.path("README"))
        self.assertFalse(watch.changed(), "reading, listing and stat change nothing")

        def append():
            with open(self.path("src", "deep", "b.py"), "a") as handle:
                handle.write("c = 2\n")

        def rewrite_same_size():
            with open(self.path("src", "a.py"), "r+") as handle:
                handle.write("a = 2")
        changes = {
            "append in a nested directory": append,
            "rewrite in place, same size": rewrite_same_size,
            "chmod +x": lambda: os.chmod(self.path("README"), 0o755),
            "touch": lambda: os.utime(self.path("README"), (1, 1)),
            "truncate": lambda: os.truncate(self.path("src", "a.py"), 0),
            "new file": lambda: self.write_file(self.path("new.txt"), "new\n"),
            "rename": lambda: os.rename(self.path("new.txt"), self.path("src", "moved.txt")),
            "delete": lambda: os.unlink(self.path("src", "moved.txt")),
            "symlink": lambda: os.symlink("README", self.path("link")),
            "mkdir": lambda: os.mkdir(self.path("empty")),
            "rmdir": lambda: os.rmdir(self.path("empty")),
        }
        for label, change in changes.items():
            self.assertSeen(watch, change, label)

    def test_directories_that_appear_are_watched_before_the_next_answer(self):
        watch = self.watch()
        self.assertSeen(watch, lambda: os.makedirs(self.path("a", "b", "c")), "mkdir -p")
        self.assertSeen(watch, lambda: self.write_file(self.path("a", "b", "c", "x"), "1"),
                        "a file in a directory made since the watch started")
        outside = os.path.join(self.cwd, "elsewhere")
        self.write_file(os.path.join(outside, "sub", "y"), "1")
        self.assertSeen(watch, lambda: os.rename(outside, self.path("moved-in")), "moved in")
        self.assertSeen(watch, lambda: self.write_file(self.path("moved-in", "sub", "y"), "2"),
                        "a file in a directory that was moved in")

    def test_the_projects_git_directory_is_watched_whole(self):
        git_dir = self.path(".git")
        os.makedirs(os.path.join(git_dir, "objects", "ab"))
        self.write_file(os.path.join(git_dir, "index"), "index 1")
        watch = self.watch(user_git=git_dir)
        self.assertSeen(watch, lambda: self.write_file(os.path.join(git_dir, "index"), "index 2"),
                        "the project's index")
        self.assertSeen(watch, lambda: os.mkdir(os.path.join(git_dir, "info")), "info/ made")
        self.assertSeen(watch, lambda: self.write_file(os.path.join(git_dir, "info", "exclude"),
                                                       "*.log\n"), "info/exclude")
        # A second name of a project file inside .git (the same mount: no EXDEV in a sandbox).
        self.assertSeen(watch, lambda: os.link(self.path("README"),
                                               os.path.join(git_dir, "objects", "ab", "x")),
                        "a hard link made into .git")
        self.assertSeen(watch, lambda: self.write_file(os.path.join(git_dir, "objects", "ab", "x"),
                                                       "through .git\n", "a"),
                        "a write through a name inside .git")

    def test_a_replaced_git_directory_or_info_is_seen_from_then_on(self):
        git_dir = self.path(".git")
        os.makedirs(os.path.join(git_dir, "info"))
        watch = self.watch(user_git=git_dir)
        os.rename(git_dir, os.path.join(self.cwd, "old-git"))
        os.makedirs(os.path.join(git_dir, "info"))
        self.assertTrue(watch.changed())
        self.assertSeen(watch, lambda: self.write_file(os.path.join(git_dir, "info", "exclude"),
                                                       "a.py\n"), "the new .git's info/exclude")
        elsewhere = os.path.join(self.cwd, "elsewhere-info")
        os.makedirs(elsewhere)
        shutil.rmtree(os.path.join(git_dir, "info"))
        os.symlink(elsewhere, os.path.join(git_dir, "info"))
        self.assertTrue(watch.changed())
        self.write_file(os.path.join(elsewhere, "exclude"), "*\n")
        self.assertTrue(watch.changed(), "info/ read through a link: the watch cannot tell now")
        os.makedirs(os.path.join(self.tmp, "p2", "src"))
        git_two = os.path.join(self.tmp, "p2", ".git")
        os.makedirs(git_two)
        os.symlink(elsewhere, os.path.join(git_two, "info"))
        self.assertIsNone(TreeWatch.start(os.path.join(self.tmp, "p2"), git_two))

    def test_whether_a_nested_repository_is_one_is_watched(self):
        nested = self.path("vendor", "lib")
        os.makedirs(os.path.join(nested, ".git", "objects"))
        self.write_file(os.path.join(nested, ".git", "HEAD"), "ref: refs/heads/main\n")
        self.write_file(os.path.join(nested, "data.txt"), "data\n")
        watch = self.watch()
        self.assertSeen(watch, lambda: os.rename(os.path.join(nested, ".git", "HEAD"),
                                                 os.path.join(nested, ".git", "HEAD.off")),
                        "the nested repository's HEAD moved away")
        outside_repo = os.path.join(self.cwd, "outside-repo")
        os.makedirs(outside_repo)
        shutil.rmtree(os.path.join(nested, ".git"))
        self.write_file(os.path.join(nested, ".git"), f"gitdir: {outside_repo}\n")
        self.assertTrue(watch.changed())
        self.assertTrue(watch.changed(), "a repository kept outside the tree: cannot tell")
        self.assertIsNone(TreeWatch.start(self.root), "nor from the start")
        self.write_file(os.path.join(nested, ".git"), "gitdir: ../../.git/modules/lib\n")
        self.assertIsNotNone(self.watch(), "a submodule's gitfile inside the tree")

    def test_a_root_moved_away_and_made_again_is_never_quiet(self):
        watch = self.watch()
        os.rename(self.root, self.root + ".bak")
        os.makedirs(self.root)
        self.assertTrue(watch.changed())
        self.assertTrue(watch.changed(), "the path names another directory now")

    def test_a_mount_over_a_directory_of_the_tree_is_seen(self):
        probe = (f"import sys, subprocess; sys.path.insert(0, {HELPERS!r})\n"
                 "from nagent_tree_watch import TreeWatch\n"
                 f"watch = TreeWatch.start({self.root!r})\n"
                 "print(watch.changed(), watch.changed())\n"
                 f"subprocess.run(['mount', '-t', 'tmpfs', 'none', {self.path('src')!r}], check=True)\n"
                 "print(watch.changed(), watch.changed())\n")
        proc = self.with_private_mounts(probe)
        self.assertEqual(proc.stdout.split(), ["True", "False", "True", "True"], proc.stderr)

    def test_a_mount_elsewhere_costs_one_full_look_not_the_watch(self):
        # A machine whose mount table changes now and then (a container engine, an automounter,
        # a CI harness) must not lose the watch for the rest of the run: only a mount at or
        # above the root, or inside it, changes what the tree shows.
        elsewhere = os.path.join(self.cwd, "elsewhere")
        os.makedirs(elsewhere)
        probe = (f"import sys, subprocess; sys.path.insert(0, {HELPERS!r})\n"
                 "from nagent_tree_watch import TreeWatch\n"
                 "def mount(path): subprocess.run(['mount', '-t', 'tmpfs', 'none', path], check=True)\n"
                 f"watch = TreeWatch.start({self.root!r})\n"
                 "print(watch.changed(), watch.changed())\n"
                 f"mount({elsewhere!r})\n"
                 "print(watch.changed(), watch.changed(), watch.reason)\n"
                 f"mount({self.path('src', 'deep')!r})\n"
                 "print(watch.changed(), watch.changed(), repr(watch.reason))\n")
        proc = self.with_private_mounts(probe)
        self.assertEqual(proc.stdout.splitlines(),
                         ["True False", "True False None",
                          "True True 'a mount at or inside the tree changed'"], proc.stderr)

    def test_a_mount_change_ends_the_watch_where_what_came_and_went_cannot_be_told(self):
        # Found in review: a tmpfs inside the tree unmounted and mounted again has the same
        # fields (the freed device number comes back), and a sandbox's writable root on the
        # project's filesystem may have shown the project through a mount that came and went.
        elsewhere, scratch, other = (os.path.join(self.cwd, name) for name in
                                     ("elsewhere", "scratch", "other"))
        for path in (elsewhere, scratch, other):
            os.makedirs(path)
        deep = self.path("src", "deep")
        probe = (f"import sys, subprocess; sys.path.insert(0, {HELPERS!r})\n"
                 "from nagent_tree_watch import TreeWatch\n"
                 "def run(*argv): subprocess.run(argv, check=True)\n"
                 "def look(watch): print(watch.changed(), watch.changed(), watch.reason)\n"
                 f"run('mount', '-t', 'tmpfs', 'none', {deep!r})\n"
                 f"inner = TreeWatch.start({self.root!r}); inner.changed()\n"
                 f"run('umount', {deep!r}); run('mount', '-t', 'tmpfs', 'none', {deep!r})\n"
                 "look(inner)\n"
                 f"run('umount', {deep!r})\n"
                 f"shared = TreeWatch.start({self.root!r}, writable=[{scratch!r}]); shared.changed()\n"
                 f"run('mount', '-t', 'tmpfs', 'none', {other!r})\n"
                 "look(shared)\n"
                 f"run('mount', '-t', 'tmpfs', 'none', {scratch!r})\n"
                 f"apart = TreeWatch.start({self.root!r}, writable=[{scratch!r}]); apart.changed()\n"
                 f"run('mount', '-t', 'tmpfs', 'none', {elsewhere!r})\n"
                 "look(apart)\n")
        proc = self.with_private_mounts(probe)
        self.assertEqual(proc.stdout.splitlines(), [
            "True True the mount table changed while a mount lies inside the tree",
            "True True the mount table changed while a writable root of the sandbox is on the "
            "project's filesystem",
            "True False None"], proc.stderr)

    def test_a_sandbox_root_that_comes_to_show_the_project_ends_the_watch(self):
        # Checked at start and again at every change of the mount table: a bind of the
        # project's parent into a writable root, made after the watch started.
        # The writable root is a filesystem of its own (a tmpfs), as /tmp often is: no other
        # change of the mount table ends the watch then.
        writable = os.path.join(self.cwd, "scratch")
        os.makedirs(writable)
        probe = (f"import os, sys, subprocess; sys.path.insert(0, {HELPERS!r})\n"
                 "from nagent_tree_watch import TreeWatch\n"
                 f"subprocess.run(['mount', '-t', 'tmpfs', 'none', {writable!r}], check=True)\n"
                 f"os.mkdir({writable + '/view'!r})\n"
                 f"watch = TreeWatch.start({self.root!r}, writable=[{writable!r}])\n"
                 "print(watch.changed(), watch.changed())\n"
                 f"subprocess.run(['mount', '--bind', {self.cwd!r}, {writable + '/view'!r}], check=True)\n"
                 "print(watch.changed(), watch.changed(), watch.reason)\n"
                 f"print(TreeWatch.start({self.root!r}, writable=[{writable!r}]))\n")
        proc = self.with_private_mounts(probe)
        self.assertEqual(proc.stdout.splitlines(),
                         ["True False", "True True a writable root of the sandbox shows the "
                          "project's filesystem", "None"], proc.stderr)

    def test_directories_left_out_until_an_ignore_rule_changes(self):
        git_dir = self.path(".git")
        os.makedirs(os.path.join(git_dir, "info"))
        skipped = self.path("node_modules")
        for index in range(12):
            os.makedirs(os.path.join(skipped, f"pkg{index}", "lib"))
        self.assertIsNone(TreeWatch.start(self.root, git_dir, max_watches=20), "too many")
        watch = TreeWatch.start(self.root, git_dir, max_watches=20, skip={skipped})
        self.addCleanup(watch.close)
        self.assertTrue(watch.changed())
        self.write_file(os.path.join(skipped, "pkg1", "lib", "x.js"), "x")
        shutil.rmtree(os.path.join(skipped, "pkg2"))
        self.assertFalse(watch.changed(), "what no snapshot looks at")
        shutil.rmtree(skipped)
        os.makedirs(os.path.join(skipped, "again"))
        self.assertTrue(watch.changed())
        self.write_file(os.path.join(skipped, "again", "y.js"), "y")
        self.assertFalse(watch.changed(), "made again under the same rules: still left out")
        self.write_file(self.path("src", ".gitignore"), "*.log\n")
        self.assertTrue(watch.changed())
        self.assertTrue(watch.changed(), "a rule changed: the watch cannot tell any more")
        other = TreeWatch.start(self.root, git_dir, skip={skipped})
        self.addCleanup(other.close)
        other.changed()
        self.write_file(os.path.join(git_dir, "info", "exclude"), "build/\n")
        self.assertTrue(other.changed())
        self.assertTrue(other.changed(), "info/exclude is a rule too")
        third = TreeWatch.start(self.root, git_dir, skip={skipped})
        self.addCleanup(third.close)
        third.changed()
        third.give_up()
        self.assertTrue(third.changed())

    def test_a_write_through_another_name_of_a_hard_linked_file_is_seen(self):
        outside = os.path.join(self.cwd, "outside")
        os.makedirs(outside)
        os.link(self.path("README"), os.path.join(outside, "readme-link"))
        watch = self.watch()
        with open(os.path.join(outside, "readme-link"), "a") as handle:
            handle.write("changed from outside\n")
        self.assertTrue(watch.changed(), "a link that existed when the watch started")
        self.write_file(os.path.join(outside, "later"), "x\n")
        self.assertSeen(watch, lambda: os.link(os.path.join(outside, "later"), self.path("later")),
                        "a hard link made into the tree")
        self.assertSeen(watch, lambda: self.write_file(os.path.join(outside, "later"), "y\n", "a"),
                        "a write through the outside name of a link made during the run")

    def test_an_overflowed_queue_answers_changed_from_then_on(self):
        watch = self.watch()
        folder = self.path("many")
        os.mkdir(folder)
        self.assertTrue(watch.changed())
        limit = 16384
        try:
            with open("/proc/sys/fs/inotify/max_queued_events") as handle:
                limit = int(handle.read())
        except OSError:
            pass
        if limit > 50000:
            self.skipTest(f"max_queued_events is {limit}")
        for index in range(limit // 2 + 100):
            name = os.path.join(folder, str(index))
            open(name, "w").close()
            os.unlink(name)
        self.assertTrue(watch.changed())
        self.assertTrue(watch.changed(), "after an overflow the watch cannot tell any more")

    def test_a_tree_over_the_cap_is_not_watched(self):
        for index in range(6):
            os.makedirs(self.path("many", str(index)))
        self.assertIsNone(TreeWatch.start(self.root, max_watches=5))
        self.assertIsNotNone(self.watch(max_watches=50))

    def test_a_linked_directory_is_not_followed(self):
        os.makedirs(os.path.join(self.cwd, "target"))
        os.symlink(os.path.join(self.cwd, "target"), self.path("linked"))
        watch = self.watch()
        self.write_file(os.path.join(self.cwd, "target", "y"), "1")
        self.assertFalse(watch.changed(), "git status records the link, not what it points to")

    def test_remote_filesystems_are_refused(self):
        table = os.path.join(self.tmp, "mountinfo")
        lines = ["22 1 0:1 / / rw - ext4 /dev/vda rw",
                 "23 22 0:2 / /srv/nfs\\040share rw - nfs4 server:/x rw",
                 "24 22 0:3 / /home/u/proj/mnt rw - fuse.sshfs host: rw",
                 "25 22 0:4 / /home/u/other rw - 9p tag rw"]
        with open(table, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        self.assertEqual(remote_mounts("/srv/nfs share/p", table), [b"/srv/nfs share"])
        self.assertEqual(remote_mounts("/home/u/proj", table), [b"/home/u/proj/mnt"])
        self.assertEqual(remote_mounts("/home/u/otherwise", table), [])
        self.assertEqual(remote_mounts("/home/u/other", table), [b"/home/u/other"])
        self.assertIn("nfs", NETWORK_FS)
        with open(table, "w") as handle:      # malformed escapes read as text, not an error
            handle.write("22 1 0:1 / / rw - ext4 /dev/vda rw\n23 22 0:2 / /x\\9 rw - nfs s rw\n")
        self.assertEqual(remote_mounts("/x\\9/p", table), [b"/x\\9"])

    def test_a_writable_root_that_shows_the_project_from_above_exposes_it(self):
        table = os.path.join(self.tmp, "mountinfo")
        project = os.path.join(self.root, "app")
        os.makedirs(project)
        info = os.stat(project)
        device = f"{os.major(info.st_dev)}:{os.minor(info.st_dev)}"
        lines = [f"22 1 {device} / / rw - ext4 /dev/vda rw",
                 f"30 22 {device} {self.root} /data rw - ext4 /dev/vda rw",     # /data shows the tree
                 f"31 22 {device} {project} /srv/app rw - ext4 /dev/vda rw",    # exactly the project
                 "32 22 0:99 / /scratch rw - tmpfs tmpfs rw"]
        with open(table, "w") as handle:
            handle.write("\n".join(lines) + "\n")
        self.assertTrue(exposes_project(project, [project, "/data"], table),
                        "/data/app is the project: /data/x is on its mount, outside it")
        self.assertFalse(exposes_project(project, [project, "/srv/app", "/scratch"], table))
        self.assertTrue(exposes_project(project, [self.root], table), "a root holding the project")
        self.assertFalse(exposes_project(project, [os.path.join(project, "sub")], table))
        self.assertTrue(exposes_project(project, [project], os.path.join(self.tmp, "missing")),
                        "no mount table: exposed")


class RunSkipsStatusTest(RewindRunCase):
    """Counted git status runs of a real run (a `git` first on PATH logs its arguments)."""

    def setUp(self):
        super().setUp()
        real = shutil.which("git", path=self.env.get("PATH"))
        self.log = os.path.join(self.tmp, "git.log")
        wrapper_dir = os.path.join(self.tmp, "gitlog")
        os.makedirs(wrapper_dir)
        wrapper = os.path.join(wrapper_dir, "git")
        with open(wrapper, "w") as handle:
            handle.write(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = status ] && echo status >> '
                         f'"{self.log}"; done\nexec "{real}" "$@"\n')
        os.chmod(wrapper, stat.S_IRWXU)
        self.env["PATH"] = wrapper_dir + os.pathsep + self.env["PATH"]

    def statuses(self):
        try:
            with open(self.log) as handle:
                count = len(handle.read().splitlines())
        except FileNotFoundError:
            count = 0
        os.unlink(self.log) if count else None
        return count

    def test_quiet_actions_take_no_git_status_and_a_change_still_shows(self):
        self.project({"a.py": "x = 1\n"})
        self.statuses()
        # The first action gives the watch time to be ready (it starts there, in a thread).
        self.turn("look", shell("sleep 0.5"), shell("true"), shell("ls > /dev/null"),
                  shell("cat a.py"), shell("true"), shell("true"))
        quiet = self.statuses()
        # The turn's first snapshot, the first action's two, the one listing the ignored
        # directories, the first with the watch ready (5; 7 leaves room for a watch a loaded
        # machine makes late); without the watch two per action: 13.
        self.assertLessEqual(quiet, 7)
        proc = self.turn("edit", shell("true"), shell("sed -i 's/1/2/' a.py"), args=("--events",))
        self.assertIn('"file_change"', proc.stdout)
        self.assertIn('"path":"a.py"', proc.stdout)
        self.assertEqual(self.read("a.py"), "x = 2\n")
        changes = self.command("--changes").stdout
        self.assertIn("a.py", changes)

    def test_an_ignored_directory_is_left_out_until_a_file_in_it_counts(self):
        self.project({"a.py": "x = 1\n", ".gitignore": "node_modules/\n"})
        for index in range(30):
            self.write_file(f"node_modules/pkg{index}/index.js", "module.exports = 1\n")
        self.statuses()
        writes = [shell(f"echo {n} >> node_modules/pkg3/index.js") for n in range(8)]
        # The first action gives the watch time to be ready (it starts there, in a thread).
        self.turn("deps", shell("sleep 0.5"), shell("true"), *writes)
        # The turn start, the first action (before and after), the one listing the ignored
        # directories, the first snapshot with the watch ready (5; 7 leaves room for a late
        # watch); none for the ignored writes (watched, each would make the snapshot after it a
        # full one: 11 and more).
        self.assertLessEqual(self.statuses(), 7, "ignored files change nothing a snapshot sees")
        # Tracked although ignored: from then on the directory counts, and a change in it shows.
        proc = self.turn("track", shell("sleep 0.5"), shell("true"),
                         shell("git add -f node_modules/pkg3/index.js"), shell("true"),
                         shell("echo 3 >> node_modules/pkg3/index.js"), args=("--events",))
        events = [json.loads(line) for line in proc.stdout.splitlines()]
        echo = [e["index"] for e in events if e["type"] == "action_start"
                and e["summary"].startswith("echo 3")]
        shown = [e["path"] for e in events if e["type"] == "file_change" and e["index"] in echo]
        self.assertEqual(shown, ["node_modules/pkg3/index.js"], "the echo's own change")

    def sandboxed_turn(self, count, **environ):
        """The run's NAGENT_DEBUG line on the tree watch (with NAGENT_DEBUG=1, shown by -v)."""
        quiet = tuple(shell(f"echo {n} > /dev/null") for n in range(count - 1))
        for reply in (shell("sleep 0.5"),) + quiet + (DONE,):
            self.fake.reply(reply)
        proc = self.nagent("--conversation", self.CONVERSATION, "--shell-sandbox", "bwrap",
                           *(("-v",) if environ else ()), "look", env=dict(self.env, **environ))
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return "".join(line for line in proc.stderr.splitlines() if "tree watch" in line)

    @unittest.skipUnless(HAVE_BWRAP, "bwrap not installed")
    def test_a_sandbox_whose_writable_root_holds_the_project_runs_git_status_every_time(self):
        # The project lies under the temp root the sandbox may write: a command there could link
        # a project file to a name outside the project and write through it unseen by the watch.
        self.assertTrue(self.cwd.startswith(("/tmp/", "/var/tmp/")), self.cwd)
        self.project({"a.py": "x = 1\n"})
        self.statuses()
        debug = self.sandboxed_turn(5, NAGENT_DEBUG="1")
        self.assertIn("tree watch: refused here: a writable root of the sandbox shows the "
                      "project's filesystem", debug)
        self.assertGreaterEqual(self.statuses(), 10, "before and after each of five actions")

    @unittest.skipUnless(HAVE_BWRAP, "bwrap not installed")
    def test_a_sandboxed_project_outside_the_temp_roots_is_watched(self):
        # Not the checkout's own filesystem when that one cannot be watched: a CI checkout on a
        # shared mount (9p, virtiofs) rightly gets every git status (the run ran 11 there).
        self.cwd = outside_dir(self, accept=watchable_under_sandbox(self.env))
        os.chdir(self.cwd)
        self.project({"a.py": "x = 1\n"})
        self.statuses()
        with open("/proc/self/mountinfo", "rb") as table:
            table.read()
            mounts = select.poll()
            mounts.register(table.fileno(), select.POLLPRI)
            debug = self.sandboxed_turn(5, NAGENT_DEBUG="1")
            elsewhere = bool(mounts.poll(0))
        count = self.statuses()
        seen = (f"{count} git status runs; the run said {debug.strip()!r}; "
                f"{self.cwd} is on {mount_of(self.cwd)}")
        if MACHINE_LIMITS.search(debug):
            # What this machine lacks, not what nagent decides: inotify's per-user limits (root's
            # 128 instances are shared by every root process, containers' included), or a mount
            # made at the tree while the run went on.
            self.skipTest(f"this machine's limits: {seen}")
        self.assertIn("tree watch: in use", debug, seen)
        if count > 6 and elsewhere:
            # Each change of the machine's mount table costs the run one full look.
            self.skipTest(f"the machine's mount table changed during the run: {seen}")
        self.assertLessEqual(count, 6, "4 when the watch is ready in time; 11 without; " + seen)


class SnapshotErrorTest(RewindRunCase):
    def test_a_snapshot_that_fails_unexpectedly_turns_snapshots_off_and_the_run_goes_on(self):
        # A hand-damaged journal whose last entry has a count that is not a number: the turn's
        # first snapshot (in a thread, while the model works) fails on it, and so would the
        # action's. Before: a traceback from the thread, then the run died of the same error.
        self.project({"a.py": "x = 1\n"})
        self.turn("first", shell("true"))
        journal = os.path.join(self.store_path(), "journal")
        with open(journal, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        index = max(i for i, line in enumerate(lines) if '"tree"' in line)
        last = json.loads(lines[index])
        last["count"] = "many"
        lines[index] = json.dumps(last)
        with open(journal, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
        for reply in (shell("sed -i 's/1/2/' a.py"), DONE):
            self.fake.reply(reply)
        proc = self.nagent("--conversation", self.CONVERSATION, "--events", "again")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        notes = [json.loads(line) for line in proc.stdout.splitlines()
                 if '"type":"note"' in line]
        self.assertTrue(any("snapshots off for the rest of this run" in note["text"]
                            for note in notes), proc.stdout)
        self.assertEqual(self.read("a.py"), "x = 2\n")


if __name__ == "__main__":
    unittest.main()
