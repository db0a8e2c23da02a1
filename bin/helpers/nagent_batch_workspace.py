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
  workspace and no object is written to the repository. git runs with a GIT_DIR of its own
  (nagent_shadow_git.init_git_dir: a plain config, the repository's objects as alternates, its
  info/exclude copied), found from what `create` recorded (a worktree's admin directory, a
  clone's .git): the task's nagent may have written the workspace's .git (a clone's config, a
  worktree's `gitdir:` file), and this git runs outside any sandbox, so no filter, diff
  driver or hook the workspace names ever runs.
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
from nagent_fs import atomic_write, read_regular
from nagent_project import git_command, git_environ
from nagent_shadow_git import init_git_dir

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
    admin = own.stdout.decode("utf-8", "surrogateescape").strip()
    return _owned_admin(path, repo, os.path.realpath(admin), environ) if admin else None


def checked(ws, environ):
    """`ws` as read back from a record its attempt's own commands may have rewritten (a batch
    manifest), with an admin directory only when it is the workspace's own (`_owned_admin`):
    `remove` deletes it and `diff` reads the repository through it."""
    admin = _owned_admin(ws.path, ws.repo, ws.admin, environ) if ws.admin else None
    return replace(ws, admin=admin)


def _owned_admin(path, repo, admin, environ):
    """`admin` when it is a directory right under the repository's worktrees/ whose `gitdir`
    names this workspace's .git; else None."""
    if not isinstance(admin, str) or not os.path.isabs(admin):
        return None
    common = git(repo, "rev-parse", "--git-common-dir", environ=environ, check=False)
    named = common.stdout.decode("utf-8", "surrogateescape").strip()
    if common.returncode != 0 or not named:
        return None
    worktrees = os.path.join(os.path.realpath(os.path.join(repo, named)), "worktrees")
    real = os.path.realpath(admin)
    if os.path.dirname(real) != worktrees:
        return None
    try:
        gitdir = read_regular(os.path.join(real, "gitdir"), 1 << 16)
    except OSError:
        return None
    if gitdir is None or gitdir.decode("utf-8", "surrogateescape").strip() != \
            os.path.join(path, ".git"):
        return None
    return real


# The private GIT_DIR a diff runs with: nothing in it names a command (no filter, diff driver,
# hook or fsmonitor), and GIT_DIR in the environment means git reads no config of the workspace.
DIFF_CONFIG = "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tlogallrefupdates = false\n"


def _git_store(ws, environ):
    """(objects dir, index, info/exclude) of the workspace's repository, from what nagent
    recorded when it made the workspace, never from the workspace's .git (its nagent may have
    pointed it at a repository of its own)."""
    if ws.kind == "clone":
        common = os.path.join(ws.path, ".git")   # read as data only: objects and the index
        index = os.path.join(common, "index")
    else:
        if ws.admin:
            common, index = os.path.dirname(os.path.dirname(ws.admin)), os.path.join(ws.admin, "index")
        else:
            found = git(ws.repo, "rev-parse", "--path-format=absolute", "--git-common-dir",
                        environ=environ)
            common, index = found.stdout.decode("utf-8", "surrogateescape").strip(), None
    return os.path.join(common, "objects"), index, os.path.join(common, "info", "exclude")


def diff(ws, environ):
    objects, index, exclude = _git_store(ws, environ)
    with tempfile.TemporaryDirectory(prefix="nagent-batch-index-") as scratch:
        git_dir = os.path.join(scratch, "git")
        init_git_dir(git_dir, config=DIFF_CONFIG, attributes=None, alternates=objects)
        source = read_regular(exclude, 1 << 20)
        if source:
            atomic_write(os.path.join(git_dir, "info", "exclude"), source, 0o600, sync=False)
        copy = os.path.join(scratch, "index")
        extra = {"GIT_DIR": git_dir, "GIT_WORK_TREE": ws.path, "GIT_INDEX_FILE": copy}
        try:
            if not (index and stat.S_ISREG(os.lstat(index).st_mode)):
                raise OSError("no index")
            shutil.copyfile(index, copy)   # its stat data spares git re-hashing every file
            git(ws.path, "add", "--intent-to-add", "--all", "--", ".", environ=environ,
                extra_env=extra)
        except (OSError, WorkspaceError):   # none, or one git cannot read alone: start afresh
            if os.path.lexists(copy):
                os.unlink(copy)
            git(ws.path, "read-tree", ws.base, environ=environ, extra_env=extra)
            git(ws.path, "add", "--intent-to-add", "--all", "--", ".", environ=environ,
                extra_env=extra)
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
