"""Write authority: validate_write_path / validate_patch_source / write_file_atomic.

Most attacks need a directory that is outside every temp root; the hermetic temp dir lives under
/tmp, so `self.outside` is a scratch dir under /dev/shm (tmpfs, but not a temp root).
"""
import json
import os
import stat
from dataclasses import replace

from base import HermeticTestCase

import nagent_write_policy as wp
from nagent_errors import RefusedError

MAIN = wp.WriteMode()


class PolicyCase(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.outside = self.make_outside_dir()
        self.assertFalse(any(self.outside.startswith(root + "/") for root in wp.temp_roots(self.env)))

    def make(self, path, content=b"old"):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(content)
        return path

    def read(self, path):
        with open(path, "rb") as handle:
            return handle.read()

    def snapshot(self, *dirs):
        found = {}
        for top in dirs:
            for root, subdirs, files in os.walk(top):
                for name in subdirs + files:
                    full = os.path.join(root, name)
                    st = os.lstat(full)
                    found[full] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode)
        return found

    def refused(self, path, mode=MAIN, cwd=None, contains=None):
        with self.assertRaises(RefusedError) as ctx:
            wp.validate_write_path(path, mode, self.cwd if cwd is None else cwd, self.env)
        error = ctx.exception
        self.assertEqual(error.exit_code, 10)
        self.assertEqual(len(error.line().splitlines()), 1)
        self.assertTrue(error.line().startswith("Error: write refused"))
        if contains:
            self.assertIn(contains, error.fix)
        return error

    def edit_mode(self, target):
        st = os.stat(target)
        return wp.WriteMode("file-edit", os.path.realpath(target), f"{st.st_dev}:{st.st_ino}")


class TempRootsTest(PolicyCase):
    def test_fixed_roots_and_tmpdir(self):
        roots = wp.temp_roots(self.env)
        self.assertIn(os.path.realpath("/tmp"), roots)
        self.assertIn(os.path.realpath(self.tmpdir), roots)
        self.assertEqual(len(roots), len(set(roots)))

    def test_tmpdir_symlink_uses_realpath(self):
        real = os.path.join(self.outside, "realtmp")
        os.mkdir(real)
        os.symlink(real, os.path.join(self.outside, "tlink"))
        env = dict(self.env, TMPDIR=os.path.join(self.outside, "tlink"))
        self.assertIn(real, wp.temp_roots(env))
        self.assertNotIn(os.path.join(self.outside, "tlink"), wp.temp_roots(env))
        self.assertEqual(wp.validate_write_path(os.path.join(self.outside, "tlink", "f"), MAIN, self.cwd, env),
                         os.path.join(real, "f"))

    def test_tmpdir_relative_missing_file_or_root_ignored(self):
        afile = self.make(os.path.join(self.outside, "afile"))
        for value in ("relative/dir", os.path.join(self.outside, "missing"), afile, "/", ""):
            env = dict(self.env, TMPDIR=value)
            roots = wp.temp_roots(env)
            self.assertEqual(set(roots), {os.path.realpath("/tmp"), os.path.realpath("/var/tmp")}, value)
        env = dict(self.env)
        env.pop("TMPDIR")
        self.assertNotIn(self.tmpdir, wp.temp_roots(env))

    def test_tmpdir_equal_to_tmp_is_deduplicated(self):
        self.assertEqual(wp.temp_roots(dict(self.env, TMPDIR="/tmp/")).count(os.path.realpath("/tmp")), 1)


