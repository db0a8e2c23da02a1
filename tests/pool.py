"""Run the suite's test classes in a few worker processes, reported into the one unittest result.

Why: most of the suite waits on child processes (a tool run, an SDK import, a sandbox, a pty, a
timeout that must expire); one after another those waits add up to minutes while the cores idle.
Three workers on two cores keep them busy. `python3 -m unittest discover -s tests -v` stays the
command, and its output stays unittest's own: every test named as it ends, failures and errors
with their tracebacks, the summary line, the exit code.

How it hooks in: discovery imports tests/test__pool.py first (its name sorts before every other
module), whose `load_tests` calls `install(loader)`; from then on every module the loader loads
becomes a `PooledModule`: the same tests, in units of one class (one module when it has
setUpModule/tearDownModule). When the runner reaches the first pooled module the pool starts the
workers (`python3 tests/pool.py --worker`, this interpreter and its flags, this environment, cwd
and stdin) and deals them units, longest first (COSTS, else a per-test guess). Each PooledModule
then replays its units' events, in discovery order, into the runner's result as they arrive.
New modules are pooled without a list to keep.

Run in this process as before: anything that does not load test__pool.py (`-p "test_x.py"`,
`python3 -m unittest test_x`), NAGENT_TEST_WORKERS=1, and a module with its own load_tests.

Data contract:
- job (pool -> worker, one JSON line on the command pipe): {"module", "path" (its sys.path
  entry), "ids" (test ids, in order), "tb_locals"}.
- event (worker -> pool, one JSON line on the event pipe): {"e": start | stop | success | failure
  | error | skip | xfail | xpass | sub | duration | done, "i": index in the job's ids, or "holder":
  the description of a class or module fixture error, "text": the formatted traceback (as the
  worker's unittest formats it), "reason", "sub": a subtest's description, "kind": the subtest's
  outcome, "secs", "out"/"err": what fds 1 and 2 got since the last event}.
- A worker's fds 1 and 2 are files of the pool (so a crash's last words are kept); a worker that
  dies mid-job has the test it was running reported as an error naming its exit status and last
  output, the rest of the job as one error, and a new worker takes the remaining jobs.
"""
import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
import traceback
import unittest
import unittest.case
import unittest.suite
import warnings

WORKERS_VARIABLE = "NAGENT_TEST_WORKERS"
DEFAULT_WORKERS = 3

# Measured seconds of the slowest classes on 2 cores (full suite, load 3-6): a hint for dealing
# the longest jobs first, so none starts last. A class not listed counts PER_TEST a test.
PER_TEST = 0.4
COSTS = {
    "test_sandbox_attacks.UnprivilegedNextRunTrust": 20, "test_sandbox_attacks.NextRunTrust": 16,
    "test_sandbox_attacks.UnprivilegedSocketsAndKeys": 12, "test_sandbox_attacks.SocketsAndKeys": 9,
    "test_sandbox_attacks.UnprivilegedEscapes": 7, "test_sandbox_attacks.Escapes": 6,
    "test_parallel_agents.FailingSiblings": 13, "test_parallel_agents.ConcurrentChildren": 19,
    "test_parallel_agents.InterruptedBatch": 10, "test_parallel_agents.AgentTable": 9,
    "test_shell_modes.ShellFactsTest": 22, "test_shell_modes.SandboxModes": 10,
    "test_mcp_servers.StdioServerTest": 25, "test_mcp_servers.LoopUsesMcpTest": 8,
    "test_faults_crash.CrashTest": 13, "test_live_tty.LiveTerminalTest": 20,
    "test_processes.SubAgentTimeout": 9, "test_processes.ExitSignals": 8,
    "test_batch_dask.DaskEngineTest": 8, "test_streaming.OpenAIStreamingTest": 8,
    "test_streaming.AnthropicStreamingTest": 7, "test_streaming.GoogleStreamingTest": 6,
    "test_zygote.ZygoteEqualsFreshTest": 9, "test_slow_server.InterruptedCallTest": 6,
    "test_safe_autonomy.ConfirmAnswers": 7, "test_safe_autonomy.DestructiveGuard": 6,
    "test_faults_hostile.BigInputTest": 7, "test_file_tools.ToolTimeoutTest": 6,
}


