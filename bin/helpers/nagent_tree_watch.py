"""Knowing that nothing in a project tree changed since the last look, without scanning it (Linux
inotify): a run's snapshot then repeats the last one instead of running git status.

Data contract:
- `TreeWatch.start(root, user_git=None, max_watches=MAX_WATCHES) -> TreeWatch | None`
  (`TreeWatch.open`: the same, raising Unwatchable with the reason instead of None): watches
  every directory under `root` (a real path), `.git` directories included (their contents
  decide what git status sees: whether a nested repository is one, the project's index and
  info/exclude), and the inode of every regular file with more than one link (a write through
  another of its names reaches no directory watch). None when it cannot promise what `changed`
  promises: no inotify here (not Linux, no libc entry), the root or a mount below it on a
  filesystem whose changes can come from elsewhere (NETWORK_FS, FUSE), a `.git` below the root
  that is a link or a file naming a repository outside the root, a `user_git/info` that is
  not a directory, more than `max_watches` watches, or any error while setting up.
- `watch.changed() -> bool`: True when anything happened in the tree since the watch started or
  since the last call (every call drains the queue and starts a new interval), or when the
  watch can no longer tell: the kernel's queue overflowed, the root was moved, deleted or is
  no longer the directory at its path, a mount at, above or inside the root came or went (a
  mount over a directory of the tree makes no event), one of the conditions `start` refuses
  arose, a read failed. From then on it is always True, and `watch.reason` says why. Any other
  change of this process's mount table costs one True: mounts elsewhere come and go on many
  machines (container engines, automounters), and must not cost the watch; but not while a
  mount lies inside the tree (gone and made again, it looks the same), nor, under a sandbox,
  while a writable root is on the project's filesystem (a mount exposing the project may have
  come and gone between two looks).
- `writable`: a sandbox's writable roots (None unsandboxed). `start` refuses, and `changed`
  ends the promise, while one of them exposes the project (`exposes_project`), checked again
  at every change of the mount table. A directory that appears is watched, and walked,
  before this returns; a regular file that appears with more than one link gets an inode watch.
  So: when it returns False, the tree is as it was when the previous call returned, as far as
  git status could see it.
- `skip`: directories (real paths) to leave out, with all below them: the ones no snapshot looks
  into (nagent_snapshots.ignored_dirs). With any, a change of an ignore rule (an event on a
  `.gitignore`, or in `user_git/info`) ends the promise; and the caller calls `give_up()` when
  it learns a file in one of them came to count (a snapshot added it).
- `watch.give_up()`: `changed` is True from then on. `watch.close()`.
- `exposes_project(root, writable, mountinfo) -> bool`: whether a command that may write the
  directories `writable` (a sandbox's roots) can reach a file of `root` under a name outside
  `root` on one mount: through a root that holds the project, or a mount that shows the
  project's filesystem from an ancestor of the project (a bind of /data while /home is /data/home).
  There it could hard-link a project file out of the tree and write through the link. True
  when the mount table cannot be read.
Why `changed` holds: a directory's watch is added before it is listed, so a change in it is
either in the listing or an event; a directory created later is an event in its watched parent,
and is walked before the next snapshot that its event forces. The caller takes a real snapshot
after any call that returned True, and repeats the last one only after a False.
What it cannot see: a write through a hard link made from a project file to a name outside the
tree after the walk (the link-count change reaches only an inode watch), and writes through a
shared mapping by a process that outlives its action. The caller keeps the watch off where a
sandboxed command could do the first (`exposes_project`); unsandboxed, a command can rewrite the
snapshot store itself, so there the snapshots hold against mistakes, not against the model.
"""
import ctypes
import os
import select
import stat
import struct
import threading

MAX_WATCHES = 8192
MOUNTINFO = "/proc/self/mountinfo"
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
GITFILE_LIMIT = 4096


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
    # The kernel writes space, tab, newline and backslash as \ooo (three octal digits).
    out, index = bytearray(), 0
    while index < len(field):
        code = field[index + 1:index + 4]
        if field[index:index + 1] == b"\\" and len(code) == 3 and all(c in b"01234567" for c in code) \
                and int(code, 8) < 256:
            out.append(int(code, 8))
            index += 4
        else:
            out += field[index:index + 1]
            index += 1
    return bytes(out)