class MainModeTest(PolicyCase):
    def test_temp_paths_allowed(self):
        for path in (os.path.join(self.tmpdir, "a.txt"), "/var/tmp/nagent-never-written.txt",
                     os.path.join(self.tmpdir, "new", "deep", "b.txt")):
            self.assertEqual(wp.validate_write_path(path, MAIN, self.cwd, self.env), path)

    def test_outside_refused(self):
        self.refused(os.path.join(self.outside, "x.txt"), contains="/tmp")
        self.refused("/etc/nagent-should-not-exist")
        self.refused(os.path.join(os.path.realpath(self.outside), "..", "shm-x"))

    def test_relative_resolves_against_cwd(self):
        self.assertEqual(wp.validate_write_path("sub/f.txt", MAIN, self.cwd, self.env),
                         os.path.join(self.cwd, "sub", "f.txt"))
        self.refused("f.txt", cwd=self.outside)

    def test_tilde_not_expanded(self):
        self.assertEqual(wp.validate_write_path("~/f.txt", MAIN, self.cwd, self.env),
                         os.path.join(self.cwd, "~", "f.txt"))
        self.refused("~/f.txt", cwd=self.outside)

    def test_dotdot_escape_refused(self):
        self.refused(os.path.join(self.tmpdir, "..", "..", "..", self.outside.lstrip("/"), "f"))
        self.refused("/tmp/../etc/passwd-nagent")
        inside = wp.validate_write_path(os.path.join(self.outside, "..", "..", "..", "tmp", "ok"), MAIN,
                                        self.cwd, self.env)
        self.assertEqual(inside, os.path.join(os.path.realpath("/tmp"), "ok"))

    def test_bad_strings_refused(self):
        self.refused("", contains="empty")
        self.refused(os.path.join(self.tmpdir, "a\0b"), contains="control")
        self.refused(os.path.join(self.tmpdir, "a\nb"), contains="control")
        self.refused(None, contains="text")
        error = self.refused(os.path.join(self.tmpdir, "a\nb"))
        self.assertNotIn("\n", error.line())

    def test_overlong_paths_refused_cleanly(self):
        self.refused("/tmp/" + "d/" * 2100 + "f", contains="PATH_MAX")
        self.refused("/tmp/" + "n" * 300, contains="NAME_MAX")
        self.refused("x" * 200 + "/" + "y" * 200, cwd="/tmp/" + "c/" * 1900, contains="PATH_MAX")
        with self.assertRaises(RefusedError):
            wp.write_file_atomic("/tmp/" + "n" * 300, b"x", MAIN, self.cwd, self.env)

    def test_directories_refused(self):
        self.refused(self.tmpdir, contains="directory")
        self.refused(self.tmpdir + "/", contains="directory")
        self.refused(os.path.join(self.tmpdir, "."), contains="directory")
        self.refused(os.path.join(self.tmpdir, "x", ".."), contains="directory")
        self.refused("/tmp", contains="directory")

    def test_final_symlink_refused_even_inside_temp(self):
        real = self.make(os.path.join(self.tmpdir, "real.txt"))
        link = os.path.join(self.tmpdir, "link.txt")
        os.symlink(real, link)
        self.refused(link, contains="symlink")
        os.symlink(os.path.join(self.outside, "victim"), os.path.join(self.tmpdir, "out.txt"))
        self.refused(os.path.join(self.tmpdir, "out.txt"), contains="symlink")
        with self.assertRaises(RefusedError):
            wp.write_file_atomic(link, b"new", MAIN, self.cwd, self.env)
        self.assertEqual(self.read(real), b"old")
        self.assertFalse(os.path.lexists(os.path.join(self.outside, "victim")))

    def test_symlink_component_to_outside_refused(self):
        os.symlink(self.outside, os.path.join(self.tmpdir, "escape"))
        self.refused(os.path.join(self.tmpdir, "escape", "f.txt"), contains="/tmp")
        before = self.snapshot(self.outside)
        with self.assertRaises(RefusedError):
            wp.write_file_atomic(os.path.join(self.tmpdir, "escape", "f.txt"), b"x", MAIN, self.cwd, self.env)
        self.assertEqual(self.snapshot(self.outside), before)

    def test_symlink_component_into_temp_allowed(self):
        os.symlink(self.tmpdir, os.path.join(self.outside, "intmp"))
        self.assertEqual(wp.validate_write_path(os.path.join(self.outside, "intmp", "f"), MAIN,
                                                self.cwd, self.env), os.path.join(self.tmpdir, "f"))

    def test_symlink_loop_refused(self):
        os.symlink("loop", os.path.join(self.outside, "loop"))
        self.refused(os.path.join(self.outside, "loop", "f"))

    def test_unicode_lookalikes_are_other_paths(self):
        self.refused("/t\u043c\u0440/x")            # Cyrillic letters
        self.refused("\uff0ftmp\uff0fx", cwd=self.outside)   # fullwidth solidus: a relative name
        self.assertEqual(wp.validate_write_path("\uff0ftmp\uff0fx", MAIN, self.cwd, self.env),
                         os.path.join(self.cwd, "\uff0ftmp\uff0fx"))

    def test_case_variants_are_other_paths(self):
        if os.path.exists("/TMP"):
            self.skipTest("/TMP exists on this machine")
        self.refused("/TMP/x")
        self.refused("/Tmp/x")

    def test_hardlinked_temp_file_refused(self):
        # the other link lives elsewhere (same device, so in the hermetic home)
        victim = self.make(os.path.join(self.home, "victim"), b"precious")
        alias = os.path.join(self.tmpdir, "alias")
        os.link(victim, alias)
        self.refused(alias, contains="hard link")
        with self.assertRaises(RefusedError):
            wp.write_file_atomic(alias, b"pwned", MAIN, self.cwd, self.env)
        self.assertEqual(self.read(victim), b"precious")

    def test_fifo_refused(self):
        fifo = os.path.join(self.tmpdir, "fifo")
        os.mkfifo(fifo)
        self.refused(fifo, contains="regular")