def worker_count():
    try:
        return max(1, int(os.environ.get(WORKERS_VARIABLE, DEFAULT_WORKERS)))
    except ValueError:
        return DEFAULT_WORKERS


def install(loader):
    """Pool every module `loader` loads from now on (once per loader; not inside a worker)."""
    if worker_count() < 2 or getattr(loader, "nagent_pool", None) is not None:
        return
    pool = loader.nagent_pool = Pool(worker_count())
    load_module = loader.loadTestsFromModule

    def load_pooled(module, *args, **kwargs):
        return pool.adopt(module, load_module(module, *args, **kwargs))
    loader.loadTestsFromModule = load_pooled


def flatten(suite):
    for test in suite:
        if isinstance(test, unittest.TestSuite):
            yield from flatten(test)
        else:
            yield test


def import_root(module):
    """The sys.path entry `module` was imported from."""
    root = os.path.dirname(os.path.abspath(module.__file__))
    for _ in range(module.__name__.count(".")):
        root = os.path.dirname(root)
    return root


class Unit:
    """One job: tests of one class (or module) run in order by one worker."""

    def __init__(self, module, root, tests, whole):
        self.module, self.root, self.tests = module, root, tests
        self.name = module if whole else f"{module}.{type(tests[0]).__name__}"
        self.cost = COSTS.get(self.name, PER_TEST * len(tests))
        self.events, self.finished, self.crash, self.running = [], False, None, None

    def job(self, tb_locals):
        return {"module": self.module, "path": self.root, "sys_path": sys.path,
                "ids": [test.id() for test in self.tests], "tb_locals": tb_locals}


class PooledModule(unittest.TestSuite):
    """A module's tests, run by the pool's workers and replayed into the result in order."""

    def __init__(self, pool, tests, units):
        super().__init__(tests)
        self.pool, self.units = pool, units

    def run(self, result, debug=False):
        self.pool.start(getattr(result, "tb_locals", False))
        for unit in self.units:
            if result.shouldStop:
                break
            replay(self.pool, unit, result)
        if result.shouldStop:
            self.pool.stop()
        return result


class Worker:
    def __init__(self, pool):
        self.pool, self.unit = pool, None
        self.out = tempfile.TemporaryFile()
        self.err = tempfile.TemporaryFile()
        self.seen = {"out": 0, "err": 0}
        command_read, self.commands = os.pipe()
        self.events, event_write = os.pipe()
        argv = [sys.executable, *subprocess._args_from_interpreter_flags(), __file__, "--worker",
                str(command_read), str(event_write)]
        self.proc = subprocess.Popen(argv, stdout=self.out, stderr=self.err,
                                     pass_fds=(command_read, event_write), env=pool.worker_env())
        os.close(command_read)
        os.close(event_write)
        self.reader = threading.Thread(target=self.read, daemon=True)
        self.reader.start()

    def send(self, unit):
        self.unit = unit
        if unit is None:
            self.close()
            return
        line = json.dumps(unit.job(self.pool.tb_locals)) + "\n"
        try:
            os.write(self.commands, line.encode())  # one short job at a time: never blocks
        except OSError:
            pass  # the worker is gone: its reader reports the job as not run

    def read(self):
        with open(self.events, "rb") as stream:
            for line in stream:
                event = json.loads(line)
                for name in ("out", "err"):
                    self.seen[name] += len(event.get(name, "").encode())
                self.pool.record(self, event)
        status = self.proc.wait()
        self.pool.worker_ended(self, status, self.last_words())

    def last_words(self):
        """What the worker wrote to fds 1 and 2 after its last event (a crash's own words)."""
        words = ""
        for name, stream in (("out", self.out), ("err", self.err)):
            stream.seek(self.seen[name])
            words += stream.read().decode("utf-8", "replace")[-4000:]
        return words

    def close(self):
        with self.pool.changed:
            if self.commands is not None:
                os.close(self.commands)
                self.commands = None


