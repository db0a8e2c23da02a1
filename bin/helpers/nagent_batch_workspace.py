"""One task's workspace: a git worktree of a local repository, or a clone of a URL, at the task's ref.

Data contract:
- `create(task, workdir, name, environ, made=None)` -> `Workspace`: makes the directory
  `workdir/name` itself (os.mkdir: a name already there is an error, never reused), calls
  `made(workspace)` before git writes anything (so the caller can record it), then fills it with
  `git worktree add --detach` (a local repo: no branch is created, no ref moves, no hook runs)
  or `git clone` + a detached checkout (a URL). `Workspace.base` is the commit `ref` resolved
  to (the diff's base), `ident` the (st_dev, st_ino) of the directory made, `admin` the
  worktree's own directory under the repository's `worktrees/` (None for a clone). Failures
  are `WorkspaceError` with git's last error line. Worktree add/remove on one repository are
  serialised by an flock beside the workspaces (`workdir/.repo-HASH.lock`): concurrent tasks
  on one repo are fine, concurrent edits of its worktree list are not.
- `diff(ws, environ)` -> text: the workspace against `base`, untracked files included (as new
  files, symlinks as links, binaries in git's binary form), ignored files not. It uses a
  private copy of the worktree's index with intent-to-add entries: nothing is staged in the
  workspace and no object but git's empty blob is written to the repository.
- `remove(ws, environ)` -> None when the workspace is gone, else the reason it was kept. Only
  the directory `create` made is removed, checked by its identity through a descriptor of its
  parent (a path that now leads elsewhere, or a symlink, is left alone): a worktree through
  `git worktree remove --force` (git unlinks symlinks, never follows them), else, and for a
  clone, a symlink-safe shutil.rmtree relative to that descriptor. Nothing outside the
  workspace is deleted; for a worktree, its admin directory goes only when it is the one
  recorded at creation, inside the repository's worktrees/.
- Every git process is nagent_project's hardened command (no fsmonitor, no pager) with
  `core.hooksPath=/dev/null`, run with nagent_project.git_environ (no provider keys).
"""
import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from dataclasses import dataclass, replace

from nagent_batch_tasks import is_url
from nagent_errors import NagentError
from nagent_paths import within
from nagent_project import git_command, git_environ

GIT_TIMEOUT = 600.0


class WorkspaceError(NagentError):
    kind = "input"


@dataclass(frozen=True)
class Workspace:
    path: str
    kind: str            # "worktree" | "clone"
    repo: str            # the repository's realpath, or the URL
    base: str            # the commit the workspace started at
    ident: tuple
    admin: str | None = None


def git(directory, *args, environ, timeout=GIT_TIMEOUT, extra_env=None, check=True):
    env = git_environ(environ)
    env.update(extra_env or {})
    command = git_command(directory, *args)
    command[2:2] = ["-c", "core.hooksPath=/dev/null"]
    try:
        proc = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, env=env,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        raise WorkspaceError(f"git {args[0]} timed out", directory) from None
    except OSError as error:
        raise WorkspaceError("cannot run git", error.strerror or str(error), "install git") from None
    if check and proc.returncode != 0:
        lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
        raise WorkspaceError(f"git {args[0]} failed", lines[-1] if lines else f"exit {proc.returncode}")
    return proc


class _RepoLock:
    """flock serialising worktree add/remove on one repository, across threads and processes."""

    def __init__(self, workdir, repo):
        digest = hashlib.sha256(repo.encode("utf-8", "surrogateescape")).hexdigest()[:16]
        self.path = os.path.join(workdir, f".repo-{digest}.lock")

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self.fd)


def _commit(directory, ref, environ):
    proc = git(directory, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}",
               environ=environ, check=False)
    sha = proc.stdout.decode("ascii", "replace").strip()
    return sha if proc.returncode == 0 and sha else None


