"""Shared file plumbing: atomic writes, unique side files, sha256 digests, regular-file stat.

Data contract:
- `atomic_write(path, data, mode=None, sync=True, exclusive=False) -> path` puts the bytes `data`
  at `path` whole or not at all: they go to a temp file `.{name}.{random hex}.tmp` in the same
  directory (created O_EXCL, 0o600, so no one sees it half written), which gets `mode` and then
  replaces `path` with os.replace. `mode=None` keeps the permission bits of the file it replaces,
  and gives a new file 0o666 minus the umask. `sync=True` fsyncs the temp file before the rename
  and the directory after it. `exclusive=True` links the temp file into place instead, raising
  FileExistsError when `path` exists. The temp file never survives, success or failure.
  `swap=True` (for files rewritten often with sync=False, such as run files) swaps the temp
  file with an existing regular file at `path` (renameat2 RENAME_EXCHANGE) and unlinks the old
  one: readers see the old or the new file whole, as with os.replace, but ext4 (auto_da_alloc)
  does not flush the new file's data as it does on a rename over an existing file (~0.2 ms a
  write). Anything else at `path` (none, a link, a directory) and systems without renameat2
  take os.replace.
- `write_unique(base, data, mode=0o600) -> path` writes a NEW file at `base`, or `base-2`,
  `base-3`, ... when taken (atomically, exclusively); InputError after 9999 names.
- `existing_mode(path, default)`: the permission bits of `path`, or `default` if it is missing.
- `sha256_bytes(data) -> hex`, `sha256_file(path) -> hex`, `sha256_fd(fd) -> hex` (read in 1 MiB
  chunks; OSError raised).
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
- `open_dir_nofollow(path, make=None) -> fd`: the directory at the absolute, resolved `path`,
  opened component by component from "/" with O_NOFOLLOW, so a link anywhere on the way (one
  swapped in after the path was checked) is never followed: OSError ELOOP/ENOTDIR, with
  `filename` the component. A missing component is created (0700) when `make(component path)`
  says so, else ENOENT.
- `write_in_dir(dir_fd, name, data, mode=None, check=None)`: `data` replaces (or creates) entry
  `name` of that open directory atomically (a temp file there, fsync, rename, fsync of the
  directory), with permission bits `mode` (None: 0o666 minus the umask); `check()`, called right
  before the rename, may raise to stop (the temp file is removed).
- `replace_nofollow(path, data, check=None)`: the regular file at the resolved `path` is
  replaced with `data` through its directory opened by open_dir_nofollow, keeping its
  permission bits; `check(current bytes)`, read through that same directory, may raise to
  stop first. A link on the way or as the file itself: OSError ELOOP, nothing written. The one
  writer for tools that replace a file nagent checked by path (nagent-file-patch).
- `opened_path(fd) -> str | None`: the path of the file an open descriptor holds, as the kernel
  names it now (/proc/self/fd: links and ".." resolved); None without /proc. The one way nagent
  learns what it actually opened, to check the object it holds instead of a path looked up twice.
Only cheap stdlib is imported at module level; hashlib loads on the first digest.
"""
import errno
import fcntl
import functools
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


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2():
    """libc's renameat2, or None (not Linux, an old libc). ctypes is imported only here, on a
    process's first swap (a model-calling run has it loaded already)."""
    try:
        import ctypes
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (ImportError, OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p,
                         ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def _swap_in(temp, path):
    """Put the file `temp` at `path` (see atomic_write's swap); the old file ends at `temp`."""
    exchange = _renameat2()
    try:
        regular = stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        regular = False
    if exchange is None or not regular:
        os.replace(temp, path)
        return
    if exchange(_AT_FDCWD, os.fsencode(temp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE):
        os.replace(temp, path)      # EINVAL: a file system without exchange; the plain rename
        return
    if not stat.S_ISREG(os.lstat(temp).st_mode):
        # Something else took `path` between the lstat and the swap: put it back, then fail
        # or replace as os.replace would.
        exchange(_AT_FDCWD, os.fsencode(temp), _AT_FDCWD, os.fsencode(path), _RENAME_EXCHANGE)
        os.replace(temp, path)


def atomic_write(path, data, mode=None, sync=True, exclusive=False, swap=False):
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
        elif swap:
            _swap_in(temp, path)
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


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_dir_nofollow(path, make=None):
    fd = os.open("/", _DIR_FLAGS)
    current = "/"
    try:
        for part in [p for p in path.split("/") if p]:
            child = os.path.join(current, part)
            try:
                try:
                    next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if make is None or not make(child):
                        raise
                    try:
                        os.mkdir(part, 0o700, dir_fd=fd)
                    except FileExistsError:
                        pass
                    next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as error:
                error.filename = child
                raise
            os.close(fd)
            fd, current = next_fd, child
        return fd
    except BaseException:
        os.close(fd)
        raise


def write_in_dir(dir_fd, name, data, mode=None, check=None):
    mode = 0o666 & ~_umask() if mode is None else mode
    temp_name = f".nagent-{os.urandom(8).hex()}.tmp"
    try:
        fd = os.open(temp_name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600, dir_fd=dir_fd)
        try:
            os.fchmod(fd, mode)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        if check is not None:
            check()   # last look at the file being replaced, right before the rename
        os.replace(temp_name, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        temp_name = None
        os.fsync(dir_fd)
    finally:
        if temp_name is not None:
            try:
                os.unlink(temp_name, dir_fd=dir_fd)
            except OSError:
                pass


def replace_nofollow(path, data, check=None):
    parent, name = os.path.split(path)
    dir_fd = open_dir_nofollow(parent)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise OSError(errno.EINVAL, "not a regular file", path)
            current = _read_all(fd)
        finally:
            os.close(fd)
        if check is not None:
            check(current)
        write_in_dir(dir_fd, name, data, stat.S_IMODE(info.st_mode))
    finally:
        os.close(dir_fd)


def _read_all(fd):
    parts = []
    while True:
        part = os.read(fd, _CHUNK)
        if not part:
            return b"".join(parts)
        parts.append(part)


def opened_path(fd):
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def sha256_bytes(data):
    import hashlib
    return hashlib.sha256(data).hexdigest()


def sha256_fd(fd):
    """sha256 of everything an open regular file holds, read with pread (the offset stays)."""
    import hashlib
    digest, offset = hashlib.sha256(), 0
    while True:
        chunk = os.pread(fd, _CHUNK, offset)
        if not chunk:
            return digest.hexdigest()
        digest.update(chunk)
        offset += len(chunk)


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
