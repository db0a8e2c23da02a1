"""Snapshots of a project tree: what is covered, and taking one.

Data contract:
- `project_scope(cwd, environ, key_names=None) -> Scope(root, mode, user_git, refused)`: the
  tree snapshots cover. In a git work tree (nagent_project.find_project, the one validated
  root: it refuses a root git names elsewhere than the directory holding the `.git` found
  walking up, such as a `core.worktree` in the project's config) `mode` is "git" and
  `user_git` the project's own `.git` directory when it is a plain directory (read as data
  only: its index for the tracked list, info/exclude for patterns; git never runs on it);
  elsewhere `mode` is "tree" and the root is the working directory. `refused` (one line, else
  None) when the working directory lies in a repository's `.git` directory
  (nagent_project.search_marker), or the root is /, $HOME, holds $HOME, or holds or lies in
  nagent's own state (~/.nagent): nothing is snapshotted there.
- Coverage (`take_snapshot`): files git status sees in the shadow index over the root — tracked
  there, or untracked and not excluded by the tree's .gitignore files or the project's
  info/exclude patterns — plus every file the project's own index tracks even when ignored.
  Nested repositories are not entered. A regular file over `limits.max_file_bytes` is not
  copied: it is recorded in the entry's `skipped` {path: [size, mtime_ns]}. In "tree" mode a
  snapshot that would hold more than `limits.max_files` files, or copy more than
  `limits.max_bytes`, is refused (SnapshotRefused): nothing is recorded.
- `take_snapshot(store, scope, limits, meta, now, record=True) -> entry` runs under the store's
  lock (the caller holds it; `record` False leaves the journal alone: a rewind's look first): one `git status` when nothing changed; when something did, update-index,
  write-tree, a commit object and HEAD (nagent_shadow_git). The journal entry appended:
  {"id" (the last id + 1), "time", "tree", "commit", "files" (paths whose recorded state
  changed since the previous entry of the store), "count" (files recorded), "skipped"
  (when any), "pid"} plus `meta`: {"conv", "turn_id", "turn", "phase", "kind", "summary"}.
  A phase is "start" (a turn's first), "action" (before an action that can change files: it
  opens the action, until the conversation's next entry), "after" (the action ended), "rewind"
  (before a rewind: it opens the rewind), "end" (closes a rewind, or an action a Ctrl-C cut).
- `repeat_snapshot(store, previous, meta, now=None) -> entry`: the entry take_snapshot records
  when nothing changed since `previous`, without running git (the caller knows nothing did).
- `ignored_dirs(store, scope, tracked_ignored(store)) -> frozenset` of the directories no
  snapshot looks into (what a tree watch may leave out) while the rules and that list hold.
- `Limits` comes from settings.snapshots (`limits_of(settings)`).
"""
import os
import stat
import time
from collections import namedtuple

from nagent_errors import ConfigError
from nagent_fs import atomic_write, read_regular
from nagent_paths import home_dir, nagent_home, too_wide, within
from nagent_project import find_project, search_marker
from nagent_shadow_git import (EMPTY_TREE, Git, SnapshotError, parse_status, read_head,
                               set_head, write_commit)
from nagent_snapshot_store import append_journal, last_entry

Scope = namedtuple("Scope", "root mode user_git refused")
Limits = namedtuple("Limits", "max_file_bytes max_files max_bytes keep_days keep_turns")
STATUS = ("status", "--porcelain=v2", "-z", "--untracked-files=all", "--ignore-submodules=all",
          "--no-renames")
INDEX_LIMIT = 256 << 20
# New blobs go into one pack per update-index (git's bulk check-in) instead of a loose file
# each: creating thousands of small files is what made a first snapshot slow. Only there: the
# same setting makes git diff call every file binary.
PACKED = ("-c", "core.bigFileThreshold=1")


class SnapshotRefused(SnapshotError):
    kind = "refused"


def limits_of(settings):
    snap = settings.snapshots
    return Limits(snap.max_file_bytes, snap.max_files, snap.max_bytes, snap.keep_days,
                  snap.keep_turns)


def scope_problem(root, environ):
    """Why `root` is never snapshotted, or None."""
    try:
        home = os.path.realpath(home_dir(environ))
        state = os.path.realpath(nagent_home(environ))
    except ConfigError:
        return "HOME is not an absolute path"
    wide = too_wide(root, home)
    if wide:
        return f"{wide} is never snapshotted"
    if within(state, root, inclusive=True) or within(root, state, inclusive=True):
        return f"{root} holds nagent's own state ({state}) and is never snapshotted"
    return None


