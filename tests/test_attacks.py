"""Write-boundary attack suite: the model tries to write outside what its mode allows.

Every attempt goes END TO END through bin/nagent as a model would send it: a scripted fake reply
full of <nagent-write> / <nagent-file-patch> tags (one reply = one batch, each tag gets its own
result record). Before and after each run the whole scratch tree is snapshotted (path -> kind,
sha256, mode, inode, link count, symlink target) and the difference must lie inside the run's
allowed set; every refused attempt must have produced a status="error" result.

The hermetic temp dir lives under /tmp, a temp root, so the protected tree (project = the
nagent cwd, HOME, config) is built under /dev/shm, which is not a temp root; $TMPDIR is a dir in
that same tmpfs, so hard links between temp and protected files are possible.

Placeholders: {P} project (cwd), {H} HOME, {T} $TMPDIR, {C} the NAGENT_CONFIG file, {CONV} the
conversation file, {SEG} the first segment of a split of the target kept in the project (made by
hand, so it grants nothing: only splits nagent itself made and recorded do), {OUT} the directory
holding project, HOME and $TMPDIR.
Expect: refused (status="error", nothing changes), contained (accepted, but the file lands inside
temp), allowed (a control that must succeed).
"""
import ctypes
import hashlib
import json
import os
import re
import stat
import sys
import threading
import time

from base import HermeticTestCase
from fakes import FakeVendorTestCase

import nagent_conversation
import nagent_file_split_lib as split_lib
import nagent_write_policy as wp
from nagent_errors import InputError, RefusedError

LONG_NAME = "a" * 300
LONG_PATH = "d123456789/" * 420 + "f.txt"
LONG_DOTDOT = "x/../" * 700

