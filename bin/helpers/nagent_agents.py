"""Nested nagent processes the driver runs (sub-agents, per-file edit sessions): several at once,
each ended with its whole tree.

Data contract
-------------
* A `Job` is one child to run: index (its action's position), name (its conversation, when
  known), task (its stdin), argv (the child's arguments; with no tool and no argv: a sub-agent's
  `child_command`), tool (a nagent tool name: `start_tool` runs that tool with `argv` as its
  arguments: a fork of this process when ctx.warm_children (config warm_children) and
  nagent_fork.warm_start_possible(): no second interpreter start or SDK import; else, or when
  the fork fails, a new process of the tool, nagent_install.tool_argv), env (None: ctx.environ,
  the driver's own environment: its children are the driver's tools, not the model's shell),
  timeout (None: ctx.agent_timeout), key (children with the same non-empty key never run at
  once: two edit sessions of one file), totals (fn() -> the totals of a child that printed
  none; None: `child_totals(name)`).
* A sub-agent is `nagent --conversation NAME --invocation delegated --parent-conversation PATH
  --depth D+1 --pid PID --json [settings] -` (tool "nagent" with `child_args`; `child_command`
  is the whole command line of its new-process form), its task on stdin; NAME is
  `child_name(pid)`: "agent-{uuid4 hex}-{conversation pid}" (the conversation pid passed
  through, never this process's OS pid). `setting_args(settings)` are the flags that hand a
  child the session's settings a command line may have changed: provider, model, shell sandbox
  and approval (a `--shell-sandbox bwrap` run sandboxes its children's shells too) and the
  mode (`--mode plan` stays plan). `delegated_args(ctx)` include its share of the run's budget
  (`--budget` with ctx.child_budget, nagent_budget.encode: a flag only nagent's own children
  get, sub-agents and nested edit sessions alike). A child's
  stdin, stdout and stderr are anonymous temp files, not pipes, so nothing has to be drained
  while several run.
* `run_children(jobs, ctx, done, watch=None, started=None)` runs `jobs` (in tag order) at most
  `ctx.max_parallel` at a time, starting them in order as slots free up (a job whose key is held
  by a running child waits, and the next ones may pass it), calls `started(index)` (when given)
  right before a child's process starts, and `done(index, ChildResult)` as each one ends, in
  whatever order they end. A child past its timeout gets SIGTERM (it ends its own shell commands
  and records why); after AGENT_TERM_GRACE seconds it and every process it left are killed; its
  siblings run on.
  `watch(views)` (optional) is called about every WATCH_TICK seconds while children run, with one
  dict per started child still running: index, name, pid, elapsed (s), action (what its run file
  says it does now, or None), calls, tokens.
* Interrupted (KeyboardInterrupt, or nagent_errors.ExitSignal for SIGTERM/SIGHUP, e.g. this
  process's own parent timing it out): every running child's whole tree is ended together (for
  Ctrl-C the children got the terminal's SIGINT themselves: they are given the grace period
  first, then SIGTERM), exit signals are held back until that is done, `done()` is called with
  status "cut_off" for each of them and "not_started" for jobs never started, and the exception
  is raised again.
* `ChildResult`: name, status ("finished", "timed_out", "cut_off", "not_started",
  "start_failed"), exit_code, response (the child's final answer from its --json, or None),
  error_line (its last non-empty stderr line), first_error (its first one), totals (its
  recursive token totals: from its --json, else the job's `totals`, so a child that was ended
  still counts), seconds, reason (why it did not finish: the start error, or the signal), data
  (its whole --json object, {} when it printed none).
"""
import json
import os
import select
import signal
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from typing import Callable

import nagent_conversation_layout as layout
from nagent_conversation_tail import read_tail_summary
from nagent_errors import ExitSignal, NagentError
from nagent_fork import fork_tool, warm_start_possible
from nagent_install import tool_argv
from nagent_instances import read_run_file
from nagent_procs import end_process_trees, kill_tree, process_tree

AGENT_TERM_GRACE = 5.0   # a timed-out child's time to end its shell groups and record why
EXIT_GRACE = 3.0         # the same when this process itself is ending (within its parent's grace)
WATCH_TICK = 0.2
ENDING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class ChildResult:
    name: str
    status: str
    exit_code: int | None = None
    response: str | None = None
    error_line: str = ""
    totals: dict = field(default_factory=dict)
    seconds: float = 0.0
    reason: str = ""
    data: dict = field(default_factory=dict)
    first_error: str = ""


@dataclass(frozen=True)
class Job:
    index: int
    name: str
    task: str
    argv: tuple = ()
    env: dict | None = None
    timeout: float | None = None
    key: str = ""
    totals: Callable | None = None
    tool: str = ""


