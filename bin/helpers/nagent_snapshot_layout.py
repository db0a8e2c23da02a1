"""Where a project's snapshot store lives, found without running git (see nagent_snapshot_store).

Data contract:
- `snapshots_dir(environ)` is ~/.nagent/snapshots; `store_dir(root, environ)` the store of the
  project root `root`: NAME-HASH (NAME from the root's last component, HASH the first 16 hex
  digits of sha256 of the root); `read_root(path)` the root a store records (None: none).
- `disk_usage(path) -> bytes` on disk under `path` (blocks, as du counts them).
- `status_of(cwd, environ)` -> {"store", "project", "bytes"} of the store the project around
  `cwd` uses, or None: for --status, found by name and recorded root (no git process, no
  hashing): the directory holding the .git found walking up, as nagent_project validates it,
  else the working directory.
"""
import os

from nagent_conversation_layout import sanitize
from nagent_fs import read_regular, sha256_bytes
from nagent_paths import nagent_home
from nagent_project import git_marker_dir


def snapshots_dir(environ=None):
    return os.path.join(nagent_home(environ), "snapshots")


def _name(root):
    return sanitize(os.path.basename(root.rstrip("/")))[:40] or "root"


def store_dir(root, environ=None):
    digest = sha256_bytes(os.fsencode(root))[:16]
    return os.path.join(snapshots_dir(environ), f"{_name(root)}-{digest}")


def read_root(path):
    data = read_regular(os.path.join(path, "root"), 1 << 16)
    return None if data is None else os.fsdecode(data.rstrip(b"\n"))


def disk_usage(path):
    total = 0
    for folder, dirs, files in os.walk(path):
        for name in dirs + files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass
    return total


def status_of(cwd, environ=None):
    real = os.path.realpath(cwd)
    root = os.path.realpath(git_marker_dir(real) or real)
    folder = snapshots_dir(environ)
    try:   # by name and recorded root, not by hash: --status loads no hashlib for this
        names = [name for name in os.listdir(folder) if name.startswith(_name(root) + "-")]
    except OSError:
        return None
    for name in names:
        path = os.path.join(folder, name)
        if read_root(path) == root:
            return {"store": path, "project": root, "bytes": disk_usage(path)}
    return None
