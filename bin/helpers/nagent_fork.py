"""One of nagent's own tools run in a fork of this process: a nested edit session that pays for
no second interpreter start and no second provider SDK import (0.6-1.5 s each, issue 20).

Data contract: `fork_tool(name, args, env, cwd, files) -> Forked`. The child process (os.fork,
called from the main thread) runs tool `name`'s `run()` (nagent_install.TOOLS) as `NAME args`
would: `env` as its whole environment, `cwd`, and `files` (three open binary files) as its
fds 0, 1 and 2. It stays in this process group (a terminal's Ctrl-C reaches it, as it reaches
an exec'd child) and gets SIGTERM when this process dies (PR_SET_PDEATHSIG: it holds copies of
our descriptors, the conversation lock's among them, and must not outlive us holding them). It
uses nothing of this process's running state: new sys.stdin/stdout/stderr
objects over its own fds (another thread may hold the old objects' locks at the fork), the
signal handlers Python starts with, the temp directory looked up again, this process's objects
frozen out of garbage collection (no finalizer of ours runs in it), and it ends with os._exit
after flushing its streams (none of our atexit functions run: the child starts with none, so a
tool that ends with nagent_cli.exit_now runs only its own). A tool that raises SystemExit
exits with its code; an uncaught error prints its traceback and exits 1.
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
import traceback

from nagent_install import TOOLS

PR_SET_PDEATHSIG = 1


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


def fork_tool(name, args, env, cwd, files):
    module = TOOLS[name]
    for handle in files:
        handle.flush()
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return Forked(pid, [name, *args])
    code = 1
    try:
        code = _child(module, name, args, env, cwd, files, parent)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:   # noqa: B036 - a child must never return into the parent's frames
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:   # noqa: B036
                pass
        os._exit(code & 0xFF)


def _die_with(parent):
    """SIGTERM when `parent` dies; if it already has, end now."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent:
        os._exit(143)


def _child(module, name, args, env, cwd, files, parent):
    gc.freeze()
    atexit._clear()
    for fd, handle in enumerate(files):
        os.dup2(handle.fileno(), fd)
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGPIPE):
        signal.signal(signum, signal.SIG_DFL if signum != signal.SIGPIPE else signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _die_with(parent)
    sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False,
                      buffering=1)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None
    sys.argv = [name, *args]
    return importlib.import_module(module).run()
