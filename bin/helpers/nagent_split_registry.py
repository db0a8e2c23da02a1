"""The split registry: nagent's own record of every split it made for one conversation.

Authority over splits comes from here, never from files the model can write (an index.json, a
segment, a split directory): a split is reused, patched, or its segments written in a per-file
edit session only when this record says nagent made it.

Data contract:
- The registry lives in the conversation's state directory (the caller passes the directory,
  nagent_conversation_lifecycle.side_dir of the conversation; nothing the model can write: the
  write policy refuses ~/.nagent) as `split-registry.json`, mode 0600, written atomically by the
  one writer that holds the conversation's lock:
    {"version": 1, "root": "/tmp/nagent-splits-XXXXXXXX" or null,
     "splits": [{"index": realpath of DIR/index.json, "directory": realpath of DIR,
                 "source": realpath, "source_id": "dev:inode", "source_sha256": hex,
                 "index_sha256": hex of index.json's bytes, "created": ISO-8601 UTC,
                 "updated": ISO-8601 UTC, "segments": [{"file": name, "sha256": hex}]}]}
  `root` is a private directory (tempfile.mkdtemp: 0700, ours, unpredictable name) under the
  scratch temp root; every split is a private directory inside it.
- `load(state_dir) -> dict` never raises for content: a missing registry is empty; a corrupt one
  is moved aside to `split-registry.json.corrupt` and comes back empty (it then grants nothing).
  `save(state_dir, registry)` writes it. Plain dicts; the functions below are pure unless noted.
- `private_dir_problem(path, parent=None) -> str | None` (I/O: lstat): why `path` is not a
  directory nagent can trust (a symlink, or reached through one: recorded paths are realpaths;
  not a directory, not owned by us, open to group/other, not directly inside `parent`).
- `ensure_root(registry, scratch_root, roots) -> path` (I/O): the registry's root when it is still
  private and inside one of `roots`, else a fresh mkdtemp under `scratch_root`, recorded.
- `new_split_dir(root, source) -> path` (I/O): a fresh private directory for one split.
- `find_by_index(registry, index_path)`, `splits_of(registry, source)`: lookups by realpath.
- `granted_segments(registry, target, target_id) -> frozenset` of segment realpaths of splits
  whose source is the target (by realpath or file id): the write grant of a per-file session.
- `split_dir_problem(directory)`: private_dir_problem of the split directory and of its root.
- `check_split(entry) -> SplitCheck(unsafe, index_changed, edited)` (I/O): compares the split's
  files with the record: `unsafe` is a reason the directory or its root (its parent) is not
  private to us any more, `edited` lists
  segments whose bytes differ from their recorded hash (or are missing): unmerged work.
- `entry_from_files(source, source_id, directory, index_path, segment_names, expected_sha256)`
  (I/O) -> a new entry built from the files on disk, after checking that the segments
  concatenate to bytes whose sha256 is `expected_sha256`; InputError otherwise.
- `put(registry, entry)` adds or replaces (by index path); `drop(registry, entry)` removes.
"""
import json
import os
import stat
import tempfile
from dataclasses import dataclass
from datetime import datetime, timezone

from nagent_errors import InputError
from nagent_fs import atomic_write
from nagent_paths import within_any

REGISTRY_NAME = "split-registry.json"
VERSION = 1
_CHUNK = 1 << 20


@dataclass(frozen=True)
class SplitCheck:
    unsafe: str | None
    index_changed: bool
    edited: tuple


def now_iso():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def empty():
    return {"version": VERSION, "root": None, "splits": []}


def registry_path(state_dir):
    return os.path.join(state_dir, REGISTRY_NAME)


def _valid_entry(entry):
    text = ("index", "directory", "source", "source_sha256", "index_sha256")
    if not isinstance(entry, dict) or not all(isinstance(entry.get(key), str) for key in text):
        return False
    segments = entry.get("segments")
    return isinstance(segments, list) and all(
        isinstance(seg, dict) and isinstance(seg.get("file"), str) and "/" not in seg["file"]
        and seg["file"] not in ("", ".", "..") and isinstance(seg.get("sha256"), str)
        for seg in segments)