def project_scope(cwd, environ, key_names=None):
    real = os.path.realpath(cwd)
    inside = search_marker(real)[1]
    project = None if inside else find_project(real, environ, key_names)
    if project is not None:
        root, mode = project.root, "git"
        marker = os.path.join(root, ".git")
        user_git = marker if stat.S_ISDIR(_lstat_mode(marker)) else None
    else:
        root, mode, user_git = real, "tree", None
    return Scope(root, mode, user_git, inside or scope_problem(root, environ))


def _lstat_mode(path):
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _sync_excludes(store, scope):
    """The project's info/exclude patterns (data, never config) become the shadow's."""
    if scope.user_git is None:
        return
    source = read_regular(os.path.join(scope.user_git, "info", "exclude"), 1 << 20) or b""
    target = os.path.join(store.git.git_dir, "info", "exclude")
    if (read_regular(target, 1 << 20) or b"") != source:
        atomic_write(target, source, 0o600, sync=False)


def _tracked_ignored(store, scope):
    """Paths the project's index tracks that its ignore rules exclude, when that list changed
    since the last snapshot (else []): a copy of the project's index is read by git under the
    shadow GIT_DIR, so the project's config, hooks and repository are never used."""
    if scope.user_git is None:
        return []
    index = os.path.join(scope.user_git, "index")
    try:
        info = os.stat(index)
    except OSError:
        return []
    key = f"{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"
    seen_file = os.path.join(store.path, "tracked-ignored")
    seen = (read_regular(seen_file, INDEX_LIMIT) or b"").split(b"\0")
    if seen and seen[0] == key.encode():
        return []
    data = read_regular(index, INDEX_LIMIT)
    paths = []
    if data:
        copy = os.path.join(store.git.git_dir, "project-index")
        atomic_write(copy, data, 0o600, sync=False)
        git = store.git
        reader = Git(git.git_dir, git.work_tree, dict(git.env, GIT_INDEX_FILE=copy))
        try:
            listed = reader.run("ls-files", "-z", "-c", "-i", "--exclude-standard")
            paths = [os.fsdecode(item) for item in listed.split(b"\0") if item]
        except SnapshotError:
            paths = []  # an index git cannot read alone (split index ...): untracked rules only
    old = {os.fsdecode(item) for item in seen[1:] if item}
    atomic_write(seen_file, b"\0".join([key.encode()] + [os.fsencode(p) for p in paths]), 0o600,
                 sync=False)
    return [path for path in paths if path not in old]


def _behind_link(root, path, dirs):
    """True when a parent of `path` is not a real directory (a symlink, a file, missing): the
    path is then not in the project, whatever lies behind the link."""
    parts = path.split("/")[:-1]
    for end in range(1, len(parts) + 1):
        prefix = "/".join(parts[:end])
        if prefix not in dirs:
            dirs[prefix] = stat.S_ISDIR(_lstat_mode(os.path.join(root, prefix)))
        if not dirs[prefix]:
            return True
    return False


def _classify(root, status, forced, max_file_bytes):
    """(adds, removals, forced removals, skipped) for the paths git status reported."""
    adds, removes, force, skipped, dirs = [], [], [], {}, {}
    tracked = set(status.changed)
    for path in list(status.changed) + list(status.untracked) + list(forced):
        if path.endswith("/"):
            continue  # a nested repository: not entered
        if _behind_link(root, path, dirs):
            if path in tracked:
                force.append(path)
            continue
        try:
            info = os.lstat(os.path.join(root, path))
        except OSError:
            if path in tracked:
                removes.append(path)
            continue
        mode = info.st_mode
        if stat.S_ISREG(mode) and info.st_size > max_file_bytes:
            skipped[path] = [info.st_size, info.st_mtime_ns]
            if path in tracked:
                force.append(path)
        elif stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            adds.append((path, info.st_size if stat.S_ISREG(mode) else 0))
        elif path in tracked:
            (removes if stat.S_ISDIR(mode) else force).append(path)
    return adds, removes, force, skipped