class FileEditModeTest(PolicyCase):
    def setUp(self):
        super().setUp()
        self.project = os.path.join(self.outside, "project")
        self.target = self.make(os.path.join(self.project, "src", "Foo.py"), b"print(1)\n")
        self.mode = self.edit_mode(self.target)

    def test_target_and_temp_allowed(self):
        self.assertEqual(wp.validate_write_path(self.target, self.mode, self.cwd, self.env), self.target)
        self.assertEqual(wp.validate_write_path("src/Foo.py", self.mode, self.project, self.env), self.target)
        self.assertTrue(wp.validate_write_path(os.path.join(self.tmpdir, "scratch"), self.mode,
                                               self.cwd, self.env))

    def test_other_project_files_refused(self):
        self.make(os.path.join(self.project, "src", "other.py"))
        self.refused(os.path.join(self.project, "src", "other.py"), self.mode, contains="target")
        self.refused(os.path.join(self.project, "src", "new.py"), self.mode)
        self.refused(os.path.join(self.project, "src", "foo.py"), self.mode)   # case variant
        self.refused(os.path.join(self.project, "src", "FOO.PY"), self.mode)

    def test_renamed_target_allowed_by_file_id(self):
        moved = os.path.join(self.project, "src", "bar.py")
        os.rename(self.target, moved)
        self.assertEqual(wp.validate_write_path(moved, self.mode, self.cwd, self.env), moved)
        wp.write_file_atomic(moved, b"print(2)\n", self.mode, self.cwd, self.env)
        self.assertEqual(self.read(moved), b"print(2)\n")

    def test_renamed_target_allowed_by_the_id_the_file_edit_index_records(self):
        # The index keys a target reached through a link by the linked file's id; write authority
        # compares that id with an lstat of the renamed file: both must come from one rule.
        import nagent_file_edit_lib as fe
        link = os.path.join(self.project, "via-link.py")
        os.symlink(self.target, link)
        record = fe.resolve_file_edit(link, "7", self.env)
        mode = wp.WriteMode("file-edit", os.path.realpath(record["path"]), record["file_id"])
        moved = os.path.join(self.project, "src", "renamed.py")
        os.rename(self.target, moved)
        self.assertEqual(wp.validate_write_path(moved, mode, self.cwd, self.env), moved)
        other = self.make(os.path.join(self.project, "src", "other.py"))
        self.refused(other, mode, contains="target")

    def test_symlink_to_target_refused(self):
        link = os.path.join(self.project, "link.py")
        os.symlink(self.target, link)
        self.refused(link, self.mode, contains="symlink")

    def test_hardlink_to_target_refused_but_target_still_allowed(self):
        alias = os.path.join(self.project, "alias.py")
        os.link(self.target, alias)
        self.refused(alias, self.mode, contains="hard link")
        result = wp.write_file_atomic(self.target, b"new\n", self.mode, self.cwd, self.env)
        self.assertFalse(result["created"])
        self.assertEqual(self.read(self.target), b"new\n")
        self.assertEqual(self.read(alias), b"print(1)\n")   # replaced, not written through

    def make_split(self, directory, source, files=("0001-Foo.py", "0002-Foo.py"), index=None):
        os.makedirs(directory, exist_ok=True)
        for name in files:
            self.make(os.path.join(directory, name), b"seg\n")
        data = index if index is not None else {
            "version": 1, "source": source, "segments": [{"file": name} for name in files]}
        with open(os.path.join(directory, "index.json"), "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        return directory

    def granted(self, *paths):
        """The mode as execute_write builds it: segments granted from nagent's split registry."""
        return replace(self.mode, segments=frozenset(os.path.realpath(p) for p in paths))

    def test_granted_segments_allowed(self):
        split = self.make_split(os.path.join(self.project, "split"), self.target)
        seg = os.path.join(split, "0001-Foo.py")
        mode = self.granted(seg)
        self.assertEqual(wp.validate_write_path(seg, mode, self.cwd, self.env), seg)
        wp.write_file_atomic(seg, b"edited\n", mode, self.cwd, self.env)
        self.assertEqual(self.read(seg), b"edited\n")
        self.refused(os.path.join(split, "0002-Foo.py"), mode)   # listed by the index, not granted

    def test_an_index_naming_the_target_grants_nothing(self):
        """Issue 10.1: authority never comes from an index.json the model can write."""
        split = self.make_split(os.path.join(self.project, "split"), self.target)
        for name in ("0001-Foo.py", "0003-Foo.py", "index.json"):
            self.refused(os.path.join(split, name), self.mode)
        sibling = self.make(os.path.join(self.project, "src", "Makefile"), b"all:\n")
        with open(os.path.join(self.project, "src", "index.json"), "w", encoding="utf-8") as handle:
            json.dump({"version": 1, "source": self.target, "segments": [{"file": "Makefile"}]}, handle)
        self.refused(sibling, self.mode)
        self.refused(sibling, self.granted(os.path.join(split, "0001-Foo.py")))

    def test_main_mode_ignores_granted_segments(self):
        seg = self.make(os.path.join(self.project, "split", "0001-Foo.py"))
        self.refused(seg, replace(MAIN, segments=frozenset({seg})))

    def test_tampered_index_grants_nothing(self):
        other = self.make(os.path.join(self.project, "src", "other.py"))
        split = self.make_split(os.path.join(self.project, "split"), other)
        self.refused(os.path.join(split, "0001-Foo.py"), self.mode)
        bad = self.make_split(os.path.join(self.project, "bad"), self.target,
                              index={"source": self.target, "segments": [{"file": "../escape.py"},
                                                                         "0001-Foo.py"]})
        self.refused(os.path.join(self.project, "escape.py"), self.mode)
        self.refused(os.path.join(bad, "0001-Foo.py"), self.mode)

    def test_segment_hardlink_refused(self):
        split = self.make_split(os.path.join(self.project, "split"), self.target)
        victim = self.make(os.path.join(self.project, "victim.txt"), b"precious")
        os.unlink(os.path.join(split, "0001-Foo.py"))
        os.link(victim, os.path.join(split, "0001-Foo.py"))
        seg = os.path.join(split, "0001-Foo.py")
        self.refused(seg, self.granted(seg), contains="hard link")
        os.unlink(seg)
        os.symlink(victim, seg)
        self.refused(seg, self.granted(seg), contains="symlink")

    def test_missing_parent_outside_temp_not_created(self):
        mode = wp.WriteMode("file-edit", os.path.join(self.project, "gone", "x.py"), None)
        with self.assertRaises(RefusedError):
            wp.write_file_atomic(mode.target, b"x", mode, self.cwd, self.env)
        self.assertFalse(os.path.exists(os.path.join(self.project, "gone")))

    def test_unknown_mode_kind_rejected(self):
        with self.assertRaises(ValueError):
            wp.WriteMode("god-mode")


class PatchSourceTest(PolicyCase):
    def test_main_mode_temp_only(self):
        src = self.make(os.path.join(self.tmpdir, "big.py"))
        self.assertEqual(wp.validate_patch_source(src, MAIN, self.env), src)
        with self.assertRaises(RefusedError):
            wp.validate_patch_source(self.make(os.path.join(self.outside, "big.py")), MAIN, self.env)
        with self.assertRaises(RefusedError):
            wp.validate_patch_source("big.py", MAIN, self.env)

    def test_file_edit_target_not_segments(self):
        target = self.make(os.path.join(self.outside, "p", "big.py"))
        mode = self.edit_mode(target)
        self.assertEqual(wp.validate_patch_source(target, mode, self.env), target)
        split = os.path.join(self.outside, "p", "split")
        self.make(os.path.join(split, "0001-big.py"))
        seg = os.path.join(split, "0001-big.py")
        with self.assertRaises(RefusedError):
            wp.validate_patch_source(seg, replace(mode, segments=frozenset({seg})), self.env)
        with self.assertRaises(RefusedError):
            wp.validate_patch_source(self.make(os.path.join(self.outside, "p", "other.py")), mode, self.env)


class AtomicWriteTest(PolicyCase):
    def test_create_and_overwrite(self):
        path = os.path.join(self.tmpdir, "f.txt")
        self.assertEqual(wp.write_file_atomic(path, b"one", MAIN, self.cwd, self.env),
                         {"path": path, "bytes": 3, "created": True})
        self.assertEqual(wp.write_file_atomic(path, "twö", MAIN, self.cwd, self.env)["created"], False)
        self.assertEqual(self.read(path), "twö".encode())
        self.assertEqual(sorted(os.listdir(self.tmpdir)), ["f.txt"])   # no temp file left

    def test_mode_kept(self):
        path = self.make(os.path.join(self.tmpdir, "run.sh"))
        os.chmod(path, 0o751)
        wp.write_file_atomic(path, b"#!/bin/sh\n", MAIN, self.cwd, self.env)
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o751)

    def test_missing_parents_created_inside_temp(self):
        path = os.path.join(self.tmpdir, "a", "b", "c.txt")
        wp.write_file_atomic("a/b/c.txt", b"x", MAIN, self.tmpdir, self.env)
        self.assertEqual(self.read(path), b"x")
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(self.tmpdir, "a")).st_mode) & 0o077, 0)

    def test_refused_write_changes_nothing(self):
        self.make(os.path.join(self.outside, "keep.txt"))
        before = self.snapshot(self.outside, self.tmpdir)
        for path in (os.path.join(self.outside, "keep.txt"), os.path.join(self.outside, "new", "x"),
                     self.tmpdir, "", "/tmp/" + "n" * 300):
            with self.assertRaises(RefusedError):
                wp.write_file_atomic(path, b"x", MAIN, self.outside, self.env)
        self.assertEqual(self.snapshot(self.outside, self.tmpdir), before)

    def test_parent_swapped_for_symlink_after_validation(self):
        work = os.path.join(self.tmpdir, "work")
        os.mkdir(work)
        final = wp.validate_write_path(os.path.join(work, "f.txt"), MAIN, self.cwd, self.env)
        os.rename(work, work + ".old")
        os.symlink(self.outside, work)
        before = self.snapshot(self.outside)
        with self.assertRaises(RefusedError) as ctx:
            wp._write_validated(final, b"x", MAIN, self.env)
        self.assertIn("symlink", ctx.exception.fix)
        self.assertEqual(self.snapshot(self.outside), before)

    def test_final_swapped_for_symlink_or_hardlink_after_validation(self):
        victim = self.make(os.path.join(self.home, "victim"), b"precious")
        final = wp.validate_write_path(os.path.join(self.tmpdir, "f.txt"), MAIN, self.cwd, self.env)
        os.symlink(victim, final)
        with self.assertRaises(RefusedError):
            wp._write_validated(final, b"x", MAIN, self.env)
        os.unlink(final)
        os.link(victim, final)
        with self.assertRaises(RefusedError):
            wp._write_validated(final, b"x", MAIN, self.env)
        self.assertEqual(self.read(victim), b"precious")

    def test_opened_directory_must_match(self):
        fd = os.open(self.tmpdir, os.O_RDONLY | os.O_DIRECTORY)
        self.addCleanup(os.close, fd)
        wp._check_opened(fd, self.tmpdir)
        with self.assertRaises(RefusedError):
            wp._check_opened(fd, self.cwd)

    def test_unwritable_directory_is_clean_input_error(self):
        if os.geteuid() == 0:
            self.skipTest("root ignores directory permissions")
        locked = os.path.join(self.tmpdir, "locked")
        os.mkdir(locked, 0o500)
        self.addCleanup(os.chmod, locked, 0o700)
        from nagent_errors import InputError
        with self.assertRaises(InputError):
            wp.write_file_atomic(os.path.join(locked, "f"), b"x", MAIN, self.cwd, self.env)


