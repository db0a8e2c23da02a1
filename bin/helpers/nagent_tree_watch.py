"""Knowing that nothing in a project tree changed since the last look, without scanning it (Linux
inotify): a run's snapshot then repeats the last one instead of running git status.

Data contract:
- `TreeWatch.start(root, user_git=None, max_watches=MAX_WATCHES) -> TreeWatch | None`: watches
  every directory under `root` (real path) that is not inside a `.git`, the project's own
  `user_git` directory and its `info/` (the index and exclude a snapshot reads), and the inode
  of every regular file with more than one link (a write through another of its names reaches
  no directory watch). None when it cannot promise that: no inotify here (not Linux, no
  libc entry), a tree on a filesystem whose changes can come from elsewhere (NETWORK_FS, FUSE),
  more than `max_watches` watches needed, or any error while setting up.
- `watch.changed() -> bool`: True when anything happened in the tree since the watch started or
  since the last call (every call drains the queue and starts a new interval), or when the
  watch can no longer tell (the kernel's queue overflowed, a read failed: from then on always
  True). A directory that appears is watched, and walked, before this returns; a regular file
  that appears with more than one link gets an inode watch. So: when it returns False, the tree
  is as it was when the previous call returned, as far as git status could see it.
- `watch.close()`.
Why it holds: a directory's watch is added before it is listed, so a change in it is either in
the listing or an event; a directory created later is an event in its watched parent, and is
walked before the next snapshot that its event forces. The caller takes a real snapshot after
any call that returned True, and repeats the last one only after a False.
What it cannot see: a write through a hard link created to a name outside the tree after the
walk (the link-count change reaches only an inode watch). The caller keeps it off where a shell
command could do that and the snapshots are meant to hold against it (see nagent_run_snapshots).
"""
import ctypes
import os
import stat
import struct
import threading

MAX_WATCHES = 8192
NETWORK_FS = frozenset({"nfs", "nfs4", "cifs", "smb3", "smbfs", "9p", "virtiofs", "ceph",
                        "glusterfs", "afs", "lustre", "gpfs", "beegfs", "ncpfs", "coda"})

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_ISDIR = 0x01000000, 0x02000000, 0x40000000
IN_NONBLOCK, IN_CLOEXEC = 0o4000, 0o2000000
DIR_MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE
            | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW)
FILE_MASK = IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_DELETE_SELF | IN_DONT_FOLLOW
EVENT = struct.Struct("iIII")


class Unwatchable(Exception):
    """The tree cannot be watched with the promise `changed` makes."""


def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc if hasattr(libc, "inotify_init1") and hasattr(libc, "inotify_add_watch") \
            else None
    except OSError:
        return None


def _unescape(field):
    # /proc/self/mountinfo writes space, tab, newline and backslash as \ooo.
    out, index = bytearray(), 0
    while index < len(field):
        if field[index:index + 1] == b"\\" and field[index + 1:index + 4].isdigit():
            out.append(int(field[index + 1:index + 4], 8))
            index += 4
        else:
            out += field[index:index + 1]
            index += 1
    return bytes(out)


def remote_mounts(root, mountinfo=b"/proc/self/mountinfo"):
    """Mount points at or above `root`'s (the one holding it) and below it, whose filesystem
    can change without this kernel seeing it (NETWORK_FS, fuse*); Unwatchable when the table
    cannot be read."""
    try:
        with open(mountinfo, "rb") as handle:
            table = handle.read()
    except OSError:
        raise Unwatchable("no mount table") from None
    root = os.fsencode(root)
    holding, found = (b"", b""), []
    for line in table.splitlines():
        fields, _, tail = line.partition(b" - ")
        parts, kinds = fields.split(b" "), tail.split(b" ")
        if len(parts) < 5 or not kinds:
            raise Unwatchable("unreadable mount table")
        point, kind = _unescape(parts[4]), kinds[0]
        remote = kind.decode("ascii", "replace") in NETWORK_FS or kind.startswith(b"fuse")
        if root == point or root.startswith(point.rstrip(b"/") + b"/"):
            if len(point) >= len(holding[0]):
                holding = (point, remote)
        elif point.startswith(root.rstrip(b"/") + b"/") and remote:
            found.append(point)
    return ([holding[0]] if holding[1] else []) + found