class Pool:
    def __init__(self, size):
        self.size, self.units, self.queue, self.workers = size, [], [], []
        self.started = self.stopped = False
        self.tb_locals, self.display = False, None
        self.changed = threading.Condition()

    @staticmethod
    def worker_env():
        """This environment; the one bytecode cache of the suite's child interpreters (base.py)."""
        env = dict(os.environ)
        base = sys.modules.get("base")
        if base is not None:
            env["NAGENT_TEST_PYCACHE"] = base.PYCACHE
        return env

    def adopt(self, module, suite):
        """`suite` (what the loader made of `module`) as a PooledModule, or as it is."""
        tests = list(flatten(suite))
        if not tests or hasattr(module, "load_tests") or not all(
                isinstance(test, unittest.TestCase) for test in tests):
            return suite
        whole = hasattr(module, "setUpModule") or hasattr(module, "tearDownModule")
        groups = []
        for test in tests:
            if groups and (whole or type(groups[-1][-1]) is type(test)):
                groups[-1].append(test)
            else:
                groups.append([test])
        root = import_root(module)
        units = [Unit(module.__name__, root, group, whole) for group in groups]
        self.units.extend(units)
        return PooledModule(self, tests, units)

    def start(self, tb_locals):
        with self.changed:
            if self.started:
                return
            self.started, self.tb_locals = True, tb_locals
            self.queue = list(self.units)
            atexit.register(self.finish)
            for _ in range(min(self.size, len(self.queue))):
                self._spawn()

    def _next(self, worker):
        """The first worker takes units in discovery order, so the report moves from the start;
        the others take the longest left, so none is started last."""
        if not self.queue or self.stopped:
            return None
        if worker is self.display:
            return self.queue.pop(0)
        longest = max(range(len(self.queue)), key=lambda index: self.queue[index].cost)
        return self.queue.pop(longest)

    def _spawn(self):
        worker = Worker(self)
        self.workers.append(worker)
        if self.display is None or self.display.proc.poll() is not None:
            self.display = worker
        worker.send(self._next(worker))

    def record(self, worker, event):
        with self.changed:
            unit = worker.unit
            if event["e"] == "done":
                unit.finished = True
                if "out" in event or "err" in event:
                    unit.events.append(event)
                worker.send(self._next(worker))
            else:
                unit.events.append(event)
            self.changed.notify_all()

    def worker_ended(self, worker, status, last_words):
        with self.changed:
            unit = worker.unit
            if unit is not None and not unit.finished:
                unit.crash = (f"the test worker (pid {worker.proc.pid}) ended with status "
                              f"{status} while running {unit.name}\n--- its last output ---\n"
                              f"{last_words}")
                unit.finished = True
                worker.close()
                if self.queue and not self.stopped:
                    self._spawn()
            self.changed.notify_all()

    def stop(self):
        """Failfast or an interrupt: no more jobs; end the running ones (SIGTERM, as a shutdown)."""
        with self.changed:
            self.stopped, self.queue = True, []
            workers = list(self.workers)
        for worker in workers:
            if worker.proc.poll() is None:
                worker.proc.terminate()

    def finish(self):
        """At exit: let each worker end its own way (its temp dirs, its zygote), then make sure."""
        with self.changed:
            self.stopped, self.queue = True, []
            workers = list(self.workers)
        for worker in workers:
            worker.close()
            try:
                worker.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                worker.proc.kill()
                worker.proc.wait()


class RemoteFailure(AssertionError):
    """A failure in a worker; its message is the worker's formatted traceback."""


class RemoteError(Exception):
    """An error in a worker; its message is the worker's formatted traceback."""


for _kind in (RemoteFailure, RemoteError):
    _kind.__module__ = "builtins"  # formatted as "RemoteError: ..." should the text stay


