"""Trust in a project's own tools: `<root>/.nagent/bin` runs only after `nagent --trust`, and
then only as the bytes the user trusted.

A cloned repository is someone else's code: running its executables with `--description`
while building the context would run that code before the user asked for anything. So nagent
runs them only when the user trusted the project, and only while `.nagent/bin` is what they
trusted. The project tree is writable by any shell command (sandboxed too), so a file checked
by path and then run by path could be another file by then: nagent never runs the project's
files. It runs a private copy in its own state, made from one read of each file whose bytes
hash to the trusted listing.

Data contract:
- `project_bin(root)` -> `<root>/.nagent/bin`.
- `bin_listing(directory, copy_to=None)` -> [[relative path, kind, mode, size, digest]] of
  everything under the directory, sorted, links not followed: kind "file" (digest: sha256 of
  its bytes, size their count, both from one read through one descriptor), "link" (digest: the
  link's target), "dir", "other". [] when the directory is missing. With `copy_to` (an empty
  directory) the same read also writes each file's bytes there (owner-only modes), recreates
  links and directories, and skips "other": the copy holds exactly what the listing hashes.
- `listing_hash(listing)` -> sha256 hex of the listing's JSON. A renamed, added, removed,
  re-moded or edited file changes it; a touched mtime does not.
- `trust_path(environ)` -> ~/.nagent/trust.json, in nagent's own state (never a write target of
  the model's actions, hidden inside the shell sandbox): {"version": 1, "projects": {root
  realpath: {"bin_hash", "tools", "trusted_at"}}}. Read leniently (a corrupt file trusts
  nothing); written atomically under an flock on ~/.nagent/trust.lock.
- `copies_dir(environ)` -> ~/.nagent/trusted-bin: `HASH/` is a copy of a listing with that
  hash, renamed into place whole (a directory there is complete); copies no trust entry names
  are removed when a project is trusted.
- `trust_status(project, environ)` -> TrustStatus(state, bin_dir, tools, hash): state "none"
  (no .nagent/bin, nothing in it, it is the user's own ~/.nagent/bin, or it or .nagent is a
  link out of the project: such tools are never offered), "trusted" (the
  recorded hash is the current one), "untrusted" (never trusted) or "changed" (trusted with
  another listing: ask again). `tools` are the top-level names in .nagent/bin. For display and
  the decision to describe; what runs is `trusted_copy`.
- `trusted_copy(project, bin_hash, environ)` -> the directory of the private copy whose listing
  hash is `bin_hash` (made now from one read of .nagent/bin when missing), or None when the
  bytes read do not hash to `bin_hash` (.nagent/bin changed meanwhile): then nothing runs.
- `trust_project(project, environ)` records the project's root and the hash of one read of
  .nagent/bin, keeps that read as the private copy, and returns {"root", "bin", "hash",
  "tools", "files", "previous"}; it runs nothing. InputError when the copy cannot be written.
"""
import errno
import json
import os
import shutil
import stat
import tempfile
import time
from collections import namedtuple

from nagent_errors import InputError
from nagent_fs import atomic_write
from nagent_paths import nagent_home, within

TRUST_VERSION = 1

TrustStatus = namedtuple("TrustStatus", "state bin_dir tools hash")


def project_bin(root):
    return os.path.join(root, ".nagent", "bin")


def _read_file(path, info, copy_path):
    """(mode, size, sha256) of the regular file `path` (lstat `info`) from one read through one
    descriptor, its bytes also written to a new `copy_path` when given; None when `path` is not
    a regular file any more. An unreadable file gets an "unreadable" digest and no copy (it
    cannot run); failing to write the copy raises OSError."""
    import hashlib
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return None
        return stat.S_IMODE(info.st_mode), info.st_size, f"unreadable: {error.strerror or error}"
    target = None
    try:
        now = os.fstat(fd)
        if not stat.S_ISREG(now.st_mode):
            return None
        mode = stat.S_IMODE(now.st_mode)
        if copy_path is not None:
            target = os.open(copy_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC,
                             mode & 0o700)
        digest, size = hashlib.sha256(), 0
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError as error:
                if target is not None:   # no partial copy of something that cannot be hashed
                    os.close(target)
                    target = None
                    os.unlink(copy_path)
                return mode, size, f"unreadable: {error.strerror or error}"
            if not chunk:
                return mode, size, digest.hexdigest()
            digest.update(chunk)
            size += len(chunk)
            if target is not None:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(target, view):]
    finally:
        os.close(fd)
        if target is not None:
            os.close(target)


