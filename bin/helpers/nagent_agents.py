"""Sub-agents as processes: child `nagent` runs, several at once, each ended with its whole tree.

Data contract
-------------
* A child is `nagent --conversation NAME --invocation delegated --parent-conversation PATH
  --depth D+1 --pid PID --json ... -` (`child_command`), its task on stdin; NAME is
  `child_name(pid)`: "agent-{uuid4 hex}-{conversation pid}" (the conversation pid passed
  through, never this process's OS pid). It inherits the mode (`--mode plan` stays plan) and
  gets its share of the run's budget (`child_budget_args(ctx)`: `--budget` with
  ctx.child_budget, nagent_budget.encode; nested edit sessions take the same flag). Its stdin, stdout and stderr are anonymous temp files,
  not pipes, so nothing has to be drained while several run.
* `run_children(jobs, ctx, done, watch=None)` runs `jobs` ([(index, name, task)], in tag order)
  at most `ctx.max_parallel` at a time, starting them in order as slots free up, and calls
  `done(index, ChildResult)` as each one ends, in whatever order they end. A child past
  `ctx.agent_timeout` seconds gets SIGTERM (it ends its own shell commands and records why); after
  AGENT_TERM_GRACE seconds it and every process it left are killed; its siblings run on.
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
  error_line (its last non-empty stderr line), totals (its recursive token totals: from its
  --json, else from the last stats record of its conversation, so a child that was ended still
  counts), seconds, reason (why it did not finish: the start error, or the signal).
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

import nagent_conversation_layout as layout
from nagent_conversation_tail import read_tail_summary
from nagent_errors import ExitSignal, NagentError
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


def child_name(pid):
    return f"agent-{uuid.uuid4().hex}-{layout.sanitize(pid) or 'none'}"


def child_command(ctx, name):
    settings = ctx.settings
    command = [*tool_argv("nagent"), "--conversation", name, "--pid", ctx.pid,
               "--invocation", "delegated", "--parent-conversation", ctx.conversation,
               "--depth", str(ctx.depth + 1), "--json"]
    if settings is not None:
        command += ["--provider", settings.provider.name, "--model", settings.model,
                    "--mode", settings.mode]
    return command + child_budget_args(ctx) + list(ctx.extra_args) + ["-"]


def child_budget_args(ctx):
    """What is left of the run's budget for one child process nagent starts itself (a
    sub-agent, a nested edit session): a flag only nagent's own children get, never a shell."""
    budget = getattr(ctx, "child_budget", "")
    return ["--budget", budget] if budget else []


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

    def __init__(self, index, name, task):
        self.index, self.name, self.task = index, name, task
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
        self.proc = subprocess.Popen(child_command(ctx, self.name), stdin=self.stdin,
                                     stdout=self.stdout, stderr=self.stderr, cwd=ctx.cwd,
                                     env=ctx.environ)
        self.started = time.monotonic()
        self.deadline = self.started + ctx.agent_timeout
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
        totals = data.get("totals") if isinstance(data.get("totals"), dict) else \
            child_totals(self.name, environ)
        lines = [line for line in err.splitlines() if line.strip()]
        response = data.get("response") if isinstance(data.get("response"), str) else None
        return ChildResult(self.name, status, self.proc.returncode if self.proc else None,
                           response, lines[-1] if lines else "", totals,
                           time.monotonic() - self.started if self.started else 0.0, reason)


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


def run_children(jobs, ctx, done, watch=None):
    environ = ctx.environ
    limit = max(1, int(getattr(ctx, "max_parallel", 1) or 1))
    pending = [_Child(index, name, task) for index, name, task in jobs]
    running = []
    try:
        while pending or running:
            while pending and len(running) < limit:
                child = pending.pop(0)
                try:
                    child.start(ctx)
                except OSError as error:
                    child.close()
                    done(child.index, ChildResult(child.name, "start_failed",
                                                  reason=f"cannot start sub-agent: {error.strerror}"))
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
                                                       reason=f"timed out after {ctx.agent_timeout:g} s"
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
