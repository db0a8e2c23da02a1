"""The guard on destructive commands: on in every approval mode, it makes nagent ask (on a
terminal) or refuse (headless) before a command that can destroy work nothing else keeps.

Data contract:
- `Place(cwd, temp_roots, project, home, tracked, dirty)`: where the run works. `project` is
  the project root (None outside one); `tracked(real) -> bool | None` tells whether the project
  tracks a file, `dirty(paths, cwd) -> bool | None` whether git sees uncommitted changes there
  (None: cannot tell, which counts as yes). `git_place(cwd, environ, secret_names)` builds one
  over git (nagent_project.run_git: the validated root, reading subcommands only); `dirty` is
  `worktree_changed`: the index's blobs against the files' bytes hashed here, so no filter,
  textconv or fsmonitor the repository configures runs (a sandboxed command can write them).
- `findings(command, place) -> tuple of str`: why one nagent_command_types.Command may destroy
  work; empty when nothing was found. A word known only at run time counts as the worst case.
  What it covers: `git reset --hard`; `git clean -f…`; `git checkout -- PATHS` / `git checkout .`
  / `git restore PATHS` with uncommitted changes there; `git checkout -f`, `git switch -f`;
  `git push --force` / `-f` / `--force-with-lease` / `--mirror` / `--delete` / `+ref` / `:ref`;
  `git stash drop|clear`, `git branch -D`, `git rm -f`, `git reflog expire|delete`,
  `git gc --prune=now`, `git update-ref -d`, `git filter-branch|filter-repo`,
  `git worktree remove -f`; `rm -r` of anything outside the temp roots, or of the project, the
  working directory, the home or one of their ancestors even inside a temp root; `find …
  -delete`; `shred`; `truncate`; `dd of=`; `mkfs*`, `mke2fs`, `mkswap`, `wipefs`, `blkdiscard`,
  `fdisk`, `sfdisk`, `parted`, `sgdisk`; `chmod -R` / `chown -R` / `chgrp -R` outside the project;
  `rsync --delete…`; `crontab -r`; `docker volume rm|prune`, `docker system prune`; a redirection
  (`>`, `>|`, `&>`, `>&FILE`) or `tee` without -a that truncates a file the project tracks (or a
  file named only at run time, inside a project), or writes a disk device.
- `exact_form(command)`: the command as an exact rule pattern (what "allow this exact form"
  adds). `resolved_paths(word, command)`: the real paths a word may name, one per directory the
  command may run in (None: not known), the one rule for paths in commands.
"""
import os
import re
import stat
from dataclasses import dataclass
from typing import Callable

from nagent_paths import within, within_any
from nagent_project import run_git
from nagent_shadow_git import blob_sha

FORMATTERS = frozenset({"mke2fs", "mkswap", "wipefs", "blkdiscard", "fdisk", "sfdisk", "parted",
                        "sgdisk", "mkdosfs"})
DISK_RE = re.compile(r"/dev/(?:sd|hd|vd|xvd|nvme|mmcblk|disk/|mapper/|md\d|dm-|loop)")
TRUNCATING = (">", ">|", "&>")


@dataclass(frozen=True)
class Place:
    cwd: str
    temp_roots: tuple = ()
    project: "str | None" = None
    home: "str | None" = None
    tracked: Callable = lambda real: False
    dirty: Callable = lambda paths, cwd: False


def exact_form(command):
    return command.text()


def _split(args):
    """(options, operands, unknown): static option words before `--`, the other words, and
    whether a word known only at run time might be an option too: an unquoted expansion that
    starts the word (`rm $FLAGS x`), not a quoted one (`rm "$f"`) or one after a literal start
    (`rm /tmp/x-$$`), which stay operands."""
    options, operands, ended, unknown = [], [], False, False
    for word in args:
        if not ended and word.static and word.text == "--":
            ended = True
        elif not ended and word.static and word.text.startswith("-") and word.text != "-":
            options.append(word.text)
        else:
            operands.append(word)
            unknown = unknown or (not ended and word.split and
                                  (word.raw or word.text).startswith(("$", "`")))
    return options, operands, unknown


