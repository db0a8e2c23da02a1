"""The batch coordinator, and its default engine: a pool of worker threads on this machine.

Data contract:
- `BatchOptions` (frozen): out (the output folder), jobs, max_cost (USD for the whole folder,
  or None), retry_failed, run (nagent_batch_exec.RunOptions).
- `run_here(task, out, run, notify, cancel, append=True)` runs one attempt on this machine
  the one way the pool and `--run-one` share: it takes the task's lock (`take_task`: waiting up
  to LOCK_WAIT for an attempt whose batch was killed to end, then recovering what that attempt
  left, nagent_batch_store.recover_task), records the workspace's manifest
  before anything runs in it, stores the attempt in OUT/tasks (and appends its line to
  results.jsonl when `append`), and only then removes the workspace. Returns the results
  line, or None when another process holds the task.
- An engine has `capacity()`, `submit(task)` -> handle, `wait(handles, timeout)` -> the
  handles done, `collect(handle, task)` -> the stored results line or None, `cancel()` and
  `close()`; it reports attempts through `push(kind, fields)` ("start", "cost") from any
  thread. `LocalEngine(options, push)` is `options.jobs` threads running `run_here`.
- `prepare(tasks, options)` -> (results, todo, notes): merges stored attempts results.jsonl
  lacks (`collect`), then recovers the attempts a killed batch left unfinished under the
  workdir (nagent_batch_store.recover), and selects what to run (`pending`).
- `run_batch(tasks, todo, options, engine, reporter, events)` -> `Summary`: runs `todo`, at
  most `capacity()` at once, and starts no task
  once the folder's spent cost (results plus the live cost of running attempts) reaches
  `max_cost`. Ctrl-C or SIGTERM ends the running attempts (each stored as "interrupted")
  and re-raises. Every line is counted once: a task's result is the line its attempt stored.
- `tally(summary, tasks, latest)` counts each task once by its last line.
"""
import os
import queue
import threading
import time
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field

import nagent_batch_store as store
import nagent_batch_workspace as workspace
from nagent_batch_exec import RunOptions, interrupted_outcome, run_attempt
from nagent_procs import exit_signals

LOCK_WAIT = 15.0
TICK = 0.5
INTERRUPTED = "the batch ended before this attempt did"


@dataclass(frozen=True)
class BatchOptions:
    out: str
    jobs: int
    run: RunOptions
    max_cost: float | None = None
    retry_failed: bool = False


@dataclass
class Summary:
    total: int
    ok: int = 0
    failed: list = field(default_factory=list)      # (id, reason) of tasks whose result failed
    missing: list = field(default_factory=list)     # ids with no result
    not_started: list = field(default_factory=list)  # ids the budget kept from starting
    busy: list = field(default_factory=list)        # ids another process was running
    ran: int = 0
    cost: float = 0.0
    seconds: float = 0.0

    @property
    def exit_code(self):
        if self.not_started:
            return 9
        if self.busy:
            return 7
        return 0 if not (self.failed or self.missing) else 1


def _wait_lock(out, task_id, patience):
    deadline = time.monotonic() + patience
    while True:
        fd = store.task_lock(out, task_id)
        if fd is not None or time.monotonic() >= deadline:
            return fd
        time.sleep(0.2)


def take_task(task, out, run, patience=LOCK_WAIT, append=True):
    """The task's lock (None when another process keeps it past `patience`), with what an
    earlier holder left recovered: an attempt of a killed batch that still held the lock when
    this batch first looked (`prepare`) is stored as "interrupted" and its workspace removed
    before the task runs again."""
    lock = _wait_lock(out, task.id, patience)
    if lock is not None and run.workdir is not None:
        try:
            store.recover_task(out, run.workdir, task.id, dict(os.environ), _interrupted, append)
        except BaseException:
            os.close(lock)
            raise
    return lock


def _interrupted(data, ws):
    return interrupted_outcome(data, ws, INTERRUPTED)


