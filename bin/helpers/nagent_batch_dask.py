"""The dask engine: the batch's tasks on a Dask distributed cluster (`--engine dask --scheduler`).

Data contract:
- `DaskEngine(options, push, scheduler)` connects a `distributed.Client` to `scheduler`
  (tcp://HOST:PORT; SetupError when the package is missing or the scheduler does not answer)
  and has the engine interface of nagent_batch_pool. distributed is imported here only, and
  this module only when the engine is chosen.
- Each task is one dask task, nagent_batch_run_task (pickled by value: the scheduler
  needs no nagent), submitted with pure=False and retries=0: it runs
  nagent_batch_exec.run_attempt on the worker exactly as the local pool does (a nagent process
  in its own workspace, the worker's own environment and keys). What is shipped is the task's
  JSON (nagent_batch_tasks.task_json: no environment, no key) and the RunOptions as a dict;
  what comes back, as plain data (`outcome_of`), is the result, the conversation and the
  other files of the attempt.
- "start" and "cost" reports travel as dask worker events on `topic` (Worker.log_event, read
  with Client.subscribe_topic).
- The coordinator stores each Outcome in the output folder (nagent_batch_store.store, then
  append) and only then asks the worker that ran it to remove the workspace
  (Client.run(nagent_batch_remove_workspace, workers=[address])): a workspace is removed only once its
  result is collected. A worker that is gone keeps it (it was on that machine).
- A worker lost mid-task: the scheduler runs the task again on another worker; when it has
  lost allowed-failures workers (KilledWorker), the task is stored as failed ("lost", with
  dask's reason). A future ends once, so a task's result is stored once.
- Workspaces are made under RunOptions.workdir, or, when None, under the worker's temporary
  directory (`nagent-<tag>`): a path of the coordinator's machine means nothing there.
"""
import json
import os
import tempfile
from dataclasses import asdict, replace

import nagent_batch_store as store
import nagent_batch_workspace as workspace
from nagent_batch_exec import Outcome, RunOptions, new_attempt, new_result, now_iso, run_attempt
from nagent_batch_tasks import parse_task, task_json, task_sha
from nagent_errors import SetupError
from nagent_install import install_command

CONNECT_TIMEOUT = "20s"


def run_task(task_text, run_options, topic):
    """On a worker: one attempt, returned as plain data (see the module docstring)."""
    from distributed import get_worker
    worker = get_worker()

    def notify(kind, **fields):
        worker.log_event(topic, dict(fields, kind=kind, address=worker.address))

    options = RunOptions(**run_options)
    if options.workdir is None:
        options = replace(options, workdir=os.path.join(tempfile.gettempdir(), f"nagent-{options.tag}"))
    outcome = run_attempt(parse_task(json.loads(task_text), "/", "task"), options, notify)
    ws = outcome.workspace
    return {"result": outcome.result, "files": outcome.files, "address": worker.address,
            "workspace": None if ws is None else asdict(ws)}


def workspace_of(fields):
    return None if fields is None else workspace.Workspace(**dict(fields, ident=tuple(fields["ident"])))


def remove_workspace(fields):
    """On a worker: remove the workspace an attempt left there."""
    return workspace.remove(workspace_of(fields), os.environ)


def lost_outcome(task, reason):
    result = new_result(task.id, new_attempt(), task_sha(task))
    result.update(status="failed", failure="lost", reason=reason, worker=None, ended=now_iso())
    return Outcome(result, {}, None)


def outcome_of(data):
    """The Outcome a worker sent back as plain data (run_task)."""
    return Outcome(data["result"], data["files"], workspace_of(data.get("workspace")))


def settled(future, task, killed_worker):
    """(Outcome, worker address or None) of a finished dask future: what the worker sent, or,
    when dask gave up on the task (`killed_worker`: it lost allowed-failures workers running
    it) or the engine failed, a failed Outcome saying so."""
    try:
        data = future.result()
        return outcome_of(data), data["address"]
    except killed_worker as error:
        return lost_outcome(task, f"dask lost the workers running it: {error}"), None
    except Exception as error:   # the engine's own failure, recorded as the task's
        return lost_outcome(task, f"{type(error).__name__}: {error}"), None


class DaskEngine:
    def __init__(self, options, push, scheduler):
        try:
            import distributed
        except ImportError:
            raise SetupError("the dask engine needs the distributed package", "distributed",
                             install_command("distributed")) from None
        self.distributed, self.options = distributed, options
        self.topic = f"nagent-{options.run.tag}"
        try:
            self.client = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT)
        except (OSError, TimeoutError, ValueError) as error:
            raise SetupError("cannot reach the dask scheduler", scheduler,
                             str(error) or type(error).__name__) from None
        self.client.subscribe_topic(self.topic, lambda event: push(event[1].get("kind"), event[1]))
        self.submitted, self.cancelled = set(), False

    def capacity(self):
        if self.options.jobs:
            return self.options.jobs
        return max(1, sum(self.client.nthreads().values()))

    def submit(self, task):
        future = self.client.submit(run_task, task_json(task), asdict(self.options.run), self.topic,
                                    key=f"nagent-batch-{task.id}-{os.urandom(6).hex()}", pure=False,
                                    retries=0)
        self.submitted.add(future)
        return future

    def wait(self, handles, timeout):
        try:
            return self.distributed.wait(handles, timeout=timeout, return_when="FIRST_COMPLETED").done
        except TimeoutError:
            return set()

    def collect(self, handle, task):
        self.submitted.discard(handle)
        if self.cancelled:
            return None
        outcome, address = settled(handle, task, self.distributed.KilledWorker)
        line = store.store(self.options.out, outcome)
        store.append(self.options.out, line)
        if outcome.workspace is not None and address is not None:
            self.client.run(remove_workspace, asdict(outcome.workspace), workers=[address],
                            on_error="return")
        return line

    def cancel(self):
        # An attempt already running on a worker ends by itself there; its result is dropped
        # and its workspace stays on that worker (docs/batch.md, "Interrupting").
        self.cancelled = True
        self.client.cancel(list(self.submitted))

    def close(self):
        self.client.close()
