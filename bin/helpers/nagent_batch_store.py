"""A batch's output folder: results, collected attempts, task locks, resume.

Layout of OUT (one folder to read, grep and archive):

    results.jsonl            one line per finished attempt, appended, never rewritten; the last
                             line of an id is that task's result
    tasks/ID/ATTEMPT/        what one attempt left: result.json (its results line, written
                             last), conversation (+ side/), diff.patch, setup.log, check.log,
                             nagent.log; .collected once its line is in results.jsonl
    work/                    workspaces of attempts run on this machine (ID.ATTEMPT/) and their
                             manifests (ID.ATTEMPT.json), until collected
    locks/ID.lock            flock held by whatever runs an attempt of ID (and every process it
                             started): a task never runs twice at once over one folder

Data contract:
- `batch_tag(out)` -> "batch-" + 8 hex of the folder's realpath: the prefix of the names of the
  batch's conversations (`TAG-ID-TOKEN`), so two batches never share one.
- `read_results(out, stored=False)` -> `Results(latest, lines, cost, warnings)`: `latest`
  maps id -> its last valid line (with `stored`, attempts stored in OUT/tasks but never
  appended count too, after the file's lines, oldest first), `lines` every valid line, `cost`
  the sum of every line's cost_usd (what the folder has spent), `warnings` one text per line
  that is not a result (hand edits, a line cut by a kill): such lines are skipped, so their
  task counts as not done. A line is valid when it is a JSON object with a task id
  (nagent_batch_tasks.TASK_ID_RE), an attempt and a status of STATUSES.
- `pending(tasks, results, retry_failed)` -> (tasks to run, notes): a task runs when it has
  no result, its last one is "interrupted", it failed and `retry_failed`, or its result was
  for a different definition (task_sha differs; a note says so). A result with no task_sha
  (edited by hand) stands.
- `store(out, outcome)` writes tasks/ID/ATTEMPT/ (files first, result.json last, each atomic)
  and returns the results line with its paths (relative to OUT): conversation, diff_file,
  folder. `append(out, line)` appends one line under an flock, after a newline if a killed
  writer left the file without one, then marks the attempt's folder collected.
  `collect(out)` appends the lines of stored attempts never appended (no mark: what --run-one
  processes left, or a batch killed between storing and appending); returns them. A line the
  user deleted from results.jsonl is not brought back: deleting it runs the task again.
- `task_lock(out, task_id)` -> an open fd holding the task's flock, or None when held
  elsewhere. `write_manifest(workdir, ws, task, attempt, conversation)` records a workspace
  made under the workdir before git writes anything in it (`manifest_path(workdir, task_id,
  attempt)`). `recover(out, workdir, environ, make_outcome)` turns each manifest whose task
  lock is free and whose attempt stored no result into an "interrupted" result
  (`make_outcome(manifest, ws)`: the diff, the conversation and its totals), and removes its
  workspace: a killed batch loses nothing and leaves no workspace behind once run again (one
  it cannot remove keeps its manifest, and the next batch tries again; the result is stored
  once). An
  attempt that stored its result (result.json) is never made "interrupted". A manifest naming
  a directory outside the workdir is ignored. A manifest a kill cut short (its temp file) goes,
  with its workspace while that is still the empty directory `create` made; so does such a
  directory whose manifest the kill came before.
  `recover_task(out, workdir, task_id, environ, make_outcome)` does the same for one task whose
  lock the caller holds: an attempt whose process still held the lock at `recover`'s look.
"""
import fcntl
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass

import nagent_batch_workspace as workspace
from nagent_batch_tasks import TASK_ID_RE, conversation_name, task_sha
from nagent_fs import atomic_write

STATUSES = ("ok", "failed", "interrupted")
ATTEMPT_RE = re.compile(r"[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}")
RESULTS = "results.jsonl"
COLLECTED = ".collected"   # in an attempt's folder once its line is in results.jsonl


@dataclass(frozen=True)
class Results:
    latest: dict
    lines: tuple
    cost: float
    warnings: tuple


def batch_tag(out):
    """The batch's tag in conversation names: one per output folder."""
    return "batch-" + hashlib.sha256(os.path.realpath(out).encode("utf-8", "surrogateescape")).hexdigest()[:8]


def _valid(line):
    return (isinstance(line, dict) and isinstance(line.get("id"), str)
            and TASK_ID_RE.fullmatch(line["id"]) is not None and isinstance(line.get("attempt"), str)
            and line.get("status") in STATUSES)