def run_here(task, out, run, notify=None, cancel=None, append=True, patience=LOCK_WAIT):
    lock = take_task(task, out, run, patience, append)
    if lock is None:
        return None
    try:
        def record(ws, attempt, conversation):
            store.write_manifest(run.workdir, ws, task, attempt, conversation)

        outcome = run_attempt(task, run, notify, cancel, lock, on_workspace=record)
        line = store.store(out, outcome)
        if append:
            store.append(out, line)
        ws = outcome.workspace
        if ws is not None:
            kept = workspace.remove(ws, os.environ)
            if kept is None:
                try:
                    os.unlink(store.manifest_path(run.workdir, task.id, line["attempt"]))
                except FileNotFoundError:
                    pass
        return line
    finally:
        os.close(lock)


class LocalEngine:
    def __init__(self, options, push):
        self.options, self.push = options, push
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(max_workers=options.jobs, thread_name_prefix="nagent-batch")

    def capacity(self):
        return self.options.jobs

    def submit(self, task):
        return self.pool.submit(run_here, task, self.options.out, self.options.run,
                                lambda kind, **fields: self.push(kind, fields), self.stop)

    def wait(self, handles, timeout):
        return wait_futures(handles, timeout=timeout, return_when=FIRST_COMPLETED)[0]

    def collect(self, handle, task):
        return handle.result()

    def cancel(self):
        self.stop.set()

    def close(self):
        self.pool.shutdown(wait=True)


def prepare(tasks, options):
    """Recover a killed batch's attempts, merge stored ones; -> (results, todo, notes)."""
    os.makedirs(options.out, exist_ok=True)
    store.collect(options.out)   # first: an attempt stored but not yet appended is a result
    if options.run.workdir is not None:
        store.recover(options.out, options.run.workdir, dict(os.environ), _interrupted)
    results = store.read_results(options.out)
    todo, notes = store.pending(tasks, results, options.retry_failed)
    return results, todo, list(results.warnings) + notes


def run_batch(tasks, todo, options, engine, reporter, events):
    """`todo`: what `prepare` selected; `events`: the queue.Queue the engine's `push` fills."""
    started = time.monotonic()
    summary = Summary(total=len(tasks))
    waiting, running = list(todo), {}
    reporter.emit("batch_start", total=len(tasks), todo=len(todo), done=len(tasks) - len(todo))
    try:
        with exit_signals():
            while waiting or running:
                while waiting and len(running) < engine.capacity():
                    if options.max_cost is not None and reporter.spent() >= options.max_cost:
                        summary.not_started = [task.id for task in waiting]
                        waiting = []
                        break
                    task = waiting.pop(0)
                    running[engine.submit(task)] = task
                if not running:
                    break
                done = engine.wait(list(running), TICK)
                _drain(events, reporter)
                for handle in done:
                    task = running.pop(handle)
                    line = engine.collect(handle, task)
                    _drain(events, reporter)
                    if line is None:
                        summary.busy.append(task.id)
                        continue
                    summary.ran += 1
                    reporter.end(line)
                reporter.tick()
    except BaseException:
        engine.cancel()
        for handle, task in running.items():
            try:
                line = engine.collect(handle, task)
            except Exception:   # the interrupt already names the problem
                continue
            if line is not None:
                reporter.end(line)
        reporter.clear()
        raise
    finally:
        engine.close()
    tally(summary, tasks, store.read_results(options.out).latest)
    summary.cost = reporter.cost
    summary.seconds = round(time.monotonic() - started, 3)
    return summary


def tally(summary, tasks, latest):
    """Count each task once, by its last result line (`latest`: id -> line)."""
    for task in tasks:
        line = latest.get(task.id)
        if line is None or line["status"] == "interrupted":
            if task.id not in summary.not_started + summary.busy:
                summary.missing.append(task.id)
        elif line["status"] == "ok":
            summary.ok += 1
        else:
            summary.failed.append((task.id, line.get("reason") or line.get("failure") or "failed"))
    return summary


def _drain(events, reporter):
    while True:
        try:
            kind, fields = events.get_nowait()
        except queue.Empty:
            return
        if kind == "start":
            reporter.start(fields)
        elif kind == "cost":
            reporter.cost_update(fields)