def child_name(pid):
    return f"agent-{uuid.uuid4().hex}-{layout.sanitize(pid) or 'none'}"


def setting_args(settings):
    """The flags that give a child the session's settings a command line may have changed."""
    if settings is None:
        return []
    return ["--provider", settings.provider.name, "--model", settings.model,
            "--shell-sandbox", settings.shell.sandbox, "--shell-approval", settings.shell.approval,
            "--mode", settings.mode]


def delegated_args(ctx):
    """The flags of every nested nagent the driver starts: its pid, who started it, its depth,
    its share of the budget."""
    budget = getattr(ctx, "child_budget", "")   # what is left of the run's budget for it
    return ["--pid", ctx.pid, "--invocation", "delegated", "--parent-conversation",
            ctx.conversation, "--depth", str(ctx.depth + 1), "--json",
            *(["--budget", budget] if budget else [])]


def child_args(ctx, name):
    """A sub-agent's arguments after the tool's name (see the contract)."""
    return ["--conversation", name, *delegated_args(ctx), *setting_args(ctx.settings),
            *ctx.extra_args, "-"]


def child_command(ctx, name):
    return [*tool_argv("nagent"), *child_args(ctx, name)]


def start_tool(name, args, env, cwd, files, warm=True):
    """nagent's own tool `name` started with `args`: a fork of this process when `warm` and a
    fork is safe now (nagent_fork), else a new process of this install's tool."""
    if warm and warm_start_possible():
        try:
            return fork_tool(name, list(args), env, cwd, files)
        except OSError:
            pass   # no fork now (EAGAIN, ENOMEM): a new process may still start
    return subprocess.Popen([*tool_argv(name), *args], stdin=files[0], stdout=files[1],
                            stderr=files[2], cwd=cwd, env=env)


def child_totals(name, environ):
    """The token totals a child recorded in its conversation (its last stats record)."""
    try:
        stats = read_tail_summary(layout.conversation_path(name, environ))["stats"]
    except NagentError:
        return {}
    totals = (stats or {}).get("run")
    return totals if isinstance(totals, dict) else {}


class _Child:
    """One started child: its process, files and clock."""

    def __init__(self, job):
        self.job = job
        self.index, self.name, self.task, self.key = job.index, job.name, job.task, job.key
        self.proc = self.pidfd = None
        self.stdin = self.stdout = self.stderr = None
        self.started = self.deadline = 0.0
        self.kill_at = None       # set once it was told to end (timed out)
        self.snapshot = []        # its process tree, as last seen while ending

    def start(self, ctx):
        self.stdin = tempfile.TemporaryFile()
        self.stdin.write(self.task.encode("utf-8"))
        self.stdin.flush()
        self.stdin.seek(0)
        self.stdout, self.stderr = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        # The task goes on stdin: argv breaks past 128 KiB and on a leading "-".
        job = self.job
        env = ctx.environ if job.env is None else job.env
        if job.tool:
            self.proc = start_tool(job.tool, job.argv, env, ctx.cwd,
                                   (self.stdin, self.stdout, self.stderr),
                                   getattr(ctx, "warm_children", True))
        else:
            self.proc = subprocess.Popen(list(job.argv) or child_command(ctx, self.name),
                                         stdin=self.stdin, stdout=self.stdout,
                                         stderr=self.stderr, cwd=ctx.cwd, env=env)
        self.started = time.monotonic()
        self.timeout = ctx.agent_timeout if job.timeout is None else job.timeout
        self.deadline = self.started + self.timeout
        try:
            self.pidfd = os.pidfd_open(self.proc.pid)
        except (AttributeError, OSError):
            self.pidfd = None   # no pidfd here: the batch polls instead

    def read(self, handle):
        handle.seek(0)
        return handle.read().decode("utf-8", "replace")

    def close(self):
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None
        for handle in (self.stdin, self.stdout, self.stderr):
            if handle is not None:
                handle.close()
        self.stdin = self.stdout = self.stderr = None

    def result(self, status, environ, reason=""):
        out = self.read(self.stdout) if self.stdout else ""
        err = self.read(self.stderr) if self.stderr else ""
        try:
            data = json.loads(out) if out.strip() and status == "finished" else {}
        except json.JSONDecodeError:
            data = {}
        data = data if isinstance(data, dict) else {}
        if isinstance(data.get("totals"), dict):
            totals = data["totals"]
        elif self.job.totals is not None:
            totals = self.job.totals()
        else:
            totals = child_totals(self.name, environ)
        lines = [line for line in err.splitlines() if line.strip()]
        response = data.get("response") if isinstance(data.get("response"), str) else None
        return ChildResult(self.name, status, self.proc.returncode if self.proc else None,
                           response, lines[-1] if lines else "", totals,
                           time.monotonic() - self.started if self.started else 0.0, reason,
                           data, lines[0] if lines else "")


