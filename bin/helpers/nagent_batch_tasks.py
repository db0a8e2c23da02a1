"""nagent-batch's tasks: the JSON Lines task file, one task's rules, and the nagent command it runs.

Data contract:
- A task file holds one JSON object per line (blank lines and lines starting with "#" are
  skipped). Keys: `id` (TASK_ID_RE: letters, digits, ".", "_", "-", not starting with "." or
  "-", at most 100 characters; so "../../x" or "a/b" is refused, never rewritten), `prompt`
  (non-empty text), `repo` (a local path, relative to the task file's directory, or a git URL:
  https, http, ssh, git, file, or scp-like user@host:path), and optional `ref` (default HEAD;
  never starting with "-"), `setup` and `check` (shell commands run with `sh -c` in the
  workspace), `max_cost` (USD, a number > 0) and `model`. Any other key is refused (a
  misspelt "max-cost" would silently drop a budget), and so is an id used twice, also when
  only the case differs (the attempt folders of "T1" and "t1" are one folder on some disks).
  A task carries no environment and no key: a worker runs it with its own.
- `load_tasks(path)` -> tuple of frozen `Task`s, in file order; every problem is an InputError
  naming the line. A local repo path is resolved once here (symlinks, "..") to the realpath
  the batch then uses everywhere (`Task.repo`); a URL is kept as given.
- `parse_task(data, base_dir, where)` is the one validator, for the task file and for the
  `--run-one` task a printed command carries (`task_json(task)`: canonical JSON, repo
  absolute, self-contained). `task_sha(task)` identifies a task's definition in results.
- `nagent_argv(task, conversation, pid)` -> the nagent command line of one attempt (the prompt
  goes on stdin: argv breaks past 128 KiB and on a leading "-"): events on stdout, a fresh
  conversation NAME and conversation id. The per-task budget is nagent's own --max-cost
  (nagent_batch_exec reads its exit 13 as failure "budget").
- `is_url(text)` tells a git URL from a local path.
"""
import hashlib
import json
import os
import re
from dataclasses import asdict, dataclass

from nagent_errors import InputError
from nagent_install import tool_argv

TASK_ID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,99}")
ID_FIX = "use letters, digits, '.', '_' and '-', not starting with '.' or '-', at most 100 characters"
URL_RE = re.compile(r"(?:(?:https?|ssh|git|file)://\S+|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:\S+)\Z")
SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*::?")
FIELDS = ("id", "prompt", "repo", "ref", "setup", "check", "max_cost", "model")
REQUIRED = ("id", "prompt", "repo")
MODEL_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}")


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str
    repo: str
    ref: str = "HEAD"
    setup: str | None = None
    check: str | None = None
    max_cost: float | None = None
    model: str | None = None


def is_url(text):
    return bool(URL_RE.match(text))


def _text(data, key, where, required=False):
    value = data.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: `{key}` must be non-empty text", repr(value)[:80])
    if "\0" in value:
        raise InputError(f"{where}: `{key}` contains a NUL character", repr(value)[:80])
    return value


def _repo(value, base_dir, where):
    if is_url(value):
        return value
    if SCHEME_RE.match(value) and not os.path.exists(os.path.join(base_dir, value)):
        # ext::, fd:: and other transports run commands or reach odd places: not a repo here.
        raise InputError(f"{where}: `repo` is neither a directory nor a supported git URL", value,
                         "use a path, or an https, ssh, git or file URL")
    path = os.path.realpath(os.path.join(base_dir, os.path.expanduser(value)))
    if not os.path.isdir(path):
        raise InputError(f"{where}: `repo` is not a directory", value)
    return path


def parse_task(data, base_dir, where):
    if not isinstance(data, dict):
        raise InputError(f"{where}: a task is a JSON object", type(data).__name__)
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise InputError(f"{where}: unknown task key", ", ".join(unknown),
                         "keys: " + ", ".join(FIELDS))
    task_id = _text(data, "id", where, required=True)
    if not TASK_ID_RE.fullmatch(task_id):
        raise InputError(f"{where}: invalid task id", task_id if task_id.isprintable() else repr(task_id),
                         ID_FIX)
    where = f"{where} (task {task_id})"
    ref = _text(data, "ref", where) or "HEAD"
    if ref.startswith("-") or not ref.isprintable() or any(ch.isspace() for ch in ref):
        raise InputError(f"{where}: invalid `ref`", repr(ref), "a branch, tag or commit")
    model = _text(data, "model", where)
    if model is not None and not MODEL_RE.fullmatch(model):
        raise InputError(f"{where}: invalid `model`", repr(model))
    max_cost = data.get("max_cost")
    if max_cost is not None and (isinstance(max_cost, bool) or not isinstance(max_cost, (int, float))
                                 or not max_cost > 0 or max_cost == float("inf")):
        raise InputError(f"{where}: `max_cost` must be a number of USD above 0", repr(max_cost))
    return Task(id=task_id, prompt=_text(data, "prompt", where, required=True),
                repo=_repo(_text(data, "repo", where, required=True), base_dir, where), ref=ref,
                setup=_text(data, "setup", where), check=_text(data, "check", where),
                max_cost=None if max_cost is None else float(max_cost), model=model)


def load_tasks(path):
    try:
        with open(path, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError("cannot read the task file", path, getattr(error, "strerror", None) or str(error))
    base_dir = os.path.dirname(os.path.abspath(path))
    tasks, seen = [], {}
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{os.path.basename(path)} line {number}"
        try:
            data = json.loads(line)
        except json.JSONDecodeError as error:
            raise InputError(f"{where}: not JSON", error.msg) from None
        task = parse_task(data, base_dir, where)
        if task.id.lower() in seen:
            raise InputError(f"{where}: task id already used on line {seen[task.id.lower()]}", task.id,
                             "ids are unique, also ignoring case")
        seen[task.id.lower()] = number
        tasks.append(task)
    if not tasks:
        raise InputError("the task file holds no task", path)
    return tuple(tasks)


def task_json(task):
    """The task as canonical JSON (defaults left out): what a printed command carries."""
    data = {key: value for key, value in asdict(task).items()
            if value is not None and not (key == "ref" and value == "HEAD")}
    return json.dumps(data, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def task_sha(task):
    return hashlib.sha256(task_json(task).encode("utf-8")).hexdigest()[:16]


def conversation_name(tag, task_id, attempt):
    """The conversation an attempt's nagent writes: the batch's tag, the task, the attempt."""
    return f"{tag}-{task_id}-{attempt.rsplit('-', 1)[1]}"[:200]


def nagent_argv(task, conversation, pid):
    argv = [*tool_argv("nagent"), "--events", "-n", "--conversation", conversation, "--pid", pid]
    if task.model:
        argv.append(f"--model={task.model}")
    if task.max_cost is not None:
        argv.append(f"--max-cost={task.max_cost!r}")
    return argv + ["-"]
