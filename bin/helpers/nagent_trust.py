"""Trust in a project's own tools: `<root>/.nagent/bin` runs only after `nagent --trust`.

A cloned repository is someone else's code: running its executables with `--description`
while building the context would run that code before the user asked for anything. So nagent
runs them only when the user trusted the project, and only while `.nagent/bin` is what they
trusted.

Data contract:
- `project_bin(root)` -> `<root>/.nagent/bin`.
- `bin_listing(directory)` -> [[relative path, kind, mode, size, digest]] of everything under
  the directory, sorted, links not followed: kind "file" (digest: sha256 of its bytes), "link"
  (digest: the link's target), "dir", "other". [] when the directory is missing.
- `listing_hash(listing)` -> sha256 hex of the listing's JSON. A renamed, added, removed,
  re-moded or edited file changes it; a touched mtime does not.
- `trust_path(environ)` -> ~/.nagent/trust.json, in nagent's own state (never a write target of
  the model's actions): {"version": 1, "projects": {root realpath: {"bin_hash", "tools",
  "trusted_at"}}}. Read leniently (a corrupt file trusts nothing); written atomically under
  an flock on ~/.nagent/trust.lock.
- `trust_status(project, environ)` -> TrustStatus(state, bin_dir, tools, hash): state "none"
  (no .nagent/bin, nothing in it, it is the user's own ~/.nagent/bin, or it or .nagent is a
  link out of the project: such tools are never offered), "trusted" (the
  recorded hash is the current one), "untrusted" (never trusted) or "changed" (trusted with
  another listing: ask again). `tools` are the top-level names in .nagent/bin.
- `trust_project(project, environ)` records the project's root and current hash and returns
  {"root", "bin", "hash", "tools", "files", "previous"}; it runs nothing.
"""
import json
import os
import stat
import time
from collections import namedtuple

from nagent_paths import nagent_home, within

TRUST_VERSION = 1

TrustStatus = namedtuple("TrustStatus", "state bin_dir tools hash")


def project_bin(root):
    return os.path.join(root, ".nagent", "bin")


def _digest(path):
    from nagent_fs import sha256_file
    try:
        return sha256_file(path)
    except OSError as error:
        return f"unreadable: {error.strerror or error}"


def bin_listing(directory):
    listing = []
    if not os.path.isdir(directory) or os.path.islink(directory):
        return listing
    for current, dirs, files in os.walk(directory):
        dirs.sort()
        for name in sorted(dirs + files):
            path = os.path.join(current, name)
            relative = os.path.relpath(path, directory)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            mode = stat.S_IMODE(info.st_mode)
            if stat.S_ISLNK(info.st_mode):
                listing.append([relative, "link", mode, 0, os.readlink(path)])
            elif stat.S_ISREG(info.st_mode):
                listing.append([relative, "file", mode, info.st_size, _digest(path)])
            elif stat.S_ISDIR(info.st_mode):
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


def trust_project(project, environ=None):
    import fcntl
    from nagent_fs import atomic_write
    directory = project_bin(project.root)
    listing = bin_listing(directory)
    current = listing_hash(listing)
    home = nagent_home(environ)
    os.makedirs(home, mode=0o700, exist_ok=True)
    with open(os.path.join(home, "trust.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        projects = read_trust(environ)
        previous = projects.get(project.root)
        projects[project.root] = {"bin_hash": current,
                                  "tools": [entry[0] for entry in listing if os.sep not in entry[0]],
                                  "trusted_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        text = json.dumps({"version": TRUST_VERSION, "projects": projects}, indent=1, sort_keys=True)
        atomic_write(trust_path(environ), (text + "\n").encode("utf-8"), 0o600)
    return {"root": project.root, "bin": directory, "hash": current,
            "tools": projects[project.root]["tools"],
            "files": [{"path": entry[0], "kind": entry[1], "size": entry[3], "digest": entry[4]}
                      for entry in listing],
            "previous": None if previous is None else previous.get("bin_hash")}
