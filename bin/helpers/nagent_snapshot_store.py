"""Where a project's snapshots live, their lock, and their journal.

Data contract:
- One store per validated project root, `~/.nagent/snapshots/NAME-HASH`
  (nagent_snapshot_layout.store_dir), mode 0700:
    root       the project root it belongs to (checked on every open: a store never serves
               another root)
    git/       the shadow repository (nagent_shadow_git), its index at git/index
    journal    one JSON object per line, appended under the lock (see below)
    lock       the flock that serializes every snapshot and rewind of the project (parallel
               agents in one tree, a --rewind beside a run)
    rewind.json  the plan of a rewind in progress (present only until it is complete)
    archive/   files a rewind moved out of the project, never deleted by nagent
- `open_store(root, environ, key_names, create=True) -> Store`
  (None when it does not exist and `create` is False); SnapshotError when the directory
  belongs to another root.
- `locked(store, timeout)`: a context manager holding the store's flock (SnapshotBusy after
  `timeout` s). Holding it, nobody else runs git on the store, so git lock files left by a
  process killed mid-snapshot (index.lock) are stale and removed on entry.
- Journal entries: {"id", "time", "tree", "commit", "conv", "turn_id", "turn", "phase", "kind",
  "summary", "files", "count", "skipped"} (see nagent_snapshots). An amendment line {"id", "seq"}
  adds the conversation record number of an action's result once it is appended.
  `read_journal(store) -> [entry]` (ids ascending, amendments merged, unparsable lines
  skipped), `last_entry(store)` reads only the tail, `append_journal(store, data)` appends one
  line with one write, `rewrite_journal(store, entries)` replaces it atomically (pruning).
- `read_plan(store)`, `write_plan(store, plan)`, `remove_plan(store)`: the rewind plan file.
"""
import json
import os
from collections import namedtuple
from contextlib import contextmanager

from nagent_errors import BusyError
from nagent_fs import atomic_write, hold_flock, read_regular
from nagent_snapshot_layout import read_root, store_dir
from nagent_shadow_git import Git, SnapshotError, init_git_dir, is_git_dir, shadow_env

TAIL_BYTES = 64 * 1024
STALE_GIT_LOCKS = ("index.lock",)   # a background git gc may hold its own locks: not these

Store = namedtuple("Store", "path root git journal lock plan archive")


class SnapshotBusy(BusyError):
    pass


def open_store(root, environ, key_names=(), create=True):
    path = store_dir(root, environ)
    if not os.path.isdir(path):
        if not create:
            return None
        os.makedirs(path, mode=0o700, exist_ok=True)
    recorded = read_root(path)
    if recorded is None:
        if not create:
            return None
        atomic_write(os.path.join(path, "root"), os.fsencode(root) + b"\n", 0o600, sync=False)
    elif recorded != root:
        raise SnapshotError("the snapshot store belongs to another directory", path,
                            f"it records {recorded}; move it away")
    git_dir = os.path.join(path, "git")
    if not is_git_dir(git_dir):
        if not create:
            return None
        init_git_dir(git_dir)
    git = Git(git_dir, root, shadow_env(environ, git_dir, root, key_names))
    return Store(path, root, git, os.path.join(path, "journal"), os.path.join(path, "lock"),
                 os.path.join(path, "rewind.json"), os.path.join(path, "archive"))


@contextmanager
def locked(store, timeout=60.0):
    fd = hold_flock(store.lock, timeout)
    if fd is None:
        raise SnapshotBusy("the project's snapshot store is busy", store.path,
                           "another nagent is snapshotting or rewinding this project; try again")
    try:
        for name in STALE_GIT_LOCKS:
            try:
                os.unlink(os.path.join(store.git.git_dir, name))
            except FileNotFoundError:
                pass
        yield store
    finally:
        os.close(fd)


def _entries(lines):
    entries, amendments = {}, []
    for line in lines:
        try:
            data = json.loads(line)
        except ValueError:
            continue  # a torn last line of a killed process, or hand damage
        if not isinstance(data, dict) or not isinstance(data.get("id"), int):
            continue
        if "tree" in data:
            entries[data["id"]] = data
        else:
            amendments.append(data)
    for amendment in amendments:
        if amendment["id"] in entries:
            entries[amendment["id"]].update(amendment)
    return [entries[key] for key in sorted(entries)]


def read_journal(store):
    try:
        with open(store.journal, "rb") as handle:
            return _entries(handle.read().splitlines())
    except FileNotFoundError:
        return []


def last_entry(store):
    """The newest entry, from the journal's end (its amendment lines do not matter here)."""
    try:
        with open(store.journal, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            for tail in (TAIL_BYTES // 8, TAIL_BYTES, size):
                handle.seek(max(0, size - tail))
                lines = handle.read().splitlines()
                if tail < size:
                    lines = lines[1:]   # the first line read may be cut
                for line in reversed(lines):
                    found = _entries([line])
                    if found:
                        return found[0]
                if tail >= size:
                    return None
    except FileNotFoundError:
        return None
    return None


def _line(data):
    return (json.dumps(data, separators=(",", ":"), sort_keys=True) + "\n").encode()


def append_journal(store, data):
    fd = os.open(store.journal, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        # A killed writer may have left a line without its end: start on a line of our own.
        size = os.fstat(fd).st_size
        prefix = b""
        if size:
            with open(store.journal, "rb") as handle:
                handle.seek(size - 1)
                prefix = b"" if handle.read(1) == b"\n" else b"\n"
        os.write(fd, prefix + _line(data))
    finally:
        os.close(fd)


def rewrite_journal(store, entries):
    atomic_write(store.journal, b"".join(_line(entry) for entry in entries), 0o600)


def read_plan(store):
    data = read_regular(store.plan, 64 << 20)
    if data is None:
        return None
    try:
        plan = json.loads(data)
    except ValueError:
        return None
    return plan if isinstance(plan, dict) else None


def write_plan(store, plan):
    atomic_write(store.plan, json.dumps(plan).encode(), 0o600)


def remove_plan(store):
    try:
        os.unlink(store.plan)
    except FileNotFoundError:
        pass