def _flag(options, short="", long=()):
    """Is one of these options given? Long options count when abbreviated too, as getopt_long
    and git read them (`--har` is `--hard`, `--recur` is `--recursive`)."""
    for option in options:
        if option.startswith("--"):
            name = option.split("=", 1)[0]
            if any(name == full or (len(name) >= 4 and full.startswith(name)) for full in long):
                return True
        elif any(letter in option[1:] for letter in short):
            return True
    return False


def resolved_paths(word, command):
    """The resolved paths a word of `command` may name, one per directory it may run in (None:
    not known)."""
    if not word.static:
        return [None]
    if os.path.isabs(word.text):
        return [_real(word.text)]
    return [None if cwd is None else _real(os.path.join(cwd, word.text))
            for cwd in command.cwds or {None}]


def _real(path):
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):   # a NUL byte, a path the kernel refuses: not known
        return None


def _precious(real, place):
    """Not a path rm -r may take: outside the temp roots, or the project, the working
    directory or the home (or inside or above one of them)."""
    if real is None or not within_any(real, place.temp_roots):
        return True
    for kept in (place.project, place.cwd, place.home):
        if kept and (within(real, kept, inclusive=True) or within(kept, real)):
            return True
    return False


def _rm(command, place):
    options, operands, unknown = _split(command.words[1:])
    recursive = _flag(options, "rR", ("--recursive",))
    if not (recursive or unknown or command.open_tail):
        return []
    if command.open_tail or any(_precious(real, place) for word in operands
                                for real in resolved_paths(word, command)):
        shown = " ".join(w.raw or w.text for w in operands) or "(words added at run time)"
        return [f"rm -r of {shown} (outside the temp roots, or the project itself)"]
    return []


def _recursive_owner(command, place, name):
    options, operands, unknown = _split(command.words[1:])
    if not (_flag(options, "R", ("--recursive",)) or unknown):
        return []
    if not any(o.startswith("--reference") for o in options):
        operands = operands[1:]   # the mode or the owner
    inside = place.project or place.cwd
    for word in operands:
        for real in resolved_paths(word, command):
            if real is None or not within(real, inside, inclusive=True):
                return [f"{name} -R of {word.raw or word.text} (outside the project)"]
    return []