class RemoteSubTest(unittest.case._SubTest):
    """A subtest of a test this process holds, described as the worker described it."""

    def __init__(self, test, description):
        super().__init__(test, unittest.case._subtest_msg_sentinel, {})
        self.description = description

    def _subDescription(self):
        return self.description


def remote_error(test, kind, text):
    """An exc_info for `text`: a failure is of the test's failureException kind."""
    if kind == "failure":
        base = test.failureException
        exc_type = RemoteFailure if issubclass(RemoteFailure, base) else type(
            "RemoteFailure", (base,), {"__module__": "builtins"})
    else:
        exc_type = RemoteError
    return exc_type, exc_type(text.rstrip("\n")), None


def keep_text(entries, test, err, text):
    """unittest formatted our stand-in exception: put the worker's traceback text in its place."""
    if not entries or entries[-1][0] is not test:
        return
    line = f"{err[0].__qualname__}: {err[1]}\n"
    stored = entries[-1][1]
    if stored.startswith(line):
        entries[-1] = (test, text + stored[len(line):])


def replay(pool, unit, result):
    seen = 0
    while True:
        with pool.changed:
            # a second at a time: an interrupt (unittest -c) stops the wait
            if not pool.changed.wait_for(lambda: len(unit.events) > seen or unit.finished, 1):
                if result.shouldStop:
                    return
                continue
            batch, finished = unit.events[seen:], unit.finished
        seen += len(batch)
        for event in batch:
            apply(event, unit, result)
            if result.shouldStop:
                return
        if finished and seen == len(unit.events):
            break
    if unit.crash:
        report_crash(unit, result)


def apply(event, unit, result):
    if event.get("out"):
        sys.stdout.write(event["out"])
        sys.stdout.flush()
    if event.get("err"):
        sys.stderr.write(event["err"])
        sys.stderr.flush()
    kind = event["e"]
    if kind == "done":
        return
    if "holder" in event:
        test = unittest.suite._ErrorHolder(event["holder"])
    else:
        test = unit.tests[event["i"]]
        unit.running = test if kind == "start" else (None if kind == "stop" else unit.running)
    if kind == "start":
        result.startTest(test)
    elif kind == "stop":
        result.stopTest(test)
    elif kind == "success":
        result.addSuccess(test)
    elif kind in ("failure", "error"):
        err = remote_error(test, kind, event["text"])
        (result.addFailure if kind == "failure" else result.addError)(test, err)
        keep_text(result.failures if kind == "failure" else result.errors, test, err, event["text"])
    elif kind == "skip":
        result.addSkip(test, event["reason"])
    elif kind == "xfail":
        err = remote_error(test, "error", event["text"])
        result.addExpectedFailure(test, err)
        keep_text(result.expectedFailures, test, err, event["text"])
    elif kind == "xpass":
        result.addUnexpectedSuccess(test)
    elif kind == "sub":
        subtest = RemoteSubTest(test, event["sub"])
        if event["kind"] == "success":
            result.addSubTest(test, subtest, None)
        else:
            err = remote_error(test, event["kind"], event["text"])
            result.addSubTest(test, subtest, err)
            keep_text(result.failures if event["kind"] == "failure" else result.errors, subtest,
                      err, event["text"])
    elif kind == "duration" and hasattr(result, "addDuration"):
        result.addDuration(test, event["secs"])


def report_crash(unit, result):
    running = unit.running
    started = {event["i"] for event in unit.events if event["e"] == "start" and "i" in event}
    if running is not None:
        err = remote_error(running, "error", unit.crash)
        result.addError(running, err)
        keep_text(result.errors, running, err, unit.crash)
        result.stopTest(running)
    left = [test.id() for index, test in enumerate(unit.tests) if index not in started]
    if left:
        holder = unittest.suite._ErrorHolder(f"{unit.name} (not run: its worker died)")
        text = "\n".join(left) + "\n" + ("" if running is not None else unit.crash)
        err = remote_error(holder, "error", text)
        result.addError(holder, err)
        keep_text(result.errors, holder, err, text)


