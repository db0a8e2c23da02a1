"""The project nagent works in: the git work tree around the working directory.

Data contract:
- `git_marker_dir(directory)` -> the nearest directory at or above `directory` that holds a
  `.git` entry (a directory, or the `.git` file of a linked worktree or submodule), or None. A
  walk over the filesystem only: outside a repository no git process is ever started.
- `find_project(cwd, environ, secret_names=None)` -> `Project(root, branch, git_dir)` or None.
  None when no `.git` is found walking up, and when git itself says `cwd` is not inside a work
  tree (inside `.git`, a broken or foreign repository git refuses, git missing or slow). Then
  one git process (`rev-parse --show-toplevel --absolute-git-dir`) decides, hardened for
  untrusted repositories (no fsmonitor hook, no optional locks, no prompt, no pager) and run
  without provider keys: `git_environ(environ, secret_names)` is nagent_secrets.scrubbed_env
  over nagent_config.child_key_names (the caller's key_names; None reads them from the config)
  plus no prompt and no pager.
  `root` is the realpath of the work tree's top level; `git_dir` the absolute git directory;
  `branch` the current branch from its HEAD file: the branch name ("main", also before the
  first commit), "(detached at <12 hex>)", or "(unknown)".
- `has_permissions_file(cwd)`: whether the `.nagent` marker's directory holds a
  `.nagent/permissions` file (a filesystem walk only: callers read the rules, validated
  through find_project, only when it does).
"""
import os
from collections import namedtuple

from nagent_config import child_key_names
from nagent_secrets import scrubbed_env

GIT_TIMEOUT = 2.0

Project = namedtuple("Project", "root branch git_dir")


def git_marker_dir(directory):
    current = os.path.abspath(directory)
    while True:
        if os.path.lexists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def git_environ(environ, secret_names=None):
    """The environment of a git process nagent starts itself: no provider keys, no prompts."""
    env = scrubbed_env(environ, child_key_names(environ, secret_names))
    env.update(GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", GIT_OPTIONAL_LOCKS="0")
    return env


def has_permissions_file(cwd):
    marker = git_marker_dir(cwd)
    return bool(marker) and os.path.lexists(os.path.join(marker, ".nagent", "permissions"))


def git_command(directory, *args):
    # The repository may be untrusted: no pager, no fsmonitor hook, no external helpers.
    return ["git", "--no-pager", "-c", "core.fsmonitor=false", "-C", directory, *args]


def branch_name(git_dir):
    try:
        with open(os.path.join(git_dir, "HEAD"), encoding="utf-8", errors="replace") as handle:
            head = (handle.read(4096).splitlines() or [""])[0].strip()
    except OSError:
        return "(unknown)"
    if head.startswith("ref:"):
        ref = head[4:].strip()
        ref = ref[len("refs/heads/"):] if ref.startswith("refs/heads/") else ref
        return ref if ref.isprintable() and ref else "(unknown)"
    if len(head) >= 12 and all(ch in "0123456789abcdef" for ch in head):
        return f"(detached at {head[:12]})"
    return "(unknown)"


def find_project(cwd, environ=None, secret_names=None):
    environ = os.environ if environ is None else environ
    if git_marker_dir(cwd) is None:
        return None
    import subprocess  # only a directory inside a repository pays for it
    try:
        proc = subprocess.run(git_command(cwd, "rev-parse", "--show-toplevel", "--absolute-git-dir"),
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=GIT_TIMEOUT,
                              env=git_environ(environ, secret_names))
    except (OSError, subprocess.SubprocessError):
        return None
    lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines()
    if proc.returncode != 0 or len(lines) != 2 or not all(os.path.isabs(line) for line in lines):
        return None
    root, git_dir = os.path.realpath(lines[0]), lines[1]
    return Project(root=root, branch=branch_name(git_dir), git_dir=git_dir)
