"""Run one attempt of one task on this machine: workspace, setup, nagent, diff, check.

Data contract:
- `RunOptions` (frozen): `workdir` (where workspaces are made), `setup_timeout`,
  `check_timeout`, `task_timeout` (seconds), `tag` (the batch's tag in conversation names).
- `run_attempt(task, options, notify=None, cancel=None, lock_fd=None)` -> `Outcome(result,
  files, workspace)`, never raising for what the task does:
  * `result` is the task's results line, less the paths the output folder adds
    (nagent_batch_store): id, attempt, task_sha, status ("ok" | "failed" | "interrupted"),
    failure (None | "workspace" | "setup" | "nagent" | "timeout" | "budget" | "check"),
    reason, exit_code (nagent's), response, calls, tokens {input, output, cache_read,
    cache_write, reasoning}, cost_usd, wall_s (the attempt), nagent_s (its nagent process, None
    when none ran), ref (the base commit), diff (at most DIFF_INLINE
    characters; diff_truncated says when cut), check {exit_code, timed_out, tail} or None,
    worker (this host), started/ended (UTC ISO).
  * `files` maps names to bytes for the attempt's folder: "conversation" (nagent's file),
    "side/NAME" (its side files), "diff.patch", "setup.log", "check.log", "nagent.log".
  * `workspace`: the nagent_batch_workspace.Workspace still on disk (None when none was
    made). The caller removes it once the result is stored: workspaces outlive their attempt
    until their result is collected.
- `notify(kind, **fields)` is told "start" (id, attempt, worker) and "cost" (id, attempt,
  cost_usd: the live total after each model call). `cancel` (a threading.Event) ends the
  attempt early as "interrupted". `lock_fd` is inherited by every process of the attempt, so a
  task's lock stays held while anything it started lives.
- Each process (setup, nagent, check) runs in a session of its own, through a wrapper that
  sets PR_SET_PDEATHSIG (SIGTERM): if the process running the attempt dies (a killed batch, a
  lost dask worker), its nagent ends too instead of spending on as an orphan.
- Keys: nagent gets this process's environment (the worker's own keys); setup and check get
  nagent_secrets.scrubbed_env (no provider key: the one rule for nagent's children). Every
  text but the conversation (nagent redacts its own) is redacted with the keys this
  environment knows.
- Budget: the task's max_cost is nagent's own --max-cost (it starts no model call once the cap
  is reached, sub-agents and edit sessions included, and exits 13 with one `Error:` line):
  exit 13 is status failed, failure "budget", that line the reason. A run whose final totals
  exceed max_cost (its last call passed it, then it answered) is over budget too. The events'
  costs are only reported (notify "cost"). `nagent_batch_tasks.nagent_argv` is the one place
  the command line is made.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass

import nagent_batch_workspace as workspace
from nagent_batch_tasks import conversation_name, nagent_argv, task_sha
from nagent_config import child_key_names, known_secrets
from nagent_conversation_layout import conversation_path, state_dir
from nagent_conversation_tail import read_tail_summary
from nagent_errors import EXIT_CODES
from nagent_procs import end_group, end_process_tree
from nagent_procs import wait as wait_process
from nagent_secrets import redact, scrubbed_env

DIFF_INLINE = 200_000
TAIL_CHARS = 4000
LOG_LIMIT = 8 << 20
GRACE = 5.0
TICK = 0.25
# Runs `argv[2:]` with PR_SET_PDEATHSIG = SIGTERM; exits at once if its parent is already gone.
PDEATH = ("import ctypes,os,sys\n"
          "ctypes.CDLL(None).prctl(1, 15, 0, 0, 0)\n"
          "os.getppid() == int(sys.argv[1]) or os._exit(143)\n"
          "os.execvp(sys.argv[2], sys.argv[2:])\n")
TOKEN_KEYS = {"input": "input_tokens", "output": "output_tokens", "cache_read": "cache_read_tokens",
              "cache_write": "cache_write_tokens", "reasoning": "reasoning_tokens"}


@dataclass(frozen=True)
class RunOptions:
    workdir: str
    setup_timeout: float = 600.0
    check_timeout: float = 600.0
    task_timeout: float = 3600.0
    tag: str = "batch"


@dataclass(frozen=True)
class Outcome:
    result: dict
    files: dict
    workspace: object = None


def now_iso():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def new_attempt():
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


def guarded(argv):
    return [sys.executable, "-S", "-c", PDEATH, str(os.getpid()), *argv]


def tail(text, limit=TAIL_CHARS):
    return text if len(text) <= limit else text[-limit:]


def _read_log(handle):
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    handle.seek(max(0, size - LOG_LIMIT))
    return handle.read().decode("utf-8", "replace")


def _waited(proc, deadline, cancel):
    """None once `proc` ended; "timeout" or "interrupted" when it must be stopped."""
    while True:
        try:
            wait_process(proc, TICK)
            return None
        except subprocess.TimeoutExpired:
            pass
        if cancel is not None and cancel.is_set():
            return "interrupted"
        if time.monotonic() > deadline:
            return "timeout"


def run_command(command, cwd, timeout, env, cancel, lock_fd):
    """(exit code or None, output, "timeout" | "interrupted" | None) of `sh -c command`."""
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen(guarded(["sh", "-c", command]), cwd=cwd, env=env,
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, pass_fds=_fds(lock_fd))
        stopped = _waited(proc, time.monotonic() + timeout, cancel)
        if stopped:
            end_group(proc, 2.0)
        return (None if stopped else proc.returncode), _read_log(out), stopped


def _fds(lock_fd):
    return () if lock_fd is None else (lock_fd,)


class _Watch:
    """What the nagent events say, read on a thread: live cost, response, final totals."""

    def __init__(self, proc, stream, task, attempt, notify):
        self.proc, self.task, self.attempt, self.notify = proc, task, attempt, notify
        self.cost, self.response, self.end, self.seconds = 0.0, None, None, None
        self.thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self.thread.start()

    def _read(self, stream):
        with stream:
            for line in stream:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    self._take(event)

    def _take(self, event):
        kind = event.get("type")
        if kind == "model_call_end" and isinstance(event.get("cost_usd"), (int, float)):
            self.cost += event["cost_usd"]
            self.notify("cost", id=self.task.id, attempt=self.attempt, cost_usd=round(self.cost, 6))
        elif kind == "response":
            self.response = event.get("text")
        elif kind == "run_end":
            self.end = event


def run_nagent(task, ws, conversation, pid, options, env, cancel, lock_fd, notify, attempt):
    """(watch, stderr text, stopped): one nagent run in the workspace."""
    with tempfile.TemporaryFile() as prompt, tempfile.TemporaryFile() as err:
        prompt.write(task.prompt.encode("utf-8"))
        prompt.seek(0)
        read_end, write_end = os.pipe()
        try:
            proc = subprocess.Popen(guarded(nagent_argv(task, conversation, pid)), cwd=ws.path,
                                    env=env, stdin=prompt, stdout=write_end, stderr=err,
                                    start_new_session=True, pass_fds=_fds(lock_fd))
        finally:
            os.close(write_end)
        started = time.monotonic()
        watch = _Watch(proc, os.fdopen(read_end, "r", encoding="utf-8", errors="replace"), task,
                       attempt, notify)
        stopped = _waited(proc, started + options.task_timeout, cancel)
        if stopped:
            end_process_tree(proc, GRACE, signals=(signal.SIGINT, signal.SIGTERM))
        watch.seconds = round(time.monotonic() - started, 3)
        watch.thread.join(GRACE)
        return watch, _read_log(err), stopped


def _totals(watch, path):
    totals = (watch.end or {}).get("totals") if watch else None
    if not isinstance(totals, dict):
        try:
            totals = ((read_tail_summary(path)["stats"] or {}).get("run")) or {}
        except Exception:   # an unreadable conversation leaves the totals unknown
            totals = {}
    return totals if isinstance(totals, dict) else {}


def _conversation_files(path):
    files = {}
    try:
        with open(path, "rb") as handle:
            files["conversation"] = handle.read()
    except OSError:
        return files
    side = os.path.join(state_dir(path), "side")
    for name in sorted(os.listdir(side)) if os.path.isdir(side) else ():
        full = os.path.join(side, name)
        if os.path.isfile(full) and not os.path.islink(full):
            with open(full, "rb") as handle:
                files[f"side/{name}"] = handle.read()
    return files


def _failure(result, failure, reason):
    if result["failure"] is None:
        result.update(status="failed", failure=failure, reason=reason)


def new_result(task_id, attempt, sha):
    return {"id": task_id, "attempt": attempt, "task_sha": sha, "status": "ok",
            "failure": None, "reason": None, "exit_code": None, "response": None, "calls": 0,
            "tokens": {}, "cost_usd": None, "wall_s": None, "nagent_s": None, "ref": None, "diff": "",
            "diff_truncated": False, "check": None, "worker": socket.gethostname(),
            "started": now_iso(), "ended": None}


def _add_diff(result, files, ws, environ, secrets):
    text = redact(workspace.diff(ws, environ), secrets)
    files["diff.patch"] = text.encode("utf-8")
    result["diff"], result["diff_truncated"] = text[:DIFF_INLINE], len(text) > DIFF_INLINE


def _add_totals(result, totals):
    result["calls"] = totals.get("model_calls", 0)
    result["tokens"] = {key: totals.get(name, 0) for key, name in TOKEN_KEYS.items()}
    result["cost_usd"] = totals.get("cost_usd")


def interrupted_outcome(data, ws, reason):
    """The Outcome of an attempt found unfinished (its batch was killed): what its workspace
    and conversation hold now. `data`: the attempt's manifest (id, attempt, task_sha,
    conversation)."""
    environ = dict(os.environ)
    secrets = known_secrets(environ)
    result, files = new_result(data["id"], data["attempt"], data.get("task_sha")), {}
    result.update(status="interrupted", reason=reason, ref=ws.base, started=None)
    if os.path.isdir(ws.path):
        try:
            _add_diff(result, files, ws, environ, secrets)
        except workspace.WorkspaceError:
            pass
    conv_path = conversation_path(data["conversation"], environ)
    _add_totals(result, _totals(None, conv_path))
    files.update(_conversation_files(conv_path))
    return Outcome(result, files, ws)


class _Made:
    def __init__(self, on_workspace, attempt, conversation):
        self.on_workspace, self.attempt, self.conversation = on_workspace, attempt, conversation
        self.workspace = None

    def append(self, ws):
        self.workspace = ws
        if self.on_workspace is not None:
            self.on_workspace(ws, self.attempt, self.conversation)


def _run_setup(task, ws, options, env, cancel, lock_fd, result, files, secrets):
    """-> how it stopped ("timeout", "interrupted" or None); a failed setup fails the result."""
    code, out, stopped = run_command(task.setup, ws.path, options.setup_timeout, env, cancel, lock_fd)
    files["setup.log"] = redact(out, secrets).encode("utf-8")
    if stopped == "timeout":
        _failure(result, "setup", f"setup timed out after {options.setup_timeout:g} s")
    elif stopped is None and code != 0:
        _failure(result, "setup", f"setup exited {code}")
    return stopped


def _run_check(task, ws, options, env, cancel, lock_fd, result, files, secrets):
    code, out, stopped = run_command(task.check, ws.path, options.check_timeout, env, cancel, lock_fd)
    out = redact(out, secrets)
    files["check.log"] = out.encode("utf-8")
    result["check"] = {"exit_code": code, "timed_out": stopped == "timeout", "tail": tail(out)}
    if stopped == "timeout":
        _failure(result, "check", f"check timed out after {options.check_timeout:g} s")
    elif stopped is None and code != 0:
        _failure(result, "check", f"check exited {code}")
    return stopped


def _judge_nagent(watch, err, stop, options, result, secrets):
    result["exit_code"] = (watch.end or {}).get("exit_code", watch.proc.returncode)
    result["response"], result["nagent_s"] = watch.response, watch.seconds
    if stop == "timeout":
        _failure(result, "timeout", f"nagent ran past {options.task_timeout:g} s")
    elif result["exit_code"] != 0 and stop is None:
        lines = [line for line in err.splitlines() if line.startswith("Error: ")]
        budget = result["exit_code"] == EXIT_CODES["budget"]
        _failure(result, "budget" if budget else "nagent",
                 redact(lines[-1], secrets) if lines else f"nagent exited {result['exit_code']}")


def run_attempt(task, options, notify=None, cancel=None, lock_fd=None, on_workspace=None):
    notify = notify or (lambda kind, **fields: None)
    environ = dict(os.environ)
    secrets = known_secrets(environ)
    attempt, started = new_attempt(), time.monotonic()
    conversation = conversation_name(options.tag, task.id, attempt)
    conv_path = conversation_path(conversation, environ)
    result = new_result(task.id, attempt, task_sha(task))
    files, ws, watch, stop = {}, None, None, None
    made = _Made(on_workspace, attempt, conversation)   # the workspace, even if git then failed
    child_env = scrubbed_env(environ, child_key_names(environ))
    notify("start", id=task.id, attempt=attempt, worker=result["worker"])
    try:
        ws = workspace.create(task, options.workdir, f"{task.id}.{attempt}", environ, made.append)
        result["ref"] = ws.base
        if task.setup:
            stop = _run_setup(task, ws, options, child_env, cancel, lock_fd, result, files, secrets)
        if result["failure"] is None and stop is None:
            watch, err, stop = run_nagent(task, ws, conversation, f"b-{attempt}", options,
                                          dict(environ, NAGENT_NO_SPINNER="1"), cancel, lock_fd, notify,
                                          attempt)
            files["nagent.log"] = redact(err, secrets).encode("utf-8")
            _judge_nagent(watch, err, stop, options, result, secrets)
        if watch is not None or result["failure"] == "setup":
            _add_diff(result, files, ws, environ, secrets)
        if watch is not None and task.check and stop is None:
            checked = _run_check(task, ws, options, child_env, cancel, lock_fd, result, files, secrets)
            stop = "interrupted" if checked == "interrupted" else stop
        if stop == "interrupted":
            result.update(status="interrupted", failure=None, reason="the batch was stopped")
    except workspace.WorkspaceError as error:
        _failure(result, "workspace", redact(error.line()[len("Error: "):], secrets))
    finally:
        _add_totals(result, _totals(watch, conv_path) if watch else {"cost_usd": 0.0})
        if (task.max_cost is not None and isinstance(result["cost_usd"], (int, float))
                and result["cost_usd"] > task.max_cost and result["status"] == "ok"):
            _failure(result, "budget", f"cost {result['cost_usd']:g} USD passed max_cost {task.max_cost:g}")
        if watch is not None:
            files.update(_conversation_files(conv_path))
        result["wall_s"] = round(time.monotonic() - started, 3)
        result["ended"] = now_iso()
    return Outcome(result, files, ws or made.workspace)
