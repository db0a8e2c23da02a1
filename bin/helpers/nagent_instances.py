"""Running instances: one small run file per running nagent (sub-agents included).

Data contract
-------------
* `run_dir(environ)` is `~/.nagent/run/` (0700). A running nagent keeps `PID.json` there (0600),
  replaced whole on each change (a temp file swapped in, nagent_fs.atomic_write swap=True: a
  few changes a turn, each a rename over the file would cost a data flush on ext4; no fsync: it
  describes a live process and is worthless after a crash). Fields:
      version      1
      pid          the OS pid
      start_ticks  the process start time from /proc/PID/stat (clock ticks since boot): with
                   the pid it names the process, so a reused pid is never taken for it
      started      UTC start time, ISO 8601 ("...Z"); `started_at` the same as epoch seconds
      conversation the conversation file it appends to (its lock holder)
      parent_conversation, parent_pid   the parent nagent of a sub-agent (else null)
      depth        sub-agent depth (0: started by the user)
      invocation   "user" or "delegated"
      action       what it does now, one line ("model call 3", "shell: pytest -q",
                   "agents: 3 running"), or null
      tokens       {"input": N, "output": N} of this run so far (sub-agents folded in as they end)
      calls        model calls of this run so far
      updated      epoch seconds of the last change
* `RunFile(path, record)`: `RunFile.create(environ, **fields)` writes it, `update(**changes)`
  rewrites it only when something changed, `remove()` deletes it (idempotent). Failures to
  write are ignored: a run never fails because its run file could not be kept.
* `list_instances(environ)` -> the run files of running nagents, oldest first. A file is stale,
  and removed on the way, unless its pid lives with the start ticks it records (a file without
  them, or whose pid now belongs to another process, names no run) AND that process holds the
  lock of the conversation it names (nagent_conversation_lock.is_busy): the file is nagent's
  word, the lock is the fact. A leftover temp file of a dead writer is removed too. Unreadable
  or malformed files are skipped (and removed once their pid is dead).
* `instance_tree(instances)` -> roots, each a copy with "children" (the same shape), children
  under the instance whose pid is their parent_pid (else whose conversation is their
  parent_conversation); an instance whose parent is not running is a root.
* `read_run_file(pid, environ)` -> the run file of `pid` as it is now (no liveness check: for a
  parent watching its own children), or None.
* `running_on(conversation, environ)` -> the live instance holding that conversation, or None;
  `by_pid(pid, environ)` -> the live instance with that pid, or None.
"""
import json
import os
import time

from nagent_conversation_lock import is_busy
from nagent_fs import atomic_write, read_json_object
from nagent_paths import nagent_home
from nagent_pids import start_ticks

VERSION = 1
MAX_RUN_FILE = 1 << 16   # run files are a few hundred bytes; a planted big one is not read whole


def run_dir(environ=None):
    return os.path.join(nagent_home(environ), "run")


def run_file_path(pid, environ=None):
    return os.path.join(run_dir(environ), f"{int(pid)}.json")


def utc_iso(epoch):
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


class RunFile:
    """This process's run file (see the module docstring)."""

    def __init__(self, path, record):
        self.path = path
        self.record = record

    @classmethod
    def create(cls, environ=None, **fields):
        now = time.time()
        pid = os.getpid()
        record = {"version": VERSION, "pid": pid, "start_ticks": start_ticks(pid),
                  "started": utc_iso(now), "started_at": round(now, 3), "conversation": None,
                  "parent_conversation": None, "parent_pid": None, "depth": 0,
                  "invocation": "user", "action": None, "tokens": {"input": 0, "output": 0},
                  "calls": 0, "updated": round(now, 3)}
        record.update(fields)
        run_file = cls(run_file_path(pid, environ), record)
        try:
            os.makedirs(os.path.dirname(run_file.path), mode=0o700, exist_ok=True)
        except OSError:
            run_file.path = None
        run_file._write()
        return run_file

    def _write(self):
        if self.path is None:
            return
        data = json.dumps(self.record, ensure_ascii=False, sort_keys=True).encode("utf-8")
        try:
            atomic_write(self.path, data, 0o600, sync=False, swap=True)
        except OSError:
            pass   # a full disk or a read-only home: the run goes on without a run file

    def update(self, **changes):
        if all(self.record.get(key) == value for key, value in changes.items()):
            return
        self.record.update(changes, updated=round(time.time(), 3))
        self._write()

    def remove(self):
        path, self.path = self.path, None
        if path is not None:
            try:
                os.unlink(path)
            except OSError:
                pass


def _running(record):
    """True while the run file's pid is the process that wrote it (the same start ticks: a file
    without them names no process) and that process holds its conversation's lock (a live pid
    alone says nothing: a file can name any process)."""
    ticks, conversation = record.get("start_ticks"), record.get("conversation")
    if not isinstance(ticks, int) or isinstance(ticks, bool) or start_ticks(record["pid"]) != ticks:
        return False
    return isinstance(conversation, str) and os.path.isabs(conversation) and is_busy(conversation)


def _temp_pid(name):
    """The pid in a temp file name ".PID.json.HEX.tmp" of atomic_write, or None."""
    parts = name.split(".")
    return int(parts[1]) if len(parts) == 5 and parts[1].isdigit() and parts[-1] == "tmp" else None


def _remove(path):
    try:
        os.unlink(path)
    except OSError:
        pass


def list_instances(environ=None):
    folder = run_dir(environ)
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    found = []
    for name in names:
        path = os.path.join(folder, name)
        if name.startswith("."):
            pid = _temp_pid(name)
            if pid is not None and start_ticks(pid) is None:
                _remove(path)
            continue
        stem, dot, ext = name.partition(".")
        if ext != "json" or not stem.isdigit():
            continue
        pid = int(stem)
        record = _load(path)
        if not isinstance(record, dict) or record.get("pid") != pid:
            if start_ticks(pid) is None:
                _remove(path)
            continue
        if not _running(record):
            _remove(path)   # a crashed run, a pid taken by another process since, or no run
            continue
        found.append(record)
    found.sort(key=lambda item: (item.get("started_at") or 0, item["pid"]))
    return found


def instance_tree(instances):
    by_pid = {item["pid"]: dict(item, children=[]) for item in instances}
    by_conversation = {item["conversation"]: item["pid"] for item in instances if item.get("conversation")}
    parents = {}
    for item in instances:
        parent = item.get("parent_pid")
        if parent not in by_pid:
            parent = by_conversation.get(item.get("parent_conversation"))
        parents[item["pid"]] = parent if parent in by_pid else None
    roots = []
    for item in instances:
        node, parent = by_pid[item["pid"]], parents[item["pid"]]
        seen, above = {item["pid"]}, parent
        while above is not None and above not in seen:   # hand-edited files may form a loop
            seen.add(above)
            above = parents[above]
        if parent is None or above is not None:
            roots.append(node)
        else:
            by_pid[parent]["children"].append(node)
    return roots


def _load(path):
    """A run file's record, or None (not a regular file, unreadable, not a JSON object)."""
    return read_json_object(path, MAX_RUN_FILE)


def read_run_file(pid, environ=None):
    return _load(run_file_path(pid, environ))


def running_on(conversation, environ=None):
    target = os.path.realpath(conversation)
    for item in list_instances(environ):
        if item.get("conversation") and os.path.realpath(item["conversation"]) == target:
            return item
    return None


def by_pid(pid, environ=None):
    for item in list_instances(environ):
        if item["pid"] == int(pid):
            return item
    return None
