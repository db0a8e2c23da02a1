"""What a file action will open, fixed before the action hook sees it (issue 21, D5).

A policy decides on a path; the action must then use the object the policy saw, not whatever
the path names a moment later. So the target is pinned first, the hook is shown the pinned
target's real path, and the action works on the pinned object.

Data contract:
- `Target(real, fd, problem, source)`; `pin_target(action, ctx) -> Target | None` (None for the
  actions without a file: shell, agent, next). Paths are relative to ctx.cwd
  (nagent_action_base.resolve_path).
  - read, file-read: a regular file is opened once (O_NONBLOCK: a FIFO swapped in never blocks);
    `fd` is that descriptor, which the handler reads (never the path again), and `real` the
    opened file's own path (nagent_fs.opened_path: links and ".." resolved). Anything else gets
    `problem` ("file not found", "is a directory", "not a regular file", "cannot read: ...",
    "path contains a NUL byte"), no fd, and `real` = realpath. Pinning never raises: a path
    the kernel refuses to resolve is named as written (nagent_paths.resolved).
  - write: `real` is nagent_write_policy.resolve_write_target (the directory resolved, the last
    component as written): the writer refuses when the path resolves to anything else by then.
  - file-patch: `real` is the index's realpath; `source` the file nagent's split registry says the
    patch replaces (None: not a split nagent made); the patch refuses any other source.
  - replace, file-edit: `real` is the realpath of the file the edit changes; the edit refuses
    when the path resolves to another file by the time it is applied or its session starts.
- `release(target)` closes the descriptor; call it once per pinned target (None is fine).
"""
import os
import stat
from collections import namedtuple

from nagent_action_base import resolve_path
from nagent_errors import NagentError
from nagent_file_tools import registered_source
from nagent_fs import opened_path
from nagent_paths import resolved
from nagent_write_policy import resolve_write_target

Target = namedtuple("Target", "real fd problem source", defaults=(None, None, None))


def _problem(path):
    try:
        info = os.stat(path)
    except FileNotFoundError:
        return "file not found"
    except OSError as error:
        return f"cannot read: {error.strerror}"
    if stat.S_ISDIR(info.st_mode):
        return "is a directory"
    return None if stat.S_ISREG(info.st_mode) else "not a regular file"


def pin_read(path):
    """Target of a read of the absolute `path`: the regular file opened once, or a problem."""
    if "\x00" in path:
        return Target(path, problem="path contains a NUL byte")
    problem = _problem(path)
    if problem:
        return Target(resolved(path), problem=problem)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as error:
        return Target(resolved(path), problem=f"cannot read: {error.strerror}")
    if not stat.S_ISREG(os.fstat(fd).st_mode):   # swapped since the stat
        os.close(fd)
        return Target(resolved(path), problem="not a regular file")
    return Target(opened_path(fd) or resolved(path), fd)


def pin_target(action, ctx):
    kind = action.kind
    if kind in ("read", "file-read"):
        return pin_read(resolve_path(action.attr("path", ""), ctx))
    if kind == "write":
        raw = action.attr("path", "")
        try:
            return Target(resolve_write_target(raw, ctx.cwd))
        except NagentError:   # the write refuses it anyway; show the hook the plain resolution
            return Target(resolved(resolve_path(raw, ctx)) if "\x00" not in raw else raw)
    if kind in ("replace", "file-edit"):
        raw = resolve_path(action.attr("path", ""), ctx)
        return Target(raw if "\x00" in raw else resolved(raw))
    if kind == "file-patch":
        index = resolve_path(action.attr("index", ""), ctx)
        if "\x00" in index:
            return Target(index)
        try:
            source = registered_source(index, ctx)
        except (NagentError, OSError):
            source = None
        return Target(resolved(index), source=source)
    return None


def release(target):
    if target is not None and target.fd is not None:
        try:
            os.close(target.fd)
        except OSError:
            pass
