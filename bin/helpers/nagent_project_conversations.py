"""Conversations that follow the project: which conversation started in which directory, so that
`nagent -c` and `nagent --resume` find this project's conversations without reading every
conversation file.

Data contract
-------------
* The origin of a conversation, its own record: the meta record a user's main conversation
  starts with (nagent_loop.start_conversation) carries "origin": {"root": ROOT, "id": 32 hex
  digits, "started": ISO time}. ROOT is the project root (nagent_project.find_project, the one
  validated root) of the directory the conversation started in, or that directory (realpath)
  outside a project (nagent_context.InitialContext.root; nagent_resume.here for a command's
  working directory). `new_origin(root)` makes one; `origin_of(meta)` reads one back from a meta dict (None when missing or malformed);
  `origin_in(records)` from the first meta record of parsed records.
* The index, nagent's own state, one small file per conversation of a ROOT:
      ~/.nagent/projects/{sha256(ROOT)[:32]}/{NAME}   JSON {"root", "id", "started"}, 0600
  whose mtime is when a run last used conversation NAME. `record_use(path, origin, environ)`
  writes it, or only touches it when it already says the same, at the start of every run of a
  user's main conversation. It is a cache and a convenience: a failure to write it is ignored.
* `recent(root, environ, exclude=(), since=None, limit=None)` -> [Recent(name, path, used,
  started)], most recently used first. The index only nominates: each entry is checked against
  the conversation's own meta record (the same root and id), and an entry whose conversation is
  gone, was replaced (cleared, loaded over, started anew under the same name) or started in
  another directory is dropped, and its index file removed. So a conversation of another
  project is never returned, whatever the index says. `since` (epoch seconds) drops entries
  used earlier, `exclude` paths to leave out, `limit` stops after that many.
Reads one directory listing, one stat per entry and the head of each entry it checks.
"""
import hashlib
import json
import os
from collections import namedtuple

from nagent_conversation_format import utc_now
from nagent_conversation_head import session_meta
from nagent_conversation_layout import conversation_path, validate_name
from nagent_errors import UsageError
from nagent_fs import atomic_write, read_json_object, read_regular
from nagent_paths import nagent_home

Recent = namedtuple("Recent", "name path used started")
ENTRY_LIMIT = 4096   # bytes of an index file


def new_origin(root):
    return {"root": root, "id": os.urandom(16).hex(), "started": utc_now()}


def origin_of(meta):
    origin = meta.get("origin") if isinstance(meta, dict) else None
    if not isinstance(origin, dict):
        return None
    if not all(isinstance(origin.get(key), str) and origin[key] for key in ("root", "id")):
        return None
    return {"root": origin["root"], "id": origin["id"], "started": str(origin.get("started") or "")}


def origin_in(records):
    for record in records:
        if record.kind == "meta":
            try:
                return origin_of(json.loads(record.body))
            except ValueError:
                return None
    return None


def index_dir(root, environ=None):
    digest = hashlib.sha256(root.encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return os.path.join(nagent_home(environ), "projects", digest)


def _entry_bytes(origin):
    return json.dumps({"root": origin["root"], "id": origin["id"], "started": origin["started"]},
                      sort_keys=True).encode("utf-8", "surrogateescape")


def record_use(path, origin, environ=None):
    if origin is None:
        return
    folder = index_dir(origin["root"], environ)
    entry = os.path.join(folder, os.path.basename(path))
    data = _entry_bytes(origin)
    try:
        if read_regular(entry, ENTRY_LIMIT) == data:
            os.utime(entry)
            return
        os.makedirs(folder, mode=0o700, exist_ok=True)
        atomic_write(entry, data, 0o600, sync=False)
    except OSError:
        pass   # the index is a convenience: the conversation itself is written


def _drop(entry):
    try:
        os.unlink(entry)
    except OSError:
        pass


def _candidates(folder):
    """(mtime, name) of the index files in `folder`, newest first."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = []
    for name in names:
        try:
            validate_name(name)   # leaves out temp files of atomic writes
            found.append((os.stat(os.path.join(folder, name)).st_mtime, name))
        except (UsageError, OSError):
            continue
    found.sort(reverse=True)
    return found


def recent(root, environ=None, exclude=(), since=None, limit=None):
    folder = index_dir(root, environ)
    excluded = {os.path.abspath(path) for path in exclude}
    found = []
    for used, name in _candidates(folder):
        if since is not None and used < since:
            break
        path = conversation_path(name, environ)
        if path in excluded:
            continue
        entry = os.path.join(folder, name)
        recorded = read_json_object(entry, ENTRY_LIMIT)
        origin = origin_of(session_meta(path))
        if (recorded is None or origin is None or origin["root"] != root
                or recorded.get("root") != root or recorded.get("id") != origin["id"]):
            _drop(entry)   # gone, replaced, or not this directory's: never nominated again
            continue
        found.append(Recent(name, path, used, origin["started"]))
        if limit is not None and len(found) >= limit:
            break
    return found
