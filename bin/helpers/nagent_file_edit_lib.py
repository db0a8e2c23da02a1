"""Per-file edit identity: a stable file id and the per-shell index of per-file conversations.

Data contract:
- A file id is "dev:inode" of the file's realpath (`file_id_for_path`, nagent_fs's one identity
  rule, symlinks followed). Missing paths, directories and non-regular files raise InputError.
- The index lives at ~/.nagent/file-edits/index-{pid}.json (HOME from `environ`; the path and the
  pid rule are nagent_conversation_layout's, outside conversations/ so no name reaches it), dirs 0700,
  file 0600, and is {"version": 1, "by_file_id": {id: record}} where a record is
  {file_id, path, conversation, created, last_used, size}; times are ISO-8601 UTC strings.
  `load_file_index` never raises: a missing index is empty; a corrupt one (bad JSON, wrong types,
  invalid records) comes back salvaged or empty with a warning "file index was corrupt: ...; rebuilt"
  (the resolver keeps the bad bytes next to it as `<index>.corrupt`).
- Every change happens under an exclusive flock on `<index>.lock` (waiting at most 5 s, then
  BusyError) and is written atomically (temp file + fsync + os.replace).

Resolution rule (how `resolve_file_edit` finds a file's conversation):
1. By file id. If a record has the file's current id, it is the file. If the record's path differs,
   the file was renamed (or reached through another hard link): the path is updated and the
   conversation kept.
2. Else by path. If no record has the id but a record has the same realpath, an editor replaced the
   file by writing a new one (new inode at the same path, e.g. save-via-rename or `vim` backups):
   the record is re-keyed to the new id and the conversation kept. When several records share the
   path, the most recently used wins. Consequence: if you `mv a b` and then create a new `a`, whichever
   of the two is resolved first keeps the old conversation (id wins for `b`, path wins for new `a`).
3. Else a new record with conversation "file-<stem>-<12 hex>".
A file inside nagent's own state (~/.nagent, the NAGENT_CONFIG file) is never an edit target:
`resolve_file_edit` refuses it (RefusedError) before the index is touched, as the write policy
would refuse every write to it.
`lookup_file_edit` answers the same question read-only (for status queries): the record the rule
finds, or None where `resolve_file_edit` would create one; it writes nothing.
`clear_file_edit` gives a file a new conversation name (the caller archives the old one).
`list_file_edits` returns records by last_used (newest first) with "exists": whether the recorded
path still holds the recorded id.
"""
import json
import os
import re
import time
from datetime import datetime, timezone

from nagent_conversation_layout import file_index_path as layout_file_index_path
from nagent_errors import BusyError, InputError, RefusedError
from nagent_fs import atomic_write, regular_file_stat
from nagent_fs import file_id as stat_file_id, file_id_for_path as fs_file_id_for_path
from nagent_paths import in_nagent_state

INDEX_VERSION = 1
LOCK_TIMEOUT_SECONDS = 5.0
_RECORD_TEXT_FIELDS = ("file_id", "path", "conversation")
_IS_DIRECTORY = ("is a directory", "give a file")


def file_id_for_path(path) -> str:
    return fs_file_id_for_path(path, _IS_DIRECTORY)


def file_index_path(pid: str, environ=None) -> str:
    return layout_file_index_path(pid, environ)  # the conversation layout's one pid rule


def empty_index() -> dict:
    return {"version": INDEX_VERSION, "by_file_id": {}}


def _valid_record(key, record):
    if not isinstance(record, dict):
        return False
    if not all(isinstance(record.get(name), str) and record.get(name) for name in _RECORD_TEXT_FIELDS):
        return False
    if record["file_id"] != key or not os.path.isabs(record["path"]):
        return False
    return all(isinstance(record.get(name, ""), str) for name in ("created", "last_used")) \
        and isinstance(record.get("size", 0), int)


def parse_file_index(text) -> tuple[dict, str | None]:
    """Pure: index text -> (index, warning). Keeps every valid record of a damaged index."""
    def rebuilt(why):
        return empty_index(), f"file index was corrupt: {why}; rebuilt"
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as error:
        return rebuilt(f"not JSON ({error.__class__.__name__})")
    if not isinstance(data, dict):
        return rebuilt("top level is not an object")
    if data.get("version", INDEX_VERSION) != INDEX_VERSION:
        return rebuilt(f"unsupported version {data.get('version')!r}")
    records = data.get("by_file_id")
    if not isinstance(records, dict):
        return rebuilt("by_file_id is not an object")
    index = empty_index()
    dropped = 0
    for key, record in records.items():
        if _valid_record(key, record):
            index["by_file_id"][key] = dict(record)
        else:
            dropped += 1
    if dropped:
        return index, f"file index was corrupt: {dropped} invalid record(s) dropped; rebuilt"
    return index, None


def load_file_index(path) -> tuple[dict, str | None]:
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        return empty_index(), None
    except OSError as error:
        return empty_index(), f"file index was corrupt: unreadable ({error.strerror}); rebuilt"
    return parse_file_index(raw)


