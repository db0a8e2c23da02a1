"""One of nagent's own tools run in a fork of this process: a sub-agent or a nested edit session
that pays for no second interpreter start and no second provider SDK import (0.6-1.5 s each,
issue 20), nor for building the SDK's response types again (issue 25: children that start warm).

Data contract: `fork_tool(name, args, env, cwd, files) -> Forked` runs tool `name`'s `run()`
(nagent_install.TOOLS) as `NAME args` would; `fork_call(fn, argv, env, cwd, files) -> Forked`
runs `fn()` (its return value the exit code) with `argv` as sys.argv. The child process
(os.fork) gets `env` as its whole environment, `cwd`, and `files` (three open binary files) as
its fds 0, 1 and 2. `warm_start_possible() -> bool` says whether a fork is safe now: only from
the main thread (PR_SET_PDEATHSIG follows the thread that forks), and never while another thread
holds a module's import lock (the child would wait on it forever: a fork copies only the calling
thread); when it says no, the caller starts the tool as a new process (nagent_install.tool_argv).
The child is what an exec'd process would be, with this process's loaded modules:
- descriptors: every close-on-exec descriptor it inherited (the parent's connection pools'
  sockets, its conversation file and flock, pidfds, a terminal) is pointed at /dev/null, so it
  can neither use them, nor keep a connection or lock alive, nor release the parent's flock
  (a flock belongs to the open file, shared by both copies); the numbers stay taken, so no stale
  object of the parent can close a descriptor the child opens later. Inheritable descriptors
  stay, as through exec.
- signals: every handler set from Python goes back to SIG_DFL (SIGINT to Python's own, SIGPIPE
  ignored), the signal mask is emptied, no wakeup fd.
- threads, locks, state: only the forking thread exists (the live view's, the typeahead's and
  the snapshot thread's are gone; their objects are never used); new sys.stdin/stdout/stderr
  objects over its own fds (another thread may hold the old objects' locks at the fork; the old
  ones are kept alive, unflushed, so the parent's pending output never lands in the child's); the
  temp directory looked up again; this process's objects frozen out of garbage collection (no
  finalizer of ours runs in it); the parent's stack frames are never unwound (no `finally` or
  `with` exit of the parent runs): it ends with os._exit after flushing its streams (it starts
  with no atexit functions, so a tool that ends with nagent_exit.exit_now runs only its own).
  A tool that raises SystemExit exits with its code; an uncaught error prints its traceback
  and exits 1.
- its lifetime: it stays in this process group (a terminal's Ctrl-C reaches it, as it reaches
  an exec'd child) and gets SIGTERM when this process dies (PR_SET_PDEATHSIG).
`Forked`: pid, returncode, poll(), wait(timeout=None) (subprocess.TimeoutExpired), send_signal,
kill: what nagent_agents and nagent_procs use of a subprocess.Popen.
"""
import atexit
import gc
import importlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import traceback

from nagent_install import TOOLS

PR_SET_PDEATHSIG = 1
FD_DIR = "/proc/self/fd"


class Forked:
    def __init__(self, pid, args):
        self.pid, self.args, self.returncode = pid, args, None

    def poll(self):
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None and timeout is not None:
            fd = os.pidfd_open(self.pid)
            try:
                if not select.select([fd], [], [], timeout)[0]:
                    raise subprocess.TimeoutExpired(self.args, timeout)
            finally:
                os.close(fd)
        if self.returncode is None:
            try:
                self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            except ChildProcessError:
                pass
        return self.returncode

    def send_signal(self, signum):
        if self.poll() is None:
            os.kill(self.pid, signum)

    def kill(self):
        self.send_signal(signal.SIGKILL)


def warm_start_possible():
    if not (hasattr(os, "fork") and hasattr(os, "pidfd_open") and os.path.isdir(FD_DIR)):
        return False
    if threading.current_thread() is not threading.main_thread():
        return False
    return threading.active_count() == 1 or not _import_held_elsewhere()


def _import_held_elsewhere():
    """True when another thread is inside an import (or when that cannot be seen)."""
    try:
        refs = list(importlib._bootstrap._module_locks.values())
    except (AttributeError, RuntimeError):
        return True
    me = threading.get_ident()
    for ref in refs:
        lock = ref() if callable(ref) else ref
        owner = getattr(lock, "owner", None)
        if owner not in (None, me):
            return True
    return False


def fork_tool(name, args, env, cwd, files):
    module = TOOLS[name]
    return fork_call(lambda: importlib.import_module(module).run(), [name, *args], env, cwd, files)


def fork_call(fn, argv, env, cwd, files):
    for handle in files:
        handle.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return Forked(pid, list(argv))
    code, kept = 1, None
    try:
        kept = _become_child(argv, env, cwd, files, parent)
        code = fn()
        code = 0 if code is None else code
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:   # noqa: B036 - a child must never return into the parent's frames
        try:
            traceback.print_exc()
        except BaseException:   # noqa: B036
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:   # noqa: B036
                pass
        os._exit(code & 0xFF if isinstance(code, int) else 1)


def _die_with(parent):
    """SIGTERM when `parent` dies; if it already has, end now."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(143)


def _reset_signals():
    """The dispositions an exec'd Python starts with: Python's handlers are the parent's."""
    for signum in signal.valid_signals():
        try:
            if callable(signal.getsignal(signum)):
                signal.signal(signum, signal.SIG_DFL)
        except (OSError, ValueError, RuntimeError):
            pass
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.set_wakeup_fd(-1)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())


def _retire_descriptors():
    """Point each inherited close-on-exec descriptor above 2 at /dev/null (see the contract)."""
    null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        for name in os.listdir(FD_DIR):
            fd = int(name)
            if fd <= 2 or fd == null:
                continue
            try:
                if not os.get_inheritable(fd):
                    os.dup2(null, fd, inheritable=False)
            except OSError:
                pass   # the listing's own descriptor, closed by now
    finally:
        os.close(null)


def _become_child(argv, env, cwd, files, parent):
    """Returns the parent's stream objects: the caller keeps them until os._exit, as nothing
    else may (an object that went with its last reference would flush the parent's pending
    output into the child's fd 1 or 2)."""
    gc.freeze()
    atexit._clear()
    for fd, handle in enumerate(files):
        os.dup2(handle.fileno(), fd)
    _retire_descriptors()
    _reset_signals()
    _die_with(parent)
    parents = (sys.stdin, sys.stdout, sys.stderr)
    sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False,
                      buffering=1)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None
    sys.argv = list(argv)
    return parents