class NagentStateTest(PolicyCase):
    """Issue 10.3: ~/.nagent and the NAGENT_CONFIG file are never written, whatever the temp roots
    are. HOME lives under /tmp here, a temp root, which is exactly the case that used to leak."""

    def setUp(self):
        super().setUp()
        self.state = os.path.join(self.home, ".nagent")
        self.assertTrue(any(self.state.startswith(root + "/") for root in wp.temp_roots(self.env)))
        self.config = self.make(os.path.join(self.state, "config.json"), b"{}\n")
        self.env["NAGENT_CONFIG"] = self.make(os.path.join(self.tmpdir, "nagent.json"), b"{}\n")
        target = self.make(os.path.join(self.outside, "project", "a.py"), b"A = 1\n")
        st = os.stat(target)
        self.edit = wp.WriteMode("file-edit", target, f"{st.st_dev}:{st.st_ino}")

    def attempts(self):
        return [os.path.join(self.state, "bin", "evil"), self.config,
                os.path.join(self.state, "conversations", "latest-x"),
                os.path.join(self.state, "cache", "tools.json"), self.state + "/../.nagent/x",
                self.env["NAGENT_CONFIG"]]

    def test_write_into_nagent_state_refused_in_both_modes(self):
        before = self.snapshot(self.home, self.tmpdir)
        for mode in (MAIN, self.edit):
            for path in self.attempts():
                with self.subTest(mode=mode.kind, path=path):
                    self.refused(path, mode, contains="nagent's own state")
                    with self.assertRaises(RefusedError):
                        wp.write_file_atomic(path, b"pwned", mode, self.cwd, self.env)
        self.assertEqual(self.snapshot(self.home, self.tmpdir), before)
        self.assertFalse(os.path.exists(os.path.join(self.state, "bin")))

    def test_state_roots_are_real_paths_and_fail_closed(self):
        from nagent_paths import in_nagent_state, nagent_state_roots
        self.assertEqual(nagent_state_roots(self.env),
                         (os.path.realpath(self.state), os.path.realpath(self.env["NAGENT_CONFIG"])))
        self.assertTrue(in_nagent_state(os.path.realpath(self.state), self.env))
        self.assertFalse(in_nagent_state(os.path.realpath(self.state) + "x", self.env))
        self.assertTrue(in_nagent_state("/etc/hosts", dict(self.env, HOME="relative")))

    def test_state_reached_through_a_temp_symlink_is_refused(self):
        link = os.path.join(self.tmpdir, "state-link")
        os.symlink(self.state, link)
        self.refused(os.path.join(link, "config.json"), contains="nagent's own state")
        self.refused(os.path.join(link, "bin", "evil"), contains="nagent's own state")

    def test_a_target_or_granted_segment_inside_state_is_refused(self):
        target = self.make(os.path.join(self.state, "bin", "tool"), b"#!/bin/sh\n")
        st = os.stat(target)
        mode = wp.WriteMode("file-edit", target, f"{st.st_dev}:{st.st_ino}",
                            segments=frozenset({self.config}))
        self.refused(target, mode, contains="nagent's own state")
        self.refused(self.config, mode, contains="nagent's own state")
        with self.assertRaises(RefusedError):
            wp.validate_patch_source(target, mode, self.env)
        with self.assertRaises(RefusedError):
            wp.validate_patch_source(self.config, MAIN, self.env)