def _git(command, place):
    words = command.words[1:]
    i = 0
    while i < len(words) and words[i].static and words[i].text.startswith("-"):
        i += 2 if words[i].text in ("-C", "-c") else 1
    if i >= len(words):
        return []
    if not words[i].static:
        return ["git with a subcommand known only at run time"]
    sub, args = words[i].text, words[i + 1:]
    options, operands, unknown = _split(args)
    texts = [w.text for w in operands if w.static]

    def when(condition, text):
        return [text] if condition or unknown else []

    if sub == "reset":
        return when(_flag(options, "", ("--hard",)), "git reset --hard discards uncommitted changes")
    if sub == "clean":
        return when(_flag(options, "f", ("--force",)) and not _flag(options, "n", ("--dry-run",)),
                    "git clean -f deletes untracked files")
    if sub == "checkout":
        if _flag(options, "f", ("--force",)):
            return ["git checkout --force discards uncommitted changes"]
        if any(w.static and w.text == "--" for w in args) or "." in texts:
            return _discards(command, place, "git checkout", _after_dashes(args))
        paths = [w for w in operands if any(real and os.path.lexists(real)
                                            for real in resolved_paths(w, command))]
        return _discards(command, place, "git checkout", paths) if paths else []
    if sub == "restore":
        if _flag(options, "S", ("--staged",)) and not _flag(options, "W", ("--worktree",)):
            return []
        return _discards(command, place, "git restore", operands) if operands else []
    if sub == "switch":
        return when(_flag(options, "f", ("--force", "--discard-changes")),
                    "git switch --discard-changes discards uncommitted changes")
    if sub == "push":
        forced = _flag(options, "fd", ("--force", "--force-with-lease", "--force-if-includes",
                                       "--mirror", "--delete", "--prune"))
        return when(forced or any(t.startswith(("+", ":")) for t in texts),
                    "git push that rewrites or deletes remote history")
    if sub == "stash":
        return when(bool(texts) and texts[0] in ("drop", "clear"), "git stash drop/clear loses stashes")
    if sub == "branch":
        return when("-D" in options or (_flag(options, "d", ("--delete",)) and
                                        _flag(options, "f", ("--force",))) or
                    any(o.startswith("-") and "D" in o[1:] and not o.startswith("--") for o in options),
                    "git branch -D deletes an unmerged branch")
    if sub == "rm":
        return when(_flag(options, "f", ("--force",)), "git rm -f discards uncommitted changes")
    if sub == "reflog":
        return when(bool(texts) and texts[0] in ("expire", "delete"), "git reflog expire/delete")
    if sub == "gc":
        return when(_flag(options, "", ("--prune",)), "git gc --prune")
    if sub == "update-ref":
        return when(_flag(options, "d", ()), "git update-ref -d deletes a ref")
    if sub in ("filter-branch", "filter-repo"):
        return [f"git {sub} rewrites history"]
    if sub == "worktree":
        return when(bool(texts) and texts[0] == "remove" and _flag(options, "f", ("--force",)),
                    "git worktree remove --force")
    return []


def _after_dashes(args):
    for n, word in enumerate(args):
        if word.static and word.text == "--":
            return list(args[n + 1:])
    return [w for w in args if not (w.static and w.text.startswith("-"))]


def _discards(command, place, what, operands):
    paths = [w for w in operands]
    if not paths or any(not w.static for w in paths) or None in command.cwds:
        return [f"{what} of paths known only at run time may discard uncommitted changes"]
    for cwd in command.cwds:
        changed = place.dirty(tuple(w.text for w in paths), cwd)
        if changed or changed is None:
            return [f"{what} {' '.join(w.text for w in paths)} discards uncommitted changes"]
    return []


def _redirects(command, place):
    found = []
    for redirect in command.redirects:
        target = redirect.target
        if redirect.op not in TRUNCATING and not (redirect.op == ">&" and target is not None and
                                                  not (target.static and (target.text.isdigit()
                                                                          or target.text == "-"))):
            continue
        found += _overwrites(target, command, place, f"{redirect.op} ")
    return found


def _overwrites(word, command, place, how):
    if word.static and DISK_RE.match(word.text):
        return [f"{how}{word.text} writes a disk device"]
    for real in resolved_paths(word, command):
        if real is None:
            if place.project:
                return [f"{how}{word.raw or word.text}: a file named only at run time (it may be "
                        "one the project tracks)"]
            continue
        if real == "/dev/null" or (place.project and not within(real, place.project)):
            continue
        tracked = place.tracked(real)
        if tracked or (tracked is None and place.project):
            return [f"{how}{word.raw or word.text} truncates a file the project tracks"]
    return []


