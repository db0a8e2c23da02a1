"""The project nagent works in: the directory that holds the `.git` nagent found walking up.

Data contract:
- `git_marker_dir(directory)` -> the nearest directory at or above `directory` that holds a
  `.git` entry (a directory, or the `.git` file of a linked worktree or submodule), or None. A
  walk over the filesystem only: outside a repository no git process is ever started.
- `search_marker(real) -> (marker, inside)`: git_marker_dir of the realpath `real`, and one
  line when `real` lies inside that marker's `.git` directory (git's own files: never a
  project, nor a tree nagent snapshots), else None.
- `probe_project(cwd, environ, secret_names=None)` -> ProjectSearch(project, refused): the one
  validated project root every caller uses (context layers, skills, project tools, --trust,
  --config, and other concerns that need "the project").
  - No `.git` walking up from realpath(cwd), or cwd inside that `.git` directory: (None, None).
  - The root is the marker directory M itself. git is asked only to confirm that M/.git is a
    repository whose work tree is M: one process, `git -C M rev-parse --show-toplevel
    --absolute-git-dir`, run with GIT_CEILING_DIRECTORIES=dirname(M) (it never climbs past M)
    and `safe.bareRepository=explicit` (a bare repository a clone carries is never discovered),
    without the caller's GIT_DIR/GIT_WORK_TREE and other discovery variables.
  - Refused, (None, why) — `root_problem(marker, top, home)`: git names another work tree
    than M (a `core.worktree` a command or a clone set: "anything above the marker"), or M is
    `/`, the home directory or one of its ancestors (everything of the user would be "inside
    the project"). `why` is one line; callers warn the user ("project root refused: why") and
    the session facts say "none (refused: why)".
  - git failing (missing, slow, a broken or foreign repository it refuses): (None, None).
- `find_project(cwd, environ, secret_names=None)` -> probe_project(...).project:
  `Project(root, branch, git_dir)` or None. `root` is a realpath; `git_dir` is git's absolute
  git directory, used only for the branch name, never as a boundary; `branch` from its HEAD
  file: the branch name ("main", also before the first commit), "(detached at <12 hex>)", or
  "(unknown)".
- `run_git(marker, args, environ, secret_names)` -> CompletedProcess (bytes) or None: the one way
  nagent runs git on a project: `git_command` (no pager, no fsmonitor hook, no bare repository
  discovery) in M, `git_environ` (nagent_secrets.scrubbed_env over
  nagent_config.child_key_names, no prompt, no pager, no optional locks, the ceiling above M,
  PATH without relative entries), stdin closed, GIT_TIMEOUT seconds; git itself is looked up in
  the absolute PATH entries only (nagent_paths.find_program: a clone's own `git` never runs).
  Only READING_SUBCOMMANDS (rev-parse, log, ls-files, diff-index): none runs a command the
  repository's config or attributes name (a filter, textconv, external diff, hook, fsmonitor),
  which a sandboxed command may have written; anything else is a ValueError. Every git process
  nagent starts on a project goes through here (the guard's tracked/changed questions too).
- `with_git_safety(env)`: the environment of a shell action, with git told (GIT_CONFIG_COUNT,
  after any the user set) `safe.bareRepository=explicit` like nagent's own git: a bare
  repository a clone carries is never discovered, so its committed config runs nothing.
- `has_permissions_file(cwd)`: whether the `.nagent` marker's directory holds a
  `.nagent/permissions` file (a filesystem walk only: callers read the rules, validated
  through find_project, only when it does).
"""
import os
from collections import namedtuple

from nagent_config import child_key_names
from nagent_paths import absolute_path_value, find_program, too_wide, within
from nagent_secrets import scrubbed_env

GIT_TIMEOUT = 2.0
# Variables that would make git answer about another repository than the one nagent found.
DISCOVERY_VARIABLES = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CEILING_DIRECTORIES",
                       "GIT_DISCOVERY_ACROSS_FILESYSTEM", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
                       "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE")

# What nagent itself asks git about a project: subcommands that read the index, refs and objects
# and never a work-tree file through a filter, a textconv or an external diff, and run no hook.
# The repository's config is not nagent's: a sandboxed command can write .git/config and
# .gitattributes, and this git runs in the driver, outside the sandbox (`git status` runs a
# clean filter: never here). Anything else about the work tree is read in Python.
BARE_REPOSITORIES = ("safe.bareRepository", "explicit")
READING_SUBCOMMANDS = frozenset({"rev-parse", "log", "ls-files", "diff-index"})

Project = namedtuple("Project", "root branch git_dir")
ProjectSearch = namedtuple("ProjectSearch", "project refused")