def bin_listing(directory, copy_to=None):
    listing = []
    if not os.path.isdir(directory) or os.path.islink(directory):
        return listing
    for current, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(current, name)
            relative = os.path.relpath(path, directory)
            copy = None if copy_to is None else os.path.join(copy_to, relative)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                target = os.readlink(path)
                if copy:
                    os.symlink(target, copy)
                listing.append([relative, "link", mode, 0, target])
            elif stat.S_ISREG(info.st_mode):
                read = _read_file(path, info, copy)
                if read is None:   # swapped for something else since the lstat
                    listing.append([relative, "other", mode, 0, ""])
                else:
                    listing.append([relative, "file", *read])
            elif stat.S_ISDIR(info.st_mode):
                if copy:
                    os.mkdir(copy, 0o700)
                listing.append([relative, "dir", mode, 0, ""])
            else:
                listing.append([relative, "other", mode, 0, ""])
    listing.sort()
    return listing


def listing_hash(listing):
    import hashlib
    text = json.dumps(listing, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def trust_path(environ=None):
    return os.path.join(nagent_home(environ), "trust.json")


def read_trust(environ=None):
    try:
        with open(trust_path(environ), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    projects = data.get("projects") if isinstance(data, dict) else None
    if data.get("version") != TRUST_VERSION or not isinstance(projects, dict):
        return {}
    return {root: entry for root, entry in projects.items()
            if isinstance(entry, dict) and isinstance(entry.get("bin_hash"), str)}


def _own_bin(directory, environ):
    return os.path.realpath(directory) == os.path.realpath(os.path.join(nagent_home(environ), "bin"))


def trust_status(project, environ=None):
    directory = project_bin(project.root)
    if not within(os.path.realpath(directory), os.path.realpath(project.root)):
        return TrustStatus("none", directory, (), "")  # a .nagent linked out of the project
    listing = bin_listing(directory)
    if not listing or _own_bin(directory, environ):
        return TrustStatus("none", directory, (), "")
    tools = tuple(sorted(entry[0] for entry in listing if os.sep not in entry[0]))
    current = listing_hash(listing)
    entry = read_trust(environ).get(project.root)
    if entry is None:
        state = "untrusted"
    else:
        state = "trusted" if entry["bin_hash"] == current else "changed"
    return TrustStatus(state, directory, tools, current)


def copies_dir(environ=None):
    return os.path.join(nagent_home(environ), "trusted-bin")


def _copy_listing(project, environ):
    """(listing, temp directory holding exactly its bytes) from one read of .nagent/bin."""
    base = copies_dir(environ)
    os.makedirs(base, mode=0o700, exist_ok=True)
    folder = tempfile.mkdtemp(prefix=".copy-", dir=base)
    try:
        return bin_listing(project_bin(project.root), copy_to=folder), folder
    except BaseException:
        shutil.rmtree(folder, ignore_errors=True)
        raise


def _keep_copy(folder, bin_hash, environ):
    """Rename the copy into place as HASH/ (another run may have put the same one there)."""
    final = os.path.join(copies_dir(environ), bin_hash)
    try:
        os.rename(folder, final)
    except OSError:
        shutil.rmtree(folder, ignore_errors=True)
        if not os.path.isdir(final):
            return None
    return final


def trusted_copy(project, bin_hash, environ=None):
    final = os.path.join(copies_dir(environ), bin_hash)
    if os.path.isdir(final):
        return final
    try:
        listing, folder = _copy_listing(project, environ)
    except OSError:
        return None
    if listing_hash(listing) != bin_hash:
        shutil.rmtree(folder, ignore_errors=True)
        return None
    return _keep_copy(folder, bin_hash, environ)


def _prune_copies(projects, environ):
    wanted = {entry["bin_hash"] for entry in projects.values()}
    base = copies_dir(environ)
    for name in os.listdir(base):
        if name not in wanted:
            shutil.rmtree(os.path.join(base, name), ignore_errors=True)


def trust_project(project, environ=None):
    import fcntl
    directory = project_bin(project.root)
    home = nagent_home(environ)
    os.makedirs(home, mode=0o700, exist_ok=True)
    with open(os.path.join(home, "trust.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            listing, folder = _copy_listing(project, environ)
        except OSError as error:
            raise InputError("cannot keep a private copy of the project's tools", copies_dir(environ),
                             error.strerror or str(error)) from None
        current = listing_hash(listing)
        projects = read_trust(environ)
        previous = projects.get(project.root)
        projects[project.root] = {"bin_hash": current,
                                  "tools": [entry[0] for entry in listing if os.sep not in entry[0]],
                                  "trusted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        text = json.dumps({"version": TRUST_VERSION, "projects": projects}, indent=1, sort_keys=True)
        _keep_copy(folder, current, environ)
        atomic_write(trust_path(environ), (text + "\n").encode("utf-8"), 0o600)
        _prune_copies(projects, environ)
    return {"root": project.root, "bin": directory, "hash": current,
            "tools": projects[project.root]["tools"],
            "files": [{"path": entry[0], "kind": entry[1], "size": entry[3], "digest": entry[4]}
                      for entry in listing],
            "previous": None if previous is None else previous.get("bin_hash")}