class TmpdirRootTest(PolicyCase):
    """Issue 10.3: a $TMPDIR that is $HOME, an ancestor of $HOME or of the cwd, or inside
    ~/.nagent is not a temp root: it grants nothing. HOME is outside the temp roots here."""

    def setUp(self):
        super().setUp()
        self.home = os.path.join(self.outside, "home")
        self.project = os.path.join(self.home, "project")
        os.makedirs(os.path.join(self.home, ".nagent"))
        os.makedirs(self.project)
        self.env["HOME"] = self.home

    def test_tmpdir_symlink_into_home_grants_nothing(self):
        link = os.path.join(self.tmp, "tmp-link")
        os.symlink(self.home, link)
        env = dict(self.env, TMPDIR=link)
        self.assertNotIn(self.home, wp.temp_roots(env, self.project))
        before = self.snapshot(self.home)
        for path in (os.path.join(link, ".bashrc"), os.path.join(link, "project", "x.py"),
                     os.path.join(self.home, "new.txt")):
            with self.assertRaises(RefusedError):
                wp.write_file_atomic(path, b"pwned", MAIN, self.project, env)
        self.assertEqual(self.snapshot(self.home), before)

    def test_home_its_ancestors_cwd_ancestors_and_state_are_not_temp_roots(self):
        elsewhere = os.path.join(self.outside, "elsewhere")
        os.makedirs(elsewhere)
        for tmpdir, cwd in ((self.home, self.project), (self.outside, elsewhere),
                            (os.path.join(self.home, ".nagent"), elsewhere),
                            (elsewhere, elsewhere), (elsewhere, os.path.join(elsewhere))):
            with self.subTest(tmpdir=tmpdir, cwd=cwd):
                env = dict(self.env, TMPDIR=tmpdir)
                roots = wp.temp_roots(env, cwd)
                self.assertNotIn(os.path.realpath(tmpdir), roots)
                with self.assertRaises(RefusedError):
                    wp.validate_write_path(os.path.join(tmpdir, "x.txt"), MAIN, cwd, env)
                self.assertIn("not a temp root", wp.temp_root_problem(env, cwd))
        sub = os.path.join(elsewhere, "scratch")
        os.makedirs(sub)
        env = dict(self.env, TMPDIR=sub)
        self.assertIn(sub, wp.temp_roots(env, self.project))
        self.assertIsNone(wp.temp_root_problem(env, self.project))