def take_snapshot(store, scope, limits, meta, now=None, record=True):
    git = store.git
    last = last_entry(store)
    head = read_head(git.git_dir)
    _sync_excludes(store, scope)
    if scope.mode == "tree" and head is None:
        _check_tree_size(scope.root, limits)
    status = parse_status(git.run(*STATUS))
    forced = _tracked_ignored(store, scope) if scope.mode == "git" else []
    adds, removes, force, skipped = _classify(scope.root, status, forced, limits.max_file_bytes)
    count = (last or {}).get("count", 0)
    tracked = set(status.changed)
    new_files = sum(1 for path, _ in adds if path not in tracked)
    count = max(0, count + new_files - len(removes) - len(force))
    if scope.mode == "tree":
        copied = sum(size for _, size in adds)
        if count > limits.max_files or copied > limits.max_bytes:
            raise SnapshotRefused(
                "too much to snapshot outside a git repository", scope.root,
                f"{count} files, {copied} bytes to copy; the limits are snapshots.max_files "
                f"{limits.max_files} and snapshots.max_bytes {limits.max_bytes}: raise them, "
                "or run nagent inside a git repository")
    if force:
        git.run(*PACKED, "update-index", "--force-remove", "-z", "--stdin",
                input=b"".join(os.fsencode(p) + b"\0" for p in force))
    if adds or removes:   # removals first: a file that became a directory goes before its files
        git.run(*PACKED, "update-index", "--add", "--remove", "--replace", "-z", "--stdin",
                input=b"".join(os.fsencode(p) + b"\0" for p in removes + [a for a, _ in adds]))
    previous = last or {}
    if adds or removes or force or status.staged or head != previous.get("commit"):
        tree, commit = git.run("write-tree").decode("ascii").strip(), head
        if tree != EMPTY_TREE or head:
            commit = write_commit(git.git_dir, tree, head)
            set_head(git.git_dir, commit)
    else:
        tree, commit = previous.get("tree", EMPTY_TREE), head
    old_skipped = previous.get("skipped") or {}
    changed_skipped = sum(1 for path in set(skipped) | set(old_skipped)
                          if skipped.get(path) != old_skipped.get(path))
    files = changed_skipped
    if tree != previous.get("tree", EMPTY_TREE):
        files += len(adds) + len(removes) + len(force)
    entry = _entry(meta, previous, tree, commit, files, count, skipped, now)
    if record:
        append_journal(store, entry)
    return entry


def repeat_snapshot(store, previous, meta, now=None):
    """The entry `take_snapshot` records when nothing changed since `previous`, the store's last
    entry, recorded without running git: for a caller that knows nothing changed
    (nagent_tree_watch) and that `previous` is still the store's last entry and HEAD."""
    entry = _entry(meta, previous, previous.get("tree", EMPTY_TREE), previous.get("commit"), 0,
                   previous.get("count", 0), previous.get("skipped") or {}, now)
    append_journal(store, entry)
    return entry


def _entry(meta, previous, tree, commit, files, count, skipped, now):
    entry = dict(meta, id=previous.get("id", 0) + 1, time=round(now or time.time(), 3), tree=tree,
                 commit=commit, files=files, count=count, pid=os.getpid())
    if skipped:
        entry["skipped"] = skipped
    return entry


def tracked_ignored(store):
    """The paths (NUL-separated bytes) the project's index tracks although its rules ignore
    them, as the last snapshot found them: what `_tracked_ignored` adds to the store."""
    seen = read_regular(os.path.join(store.path, "tracked-ignored"), INDEX_LIMIT) or b""
    return seen.partition(b"\0")[2]


def ignored_dirs(store, scope, tracked):
    """Directories `take_snapshot` never looks into: wholly ignored by the tree's .gitignore
    files and the project's info/exclude, holding no file the store tracks (git lists only such
    a directory as ignored) nor any of `tracked` (tracked_ignored: what a snapshot adds). Real
    paths (bytes). They stay so while the ignore rules and `tracked` stay as they are."""
    # Without the store's lock (beside a snapshot): git must not take the index's lock either.
    listed = store.git.run("--no-optional-locks", "status", "--porcelain=v2", "-z",
                           "--ignored=traditional", "--untracked-files=normal",
                           "--ignore-submodules=all")
    dirs = {item[2:].rstrip(b"/") for item in listed.split(b"\0")
            if item.startswith(b"! ") and item.endswith(b"/")}
    for path in tracked.split(b"\0"):
        parts = path.split(b"/")
        dirs -= {b"/".join(parts[:end]) for end in range(1, len(parts))}
    root = os.fsencode(scope.root)
    return frozenset(os.path.join(root, path) for path in dirs if path)


def _check_tree_size(root, limits):
    """Before the first snapshot of a tree outside git: stop counting past the limit, so a huge
    directory is refused without reading it whole."""
    count, pending = 0, [root]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name == ".git":
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    else:
                        count += 1
                        if count > limits.max_files:
                            raise SnapshotRefused(
                                "too many files to snapshot outside a git repository", root,
                                f"more than snapshots.max_files ({limits.max_files}); raise it, "
                                "or run nagent inside a git repository")
        except OSError:
            continue