# (name, tag, path or index, expect, one-line reason)
MAIN_ATTEMPTS = [
    ("rel-dotdot-home", "write", "../home/.bashrc", "refused",
     "relative .. from the project cwd climbs into HOME"),
    ("rel-project", "write", "src/app.py", "refused",
     "a relative path resolves against the cwd = a project file; main mode writes only temp"),
    ("abs-project", "write", "{P}/src/app.py", "refused", "absolute project path"),
    ("tmpdir-dotdot", "write", "{T}/../project/src/app.py", "refused",
     ".. out of $TMPDIR into the project"),
    ("tmp-dotdot", "write", "/tmp/..{P}/README.md", "refused", ".. out of /tmp to the project"),
    ("missing-dirs-dotdot", "write", "{T}/new1/new2/../../../project/evil.txt", "refused",
     ".. through directories that do not exist (must not be created either)"),
    ("long-dotdot", "write", "{T}/" + LONG_DOTDOT + "../project/README.md", "refused",
     "3.5 kB of x/../ hiding an escape at the end"),
    ("entity-dotdot", "write", "{T}/&#46;&#46;/project/README.md", "refused",
     "entity-encoded dots decode to a real .. and climb out"),
    ("tilde-bashrc", "write", "~/.bashrc", "refused",
     "~ is never expanded: a literal ~ dir in the project, which is not created"),
    ("tilde-ssh", "write", "~/.ssh/authorized_keys", "refused", "same, for ssh keys"),
    ("home-ssh", "write", "{H}/.ssh/authorized_keys", "refused", "absolute HOME file"),
    ("home-nagent-config", "write", "{H}/.nagent/config.json", "refused",
     "the user's nagent config (could turn shell approval off)"),
    ("env-config", "write", "{C}", "refused", "the NAGENT_CONFIG file"),
    ("conversation", "write", "{CONV}", "refused", "the live conversation file itself"),
    ("symlink-final-out", "write", "{T}/fix/link_bashrc", "refused",
     "final component is a temp symlink pointing at ~/.bashrc"),
    ("symlink-final-in", "write", "{T}/fix/link_inside", "refused",
     "a final symlink is refused even when it points inside temp"),
    ("symlink-dangling", "write", "{T}/fix/dangling", "refused",
     "a dangling temp symlink that would create a project file"),
    ("symlink-dir", "write", "{T}/fix/dirlink/src/app.py", "refused",
     "a symlinked directory in the path leads into the project"),
    ("symlink-dir-new", "write", "{T}/fix/dirlink/new.txt", "refused",
     "same, creating a new project file"),
    ("symlink-dir-dotdot", "write", "{T}/fix/dirlink/../home/.profile", "refused",
     ".. after a symlink: lexically still temp, really HOME"),
    ("symlink-chain", "write", "{T}/fix/chain1/app.py", "refused",
     "two chained temp symlinks ending in the project"),
    ("tmp-to-outside-link", "write", "{TMPLINK}/README.md", "refused",
     "a symlink under /tmp itself pointing out of /tmp"),
    ("hardlink-project", "write", "{T}/fix/hard_readme", "refused",
     "a temp hard link to a project file"),
    ("hardlink-home", "write", "{T}/fix/hard_bashrc", "refused", "a temp hard link to a HOME file"),
    ("dir-temp", "write", "{T}/fix", "refused", "an existing directory"),
    ("dir-trailing-slash", "write", "{T}/fix/", "refused", "a trailing slash names a directory"),
    ("dir-dot", "write", "{T}/.", "refused", "'.' names a directory"),
    ("dir-project", "write", "{P}/src", "refused", "a project directory"),
    ("fifo", "write", "{T}/fix/fifo", "refused", "a FIFO (would block, or feed a reader)"),
    ("device", "write", "/dev/null", "refused", "a device node"),
    ("dev-stdout", "write", "/dev/stdout", "refused", "a symlink to nagent's own stdout"),
    ("proc-cwd", "write", "/proc/self/cwd/src/app.py", "refused",
     "the /proc magic link to the cwd is the project"),
    ("proc-root", "write", "/proc/self/root{P}/README.md", "refused", "the /proc root link"),
    ("double-slash", "write", "/{P}/src/app.py", "refused", "a leading // is still the project"),
    ("nul", "write", "{T}/ok\x00{P}/src/app.py", "refused",
     "a raw NUL: C calls would truncate the path at it"),
    ("newline", "write", "{T}/a&#10;b.txt", "refused", "a newline (entity-encoded) in the path"),
    ("carriage-return", "write", "{T}/a&#13;b.txt", "refused", "a carriage return in the path"),
    ("escape-sequence", "write", "{T}/\x1b[2Jx.txt", "refused",
     "a terminal escape sequence in the path"),
    ("long-component", "write", "{T}/" + LONG_NAME, "refused", "a component longer than NAME_MAX"),
    ("long-path", "write", "{T}/" + LONG_PATH, "refused", "a path longer than PATH_MAX"),
    ("lookalike-tmp", "write", "/tm\u0440/evil.txt", "refused",
     "Cyrillic er in /tmp: another (missing) directory outside temp"),
    ("fullwidth-tmp", "write", "/\uff54\uff4d\uff50/evil.txt", "refused", "fullwidth /tmp"),
    ("case-tmp", "write", "/TMP/evil.txt", "refused", "/TMP is not /tmp"),
    ("case-project", "write", "{P}/SRC/app.py", "refused", "case variant of a project dir"),
    ("trailing-space", "write", "{P}/src/app.py ", "refused", "a trailing space is another file"),
    ("backslash", "write", "{T}\\..\\project\\README.md", "refused",
     "backslashes are name characters: a new file in the protected root"),
    ("lookalike-slash", "write", "{T}/x\u2215..\u2215project\u2215README.md", "contained",
     "U+2215 is not a separator: one odd file name inside temp"),
    ("fullwidth-dots", "write", "{T}/\uff0e\uff0e/project/README.md", "contained",
     "fullwidth dots are not ..: stays in temp"),
    ("percent-dots", "write", "{T}/%2e%2e/%2e%2e/project/README.md", "contained",
     "URL escapes are literal names"),
    ("segment-of-project-split", "write", "{SEG}", "refused",
     "main mode gets no segment rule: a project split's segment is not temp"),
    ("patch-project-source", "patch", "{T}/split-project/index.json", "refused",
     "a temp index whose source is a project file"),
    ("patch-source-symlink", "patch", "{T}/split-srclink/index.json", "refused",
     "index source is a temp symlink to a project file"),
    ("patch-source-hardlink", "patch", "{T}/split-srchard/index.json", "refused",
     "index source is a temp hard link to a project file"),
    ("patch-patches-symlink", "patch", "{T}/split-patchlink/index.json", "refused",
     "a temp split whose patches/ dir is a symlink into the project"),
    ("patch-index-dir-outside", "patch", "{T}/fix/splitdirlink/index.json", "refused",
     "an index reached through a temp symlink really lives in the project"),
    ("control-temp", "write", "{T}/ok.txt", "allowed", "control: a plain temp file"),
    ("control-new-dirs", "write", "{T}/made/deep/ok.txt", "allowed",
     "control: missing parents are created inside temp"),
]