def findings(command, place):
    found = _redirects(command, place)
    if not command.words or not command.words[0].static:
        return tuple(found)
    name = command.name
    args = command.words[1:]
    options, operands, unknown = _split(args)
    texts = [w.text for w in args if w.static]
    if name == "rm":
        found += _rm(command, place)
    elif name == "find" and "-delete" in texts:
        found.append("find -delete deletes what it finds")
    elif name in ("shred", "truncate"):
        found.append(f"{name} destroys file contents")
    elif name == "dd" and any(t.startswith("of=") and t != "of=/dev/null" for t in texts):
        found.append("dd of= overwrites its target")
    elif name.startswith("mkfs") or name in FORMATTERS:
        found.append(f"{name} formats or wipes a disk")
    elif name in ("chmod", "chown", "chgrp"):
        found += _recursive_owner(command, place, name)
    elif name == "git":
        found += _git(command, place)
    elif name == "rsync" and any(o.startswith("--del") for o in options):
        found.append("rsync --delete removes files at the destination")
    elif name == "crontab" and _flag(options, "r", ("--remove",)):
        found.append("crontab -r removes every cron job")
    elif name == "docker" and len(texts) >= 2 and (texts[0], texts[1]) in (
            ("volume", "rm"), ("volume", "prune"), ("system", "prune")):
        found.append(f"docker {texts[0]} {texts[1]} deletes data")
    elif name == "tee" and not _flag(options, "a", ("--append",)):
        for word in operands:
            found += _overwrites(word, command, place, "tee ")
    return tuple(dict.fromkeys(found))


# -- the place, from git --------------------------------------------------------------------
def worktree_changed(git, project, directory, paths):
    """What `git status -- PATHS` would say (uncommitted changes there: True), without git ever
    reading a work-tree file: a clean filter, textconv or fsmonitor the repository configures
    would run in the driver. The index lists each path's blob; the file's bytes are hashed here.
    None when it cannot tell (a path outside the project, git failing), which counts as yes."""
    specs = []
    for path in paths:
        rel = os.path.relpath(os.path.join(directory, path), project)
        if rel == ".." or rel.startswith("../"):
            return None
        specs.append(rel)
    listed = git("ls-files", "-z", "-s", "--", *specs)
    others = git("ls-files", "-z", "-o", "--exclude-standard", "--", *specs)
    if listed is None or others is None or listed.returncode or others.returncode:
        return None
    if others.stdout.strip(b"\0"):
        return True   # untracked files there, as status lists them
    entries = [item for item in listed.stdout.split(b"\0") if item]
    staged = git("diff-index", "--cached", "--name-only", "-z", "--no-ext-diff", "--no-textconv",
                 "HEAD", "--", *specs)
    if staged is None or staged.returncode:
        return bool(entries)   # no commit yet: whatever the index holds is uncommitted
    if staged.stdout.strip(b"\0"):
        return True
    return any(_entry_changed(project, entry) for entry in entries)


def _entry_changed(project, entry):
    meta, _, name = entry.partition(b"\t")
    mode, sha, stage = meta.split(b" ")
    if stage != b"0" or len(sha) != 40:
        return True   # a conflict, or a sha256 repository: say changed
    full = os.path.join(project, os.fsdecode(name))
    try:
        info = os.lstat(full)
        if mode == b"120000":
            return not stat.S_ISLNK(info.st_mode) or \
                blob_sha(os.fsencode(os.readlink(full))) != sha.decode()
        if mode not in (b"100644", b"100755") or not stat.S_ISREG(info.st_mode):
            return True   # a submodule, or a file that became something else
        if bool(info.st_mode & 0o100) != (mode == b"100755"):
            return True
        with open(full, "rb") as handle:
            return blob_sha(handle.read()) != sha.decode()
    except OSError:
        return True   # deleted: checkout would bring it back


def git_place(cwd, environ, project, temp_roots, secret_names=None):
    """A Place whose tracked/dirty questions go to git (nagent_project.run_git: reading
    subcommands only, so nothing the repository configures runs)."""

    def git(*args):
        return run_git(project, args, environ, secret_names)

    def tracked(real):
        if not project or not within(real, project):
            return False
        done = git("ls-files", "--error-unmatch", "--", os.path.relpath(real, project))
        return None if done is None or done.returncode not in (0, 1) else done.returncode == 0

    def dirty(paths, directory):
        if not project:
            return False
        return worktree_changed(git, project, directory or project, paths)

    home = environ.get("HOME")
    return Place(os.path.realpath(cwd), tuple(temp_roots), project,
                 os.path.realpath(home) if home else None, tracked, dirty)