def parse(raw):
    """Registry bytes -> dict, or None when they are not a valid registry."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != VERSION:
        return None
    root, splits = data.get("root"), data.get("splits")
    if not (root is None or isinstance(root, str)) or not isinstance(splits, list):
        return None
    if not all(_valid_entry(entry) for entry in splits):
        return None
    return {"version": VERSION, "root": root, "splits": splits}


def load(state_dir):
    path = registry_path(state_dir)
    try:
        with open(path, "rb", opener=_no_follow) as handle:
            raw = handle.read()
    except FileNotFoundError:
        return empty()
    except OSError:
        raw = b""
    data = parse(raw)
    if data is None:
        try:
            os.replace(path, path + ".corrupt")
        except OSError:
            pass
        return empty()
    return data


def save(state_dir, registry):
    data = (json.dumps(registry, indent=1, sort_keys=True) + "\n").encode("utf-8")
    try:
        atomic_write(registry_path(state_dir), data, 0o600)
    except OSError as error:
        raise InputError("cannot record the split", registry_path(state_dir),
                         error.strerror or str(error)) from None


def _no_follow(path, flags):
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)


# -- private directories ----------------------------------------------------------------------

def private_dir_problem(path, parent=None):
    try:
        st = os.lstat(path)
    except OSError as error:
        return f"cannot inspect it: {error.strerror}"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symlink"
    if os.path.realpath(path) != path:
        return "its path goes through a symlink"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.geteuid():
        return "it is not owned by this user"
    if stat.S_IMODE(st.st_mode) & 0o077:
        return "it is open to other users"
    if parent is not None and os.path.dirname(path) != parent:
        return "it is not inside nagent's split directory"
    return None


def ensure_root(registry, scratch_root, roots):
    root = registry.get("root")
    if root and within_any(root, roots) and private_dir_problem(root) is None:
        return root
    try:
        root = os.path.realpath(tempfile.mkdtemp(prefix="nagent-splits-", dir=scratch_root))
    except OSError as error:
        raise InputError("cannot create a private split directory", scratch_root,
                         error.strerror or str(error)) from None
    registry["root"] = root
    return root


def new_split_dir(root, source):
    stem = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in os.path.basename(source))
    try:
        return os.path.realpath(tempfile.mkdtemp(prefix=(stem.lstrip(".") or "file")[:60] + "-",
                                                 dir=root))
    except OSError as error:
        raise InputError("cannot create a split directory", root, error.strerror or str(error)) from None


# -- lookups ------------------------------------------------------------------------------------

def find_by_index(registry, index_path):
    real = os.path.realpath(index_path)
    for entry in registry["splits"]:
        if entry["index"] == real:
            return entry
    return None


def splits_of(registry, source):
    return [entry for entry in registry["splits"] if entry["source"] == source]


def granted_segments(registry, target, target_id):
    real = os.path.realpath(target) if target else None
    granted = set()
    for entry in registry["splits"]:
        if entry["source"] == real or (target_id and entry.get("source_id") == target_id):
            granted.update(os.path.join(entry["directory"], seg["file"]) for seg in entry["segments"])
    return frozenset(granted)


def put(registry, entry):
    registry["splits"] = [e for e in registry["splits"] if e["index"] != entry["index"]] + [entry]


def drop(registry, entry):
    registry["splits"] = [e for e in registry["splits"] if e["index"] != entry["index"]]


# -- the files against the record ---------------------------------------------------------------

def file_sha256(path, sink=None):
    """sha256 of a regular file opened without following a final symlink; `sink` (a hash
    object) is fed the same bytes. OSError for a missing, linked or special file."""
    import hashlib
    digest = hashlib.sha256()
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise OSError(0, "not a regular file")
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
            if sink is not None:
                sink.update(chunk)
    return digest.hexdigest()


def split_dir_problem(directory):
    """Why a recorded split directory, or the private root holding it, is no longer ours."""
    root_problem = private_dir_problem(os.path.dirname(directory))
    if root_problem:
        return f"its root {os.path.dirname(directory)}: {root_problem}"
    return private_dir_problem(directory)


def check_split(entry):
    directory = entry["directory"]
    unsafe = split_dir_problem(directory)
    if unsafe:
        return SplitCheck(unsafe, True, ())
    try:
        index_changed = file_sha256(entry["index"]) != entry["index_sha256"]
    except OSError:
        index_changed = True
    edited = []
    for seg in entry["segments"]:
        try:
            same = file_sha256(os.path.join(directory, seg["file"])) == seg["sha256"]
        except OSError:
            same = False
        if not same:
            edited.append(seg["file"])
    return SplitCheck(None, index_changed, tuple(edited))


def entry_from_files(source, source_id, directory, index_path, segment_names, expected_sha256,
                     created=None):
    import hashlib
    whole = hashlib.sha256()
    segments = []
    try:
        for name in segment_names:
            if not isinstance(name, str) or "/" in name or name in ("", ".", ".."):
                raise InputError("split tool named an invalid segment", repr(name))
            segments.append({"file": name, "sha256": file_sha256(os.path.join(directory, name), whole)})
        index_sha256 = file_sha256(index_path)
    except OSError as error:
        raise InputError("cannot read the split nagent just made", directory,
                         error.strerror or str(error)) from None
    if whole.hexdigest() != expected_sha256:
        raise InputError("the split's segments do not add up to the source", directory,
                         "the file changed while it was split; read it again")
    stamp = now_iso()
    return {"index": index_path, "directory": directory, "source": source, "source_id": source_id,
            "source_sha256": expected_sha256, "index_sha256": index_sha256,
            "created": created or stamp, "updated": stamp, "segments": segments}