def create(task, workdir, name, environ, made=None):
    url = is_url(task.repo)
    base = None if url else _commit(task.repo, task.ref, environ)
    if not url and base is None:
        raise WorkspaceError("ref not found in the repository", f"{task.ref} in {task.repo}")
    path = os.path.join(os.path.realpath(workdir), name)
    try:
        os.makedirs(workdir, mode=0o700, exist_ok=True)
        os.mkdir(path, 0o700)
        st = os.lstat(path)
    except FileExistsError:
        raise
    except OSError as error:
        raise WorkspaceError("cannot make the workspace", path, error.strerror or str(error)) from None
    ws = Workspace(path, "clone" if url else "worktree", task.repo, base or "", (st.st_dev, st.st_ino))
    if made is not None:
        made(ws)   # recorded before git writes anything, so a killed batch leaves nothing unknown
    if url:
        git(path, "clone", "--quiet", "--no-checkout", "--", task.repo, ".", environ=environ)
        base = _commit(path, task.ref, environ) or _commit(path, f"origin/{task.ref}", environ)
        if base is None:
            raise WorkspaceError("ref not found in the clone", task.ref)
        git(path, "checkout", "--quiet", "--detach", base, environ=environ)
        return replace(ws, base=base)
    with _RepoLock(workdir, task.repo):
        git(task.repo, "worktree", "add", "--detach", "--quiet", path, base, environ=environ)
    return replace(ws, admin=_admin_dir(path, task.repo, environ))


def _admin_dir(path, repo, environ):
    """The worktree's directory under the repository's worktrees/, as git itself reports it."""
    own = git(path, "rev-parse", "--absolute-git-dir", environ=environ, check=False)
    common = git(repo, "rev-parse", "--git-common-dir", environ=environ, check=False)
    admin = own.stdout.decode("utf-8", "surrogateescape").strip()
    root = os.path.realpath(os.path.join(repo, common.stdout.decode("utf-8", "surrogateescape").strip()))
    admin = os.path.realpath(admin) if admin else ""
    return admin if admin and within(admin, os.path.join(root, "worktrees")) else None


def diff(ws, environ):
    own = git(ws.path, "rev-parse", "--git-path", "index", environ=environ, check=False)
    index = os.path.join(ws.path, own.stdout.decode("utf-8", "surrogateescape").strip())
    with tempfile.TemporaryDirectory(prefix="nagent-batch-index-") as scratch:
        copy = os.path.join(scratch, "index")
        if os.path.isfile(index):
            shutil.copyfile(index, copy)
        extra = {"GIT_INDEX_FILE": copy}
        if not os.path.isfile(index):
            git(ws.path, "read-tree", ws.base, environ=environ, extra_env=extra)
        git(ws.path, "add", "--intent-to-add", "--all", "--", ".", environ=environ, extra_env=extra)
        proc = git(ws.path, "diff", "--no-color", "--no-ext-diff", "--no-textconv", "--binary",
                   ws.base, "--", environ=environ, extra_env=extra)
    return proc.stdout.decode("utf-8", "replace")


def _same_directory(parent_fd, name, ident):
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return stat.S_ISDIR(st.st_mode) and (st.st_dev, st.st_ino) == tuple(ident)


def remove(ws, environ):
    parent, name = os.path.split(ws.path)
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as error:
        return f"cannot open its parent: {error.strerror}"
    try:
        same = _same_directory(parent_fd, name, ws.ident)
        if same is False:
            return "the path no longer leads to the directory the batch made; left alone"
        if same and ws.kind == "worktree":
            with _RepoLock(parent, ws.repo):
                git(ws.repo, "worktree", "remove", "--force", "--force", ws.path, environ=environ,
                    check=False)
            same = _same_directory(parent_fd, name, ws.ident)
        if same:
            shutil.rmtree(name, dir_fd=parent_fd, ignore_errors=True)
            if _same_directory(parent_fd, name, ws.ident):
                return "some files could not be deleted"
    finally:
        os.close(parent_fd)
    if ws.admin and os.path.isdir(ws.admin):
        shutil.rmtree(ws.admin, ignore_errors=True)
    return None