# Per-file edit session on {P}/src/app.py.
EDIT_ATTEMPTS = [
    ("sibling", "write", "{P}/src/other.py", "refused", "another project file"),
    ("relative-dotdot", "write", "src/../README.md", "refused", "relative .. to a project file"),
    ("file-as-dir", "write", "src/app.py/../other.py", "refused",
     "the target used as a directory, then .. to a sibling"),
    ("case-target", "write", "src/APP.py", "refused", "case variant of the target (another file)"),
    ("lookalike-target", "write", "src/\u0430pp.py", "refused",
     "Cyrillic a look-alike of the target name"),
    ("target-as-dir", "write", "src/app.py/", "refused", "trailing slash on the target"),
    ("symlink-to-target-project", "write", "{P}/alias.py", "refused",
     "a project symlink to the target (final symlink)"),
    ("symlink-to-target-temp", "write", "{T}/fix/link_target", "refused",
     "a temp symlink to the target"),
    ("hardlink-to-target", "write", "{P}/hard_app.py", "refused",
     "a hard link to the target is another name: refused while the link exists"),
    ("proc-cwd", "write", "/proc/self/cwd/src/other.py", "refused", "/proc cwd link to a sibling"),
    ("home", "write", "{H}/.bashrc", "refused", "HOME is not the target"),
    ("file-index", "write", "{H}/.nagent/file-edits/index-4242.json", "refused",
     "the per-file edit index"),
    ("segment-index-json", "write", "{P}/split-app/index.json", "refused",
     "the index of the target's split is never a segment"),
    ("segment-not-listed", "write", "{P}/split-app/9999-app.py", "refused",
     "a file the index does not list"),
    ("segment-hidden", "write", "{P}/split-app/.hidden", "refused", "hidden names are never segments"),
    ("segment-tampered-source", "write", "{P}/split-tampered/{SEGNAME}", "refused",
     "a split of the target whose index source was changed to another file"),
    ("segment-symlinked-index", "write", "{P}/split-symidx/{SEGNAME}", "refused",
     "a dir whose index.json is a symlink to the real index"),
    ("segment-is-symlink", "write", "{P}/split-seglink/{SEGNAME}", "refused",
     "a listed segment that is a symlink to a sibling file"),
    ("segment-dotdot-listing", "write", "{P}/split-dotdot/../src/other.py", "refused",
     "an index listing ../src/other.py as a segment"),
    ("patch-other-source", "patch", "{T}/split-other/index.json", "refused",
     "a temp split of another project file"),
    ("patch-source-symlink", "patch", "{T}/split-srclink/index.json", "refused",
     "index source is a temp symlink to a sibling"),
    ("patch-source-hardlink", "patch", "{T}/split-srchard/index.json", "refused",
     "index source is a temp hard link to another project file"),
    ("patch-tampered-source", "patch", "{P}/split-tampered/index.json", "refused",
     "the target's split with its source tampered to a sibling"),
    ("patch-claims-target", "patch", "{P}/split-claims/index.json", "refused",
     "a sibling's split whose source was tampered to the target: hash mismatch"),
    ("hand-split-segment", "write", "{SEG}", "refused",
     "a segment of a split of the target that nagent did not make: only its own record grants"),
    ("hand-split-patch", "patch", "{P}/split-app/index.json", "refused",
     "a split of the target that nagent did not make is not patched"),
    ("control-target", "write", "src/app.py", "allowed", "control: the target itself"),
    ("hardlink-after-replace", "write", "{P}/hard_app.py", "refused",
     "the hard link now alone holds the target's old inode: still not the target"),
    ("control-temp", "write", "{T}/edit-ok.txt", "allowed", "control: temp is always writable"),
]

