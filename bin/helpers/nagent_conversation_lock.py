"""The lock of a conversation: one exclusive flock per conversation, held by the run that appends.

Data contract: `acquire_lock(path, timeout)` returns an fd holding the exclusive fcntl.flock of
conversation `path` (its lock file is nagent_conversation_layout.lock_path(path), i.e.
`NAME.d/lock`, created 0600 with its directory 0700), polling up to `timeout` seconds and then
raising BusyError; `release_lock(fd)` lets it go; `conversation_lock(path, timeout)` is the
context manager. `is_busy(path)` is True when a run (in any process, this one included: flock
conflicts between descriptors) holds it. The lock file stays in place: deleting lock files races.
"""
import fcntl
import os
from contextlib import contextmanager

from nagent_conversation_layout import lock_path
from nagent_errors import BusyError, InputError
from nagent_fs import hold_flock

BUSY_FIX = "another nagent run is using it; wait or use --conversation NAME"


def acquire_lock(path, timeout=3.0, poll=0.05):
    """An fd holding the exclusive flock of conversation `path`; BusyError after `timeout` s."""
    path = os.fspath(path)
    lock = lock_path(path)
    try:
        os.makedirs(os.path.dirname(lock), mode=0o700, exist_ok=True)
        fd = hold_flock(lock, timeout, poll)
    except OSError as error:
        raise InputError("cannot lock conversation", path, error.strerror or str(error))
    if fd is None:
        raise BusyError("conversation is busy", path, BUSY_FIX)
    return fd


def release_lock(fd):
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def conversation_lock(path, timeout=3.0):
    fd = acquire_lock(path, timeout)
    try:
        yield fd
    finally:
        release_lock(fd)


def is_busy(path):
    """True when a run (in any process, this one included) holds the conversation's lock."""
    try:
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
