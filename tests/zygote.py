"""A fork server for the suite's runs of the bin/ tools.

Why: a fresh `python3 bin/nagent` spends 0.4-1 s of CPU importing a provider SDK before its first
model call, and the suite runs the tools several hundred times; that import was most of its time.
The zygote process imports the SDKs and the helpers once and forks one child per run. Each child
is a separate process that runs the bin/ file itself (runpy, as __main__) with the run's own argv,
environment, cwd and stdin/stdout/stderr files, so its files, locks, exit code, signals and death
behave as the tool's. What a child shares with its zygote is only what an import leaves behind.

Data contract:
- `Zygote(root, warm=False)` starts the server (`root`: a private dir for its warm-up run);
  `spawn(script, args, env, cwd, stdout, stderr, stdin=None, detach=False)` forks a run and
  returns a `Forked` (poll / wait / kill / returncode, like subprocess.Popen; its exit is keyed
  by the spawn's serial, not its pid: pids are reused, pid_max is 32768); `run(script, args,
  env, cwd, input, timeout, detach=False)` runs one to the end and returns a text
  subprocess.CompletedProcess, raising subprocess.TimeoutExpired (after killing the child) as
  subprocess.run does. `detach`: the child starts a new session (no controlling terminal).
- `shared()` is this test process's one zygote (started on first use, closed at exit).
- A child's exit code follows the interpreter's: SystemExit's code (a message goes to stderr and
  exits 1), 1 after an uncaught exception's traceback, and non-daemon threads and atexit
  functions run before it exits. The zygote is single-threaded (safe to fork), reaps its
  children and only ever kills its own live children.

What differs from a fresh interpreter, and so stays with `fresh=True` runs: the modules a run
imports are already in sys.modules (a test of lazy imports or start-up cost needs a fresh
process), and interpreter start-up settings (locale coercion, PYTHON* variables, -X options) are
the zygote's, taken from the suite's clean environment.
"""
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading

from base import BIN, HELPERS, clean_environ

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote_server.py")


class Zygote:
    def __init__(self, root, warm=False):
        self.root = root
        self.proc = subprocess.Popen([sys.executable, SERVER, HELPERS], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=clean_environ(),
                                     cwd=root)
        self.init_state()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        if warm:
            self._warm_up()

    def _warm_up(self):
        from fakes import FakeVendor
        with FakeVendor() as fake:
            fake.reply_fn(lambda record: "<nagent-response>warm</nagent-response>")
            env = dict(clean_environ(), HOME=self.root, NAGENT_NO_SPINNER="1", **fake.env())
            self.send({"op": "warm", "script": os.path.join(BIN, "nagent"), "args": ["warm up"],
                       "env": env, "cwd": self.root})
            try:
                self.wait_for(lambda: self.events["warm"], "no warm-up")
                if self.events["warm"][0] != 0:
                    raise AssertionError(f"zygote: warm-up run exited {self.events['warm'][0]}")
            except AssertionError:
                self.close()
                raise

    def init_state(self):
        self.events = {"spawned": {}, "exit": {}, "warm": {}}
        self.spawned, self.exits, self.serial = self.events["spawned"], self.events["exit"], 0
        self.gone = False
        self.changed = threading.Condition()
        self.send_lock = threading.Lock()

    def record(self, line):
        """One report of the server: `spawned ID PID`, `exit ID CODE` or `warm 0 CODE`."""
        word, key, value = line.split()
        with self.changed:
            self.events[word][int(key)] = int(value)
            self.changed.notify_all()

    def _read(self):
        for line in self.proc.stdout:
            self.record(line)
        with self.changed:
            self.gone = True  # the zygote died: nobody waits for it any longer
            self.changed.notify_all()

    def wait_for(self, predicate, what, timeout=120):
        with self.changed:
            if not self.changed.wait_for(lambda: predicate() or self.gone, timeout=timeout) \
                    or not predicate():
                raise AssertionError(f"zygote: {what}")

    def send(self, job):
        with self.send_lock:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()

    def spawn(self, script, args, env, cwd, stdout, stderr, stdin=None, detach=False):
        with self.send_lock:
            self.serial += 1
            serial = self.serial
        self.send({"op": "spawn", "id": serial, "script": script, "args": list(args), "env": env,
                   "cwd": cwd, "stdout": stdout, "stderr": stderr, "stdin": stdin,
                   "detach": detach})
        self.wait_for(lambda: serial in self.spawned, "no fork")
        with self.changed:
            return Forked(self, self.spawned.pop(serial), serial)

    def run(self, script, args, env, cwd, input=None, timeout=120, detach=False):
        scratch = tempfile.mkdtemp(prefix="run-", dir=self.root)
        try:
            stdout, stderr = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
            stdin = None
            if input is not None:
                stdin = os.path.join(scratch, "stdin")
                with open(stdin, "w", encoding="utf-8", newline="") as handle:
                    handle.write(input)
            child = self.spawn(script, args, env, cwd, stdout, stderr, stdin, detach)
            try:
                code = child.wait(timeout)
            except AssertionError:
                child.kill()
                child.wait(30)
                raise subprocess.TimeoutExpired([script, *args], timeout, read_text(stdout),
                                                read_text(stderr)) from None
            return subprocess.CompletedProcess([sys.executable, script, *args], code,
                                               read_text(stdout), read_text(stderr))
        finally:
            shutil.rmtree(scratch, True)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.reader.join(timeout=30)
        self.proc.stdout.close()


class Forked:
    """poll / kill / wait / returncode of a zygote child, like subprocess.Popen. Its exit is
    found by its spawn serial: its pid may since belong to another child."""

    def __init__(self, zygote, pid, serial):
        self.zygote, self.pid, self.serial = zygote, pid, serial

    @property
    def returncode(self):
        return self.zygote.exits.get(self.serial)

    def poll(self):
        return self.returncode

    def kill(self):
        self.zygote.send({"op": "kill", "id": self.serial})

    def wait(self, timeout=60):
        self.zygote.wait_for(lambda: self.serial in self.zygote.exits,
                             f"child {self.pid} did not exit", timeout)
        return self.returncode


def read_text(path):
    """A run's output as subprocess.run(text=True) gives it: universal newlines."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return ""


_shared = []
_shared_lock = threading.Lock()


def shared():
    """This test process's zygote, started on first use and closed when the process exits."""
    with _shared_lock:
        if not _shared:
            root = tempfile.mkdtemp(prefix="nagent-test-zygote-")
            zygote = Zygote(root, warm=True)
            _shared.append(zygote)
            atexit.register(shutil.rmtree, root, True)
            atexit.register(zygote.close)
        return _shared[0]