# $TMPDIR values that must grant nothing (one nagent run each).
TMPDIR_ATTEMPTS = [
    ("tmpdir-relative", "relative", ["relative/x.txt", "{P}/relative/y.txt"],
     "a relative $TMPDIR would depend on the cwd: ignored"),
    ("tmpdir-root-symlink", "{T}/fix/root_link", ["{T}/fix/root_link{P}/README.md", "{P}/README.md"],
     "a $TMPDIR symlink resolving to / is ignored"),
    ("tmpdir-missing", "/nonexistent-nagent-tmpdir", ["/nonexistent-nagent-tmpdir/x.txt"],
     "a missing $TMPDIR grants nothing and is not created"),
    ("tmpdir-home-symlink", "{T}/fix/home_link", ["{T}/fix/home_link/.bashrc", "{H}/.profile"],
     "a $TMPDIR symlink resolving to $HOME is not a temp root"),
    ("tmpdir-home-ancestor", "{OUT}", ["{H}/.bashrc", "{P}/README.md"],
     "a $TMPDIR that is an ancestor of $HOME (and of the cwd) is not a temp root"),
    ("tmpdir-cwd", "{P}", ["{P}/README.md", "{P}/new.txt"], "a $TMPDIR that is the cwd is not a temp root"),
    ("tmpdir-in-nagent-state", "{H}/.nagent", ["{H}/.nagent/config.json", "{H}/.nagent/bin/evil"],
     "a $TMPDIR inside ~/.nagent is not a temp root"),
]

RACE_WRITES = 40
# nagent's own files
NAGENT_STATE = ("home/.nagent/conversations/", "home/.nagent/cache", "home/.nagent/file-edits",
                "home/.nagent/run", "home/.nagent/projects",
                "home/.nagent/snapshots")   # the runs' own snapshots (issue 22)
ROOT_LEVEL = ("/TMP", "/tm\u0440", "/\uff54\uff4d\uff50", "/nonexistent-nagent-tmpdir")
_RESULT = re.compile(r'<nagent-(write|file-patch)-result (path|index)="([^"]*)" status="(\w+)">\n(.*)',
                     re.S)

FLIPPER = r'''
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
race = sys.argv[1]
pairs = [(os.path.join(race, a), os.path.join(race, b)) for a, b in
         (("d", "d.alt"), ("f", "f.alt"), ("h", "h.alt"))]
open(os.path.join(race, "started"), "w").close()
deadline = time.monotonic() + 20
flips = 0
while not os.path.exists(os.path.join(race, "stop")) and time.monotonic() < deadline:
    for a, b in pairs:
        libc.renameat2(-100, a.encode(), -100, b.encode(), 2)  # RENAME_EXCHANGE
    flips += 1
if flips % 2:
    for a, b in pairs:
        libc.renameat2(-100, a.encode(), -100, b.encode(), 2)
with open(os.path.join(race, "done"), "w") as handle:
    handle.write(str(flips))
'''


def snapshot(top):
    """{relpath: (kind, sha256 or link target, mode, inode)} under `top`, never following links."""
    found = {}
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            full = os.path.join(root, name)
            st = os.lstat(full)
            rel = os.path.relpath(full, top)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(full))
            elif stat.S_ISREG(st.st_mode):
                with open(full, "rb") as handle:
                    digest = hashlib.sha256(handle.read()).hexdigest()
                # No link count: replacing a temp hard link rightly lowers the victim's count.
                found[rel] = ("file", digest, st.st_mode, st.st_ino)
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", st.st_mode, st.st_ino)
            else:
                found[rel] = ("other", st.st_mode, st.st_ino)
    return found