def _view(child, environ, now):
    record = read_run_file(child.proc.pid, environ) or {}
    return {"index": child.index, "name": child.name, "pid": child.proc.pid,
            "elapsed": round(now - child.started, 1), "action": record.get("action"),
            "calls": record.get("calls", 0), "tokens": record.get("tokens") or {},
            "ending": child.kill_at is not None}


def _wait(running, timeout):
    """Until a running child exits or `timeout` seconds pass."""
    fds = [child.pidfd for child in running if child.pidfd is not None]
    if len(fds) == len(running) and fds:
        select.select(fds, [], [], max(0.0, timeout))
    else:
        time.sleep(min(max(0.0, timeout), 0.05))


def run_children(jobs, ctx, done, watch=None, started=None):
    environ = ctx.environ
    limit = max(1, int(getattr(ctx, "max_parallel", 1) or 1))
    pending = [_Child(job) for job in jobs]
    running = []
    try:
        while pending or running:
            while len(running) < limit:
                child = _next_startable(pending, running)
                if child is None:
                    break
                try:
                    if started is not None:
                        started(child.index)
                    child.start(ctx)
                except OSError as error:
                    child.close()
                    done(child.index, ChildResult(child.name, "start_failed",
                                                  reason=f"cannot start it: {error.strerror}"))
                    continue
                running.append(child)
            if not running:
                continue
            now = time.monotonic()
            wake = min((child.kill_at or child.deadline) for child in running)
            ending = any(child.kill_at is not None for child in running)
            tick = 0.1 if ending else (WATCH_TICK if watch else wake - now)
            _wait(running, min(wake - now, tick))
            now = time.monotonic()
            for child in list(running):
                outcome = _check(child, now)
                if outcome:
                    running.remove(child)
                    try:
                        done(child.index, child.result(outcome, environ,
                                                       reason=f"timed out after {child.timeout:g} s"
                                                       if outcome == "timed_out" else ""))
                    finally:
                        child.close()
            if watch and running:
                watch([_view(child, environ, now) for child in running])
    except (KeyboardInterrupt, ExitSignal) as stop:
        _cut_off(running, pending, stop, environ, done)
        raise
    finally:
        for child in running + pending:
            child.close()


def _next_startable(pending, running):
    """The first pending child whose key no running child holds (removed from `pending`)."""
    held = {child.key for child in running if child.key}
    for position, child in enumerate(pending):
        if not child.key or child.key not in held:
            return pending.pop(position)
    return None


def _check(child, now):
    """"finished" / "timed_out" once the child is done with, else None (it may be told to end)."""
    if child.proc.poll() is not None:
        if child.kill_at is None:
            return "finished"
        kill_tree(child.snapshot, os.getpgrp())   # what its shell commands left behind
        return "timed_out"
    if child.kill_at is None and now >= child.deadline:
        child.snapshot = process_tree(child.proc.pid)
        child.kill_at = now + AGENT_TERM_GRACE
        child.proc.send_signal(signal.SIGTERM)
        return None
    if child.kill_at is not None:
        child.snapshot += process_tree(child.proc.pid)
        if now >= child.kill_at:
            child.proc.kill()
            kill_tree(child.snapshot + process_tree(child.proc.pid), os.getpgrp())
            child.proc.wait()
            return "timed_out"
    return None


def _cut_off(running, pending, stop, environ, done):
    """End every running child's tree at once, signals held back meanwhile; report them all."""
    held = _hold_signals()
    try:
        by_terminal = isinstance(stop, KeyboardInterrupt)
        # Ctrl-C on the terminal reached the children too (same process group): they end on
        # their own first. An exit signal reached only us: pass it on.
        signals = (None, signal.SIGTERM) if by_terminal else (signal.SIGTERM,)
        end_process_trees([child.proc for child in running], EXIT_GRACE, signals)
        reason = "Ctrl-C" if by_terminal else getattr(stop, "name", "a signal")
        for child in running:
            done(child.index, child.result("cut_off", environ, reason=reason))
        for child in pending:
            done(child.index, ChildResult(child.name, "not_started", reason=reason))
        pending.clear()
    finally:
        _release_signals(held)


def _hold_signals():
    try:
        return signal.pthread_sigmask(signal.SIG_BLOCK, ENDING_SIGNALS)
    except (AttributeError, OSError, ValueError):
        return None


def _release_signals(held):
    if held is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
