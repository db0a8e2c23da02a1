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
"""
import contextlib
import fcntl
import os
import threading

from nagent_errors import ConfigError
from nagent_paths import nagent_home
from nagent_pids import controlling_tty

_GUARD = [threading.Lock()]   # a list so that a forked child can get a fresh one


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


def _locked(path):
    """An fd holding the record lock on `path`, or None."""
    if path is None:
        return None
    try:
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError:
        return None
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX)
    except OSError:
        os.close(fd)
        return None
    return fd


@contextlib.contextmanager
def terminal_held(environ=None):
    with _GUARD[0]:
        fd = _locked(lock_path(environ))
        try:
            yield
        finally:
            if fd is not None:
                os.close(fd)   # releases the record lock