class TreeWatch:
    def __init__(self, libc, fd, root, max_watches):
        self.libc, self.fd, self.root, self.max_watches = libc, fd, root, max_watches
        self.paths = {}           # watch descriptor -> (kind, path): "dir", "git" or "file"
        self.dirty = True         # the first call always answers True
        self.broken = False

    @classmethod
    def start(cls, root, user_git=None, max_watches=MAX_WATCHES):
        libc = _libc()
        if libc is None:
            return None
        try:
            if remote_mounts(root):
                return None
        except Unwatchable:
            return None
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            return None
        watch = cls(libc, fd, os.fsencode(root), max_watches)
        try:
            watch._walk(watch.root)
            if user_git:
                git_dir = os.fsencode(user_git)
                watch._add(git_dir, DIR_MASK, "git")
                watch._add(os.path.join(git_dir, b"info"), DIR_MASK, "git", missing_ok=True)
        except (Unwatchable, OSError):
            watch.close()
            return None
        return watch

    def _add(self, path, mask, kind="dir", missing_ok=False):
        if len(self.paths) >= self.max_watches:
            raise Unwatchable("too many directories to watch")
        wd = self.libc.inotify_add_watch(self.fd, path, ctypes.c_uint32(mask))
        if wd < 0:
            error = ctypes.get_errno()
            if missing_ok or error in (2, 20):   # ENOENT, ENOTDIR: gone or replaced meanwhile
                self.dirty = True
                return None
            raise Unwatchable(os.strerror(error))
        self.paths[wd] = (kind, path)
        return wd

    def _walk(self, top):
        """Watch `top` and every directory under it (not entering .git), each before listing
        it; an inode watch on each regular file with more than one link."""
        pending = [top]
        while pending:
            folder = pending.pop()
            if self._add(folder, DIR_MASK) is None:
                continue
            try:
                entries = list(os.scandir(folder))
            except (FileNotFoundError, NotADirectoryError):
                self.dirty = True
                continue
            for entry in entries:
                if entry.name == b".git":
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        self._file(entry.path, entry.stat(follow_symlinks=False))
                except FileNotFoundError:
                    self.dirty = True

    def _file(self, path, info):
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            self._add(path, FILE_MASK, "file")

    def _appeared(self, path, is_dir):
        try:
            if is_dir:
                self._walk(path)
            else:
                self._file(path, os.lstat(path))
        except FileNotFoundError:
            pass    # gone again: its event already made the interval dirty

    def changed(self):
        if self.broken:
            return True
        try:
            while True:
                try:
                    data = os.read(self.fd, 1 << 16)
                except BlockingIOError:
                    break
                if not data:
                    break
                self._events(data)
        except (Unwatchable, OSError):
            self.broken = True
            return True
        dirty, self.dirty = self.dirty, False
        return dirty or self.broken

    def _events(self, data):
        offset = 0
        while offset < len(data):
            wd, mask, _, length = EVENT.unpack_from(data, offset)
            name = data[offset + EVENT.size:offset + EVENT.size + length].rstrip(b"\0")
            offset += EVENT.size + length
            self.dirty = True
            if mask & IN_Q_OVERFLOW:
                raise Unwatchable("the event queue overflowed")
            if mask & IN_IGNORED:
                self.paths.pop(wd, None)
                continue
            kind, folder = self.paths.get(wd, (None, None))
            if not name or not mask & (IN_CREATE | IN_MOVED_TO):
                continue
            if kind == "dir" and name != b".git":
                self._appeared(os.path.join(folder, name), bool(mask & IN_ISDIR))
            elif kind == "git" and name == b"info" and mask & IN_ISDIR:
                self._add(os.path.join(folder, name), DIR_MASK, "git", missing_ok=True)

    def close(self):
        fd, self.fd = self.fd, None
        if fd is not None:
            # Closing waits for the kernel to tear the watches down (0.1-15 ms measured): in a
            # thread, off the run's way to its answer.
            threading.Thread(target=os.close, args=(fd,), daemon=True).start()
