"""Hermetic test base shared by every nagent test.

Data contract: `HermeticTestCase` gives each test a temp dir (`self.tmp`), a temp HOME
(`self.home`), a temp cwd (`self.cwd`, also the process cwd during the test), an
environment dict (`self.env`) with every provider key variable and base URL removed,
`NAGENT_CONFIG` pointing at `self.config_path` (an empty "{}" until `write_config` replaces it:
a NAGENT_CONFIG naming a missing file is an error),
`NAGENT_NO_SPINNER=1`, and `TMPDIR` inside the temp dir. `run_tool(name, *args, input=...)`
runs a real bin/ executable as a separate process with that environment (a child of the
suite's zygote, tests/zygote.py; `fresh=True` or a class's `FRESH_RUNS` execs a new
interpreter) and returns a CompletedProcess with text stdout/stderr. In-process code under test should receive
`self.env` explicitly or run inside `with self.patched_environ():`. `startup_seconds(module)` is
the measured start-up of a fresh interpreter importing `module`, for timeouts derived from it.
"""
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import unittest
from contextlib import contextmanager

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, "bin")
HELPERS = os.path.join(BIN, "helpers")
TESTS = os.path.dirname(os.path.abspath(__file__))
if HELPERS not in sys.path:
    sys.path.insert(0, HELPERS)

# Child interpreters share one bytecode cache outside the repo and outside every test's tree:
# a PYTHONDONTWRITEBYTECODE child recompiles every helper it imports (30-90 ms a process).
# The suite's worker processes (tests/pool.py) share their pool's: each helper compiles once.
PYCACHE = os.environ.get("NAGENT_TEST_PYCACHE")
if not PYCACHE:
    PYCACHE = tempfile.mkdtemp(prefix="nagent-test-pycache-")
    atexit.register(shutil.rmtree, PYCACHE, True)

# A runner a non-interactive shell started in the background (`cmd &`) has SIGINT ignored, and
# every tool it starts would inherit that and never see the Ctrl-C the interrupt tests send.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

SCRUBBED_PREFIXES = ("OPENAI_", "ANTHROPIC_", "GOOGLE_", "GEMINI_", "CURSOR_", "NAGENT_",
                     "OPENROUTER_", "STY", "WINDOW", "BASHPID", "TMUX")


def clean_environ(base=None):
    base = os.environ if base is None else base
    env = {}
    for name, value in base.items():
        if name.startswith(SCRUBBED_PREFIXES) or name.endswith(("_API_KEY", "_TOKEN")):
            continue
        if name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                    "all_proxy"):
            continue
        env[name] = value
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = PYCACHE
    return env


STARTUP_VARIABLES = ("LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE")


def zygote_can_run(env):
    """A zygote child keeps the interpreter start-up of the zygote, which ran with the clean
    environment: a run whose environment would start the interpreter differently is fresh."""
    clean = clean_environ()
    return all(env.get(name) == clean.get(name) for name in STARTUP_VARIABLES) and all(
        env.get(name) == clean.get(name) for name in set(env) | set(clean)
        if name.startswith("PYTHON") and name != "PYTHONPYCACHEPREFIX")


def startup_seconds(module="google.genai"):
    """Seconds a fresh interpreter takes, here and now, to start and import `module`: the floor
    of every tool process that calls a model. A test that bounds such a process derives its
    timeout from this, with a margin, never from a guess that holds only on an idle machine.
    Measured at each call (about a second): the load of a shared machine changes by the minute."""
    import time
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", f"import {module}"], env=clean_environ(),
                   capture_output=True, check=True, timeout=300)
    return time.monotonic() - started


class HermeticTestCase(unittest.TestCase):
    maxDiff = None
    # True for tests that look at what only an exec'd interpreter has: /proc/PID/environ and
    # cmdline are the zygote's for a forked run.
    FRESH_RUNS = False

    def setUp(self):
        super().setUp()
        self.tmp = os.path.realpath(tempfile.mkdtemp(prefix="nagent-test-"))
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.home = os.path.join(self.tmp, "home")
        self.cwd = os.path.join(self.tmp, "work")
        self.tmpdir = os.path.join(self.tmp, "tmpdir")
        for path in (self.home, self.cwd, self.tmpdir):
            os.makedirs(path)
        self.config_path = os.path.join(self.tmp, "config.json")
        self.write_config({})
        env = clean_environ()
        env.update(HOME=self.home, NAGENT_CONFIG=self.config_path, NAGENT_NO_SPINNER="1",
                   TMPDIR=self.tmpdir)
        self.env = env
        old_cwd = os.getcwd()
        os.chdir(self.cwd)
        self.addCleanup(os.chdir, old_cwd)

    # -- helpers ---------------------------------------------------------------------
    def write_config(self, data):
        with open(self.config_path, "w", encoding="utf-8") as handle:
            json.dump(data, handle)
        return self.config_path

    def write_file(self, relpath, content, mode="w"):
        path = relpath if os.path.isabs(relpath) else os.path.join(self.cwd, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8", "newline": ""})) as handle:
            handle.write(content)
        return path

    def run_tool(self, name, *args, input=None, env=None, timeout=120, cwd=None, fresh=False,
                 detach=False):
        """Run bin/NAME to the end. By default the run is a child of the suite's zygote (see
        tests/zygote.py: a separate process with the SDKs already imported); `fresh=True`, or an
        environment that changes interpreter start-up, runs a new interpreter instead.
        `detach`: in a new session, without a controlling terminal (nothing can be asked)."""
        env = self.env if env is None else env
        cwd = self.cwd if cwd is None else cwd
        script = os.path.join(BIN, name)
        if not (fresh or self.FRESH_RUNS) and zygote_can_run(env):
            import zygote
            return zygote.shared().run(script, args, env, cwd, input=input, timeout=timeout,
                                       detach=detach)
        return subprocess.run([sys.executable, script, *args], input=input, capture_output=True,
                              text=True, env=env, timeout=timeout, cwd=cwd,
                              start_new_session=detach)

    def assertCleanError(self, proc, code=None, contains=None):
        """A failed command: non-zero (or `code`), one `Error:` line, no traceback."""
        if code is None:
            self.assertNotEqual(proc.returncode, 0, proc.stderr)
        else:
            self.assertEqual(proc.returncode, code, proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        error_lines = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
        self.assertEqual(len(error_lines), 1, proc.stderr)
        if contains:
            self.assertIn(contains, error_lines[0])

    def make_outside_dir(self):
        """A scratch dir outside every temp root (/tmp, /var/tmp, $TMPDIR), where main-mode writes
        are refused. The test tree itself lives under /tmp, and so may a CI checkout."""
        for parent in ("/dev/shm", REPO, self.home):
            real = os.path.realpath(parent)
            if os.access(real, os.W_OK) and not real.startswith(("/tmp/", "/var/tmp/")):
                path = os.path.realpath(tempfile.mkdtemp(prefix="nagent-outside-", dir=real))
                self.addCleanup(shutil.rmtree, path, True)
                return path
        self.skipTest("needs a writable directory outside the temp roots")

    @contextmanager
    def patched_environ(self):
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(self.env)
        try:
            yield
        finally:
            os.environ.clear()
            os.environ.update(saved)