def _inside(path, root, inclusive=True):
    return (inclusive and path == root) or path.startswith(root.rstrip(b"/") + b"/")


def read_mounts(mountinfo=MOUNTINFO):
    """[(device "major:minor", root within its filesystem, mount point, filesystem type)] of
    this process's mount table, bytes; Unwatchable when it cannot be read or parsed."""
    try:
        with open(mountinfo, "rb") as handle:
            table = handle.read()
    except OSError:
        raise Unwatchable("no mount table") from None
    return _parse_mounts(table)


def _parse_mounts(table):
    mounts = []
    for line in table.splitlines():
        fields, _, tail = line.partition(b" - ")
        parts, kinds = fields.split(b" "), tail.split(b" ")
        if len(parts) < 5 or not kinds or not kinds[0]:
            raise Unwatchable("unreadable mount table")
        mounts.append((parts[2], _unescape(parts[3]), _unescape(parts[4]), kinds[0]))
    return mounts


def _device(path):
    info = os.stat(path)
    return b"%d:%d" % (os.major(info.st_dev), os.minor(info.st_dev))


def _holding(mounts, path, device=None):
    """The mount `path` lies on: the last-mounted of the longest mount points holding it (of
    `device`, when given)."""
    found = None
    for mount in mounts:
        if _inside(path, mount[2]) and (device is None or mount[0] == device):
            if found is None or len(mount[2]) >= len(found[2]):
                found = mount
    return found


def _remote(kind):
    return kind.decode("ascii", "replace") in NETWORK_FS or kind.startswith(b"fuse")


def remote_mounts(root, mountinfo=MOUNTINFO):
    """Mount points of the root's filesystem and below it whose filesystem can change without
    this kernel seeing it (NETWORK_FS, fuse*); Unwatchable when the table cannot be read."""
    mounts = read_mounts(mountinfo)
    root = os.fsencode(root)
    try:
        holding = _holding(mounts, root, _device(root))
    except OSError:
        holding = _holding(mounts, root)
    if holding is None:
        raise Unwatchable("the root's mount is not in the mount table")
    return ([holding[2]] if _remote(holding[3]) else []) + [
        mount[2] for mount in mounts if _inside(mount[2], root, inclusive=False) and _remote(mount[3])]


def _region(mount, path):
    """Where `path` (on `mount`) lies within the mount's filesystem."""
    rest = path[len(mount[2].rstrip(b"/")):].lstrip(b"/")
    return mount[1].rstrip(b"/") + b"/" + rest if rest else mount[1]


def exposes_project(root, writable, mountinfo=MOUNTINFO):
    try:
        return _exposes(read_mounts(mountinfo), os.fsencode(root), writable)
    except Unwatchable:
        return True


def _exposes(mounts, root, writable):
    try:
        device = _device(root)
    except OSError:
        return True
    home = _holding(mounts, root, device)
    if home is None:
        return True
    project = _region(home, root)
    for top in (os.fsencode(path) for path in writable):
        if _inside(top, root):
            continue          # inside the project: every name it can make is in the tree
        if _inside(root, top, inclusive=False):
            return True       # it holds the project
        holding = _holding(mounts, top)
        shown = [(holding, _region(holding, top))] if holding else []
        shown += [(mount, mount[1]) for mount in mounts if _inside(mount[2], top, inclusive=False)]
        if any(mount[0] == device and _inside(project, region, inclusive=False)
               for mount, region in shown):
            return True
    return False


def _mount_view(mounts, root):
    """The mounts that decide what the tree shows under its path: those at or above the root
    and those inside it, in the table's order."""
    return [mount for mount in mounts if _inside(root, mount[2]) or _inside(mount[2], root)]


