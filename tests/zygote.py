"""A fork server for the suite's runs of the bin/ tools.

Why: a fresh `python3 bin/nagent` spends 0.4-1 s of CPU importing a provider SDK before its first
model call, and the suite runs the tools several hundred times; that import was most of its time.
The zygote process imports the SDKs and the helpers once and forks one child per run. Each child
is a separate process that runs the bin/ file itself (runpy, as __main__) with the run's own argv,
environment, cwd and stdin/stdout/stderr files, so its files, locks, exit code, signals and death
behave as the tool's. What a child shares with its zygote is only what an import leaves behind.

Data contract:
- `Zygote(root, warm=False)` starts the server (`root`: a private dir for its warm-up run);
  `spawn(script, args, env, cwd, stdout, stderr, stdin=None)` forks a run and returns a `Forked`
  (poll / wait / kill / returncode, like subprocess.Popen); `run(script, args, env, cwd, input,
  timeout)` runs one to the end and returns a text subprocess.CompletedProcess, raising
  subprocess.TimeoutExpired (after killing the child) as subprocess.run does.
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

ZYGOTE_SOURCE = r"""
import json, os, runpy, select, sys
sys.path.insert(0, sys.argv[1])
# The imports every fresh tool pays for; the helpers' own import order is kept by importing
# the entry modules, which pull in the rest.
import openai, anthropic, google.genai, google.genai.types, yaml  # noqa: F401
import nagent_main, nagent_commands, nagent_loop, nagent_session, nagent_actions  # noqa: F401
import nagent_provider_openai, nagent_provider_anthropic, nagent_provider_google  # noqa: F401
try:
    import anyio, anyio.lowlevel, mcp, mcp.client.stdio, mcp.client.streamable_http  # noqa: F401
    import nagent_main_mcp, nagent_mcp_client  # noqa: F401
except ImportError:
    pass  # the optional MCP SDK: nagent-mcp runs then report it missing, as they would
children, buffer = set(), b""

def say(*words):
    sys.stdout.write(" ".join(map(str, words)) + "\n")
    sys.stdout.flush()

def exit_code(stop):
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)
    return 1

def finish(code):
    # What interpreter shutdown does before the process ends: join non-daemon threads, run
    # atexit functions, flush the standard streams.
    import atexit, threading
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)

def child(job):
    code = 1
    try:
        import tempfile
        tempfile.tempdir = None  # a fresh process reads TMPDIR on first use
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        stdin = job.get("stdin") or os.devnull
        for fd, path, flags in ((0, stdin, os.O_RDONLY),
                                (1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        sys.argv = [job["script"], *job["args"]]
        runpy.run_path(job["script"], run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = exit_code(stop)
    except KeyboardInterrupt:
        import signal, traceback
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        finish(code)

def warm(job):
    # One real run in the zygote itself: the SDK's lazy imports and type caches are filled
    # once here instead of in every child. What the run leaves in the process (signal
    # handlers, the dumpable flag, the temp dir cache) is put back.
    import contextlib, ctypes, gc, io, signal, tempfile
    saved, cwd = dict(os.environ), os.getcwd()
    handlers = {sig: signal.getsignal(sig) for sig in signal.valid_signals()
                if sig not in (signal.SIGKILL, signal.SIGSTOP)}
    os.environ.update(job["env"])
    os.chdir(job["cwd"])
    sys.argv = [job["script"], *job["args"]]
    code = 0
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            runpy.run_path(job["script"], run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except BaseException:
        code = 1
    for sig, handler in handlers.items():
        if handler is not None:
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError):
                pass
    ctypes.CDLL(None, use_errno=True).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE back on
    tempfile.tempdir = None
    os.environ.clear()
    os.environ.update(saved)
    os.chdir(cwd)
    gc.collect()
    gc.freeze()  # children's collections then leave the shared pages alone (no copy-on-write)
    say("warm", 0, code)

while True:
    ready = select.select([0], [], [], 0.005)[0]
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        children.discard(pid)
        say("exit", pid, os.waitstatus_to_exitcode(status))
    data = os.read(0, 65536) if ready else b"-"
    if not data:
        break
    buffer += data if ready else b""
    while b"\n" in buffer:
        line, buffer = buffer.split(b"\n", 1)
        job = json.loads(line)
        if job["op"] == "warm":
            warm(job)
        elif job["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                child(job)
            children.add(pid)
            say("spawned", job["id"], pid)
        elif job["op"] == "kill" and job["pid"] in children:
            os.kill(job["pid"], 9)
for pid in children:
    os.kill(pid, 9)
"""


class Zygote:
    def __init__(self, root, warm=False):
        self.root = root
        self.proc = subprocess.Popen([sys.executable, "-c", ZYGOTE_SOURCE, HELPERS], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=clean_environ(),
                                     cwd=root)
        self.events = {"spawned": {}, "exit": {}, "warm": {}}
        self.spawned, self.exits, self.serial = self.events["spawned"], self.events["exit"], 0
        self.gone = False
        self.changed = threading.Condition()
        self.send_lock = threading.Lock()
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

    def _read(self):
        for line in self.proc.stdout:
            word, key, value = line.split()
            with self.changed:
                self.events[word][int(key)] = int(value)
                self.changed.notify_all()
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

    def spawn(self, script, args, env, cwd, stdout, stderr, stdin=None):
        with self.send_lock:
            self.serial += 1
            serial = self.serial
        self.send({"op": "spawn", "id": serial, "script": script, "args": list(args), "env": env,
                   "cwd": cwd, "stdout": stdout, "stderr": stderr, "stdin": stdin})
        self.wait_for(lambda: serial in self.spawned, "no fork")
        with self.changed:
            return Forked(self, self.spawned.pop(serial))

    def run(self, script, args, env, cwd, input=None, timeout=120):
        scratch = tempfile.mkdtemp(prefix="run-", dir=self.root)
        try:
            stdout, stderr = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
            stdin = None
            if input is not None:
                stdin = os.path.join(scratch, "stdin")
                with open(stdin, "w", encoding="utf-8", newline="") as handle:
                    handle.write(input)
            child = self.spawn(script, args, env, cwd, stdout, stderr, stdin)
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
    """poll / kill / wait / returncode of a zygote child, like subprocess.Popen."""

    def __init__(self, zygote, pid):
        self.zygote, self.pid = zygote, pid

    @property
    def returncode(self):
        return self.zygote.exits.get(self.pid)

    def poll(self):
        return self.returncode

    def kill(self):
        self.zygote.send({"op": "kill", "pid": self.pid})

    def wait(self, timeout=60):
        self.zygote.wait_for(lambda: self.pid in self.zygote.exits, f"child {self.pid} did not exit",
                             timeout)
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