def read_results(out, stored=False):
    latest, lines, warnings, cost = {}, [], [], 0.0
    try:
        with open(os.path.join(out, RESULTS), encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except FileNotFoundError:
        text = ""
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except ValueError:
            line = None
        if not _valid(line):
            warnings.append(f"{RESULTS} line {number} is not a result; ignored")
            continue
        lines.append(line)
    if stored:
        have = {(line["id"], line["attempt"]) for line in lines}
        lines += sorted((line for line in _uncollected(out) if (line["id"], line["attempt"]) not in have),
                        key=lambda line: line["attempt"])
    for line in lines:
        latest[line["id"]] = line
        if isinstance(line.get("cost_usd"), (int, float)) and not isinstance(line["cost_usd"], bool):
            cost += line["cost_usd"]
    return Results(latest, tuple(lines), cost, tuple(warnings))


def pending(tasks, results, retry_failed=False):
    todo, notes = [], []
    for task in tasks:
        line = results.latest.get(task.id)
        if line is None or line["status"] == "interrupted":
            todo.append(task)
        elif line.get("task_sha") not in (None, task_sha(task)):
            notes.append(f"task {task.id} changed since its result: run again")
            todo.append(task)
        elif line["status"] == "failed" and retry_failed:
            todo.append(task)
    return todo, notes


def _folder(out, task_id, attempt):
    if not TASK_ID_RE.fullmatch(task_id) or not ATTEMPT_RE.fullmatch(attempt):
        raise ValueError(f"not a task id and attempt: {task_id!r} {attempt!r}")
    return os.path.join(out, "tasks", task_id, attempt)


def store(out, outcome):
    result = dict(outcome.result)
    folder = _folder(out, result["id"], result["attempt"])
    os.makedirs(os.path.join(folder, "side"), mode=0o700, exist_ok=True)
    for name, data in sorted(outcome.files.items()):
        atomic_write(os.path.join(folder, name), data, 0o600, sync=False)
    relative = os.path.relpath(folder, out)
    result.update({"folder": relative, "diff_file": None, "conversation": None})
    for key, name in (("diff_file", "diff.patch"), ("conversation", "conversation")):
        if name in outcome.files:
            result[key] = os.path.join(relative, name)
    atomic_write(os.path.join(folder, "result.json"), _line(result).encode("utf-8"), 0o600)
    return result


def _line(result):
    return json.dumps(result, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"


def append(out, line):
    fd = os.open(os.path.join(out, RESULTS), os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        size = os.fstat(fd).st_size
        data = _line(line).encode("utf-8")
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    _mark_collected(out, line)


def _mark_collected(out, line):
    try:
        folder = _folder(out, line["id"], line["attempt"])
    except ValueError:
        return
    if os.path.isdir(folder):
        atomic_write(os.path.join(folder, COLLECTED), b"", 0o600, sync=False)


def _uncollected(out):
    """The results lines of the attempts stored in OUT/tasks whose line was never appended."""
    root = os.path.join(out, "tasks")
    for task_id in sorted(os.listdir(root)) if os.path.isdir(root) else ():
        folder = os.path.join(root, task_id)
        for attempt in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
            if os.path.exists(os.path.join(folder, attempt, COLLECTED)):
                continue
            line = _stored_line(os.path.join(folder, attempt), task_id, attempt)
            if line is not None:
                yield line


def _stored_line(folder, task_id, attempt):
    if not ATTEMPT_RE.fullmatch(attempt):
        return None
    try:
        with open(os.path.join(folder, "result.json"), encoding="utf-8") as handle:
            line = json.loads(handle.read())
    except (OSError, ValueError):
        return None   # still running, or killed before its result: not a result yet
    return line if _valid(line) and (line["id"], line["attempt"]) == (task_id, attempt) else None


def collect(out):
    have = {(line["id"], line["attempt"]) for line in read_results(out).lines}
    added = []
    for line in sorted(_uncollected(out), key=lambda line: line["attempt"]):
        if (line["id"], line["attempt"]) in have:
            _mark_collected(out, line)   # appended, then killed before the mark
        else:
            append(out, line)
            added.append(line)
    return added


# -- locks and interrupted attempts -------------------------------------------------------

def task_lock(out, task_id):
    folder = os.path.join(out, "locks")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(folder, f"{task_id}.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def manifest_path(workdir, task_id, attempt):
    return os.path.join(workdir, f"{task_id}.{attempt}.json")


def write_manifest(workdir, ws, task, attempt, conversation):
    data = {"id": task.id, "attempt": attempt, "task_sha": task_sha(task),
            "conversation": conversation, "workspace": asdict(ws)}
    atomic_write(manifest_path(workdir, task.id, attempt), json.dumps(data).encode("utf-8"), 0o600)


REVISION_RE = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


def _read_manifest(out, workdir, name):
    """(data, Workspace) of the manifest `name` in `workdir`, or None. A manifest is data the
    attempt's own commands may have written (the workdir is its workspace's parent): the
    workspace is `workdir/ID.ATTEMPT` by the manifest's own name, the conversation is the one
    the batch names for that attempt, the base a full revision (never an option), and the
    worktree's admin directory is checked before use (nagent_batch_workspace.checked)."""
    match = MANIFEST_RE.fullmatch(name)
    if match is None or not TASK_ID_RE.fullmatch(match["id"]):
        return None
    try:
        with open(os.path.join(workdir, name), encoding="utf-8") as handle:
            data = json.load(handle)
        ws = data["workspace"]
        path = os.path.join(os.path.realpath(workdir), f"{match['id']}.{match['attempt']}")
        ident = tuple(ws["ident"])
        if (data["id"], data["attempt"]) != (match["id"], match["attempt"]) or ws["path"] != path \
                or ws["kind"] not in ("worktree", "clone") or not isinstance(ws["repo"], str) \
                or not (ws["base"] == "" or REVISION_RE.fullmatch(ws["base"])) \
                or len(ident) != 2 or not all(type(part) is int for part in ident) \
                or not isinstance(ws.get("admin") or "", str):
            return None
        data = dict(data, conversation=conversation_name(batch_tag(out), data["id"],
                                                         data["attempt"]))
        return data, workspace.Workspace(path, ws["kind"], ws["repo"], ws["base"], ident,
                                         ws.get("admin"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def recover(out, workdir, environ, make_outcome):
    """Interrupted attempts left under `workdir` by a batch that was killed: each is stored as
    an "interrupted" result (`make_outcome(data, ws)` -> Outcome) and its workspace removed."""
    recovered = []
    names = sorted(os.listdir(workdir)) if os.path.isdir(workdir) else ()
    for name in names:
        path = os.path.join(workdir, name)
        found = _read_manifest(out, workdir, name)
        if found is not None:
            line = _recover_one(out, workdir, path, found, environ, make_outcome)
            recovered += [line] if line else []
    for name in names:
        _unfinished_manifest(out, workdir, name)
    return recovered


def recover_task(out, workdir, task_id, environ, make_outcome, append_line=True):
    """`recover` for one task whose lock the caller holds: what an earlier holder of the lock
    left (a killed batch's attempt whose process outlived the batch's own first look). Without
    `append_line` (`--run-one`), the result is only stored, for `collect` to append."""
    recovered = []
    names = sorted(os.listdir(workdir)) if os.path.isdir(workdir) else ()
    for name in names:
        path = os.path.join(workdir, name)
        found = _read_manifest(out, workdir, name)
        if found is not None and found[0]["id"] == task_id:
            line = _recover_held(out, workdir, path, found, environ, make_outcome, append_line)
            recovered += [line] if line else []
    return recovered


def _recover_one(out, workdir, path, found, environ, make_outcome):
    lock = task_lock(out, found[0]["id"])
    if lock is None:
        return None   # still running somewhere
    try:
        return _recover_held(out, workdir, path, found, environ, make_outcome)
    finally:
        os.close(lock)


def _recover_held(out, workdir, path, found, environ, make_outcome, append_line=True):
    data, ws = found[0], workspace.checked(found[1], environ)
    if os.path.realpath(os.path.dirname(ws.path)) != os.path.realpath(workdir):
        return None   # a manifest naming a directory elsewhere is not one this batch made
    line = None
    folder = _folder(out, data["id"], data["attempt"])
    if _stored_line(folder, data["id"], data["attempt"]) is None:   # no result yet
        line = store(out, make_outcome(data, ws))
        if append_line:
            append(out, line)
    if workspace.remove(ws, environ) is None:
        os.unlink(path)   # else kept: the manifest is what lets a later batch try again
    return line


TEMP_MANIFEST_RE = re.compile(r"\.(?P<id>.+)\.(?P<attempt>[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8})\.json"
                              r"\.[0-9a-f]{12}\.tmp")
WORKSPACE_RE = re.compile(r"(?P<id>.+)\.(?P<attempt>[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8})")
MANIFEST_RE = re.compile(r"(?P<id>.+)\.(?P<attempt>[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8})\.json")


def _unfinished_manifest(out, workdir, name):
    """A manifest whose write a kill cut short (nagent_fs.atomic_write's temp file, never
    renamed), or never began (the kill came between `create`'s mkdir and the manifest's temp
    file): the workspace was made (os.mkdir) but git never ran in it, since `create` records
    it before any git. The temp file goes, and so does the directory when it is still the empty
    one (rmdir removes nothing else, and never follows a link). Only with the task's lock free:
    an attempt holds it from before its mkdir until its manifest is written."""
    match = TEMP_MANIFEST_RE.fullmatch(name) or WORKSPACE_RE.fullmatch(name)
    if match is None or not TASK_ID_RE.fullmatch(match["id"]):
        return
    if os.path.exists(manifest_path(workdir, match["id"], match["attempt"])):
        return    # its manifest was written after all (and is recovered on its own)
    lock = task_lock(out, match["id"])
    if lock is None:
        return    # still running somewhere
    try:
        targets = ((os.unlink, name),) if name.startswith(".") else ()
        for remove, target in targets + ((os.rmdir, f"{match['id']}.{match['attempt']}"),):
            try:
                remove(os.path.join(workdir, target))
            except OSError:
                pass   # gone already, or not empty: then it is not one this function may remove
    finally:
        os.close(lock)