class TreeWatch:
    def __init__(self, libc, fd, root, user_git, max_watches, skip=frozenset(), writable=None):
        self.libc, self.fd, self.root, self.max_watches = libc, fd, root, max_watches
        self.writable = writable      # a sandbox's writable roots, or None (unsandboxed)
        self.skip = skip              # directories left out (the snapshot never looks in them)
        self.user_git = user_git      # bytes or None: the project's own .git directory
        self.paths = {}               # watch descriptor -> (kind, path): "dir" or "file"
        self.dirty = True             # the first call always answers True
        self.reason = None            # why `changed` answers True from now on (None: it holds)
        self.identity = None          # (st_dev, st_ino) of the root when the watch started
        self.mount_poll = self.mount_file = self.mount_view = None

    @classmethod
    def start(cls, root, user_git=None, max_watches=MAX_WATCHES, skip=frozenset(), writable=None):
        try:
            return cls.open(root, user_git, max_watches, skip, writable)
        except Unwatchable:
            return None

    @classmethod
    def open(cls, root, user_git=None, max_watches=MAX_WATCHES, skip=frozenset(), writable=None):
        """`start`, raising Unwatchable with the reason instead of returning None."""
        libc = _libc()
        if libc is None:
            raise Unwatchable("no inotify here")
        try:
            remote = remote_mounts(root)
        except OSError as error:
            raise Unwatchable(f"the root's mount: {error.strerror or error}") from None
        if remote:
            raise Unwatchable(f"a filesystem changed from elsewhere: {os.fsdecode(remote[0])}")
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            raise Unwatchable(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        watch = cls(libc, fd, os.fsencode(root), os.fsencode(user_git) if user_git else None,
                    max_watches, frozenset(os.fsencode(path) for path in skip),
                    None if writable is None else tuple(writable))
        try:
            watch._watch_mounts()
            info = os.stat(watch.root)
            watch.identity = (info.st_dev, info.st_ino)
            watch._walk(watch.root)
            watch._check_git_info()
        except (Unwatchable, OSError, ValueError) as error:
            watch.close()
            if isinstance(error, Unwatchable):
                raise
            raise Unwatchable(f"{type(error).__name__}: {error}") from None
        return watch

    def _watch_mounts(self):
        # A change to this process's mount table wakes a poller with POLLPRI (proc(5)).
        # The table is read after the file is opened: a change from then on wakes the poller,
        # so no change falls between the view kept here and the first poll.
        self.mount_file = open(MOUNTINFO, "rb")
        mounts = _parse_mounts(self.mount_file.read())
        self.mount_poll = select.poll()
        self.mount_poll.register(self.mount_file.fileno(), select.POLLPRI | select.POLLERR)
        self._check_mounts(mounts)
        self.mount_view = _mount_view(mounts, self.root)

    def _check_mounts(self, mounts):
        """At start (no view yet), and at every change of the mount table since: whether the
        watch's promise still holds. Only what the current table shows can be checked, so a
        change ends the watch where something may have come and gone in between unseen."""
        if self.mount_view is not None:
            view = _mount_view(mounts, self.root)
            if view != self.mount_view:
                raise Unwatchable("a mount at or inside the tree changed")
            if any(_inside(mount[2], self.root, inclusive=False) for mount in view):
                # Unmounted and mounted again, it has the same fields (a tmpfs gets the freed
                # device number back) and new directories no watch is on.
                raise Unwatchable("the mount table changed while a mount lies inside the tree")
            if self.writable is not None and self._shares_device():
                # A mount that showed the project under a writable root may have come and gone.
                raise Unwatchable("the mount table changed while a writable root of the sandbox "
                                  "is on the project's filesystem")
        if self.writable is not None and _exposes(mounts, self.root, self.writable):
            raise Unwatchable("a writable root of the sandbox shows the project's filesystem")

    def _shares_device(self):
        device = os.stat(self.root).st_dev
        for top in (os.fsencode(path) for path in self.writable):
            if _inside(top, self.root):
                continue
            try:
                if os.stat(top).st_dev == device:
                    return True
            except OSError:
                return True
        return False

    def _add(self, path, mask, kind="dir"):
        if len(self.paths) >= self.max_watches:
            raise Unwatchable("too many directories to watch")
        wd = self.libc.inotify_add_watch(self.fd, path, ctypes.c_uint32(mask))
        if wd < 0:
            error = ctypes.get_errno()
            if error in (2, 20):   # ENOENT, ENOTDIR: gone or replaced meanwhile: an event says so
                self.dirty = True
                return None
            raise Unwatchable(f"inotify_add_watch: {os.strerror(error)}")
        self.paths[wd] = (kind, path)
        return wd

    def _walk(self, top):
        """Watch `top` and every directory under it, each before listing it; an inode watch on
        each regular file with more than one link; `.git` entries checked."""
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
                try:
                    if entry.name == b".git" and folder != self.root:
                        self._check_nested_git(entry.path)
                    if entry.is_dir(follow_symlinks=False):
                        if entry.path not in self.skip:
                            pending.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        self._file(entry.path, entry.stat(follow_symlinks=False))
                except FileNotFoundError:
                    self.dirty = True

    def _file(self, path, info):
        if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
            self._add(path, FILE_MASK, "file")

    def _check_nested_git(self, path):
        """A nested repository is one while its `.git` is valid: a `.git` that is a link, or a
        file naming a repository outside the tree, could change that from outside."""
        try:
            info = os.lstat(path)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(info.st_mode):
            return
        if not stat.S_ISREG(info.st_mode):
            raise Unwatchable("a .git that is not a directory or a file")
        with open(path, "rb") as handle:
            text = handle.read(GITFILE_LIMIT)
        target = text.strip()[len(b"gitdir:"):].strip() if text.startswith(b"gitdir:") else None
        if target is None:
            return            # not a repository: git enters the directory, and it is watched
        real = os.path.realpath(os.path.join(os.path.dirname(path), target))
        if not _inside(real, self.root, inclusive=False):
            raise Unwatchable("a nested repository kept outside the tree")

    def _check_git_info(self):
        """The project's own `.git` and its `info` are read through their names by the snapshot
        (index, info/exclude): they must stay directories."""
        if self.user_git is None:
            return
        for path, required in ((self.user_git, True), (self._info(), False)):
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                if required:
                    raise Unwatchable("the project's .git is gone") from None
                continue
            if not stat.S_ISDIR(mode):
                raise Unwatchable("the project's .git or .git/info is not a directory")

    def _appeared(self, path, is_dir):
        try:
            if is_dir:
                if path not in self.skip:   # made again under the same rules: still ignored
                    self._walk(path)
            else:
                self._file(path, os.lstat(path))
        except FileNotFoundError:
            pass    # gone again: its event already made the interval dirty

    def changed(self):
        if self.reason is not None:
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
            if self.mount_poll.poll(0):
                # Elsewhere on the machine, mounts come and go (container engines, automounters):
                # one full look, and the watch goes on while what the tree shows is the same.
                self._check_mounts(read_mounts())
                self.dirty = True
            info = os.stat(self.root)
            if (info.st_dev, info.st_ino) != self.identity:
                raise Unwatchable("the root is another directory now")
        except (Unwatchable, OSError, ValueError) as error:
            self.reason = str(error) or type(error).__name__
            return True
        dirty, self.dirty = self.dirty, False
        return dirty

    def _events(self, data):
        offset = 0
        while offset < len(data):
            wd, mask, _, length = EVENT.unpack_from(data, offset)
            name = data[offset + EVENT.size:offset + EVENT.size + length].rstrip(b"\0")
            offset += EVENT.size + length
            self.dirty = True
            if mask & IN_Q_OVERFLOW:
                raise Unwatchable("the event queue overflowed")
            kind, folder = self.paths.get(wd, (None, None))
            if folder == self.root and mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED):
                raise Unwatchable("the root was moved or deleted")
            if mask & IN_IGNORED:
                self.paths.pop(wd, None)
                continue
            if kind != "dir" or not name:
                continue
            path = os.path.join(folder, name)
            if self.skip and (name == b".gitignore" or folder == self._info()
                              or path == self._info()):
                raise Unwatchable("an ignore rule changed: the directories left out may count")
            if name == b".git" and folder != self.root:
                self._check_nested_git(path)
            if self.user_git is not None and path in (self.user_git, self._info()):
                self._check_git_info()
            if mask & (IN_CREATE | IN_MOVED_TO):
                self._appeared(path, bool(mask & IN_ISDIR))

    def _info(self):
        return None if self.user_git is None else os.path.join(self.user_git, b"info")

    def give_up(self):
        """The caller knows something the watch cannot see changed what counts: from now on
        `changed` is always True."""
        self.reason = "given up"

    def close(self):
        fd, self.fd = self.fd, None
        if self.mount_file is not None:
            self.mount_file.close()
            self.mount_file = None
        if fd is not None:
            # Closing waits for the kernel to tear the watches down (0.1-15 ms measured): in a
            # thread, off the run's way to its answer.
            threading.Thread(target=os.close, args=(fd,), daemon=True).start()
