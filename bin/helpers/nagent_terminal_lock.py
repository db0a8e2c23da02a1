"""One reader of the controlling terminal at a time, across the nagent processes that share it.

Data contract: `terminal_held(environ=None)` is a context manager; while one holder has it, no
other thread of this process and no other nagent process on the same controlling terminal
does. Whoever reads the terminal takes it: an approval question (nagent_approval.ask_on_tty,
for the whole question, whether the run itself, a sub-agent or a nested edit session asks) and
the interactive session's reader of text typed during a run (nagent_typeahead, for each read
of keys already waiting), so an answer is read by the question that asked for it.
- Across processes: a POSIX record lock (lockf) on ~/.nagent/run/tty-{N}.lock, N the
  controlling terminal's device number (nagent_pids.controlling_tty): not inherited by a fork,
  released when its holder ends, however it ends.
- Within a process: a thread lock, replaced in a forked child (a fork taken while another
  thread held it would leave the child's first question waiting forever).
Without a controlling terminal, or when the lock file cannot be opened, only the thread lock.
- `terminal_held(environ, showing=True)`: the holder also writes on the terminal (an approval
  question): a count of such holds, kept in the lock file (and in this process), goes up.
- `terminal_free(environ=None, wait=False)`: for a live view that redraws in place (the status
  line, the table of sub-agents: nagent_display), held around each redraw. It yields None,
  holding nothing, when another holder has the terminal and `wait` is False (a question is
  open: draw nothing); else it holds the terminal like terminal_held and yields the count of
  questions shown so far, so a view that sees it changed knows a question was written below
  what it drew, and draws below that instead of over it.
"""
import contextlib
import errno
import fcntl
import os
import threading

from nagent_errors import ConfigError
from nagent_paths import nagent_home
from nagent_pids import controlling_tty

_GUARD = [threading.Lock()]   # a list so that a forked child can get a fresh one
_SHOWN = [0]                  # questions this process showed (a terminal without a lock file)
BUSY = -1


def _fresh_guard():
    _GUARD[0] = threading.Lock()


os.register_at_fork(after_in_child=_fresh_guard)


def lock_path(environ=None):
    tty = controlling_tty()
    if not tty:
        return None
    try:
        return os.path.join(nagent_home(environ), "run", f"tty-{tty}.lock")
    except ConfigError:
        return None


def _locked(path, wait=True):
    """An fd holding the record lock on `path`, None (no lock file), or BUSY (another process
    holds it and `wait` is False)."""
    if path is None:
        return None
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as error:
        os.close(fd)
        return BUSY if not wait and error.errno in (errno.EACCES, errno.EAGAIN) else None
    return fd


def _shown(fd):
    """Questions shown on this terminal: the lock file's count, plus this process's own."""
    count = 0
    if fd is not None:
        try:
            count = int(os.pread(fd, 32, 0).split(b"\n")[0] or 0)
        except (OSError, ValueError):
            count = 0
    return count + _SHOWN[0] * (1 << 32)


def _show(fd):
    _SHOWN[0] += 1
    if fd is not None:
        try:
            os.pwrite(fd, b"%d\n" % (_shown(fd) % (1 << 32) + 1), 0)
        except OSError:
            pass


@contextlib.contextmanager
def terminal_held(environ=None, showing=False):
    with _GUARD[0]:
        fd = _locked(lock_path(environ))
        try:
            if showing:
                _show(fd)
            yield
        finally:
            if fd is not None:
                os.close(fd)   # releases the record lock


@contextlib.contextmanager
def terminal_free(environ=None, wait=False):
    guard = _GUARD[0]
    if not guard.acquire(blocking=wait):
        yield None
        return
    try:
        fd = _locked(lock_path(environ), wait)
        if fd == BUSY:
            yield None
            return
        try:
            yield _shown(fd)
        finally:
            if fd is not None:
                os.close(fd)
    finally:
        guard.release()