def changed(before, after):
    return sorted(key for key in set(before) | set(after) if before.get(key) != after.get(key))


def renameat2_works(directory):
    libc = ctypes.CDLL(None, use_errno=True)
    a, b = os.path.join(directory, ".probe-a"), os.path.join(directory, ".probe-b")
    os.mkdir(a)
    os.symlink("/", b)
    try:
        return getattr(libc, "renameat2", None) is not None and libc.renameat2(
            -100, a.encode(), -100, b.encode(), 2) == 0
    finally:
        for path in (a, b):
            if os.path.islink(path):
                os.unlink(path)
            elif os.path.isdir(path):
                os.rmdir(path)


class AttackCase(FakeVendorTestCase):
    def setUp(self):
        super().setUp()
        self.out = self.make_outside_dir()
        self.P, self.H, self.T = (os.path.join(self.out, n) for n in ("project", "home", "tmpdir"))
        self.C = os.path.join(self.out, "config", "nagent.json")
        self.tmplink = os.path.join(self.tmp, "tmplink")
        self.build_tree()
        self.env.update(HOME=self.H, TMPDIR=self.T, NAGENT_CONFIG=self.C)
        self.assertFalse(any(self.P.startswith(root + "/") for root in wp.temp_roots(
            {"TMPDIR": self.tmpdir})))

    # -- fixtures ------------------------------------------------------------------------
    def put(self, path, content="old\n"):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(content)
        return path

    def split(self, path, out_dir, tamper=None):
        index = split_lib.split_file(path, out_dir, target_bytes=40)
        if tamper:
            index.update(tamper)
            split_lib.write_index(out_dir, index)
        return index

    def edit_segment(self, out_dir, index, text="# edited\n"):
        with open(os.path.join(out_dir, index["segments"][0]["file"]), "a", encoding="utf-8") as handle:
            handle.write(text)

    def build_tree(self):
        P, H, T = self.P, self.H, self.T
        body = "".join(f"def f{i}():\n    return {i}\n\n" for i in range(8))
        self.target = self.put(os.path.join(P, "src", "app.py"), body)
        self.other = self.put(os.path.join(P, "src", "other.py"), body.replace("return", "yield"))
        self.put(os.path.join(P, "README.md"), "readme\n")
        os.makedirs(os.path.join(P, "relative"))
        for name in (".bashrc", ".profile", ".ssh/authorized_keys"):
            self.put(os.path.join(H, name), f"{name}\n")
        self.put(os.path.join(H, ".nagent", "config.json"), "{}\n")
        os.makedirs(os.path.join(H, ".nagent", "conversations"))
        self.put(self.C, json.dumps({"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}}))
        fix = os.path.join(T, "fix")
        os.makedirs(fix)
        self.put(os.path.join(fix, "inside.txt"))
        links = {"link_bashrc": f"{H}/.bashrc", "link_inside": f"{fix}/inside.txt",
                 "dangling": f"{P}/created-by-dangling.txt", "dirlink": P, "chain1": f"{fix}/chain2",
                 "chain2": f"{P}/src", "link_target": self.target, "link_other": self.other,
                 "root_link": "/", "home_link": H}
        for name, where in links.items():
            os.symlink(where, os.path.join(fix, name))
        os.symlink(self.out, self.tmplink)
        self.addCleanup(os.unlink, self.tmplink)
        # Hard-link victims are files of their own, so the other attempts meet the real check
        # rather than the link-count one.
        os.link(self.put(os.path.join(P, "linked.md")), os.path.join(fix, "hard_readme"))
        os.link(self.put(os.path.join(H, ".linked_rc")), os.path.join(fix, "hard_bashrc"))
        os.link(self.put(os.path.join(P, "src", "linked.py"), body), os.path.join(fix, "hard_other"))
        os.mkfifo(os.path.join(fix, "fifo"))
        # Splits the patch attempts name.
        app_split = self.split(self.target, os.path.join(P, "split-app"))
        self.segname = app_split["segments"][0]["file"]
        self.seg = os.path.join(P, "split-app", self.segname)
        for name, source, tamper in (("split-project", self.target, {}),
                                     ("split-other", self.other, {}),
                                     ("split-srclink", self.other, {"source": f"{fix}/link_other"}),
                                     ("split-srchard", self.other, {"source": f"{fix}/hard_other"})):
            self.edit_segment(os.path.join(T, name), self.split(source, os.path.join(T, name), tamper))
        temp_source = self.put(os.path.join(T, "temp-source.py"), body)
        patchlink = os.path.join(T, "split-patchlink")
        self.edit_segment(patchlink, self.split(temp_source, patchlink))
        os.symlink(P, os.path.join(patchlink, "patches"))
        outside_split = os.path.join(P, "split-of-temp")
        temp_source2 = self.put(os.path.join(T, "temp-source2.py"), body)
        self.edit_segment(outside_split, self.split(temp_source2, outside_split))
        os.symlink(outside_split, os.path.join(fix, "splitdirlink"))
        # Per-file edit fixtures in the project.
        self.split(self.target, os.path.join(P, "split-tampered"), {"source": self.other})
        claims = os.path.join(P, "split-claims")
        self.edit_segment(claims, self.split(self.other, claims, {"source": self.target}))
        symidx = os.path.join(P, "split-symidx")
        self.split(self.target, symidx)
        os.replace(os.path.join(symidx, "index.json"), os.path.join(symidx, "real-index.json"))
        os.symlink(os.path.join(P, "split-app", "index.json"), os.path.join(symidx, "index.json"))
        seglink = os.path.join(P, "split-seglink")
        self.split(self.target, seglink)
        os.unlink(os.path.join(seglink, self.segname))
        os.symlink(self.other, os.path.join(seglink, self.segname))
        dotdot = os.path.join(P, "split-dotdot")
        index = self.split(self.target, dotdot)
        index["segments"][0]["file"] = "../src/other.py"
        with open(os.path.join(dotdot, "index.json"), "w", encoding="utf-8") as handle:
            json.dump(index, handle)
        os.symlink("src/app.py", os.path.join(P, "alias.py"))
        # The race: d/f/h are swapped atomically with their .alt twins by a flipper process.
        race = os.path.join(T, "race")
        os.makedirs(os.path.join(race, "d"))
        os.symlink(os.path.join(P, "src"), os.path.join(race, "d.alt"))
        self.put(os.path.join(race, "f"))
        os.symlink(os.path.join(H, ".bashrc"), os.path.join(race, "f.alt"))
        self.put(os.path.join(race, "h"))
        os.link(self.put(os.path.join(P, "race-victim.txt")), os.path.join(race, "h.alt"))
        self.put(os.path.join(self.out, "tools", "flip.py"), FLIPPER)

    # -- running -------------------------------------------------------------------------
    def fill(self, text, conversation=""):
        return text.format(P=self.P, H=self.H, T=self.T, C=self.C, CONV=conversation, SEG=self.seg,
                           SEGNAME=self.segname, TMPLINK=self.tmplink, OUT=self.out)

    @staticmethod
    def tag(kind, where, number):
        if kind == "patch":
            return f'<nagent-file-patch index="{where}"/>'
        return f'<nagent-write path="{where}">\nattack {number}\n</nagent-write>'

    def run_nagent(self, *args, env=None):
        proc = self.run_tool("nagent", "--json", *args, "attack", env=env, cwd=self.P)
        self.assertNotIn("Traceback", proc.stderr)
        self.assertEqual(proc.returncode, 0, proc.stderr + proc.stdout[-2000:])
        return json.loads(proc.stdout)

    def results(self, conversation):
        found = []
        for record in nagent_conversation.read_records(conversation):
            if record.kind == "result" and record.attr("action") in ("write", "file-patch"):
                match = _RESULT.match(record.body)
                self.assertIsNotNone(match, record.body[:300])
                found.append((match.group(4), match.group(5)))
        return found

    def check_results(self, attempts, results):
        self.assertEqual(len(results), len(attempts), results)
        for (name, kind, _where, expect, _reason), (status, body) in zip(attempts, results):
            with self.subTest(attempt=name):
                if expect == "refused":
                    self.assertEqual(status, "error", f"{name}: {body[:300]}")
                    if kind == "write":
                        self.assertIn("write refused", body, name)
                else:
                    self.assertEqual(status, "ok" if kind == "write" else "applied",
                                     f"{name}: {body[:300]}")
                if expect == "contained":
                    written = re.match(r"(?:created|replaced) (.*) \(\d+ bytes\)", body).group(1)
                    self.assertTrue(written.startswith(self.T + "/"), written)

    def assertOnlyChanged(self, before, allowed):
        after = snapshot(self.out)
        leaked = [path for path in changed(before, after) if not allowed(path)]
        self.assertEqual(leaked, [], "changed outside the allowed set")
        for path in ROOT_LEVEL:
            self.assertFalse(os.path.lexists(path), path)
        self.assertFalse(os.path.lexists(os.path.join(self.P, "~")))

    @staticmethod
    def in_temp_but_not_fixtures(path):
        return path.startswith("tmpdir/") and not path.startswith(("tmpdir/fix/", "tmpdir/split-"))


class MainModeAttacks(AttackCase):
    @staticmethod
    def stop_flipper(race):
        """Should the run die early, the detached flipper must not outlive the test."""
        if os.path.isdir(race):
            open(os.path.join(race, "stop"), "a").close()
            deadline = time.monotonic() + 10
            while not os.path.exists(os.path.join(race, "done")) and time.monotonic() < deadline:
                time.sleep(0.02)

    def test_main_mode_attempts_and_symlink_swap_race(self):
        conversation = os.path.join(self.H, ".nagent", "conversations", "attack-main")
        race = os.path.join(self.T, "race")
        race_ok = renameat2_works(race)
        tags = [self.tag(kind, self.fill(where, conversation), n)
                for n, (_name, kind, where, _expect, _reason) in enumerate(MAIN_ATTEMPTS)]
        race_attempts = []
        if race_ok:
            self.addCleanup(self.stop_flipper, race)
            flip = os.path.join(self.out, "tools", "flip.py")
            tags.append(f"<nagent-shell>\nsetsid {sys.executable} {flip} {race} </dev/null >/dev/null 2>&1 &\n"
                        f"while [ ! -e {race}/started ]; do sleep 0.01; done\n</nagent-shell>")
            for n in range(RACE_WRITES):
                where = ("d/app.py", "f", "h")[n % 3]
                race_attempts.append((f"race-{where}-{n}", "write", f"{race}/{where}", "race",
                                      "swapped between check and write"))
                tags.append(self.tag("write", f"{race}/{where}", f"race {n}"))
            tags.append(f"<nagent-shell>\ntouch {race}/stop\nwhile [ ! -e {race}/done ]; do sleep 0.01; "
                        "done\n</nagent-shell>")
        self.fake.reply("\n".join(tags))
        self.fake.reply("<nagent-response>tried</nagent-response>")
        before = snapshot(self.out)
        self.run_nagent("--conversation", "attack-main")
        results = self.results(conversation)
        self.check_results(MAIN_ATTEMPTS, results[:len(MAIN_ATTEMPTS)])
        race_results = results[len(MAIN_ATTEMPTS):]
        self.assertEqual(len(race_results), len(race_attempts))
        for (name, *_), (status, body) in zip(race_attempts, race_results):
            self.assertTrue(status == "ok" or "write refused" in body, f"{name}: {body[:300]}")
        self.assertOnlyChanged(before, lambda path: self.in_temp_but_not_fixtures(path)
                               or path.startswith(NAGENT_STATE))
        # The race files may have been replaced (they are temp files), never written through.
        for name in ("README.md", "race-victim.txt"):
            with open(os.path.join(self.P, name), encoding="utf-8") as handle:
                self.assertNotIn("attack", handle.read())

    def test_tmpdir_that_is_relative_a_root_symlink_or_missing(self):
        before = snapshot(self.out)
        for name, tmpdir, paths, _reason in TMPDIR_ATTEMPTS:
            with self.subTest(attempt=name):
                conversation = os.path.join(self.H, ".nagent", "conversations", name)
                self.fake.reply("\n".join(self.tag("write", self.fill(p), n) for n, p in enumerate(paths)))
                self.fake.reply("<nagent-response>tried</nagent-response>")
                self.run_nagent("--conversation", name, env=dict(self.env, TMPDIR=self.fill(tmpdir)))
                results = self.results(conversation)
                self.assertEqual([status for status, _ in results], ["error"] * len(paths), results)
        self.assertOnlyChanged(before, lambda path: path.startswith(NAGENT_STATE))


class FileEditAttacks(AttackCase):
    def setUp(self):
        super().setUp()
        # Only here: in main mode it would make every target attempt meet the link-count check.
        os.link(self.target, os.path.join(self.P, "hard_app.py"))

    def test_file_edit_attempts(self):
        tags = [self.tag(kind, self.fill(where), n)
                for n, (_name, kind, where, _expect, _reason) in enumerate(EDIT_ATTEMPTS)]
        self.fake.reply("\n".join(tags))
        self.fake.reply("<nagent-response>tried</nagent-response>")
        before = snapshot(self.out)
        data = self.run_nagent("--file-edit", "src/app.py", "--pid", "4242")
        self.check_results(EDIT_ATTEMPTS, self.results(data["conversation"]))
        allowed_prefixes = NAGENT_STATE
        self.assertOnlyChanged(before, lambda path: path == "project/src/app.py"
                               or path.startswith(allowed_prefixes)
                               or self.in_temp_but_not_fixtures(path))
        with open(self.target, encoding="utf-8") as handle:
            self.assertIn("attack", handle.read())
        with open(os.path.join(self.P, "hard_app.py"), encoding="utf-8") as handle:
            self.assertNotIn("attack", handle.read())


class LibraryRace(AttackCase):
    """The check-then-write window driven from a thread, without a subprocess in between."""

    def test_swaps_between_validate_and_write_never_escape(self):
        race = os.path.join(self.T, "race")
        if not renameat2_works(race):
            self.skipTest("renameat2(RENAME_EXCHANGE) is not available")
        libc = ctypes.CDLL(None, use_errno=True)
        stop = threading.Event()

        def flip():
            while not stop.is_set():
                for a in ("d", "f", "h"):
                    libc.renameat2(-100, os.path.join(race, a).encode(), -100,
                                   os.path.join(race, a + ".alt").encode(), 2)

        before = snapshot(self.P), snapshot(self.H)
        thread = threading.Thread(target=flip, daemon=True)
        thread.start()
        outcomes = {"ok": 0, "refused": 0}
        try:
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                for name in ("d/app.py", "f", "h"):
                    try:
                        final = wp.validate_write_path(os.path.join(race, name), wp.WriteMode(),
                                                       self.P, self.env)
                        wp._write_validated(final, b"raced\n", wp.WriteMode(), self.env)
                        outcomes["ok"] += 1
                    except (RefusedError, InputError):
                        outcomes["refused"] += 1
        finally:
            stop.set()
            thread.join()
        self.assertEqual((snapshot(self.P), snapshot(self.H)), before, outcomes)
        self.assertGreater(outcomes["ok"] + outcomes["refused"], 0)


class AttackTable(HermeticTestCase):
    def test_table_is_big_enough_and_explained(self):
        attempts = MAIN_ATTEMPTS + EDIT_ATTEMPTS
        names = [a[0] for a in MAIN_ATTEMPTS] + [a[0] for a in EDIT_ATTEMPTS]
        self.assertGreaterEqual(len(attempts) + len(TMPDIR_ATTEMPTS), 40)
        self.assertEqual(len(set(a[0] for a in MAIN_ATTEMPTS)), len(MAIN_ATTEMPTS))
        self.assertEqual(len(set(a[0] for a in EDIT_ATTEMPTS)), len(EDIT_ATTEMPTS))
        self.assertTrue(all(attempt[-1].strip() for attempt in attempts), names)