def git_marker_dir(directory):
    current = os.path.abspath(directory)
    while True:
        if os.path.lexists(os.path.join(current, ".git")):
            return current
        parent = os.path.dirname(current)
        if parent == current:
            return None
        current = parent


def search_marker(real):
    marker = git_marker_dir(real)
    if marker is not None and within(real, os.path.join(marker, ".git"), inclusive=True):
        return marker, f"{real} is inside the repository directory {marker}/.git"
    return marker, None


def git_environ(environ, secret_names=None, ceiling=None):
    """The environment of a git process nagent starts itself: no provider keys, no prompts, no
    repository but the one found; with `ceiling` (the marker directory) git never looks above it."""
    env = scrubbed_env(environ, child_key_names(environ, secret_names))
    for name in DISCOVERY_VARIABLES:
        env.pop(name, None)
    env.update(GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", GIT_OPTIONAL_LOCKS="0",
               PATH=absolute_path_value(env.get("PATH")))
    if ceiling:
        env["GIT_CEILING_DIRECTORIES"] = os.path.dirname(ceiling)
    return env


def with_git_safety(env):
    """`env` for a process that may run git where nagent did not choose the repository (a shell
    action: plan mode runs `git status` there as read-only): GIT_CONFIG_COUNT entries after the
    caller's own make git never discover a bare repository the project carries, whose
    committed config could name commands (core.fsmonitor) that git runs."""
    env = dict(env)
    count = env.get("GIT_CONFIG_COUNT", "")
    index = int(count) if count.isdigit() else 0
    key, value = BARE_REPOSITORIES
    env.update({f"GIT_CONFIG_KEY_{index}": key, f"GIT_CONFIG_VALUE_{index}": value,
                "GIT_CONFIG_COUNT": str(index + 1)})
    return env


def git_command(directory, *args, git="git"):
    # The repository may be untrusted: no pager, no fsmonitor hook, no bare repository it carries.
    return [git, "--no-pager", "-c", "core.fsmonitor=false", "-c", "=".join(BARE_REPOSITORIES),
            "-C", directory, *args]


def run_git(marker, args, environ=None, secret_names=None):
    if not args or args[0] not in READING_SUBCOMMANDS:
        raise ValueError(f"run_git runs only {sorted(READING_SUBCOMMANDS)}: {args[:1]}")
    environ = os.environ if environ is None else environ
    git = find_program("git", environ.get("PATH", os.defpath))
    if git is None:
        return None
    import subprocess  # only a directory inside a repository pays for it
    try:
        return subprocess.run(git_command(marker, *args, git=git), stdin=subprocess.DEVNULL,
                              capture_output=True, timeout=GIT_TIMEOUT,
                              env=git_environ(environ, secret_names, ceiling=marker))
    except (OSError, subprocess.SubprocessError):
        return None


def has_permissions_file(cwd):
    marker = git_marker_dir(cwd)
    return bool(marker) and os.path.lexists(os.path.join(marker, ".nagent", "permissions"))


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


def _home(environ):
    home = environ.get("HOME") or os.path.expanduser("~")
    return os.path.realpath(home) if os.path.isabs(home) else "/"


def root_problem(marker, top, home):
    """Why `top` (what git names as the work tree of marker/.git) is not a project root, or None."""
    if top != marker:
        return (f"git names {top} as the work tree of {marker}/.git; nagent takes only the "
                "directory holding the .git it found")
    wide = too_wide(marker, home)
    return f"{wide} is never a project root" if wide else None


def probe_project(cwd, environ=None, secret_names=None):
    environ = os.environ if environ is None else environ
    real = os.path.realpath(cwd)
    marker, inside = search_marker(real)
    if marker is None or inside:
        return ProjectSearch(None, None)
    home = _home(environ)
    problem = root_problem(marker, marker, home)
    if problem:   # refused before any git process reads the repository
        return ProjectSearch(None, problem)
    proc = run_git(marker, ("rev-parse", "--show-toplevel", "--absolute-git-dir"), environ,
                   secret_names)
    if proc is None or proc.returncode != 0:
        return ProjectSearch(None, None)
    lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines()
    if len(lines) != 2 or not all(os.path.isabs(line) for line in lines):
        return ProjectSearch(None, None)
    problem = root_problem(marker, os.path.realpath(lines[0]), home)
    if problem:
        return ProjectSearch(None, problem)
    return ProjectSearch(Project(root=marker, branch=branch_name(lines[1]), git_dir=lines[1]), None)


def find_project(cwd, environ=None, secret_names=None):
    return probe_project(cwd, environ, secret_names).project