# -- the worker ------------------------------------------------------------------------------

class EventResult(unittest.TestResult):
    """Sends each outcome of one job to the pool as it happens."""

    def __init__(self, emit, tests, tb_locals):
        super().__init__()
        self.emit, self.tb_locals = emit, tb_locals
        self.index = {id(test): index for index, test in enumerate(tests)}

    def _who(self, test):
        if id(test) in self.index:
            return {"i": self.index[id(test)]}
        return {"holder": str(test)}

    def _send(self, event, test, **fields):
        self.emit(dict(e=event, **self._who(test), **fields))

    def startTest(self, test):
        super().startTest(test)
        self._send("start", test)

    def stopTest(self, test):
        super().stopTest(test)
        self._send("stop", test)

    def addSuccess(self, test):
        self._send("success", test)

    def addFailure(self, test, err):
        self._send("failure", test, text=self._exc_info_to_string(err, test))

    def addError(self, test, err):
        self._send("error", test, text=self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        self._send("skip", test, reason=reason)

    def addExpectedFailure(self, test, err):
        self._send("xfail", test, text=self._exc_info_to_string(err, test))

    def addUnexpectedSuccess(self, test):
        self._send("xpass", test)

    def addSubTest(self, test, subtest, err):
        fields = {"sub": subtest._subDescription(), "kind": "success"}
        if err is not None:
            fields["kind"] = "failure" if issubclass(err[0], test.failureException) else "error"
            fields["text"] = self._exc_info_to_string(err, test)
        self._send("sub", test, **fields)

    def addDuration(self, test, elapsed):
        self._send("duration", test, secs=elapsed)


class Capture:
    """What fds 1 and 2 (files of the pool) got since the last look."""

    def __init__(self):
        self.seen = {1: self._size(1), 2: self._size(2)}

    @staticmethod
    def _size(fd):
        try:
            return os.fstat(fd).st_size
        except OSError:
            return None

    def take(self):
        for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
            try:
                stream.flush()
            except (AttributeError, ValueError, OSError):
                pass
        taken = {}
        for fd, name in ((1, "out"), (2, "err")):
            size = self._size(fd)
            if size is None or self.seen[fd] is None or size <= self.seen[fd]:
                continue
            data = os.pread(fd, size - self.seen[fd], self.seen[fd])
            self.seen[fd] += len(data)
            taken[name] = data.decode("utf-8", "replace")
        return taken


def run_job(job, loader, emit):
    sys.path[:] = job["sys_path"]  # the pool's, as discovery left it: the same imports
    if job["path"] not in sys.path:
        sys.path.insert(0, job["path"])
    try:
        module = __import__(job["module"])
        for part in job["module"].split(".")[1:]:
            module = getattr(module, part)
        loaded = {}
        for test in flatten(loader.loadTestsFromModule(module)):
            loaded.setdefault(test.id(), []).append(test)
        tests = [loaded[test_id].pop(0) for test_id in job["ids"]]
    except Exception:  # the pool's own process imported and loaded it: report, do not die
        emit({"e": "error", "holder": f"{job['module']} (in the test worker)",
              "text": traceback.format_exc()})
        return
    result = EventResult(emit, tests, job["tb_locals"])
    unittest.TestSuite(tests).run(result)


def worker(command_fd, event_fd):
    os.set_inheritable(command_fd, False)
    os.set_inheritable(event_fd, False)
    if not sys.warnoptions:
        warnings.simplefilter("default")  # as `python3 -m unittest` runs its tests
    capture = Capture()
    events = os.fdopen(event_fd, "w", encoding="utf-8")

    def emit(event):
        event.update(capture.take())
        events.write(json.dumps(event) + "\n")
        events.flush()

    loader = unittest.TestLoader()
    with os.fdopen(command_fd, "r", encoding="utf-8") as commands:
        for line in commands:
            run_job(json.loads(line), loader, emit)
            emit({"e": "done"})


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    worker(int(sys.argv[2]), int(sys.argv[3]))