def _iso(now):
    if now is None:
        now = time.time()
    if isinstance(now, str):
        return now
    if isinstance(now, datetime):
        moment = now if now.tzinfo else now.replace(tzinfo=timezone.utc)
    else:
        moment = datetime.fromtimestamp(float(now), timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_conversation_name(path) -> str:
    import uuid  # only new records pay for it
    stem = os.path.splitext(os.path.basename(path))[0]
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", stem).strip("-.")[:40] or "file"
    return f"file-{stem}-{uuid.uuid4().hex[:12]}"


def find_record(index, real, file_id):
    """Pure: (record key or None, how) by the resolution rule; how is "id", "path" or None."""
    records = index["by_file_id"]
    if file_id in records:
        return file_id, "id"
    same_path = [key for key, record in records.items() if record["path"] == real]
    if same_path:
        return max(same_path, key=lambda key: records[key].get("last_used", "")), "path"
    return None, None


def _apply(index, real, file_id, size, stamp, fresh_conversation=False):
    """Pure-ish (mutates `index`): find or create the record for the file, return (record, old)."""
    records = index["by_file_id"]
    key, how = find_record(index, real, file_id)
    if key is None:
        record = {"file_id": file_id, "path": real, "conversation": new_conversation_name(real),
                  "created": stamp}
        old = None
    else:
        record = records.pop(key)
        record["file_id"], record["path"] = file_id, real
        old = record["conversation"]
        if fresh_conversation:
            record["conversation"] = new_conversation_name(real)
    record.update(last_used=stamp, size=size)
    record.setdefault("created", stamp)
    records[file_id] = record
    return dict(record), old, how


def _ensure_dir(path):
    """Create `path` and any missing parents 0700 (os.makedirs applies `mode` to the leaf only)."""
    if os.path.isdir(path):
        return
    parent = os.path.dirname(path)
    if parent != path:
        _ensure_dir(parent)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass


def _index_bytes(index):
    return (json.dumps(index, indent=2, ensure_ascii=False, sort_keys=True) + "\n").encode("utf-8")


class _IndexLock:
    """Exclusive flock on `<index>.lock`, polled so the wait is bounded."""

    def __init__(self, index_path, timeout):
        self.path = index_path + ".lock"
        self.timeout = timeout
        self.fd = None

    def __enter__(self):
        import fcntl
        _ensure_dir(os.path.dirname(self.path))
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return self
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(self.fd)
                    raise BusyError("file index is busy", self.path,
                                    "another nagent is updating it; retry") from None
                time.sleep(0.02)

    def __exit__(self, *exc):
        os.close(self.fd)  # closing the descriptor releases the flock
        return False


def _update(path, pid, environ, now, fresh_conversation, lock_timeout):
    real, st = regular_file_stat(path, _IS_DIRECTORY)
    file_id, size = stat_file_id(st), st.st_size
    index_path = file_index_path(pid, environ)
    try:
        with _IndexLock(index_path, lock_timeout):
            index, warning = load_file_index(index_path)
            if warning and os.path.exists(index_path):
                os.replace(index_path, index_path + ".corrupt")
            record, old, how = _apply(index, real, file_id, size, _iso(now), fresh_conversation)
            atomic_write(index_path, _index_bytes(index), 0o600)
    except OSError as error:
        raise InputError("cannot update file index", index_path, error.strerror) from None
    return record, old, how, warning


def _edit_target(path, environ):
    """(realpath, stat) of an edit target: a regular file outside nagent's own state."""
    real, st = regular_file_stat(path, _IS_DIRECTORY)
    if in_nagent_state(real, environ):
        raise RefusedError("nagent's own state is not an edit target", path,
                           "~/.nagent and the NAGENT_CONFIG file are changed by hand, never by a model")
    return real, st


def resolve_file_edit(path, pid, environ=None, now=None, *, lock_timeout=LOCK_TIMEOUT_SECONDS) -> dict:
    _edit_target(path, environ)
    record, _old, how, warning = _update(path, pid, environ, now, False, lock_timeout)
    record["matched_by"] = how or "new"
    if warning:
        record["warning"] = warning
    return record


def lookup_file_edit(path, pid, environ=None) -> dict | None:
    """The record `resolve_file_edit` would use for `path` (same checks, same rule), or None when
    it would create one; writes nothing (no index, no lock file, no directory)."""
    real, st = _edit_target(path, environ)
    index, warning = load_file_index(file_index_path(pid, environ))
    key, how = find_record(index, real, stat_file_id(st))
    if key is None:
        return None
    record = dict(index["by_file_id"][key], matched_by=how)
    if warning:
        record["warning"] = warning
    return record


def clear_file_edit(path, pid, environ=None, *, now=None, lock_timeout=LOCK_TIMEOUT_SECONDS) -> dict:
    record, old, _how, warning = _update(path, pid, environ, now, True, lock_timeout)
    result = {"old": old, "new": record["conversation"], "record": record}
    if warning:
        result["warning"] = warning
    return result


def _holds(path, file_id):
    try:
        return file_id_for_path(path) == file_id
    except InputError:
        return False


def list_file_edits(pid, environ=None) -> list[dict]:
    index, _warning = load_file_index(file_index_path(pid, environ))
    records = [dict(record, exists=_holds(record["path"], record["file_id"]))
               for record in index["by_file_id"].values()]
    return sorted(records, key=lambda record: record.get("last_used", ""), reverse=True)
