"""Shared file plumbing: atomic writes, unique side files, sha256 digests, regular-file stat.

Data contract:
- `atomic_write(path, data, mode=None, sync=True, exclusive=False) -> path` puts the bytes `data`
  at `path` whole or not at all: they go to a temp file `.{name}.{random hex}.tmp` in the same
  directory (created O_EXCL, 0o600, so no one sees it half written), which gets `mode` and then
  replaces `path` with os.replace. `mode=None` keeps the permission bits of the file it replaces,
  and gives a new file 0o666 minus the umask. `sync=True` fsyncs the temp file before the rename
  and the directory after it. `exclusive=True` links the temp file into place instead, raising
  FileExistsError when `path` exists. The temp file never survives, success or failure.
- `write_unique(base, data, mode=0o600) -> path` writes a NEW file at `base`, or `base-2`,
  `base-3`, ... when taken (atomically, exclusively); InputError after 9999 names.
- `existing_mode(path, default)`: the permission bits of `path`, or `default` if it is missing.
- `sha256_bytes(data) -> hex`, `sha256_file(path) -> hex` (read in 1 MiB chunks; OSError raised).
- `regular_file_stat(path, directory=(what, fix)) -> (realpath, os.stat_result)` of a path that
  resolves to a regular file; else InputError naming `path` as given: "file not found",
  "cannot read file", `what`/`fix` for a directory, "not a regular file".
- A file's identity, the one rule: `file_id(st) -> "dev:inode"` of a stat result (what the
  file-edit index keys, the split registry's source_id and write authority's target_id compare).
  `file_id_for_path(path, directory) -> "dev:inode"` of the regular file `path` resolves to: it
  FOLLOWS symlinks (realpath, then stat, as regular_file_stat), so a link and its target share
  one id. The write policy takes the id of an lstat instead, but refuses a symlink before it
  compares ids, so both name the same file.
- `hold_flock(lock_file, timeout, poll=0.05) -> fd | None`: an fd of `lock_file` (created 0600)
  holding its exclusive fcntl.flock, polling up to `timeout` seconds; None when it stays taken
  (OSError for any other failure). The one polling lock every lock of nagent's own state uses
  (a conversation's, a snapshot store's); `os.close(fd)` lets it go.
- `read_regular(path, limit) -> bytes | None`: up to `limit` bytes of `path` when it is a regular
  file; None for anything else (a symlink is not followed, a FIFO never blocks) or when it
  cannot be read. For small state files other processes of the user can plant (run files, inbox
  messages). `read_json_object(path, limit)` is that file's JSON object (a dict), or None.
Only cheap stdlib is imported at module level; hashlib loads on the first digest.
"""
import errno
import fcntl
import os
import stat
from time import monotonic, sleep

from nagent_errors import InputError

_CHUNK = 1 << 20


def _umask():
    # Read without os.umask(): setting it, even briefly, races with other threads creating files.
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def existing_mode(path, default):
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return default


def _sync_directory(folder):
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return  # an unreadable directory cannot be synced; the rename itself already happened
    try:
        os.fsync(fd)
    except OSError as error:
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise  # only file systems that cannot sync directories are let off
    finally:
        os.close(fd)


def atomic_write(path, data, mode=None, sync=True, exclusive=False):
    path = os.fspath(path)
    if mode is None:
        mode = existing_mode(path, 0o666 & ~_umask())
    folder = os.path.dirname(os.path.abspath(path))
    # The name is cut so that a long target name still leaves room for the temp name (NAME_MAX).
    temp = os.path.join(folder, f".{os.path.basename(path)[:100]}.{os.urandom(6).hex()}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
            if sync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if exclusive:
            os.link(temp, path)
        else:
            os.replace(temp, path)
    finally:
        if os.path.lexists(temp):
            os.unlink(temp)
    if sync:
        _sync_directory(folder)
    return path


def write_unique(base, data, mode=0o600):
    for number in range(1, 10000):
        candidate = base if number == 1 else f"{base}-{number}"
        if os.path.lexists(candidate):
            continue
        try:
            return atomic_write(candidate, data, mode, exclusive=True)
        except FileExistsError:
            continue
    raise InputError("too many files with the same name", base, "clean up old side files")


def hold_flock(lock_file, timeout, poll=0.05):
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = monotonic() + max(0.0, timeout or 0.0)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise
        left = deadline - monotonic()
        if left <= 0:
            os.close(fd)
            return None
        sleep(min(poll, left))


def read_regular(path, limit):
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        parts, left = [], limit
        while left > 0:
            part = os.read(fd, left)
            if not part:
                break
            parts.append(part)
            left -= len(part)
        return b"".join(parts)
    except OSError:
        return None
    finally:
        os.close(fd)


def read_json_object(path, limit):
    """read_regular's bytes of `path` as a JSON object (dict); None for anything else."""
    import json   # only the run-file and index readers need it
    data = read_regular(path, limit)
    try:
        value = json.loads(data) if data else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def sha256_bytes(data):
    import hashlib
    return hashlib.sha256(data).hexdigest()


def sha256_file(path):
    import hashlib
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(_CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def regular_file_stat(path, directory=("is a directory, not a file", "")):
    real = os.path.realpath(os.fspath(path))
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise InputError("file not found", path) from None
    except OSError as error:
        raise InputError("cannot read file", path, error.strerror) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(directory[0], path, directory[1])
    if not stat.S_ISREG(st.st_mode):
        raise InputError("not a regular file", path)
    return real, st


def file_id(st):
    return f"{st.st_dev}:{st.st_ino}"


def file_id_for_path(path, directory=("is a directory, not a file", "")):
    """The id of the regular file `path` resolves to (symlinks followed); InputError as
    regular_file_stat."""
    return file_id(regular_file_stat(path, directory)[1])
