"""The shadow git repository behind snapshots: nagent's own GIT_DIR and index over a project tree.

Data contract:
- `Git(git_dir, work_tree, env)` is plain data for one shadow repository: `git_dir` (nagent's
  own, under ~/.nagent), `work_tree` (the project root, a realpath) and the child environment
  (`shadow_env`). `git.run(*args, input=b"") -> stdout bytes` runs the `git` binary with
  `shadow_args`; SnapshotError (exit 1) names the command and git's first error line.
- `shadow_env(environ, git_dir, work_tree, key_names)` is nagent_secrets.scrubbed_env without
  any inherited GIT_* variable (GIT_EXTERNAL_DIFF, GIT_CONFIG_PARAMETERS, GIT_DIR ... would
  run code or redirect the repository), plus GIT_DIR, GIT_WORK_TREE, GIT_INDEX_FILE (inside
  GIT_DIR), GIT_CONFIG_NOSYSTEM=1, GIT_CONFIG_GLOBAL=/dev/null, GIT_ATTR_NOSYSTEM=1, a fixed
  identity and no prompt. git therefore reads no configuration but nagent's own file, never
  the project's .git/config, hooks, attributes from $HOME or /etc, or its index.
- `shadow_args(*args)` puts the settings that must hold even if the shadow config were edited
  (no hooks, no fsmonitor, no pager) on the command line.
- `init_git_dir(git_dir, config=CONFIG, attributes=ATTRIBUTES, alternates=None)` creates the
  repository in Python (no process): HEAD, objects/, refs/, `config` (CONFIG: stat and
  untracked caches on, symlinks and modes recorded, no autocrlf, gc only when nagent asks) and
  `info/attributes` (ATTRIBUTES: no eol conversion, filter or ident from the project's
  .gitattributes, so stored bytes are the file's bytes; None: none). `alternates` names an
  objects directory it reads too: nagent-batch's diff of a workspace runs git with such a
  GIT_DIR of its own, so no config the workspace can name is ever read.
- HEAD is a detached commit nagent writes itself: `read_head(git_dir) -> sha | None`,
  `set_head(git_dir, sha)` (atomic), `write_commit(git_dir, tree, parent) -> sha` writes a loose
  commit object (deterministic content), so a snapshot needs no commit-tree process.
- `parse_status(data) -> Status(changed, untracked, staged)` reads `git status --porcelain=v2
  -z`: `changed` the paths whose work tree differs from the index, `untracked` the untracked
  paths (a nested repository's "dir/" kept with its slash), `staged` True when the index
  differs from HEAD (an interrupted snapshot left it so). Paths are str (surrogateescape).
- `parse_raw_diff(data) -> [DiffEntry(old_mode, new_mode, old_sha, new_sha, status, path)]` for
  `git diff-tree -r -z --no-renames`; `parse_stdin_diffs(data) -> {(tree_a, tree_b): [paths]}`
  for `diff-tree --stdin -r -z --name-only` over pairs of trees.
- `blob_sha(data) -> sha` is git's object id of a blob with these bytes.
"""
import os
import zlib
from collections import namedtuple

from nagent_errors import NagentError
from nagent_fs import atomic_write
from nagent_secrets import scrubbed_env

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
GIT_TIMEOUT = 600.0
IDENTITY = {"GIT_AUTHOR_NAME": "nagent", "GIT_AUTHOR_EMAIL": "nagent@localhost",
            "GIT_COMMITTER_NAME": "nagent", "GIT_COMMITTER_EMAIL": "nagent@localhost"}
CONFIG = """[core]
\trepositoryformatversion = 0
\tbare = false
\tfilemode = true
\tsymlinks = true
\tignorecase = false
\tprecomposeunicode = false
\tlogallrefupdates = false
\tuntrackedCache = true
\tautocrlf = false
\tsafecrlf = false
\tquotePath = false
\tcheckStat = default
\tsplitIndex = false
\tattributesFile = /dev/null
\texcludesFile = /dev/null
[index]
\tversion = 4
[gc]
\tauto = 0
\tautoDetach = true
\tpruneExpire = 1.hour.ago
"""
ATTRIBUTES = "* -text -eol -ident -filter -working-tree-encoding\n"
# On the command line too: they must hold even if someone edited the shadow config.
FORCED = ("core.hooksPath=/dev/null", "core.fsmonitor=false", "protocol.allow=never")


class SnapshotError(NagentError):
    kind = "failure"


Status = namedtuple("Status", "changed untracked staged")
DiffEntry = namedtuple("DiffEntry", "old_mode new_mode old_sha new_sha status path")


def shadow_env(environ, git_dir, work_tree, key_names):
    env = {name: value for name, value in scrubbed_env(environ, key_names).items()
           if not name.upper().startswith("GIT_")}
    env.update(IDENTITY, GIT_DIR=git_dir, GIT_WORK_TREE=work_tree,
               GIT_INDEX_FILE=os.path.join(git_dir, "index"), GIT_CONFIG_NOSYSTEM="1",
               GIT_CONFIG_GLOBAL="/dev/null", GIT_ATTR_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0",
               GIT_PAGER="cat", GIT_NO_REPLACE_OBJECTS="1", LC_ALL="C")
    return env


def shadow_args(*args):
    command = ["git", "--no-pager", "--literal-pathspecs"]
    for setting in FORCED:
        command += ["-c", setting]
    return command + list(args)


class Git:
    """One shadow repository: where it is, what it covers, and how to run git on it."""

    def __init__(self, git_dir, work_tree, env):
        self.git_dir, self.work_tree, self.env = git_dir, work_tree, env

    def run(self, *args, input=b"", check=True):
        import subprocess   # not at the top: --status and a run's first request need none
        name = next((arg for index, arg in enumerate(args) if not arg.startswith("-")
                     and (index == 0 or args[index - 1] != "-c")), "git")
        try:
            proc = subprocess.run(shadow_args(*args), input=input, capture_output=True,
                                  env=self.env, cwd=self.work_tree, timeout=GIT_TIMEOUT)
        except FileNotFoundError:
            raise SnapshotError("git is not installed", "git",
                                "snapshots need the git binary on PATH") from None
        except (OSError, subprocess.SubprocessError) as error:
            raise SnapshotError(f"git {name} failed", str(error)) from None
        if check and proc.returncode != 0:
            lines = proc.stderr.decode("utf-8", "replace").strip().splitlines()
            raise SnapshotError(f"git {name} failed in the snapshot store",
                                lines[0] if lines else f"exit {proc.returncode}", self.git_dir)
        return proc.stdout

    def popen(self, *args):
        import subprocess
        return subprocess.Popen(shadow_args(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=self.env, cwd=self.work_tree)


def init_git_dir(git_dir, config=CONFIG, attributes=ATTRIBUTES, alternates=None):
    """A fresh shadow repository at `git_dir` (its parent exists): written in Python. With
    `alternates` (an objects directory) it reads the objects stored there too."""
    os.makedirs(git_dir, mode=0o700, exist_ok=True)
    for sub in ("objects", os.path.join("objects", "info"), "refs", os.path.join("refs", "heads"),
                "info"):
        os.makedirs(os.path.join(git_dir, sub), mode=0o700, exist_ok=True)
    atomic_write(os.path.join(git_dir, "config"), config.encode(), 0o600, sync=False)
    if attributes is not None:
        atomic_write(os.path.join(git_dir, "info", "attributes"), attributes.encode(), 0o600,
                     sync=False)
    if alternates is not None:
        atomic_write(os.path.join(git_dir, "objects", "info", "alternates"),
                     os.fsencode(alternates) + b"\n", 0o600, sync=False)
    # Written last: a directory with HEAD is what git takes for a repository.
    atomic_write(os.path.join(git_dir, "HEAD"), b"ref: refs/heads/snapshots\n", 0o600, sync=False)


def is_git_dir(git_dir):
    return all(os.path.exists(os.path.join(git_dir, name)) for name in ("HEAD", "objects", "config"))


def read_head(git_dir):
    try:
        with open(os.path.join(git_dir, "HEAD"), "rb") as handle:
            text = handle.read(100).decode("ascii", "replace").strip()
    except OSError:
        return None
    return text if len(text) == 40 and all(c in "0123456789abcdef" for c in text) else None


def set_head(git_dir, sha):
    atomic_write(os.path.join(git_dir, "HEAD"), (sha + "\n").encode(), 0o600, sync=False)


def _object_id(kind, data):
    import hashlib
    header = f"{kind} {len(data)}\0".encode()
    return hashlib.sha1(header + data).hexdigest(), header


def blob_sha(data):
    return _object_id("blob", data)[0]


def write_object(git_dir, kind, data):
    sha, header = _object_id(kind, data)
    folder = os.path.join(git_dir, "objects", sha[:2])
    path = os.path.join(folder, sha[2:])
    if not os.path.exists(path):
        os.makedirs(folder, mode=0o700, exist_ok=True)
        try:
            atomic_write(path, zlib.compress(header + data), 0o444, sync=False, exclusive=True)
        except FileExistsError:
            pass
    return sha


def write_commit(git_dir, tree, parent=None):
    lines = [f"tree {tree}"] + ([f"parent {parent}"] if parent else [])
    lines += ["author nagent <nagent@localhost> 0 +0000",
              "committer nagent <nagent@localhost> 0 +0000", "", "nagent snapshot", ""]
    return write_object(git_dir, "commit", "\n".join(lines).encode())


def _path(raw):
    return os.fsdecode(raw)


def parse_status(data):
    changed, untracked, staged = [], [], False
    fields = data.split(b"\0")
    index = 0
    while index < len(fields):
        field = fields[index]
        index += 1
        if not field:
            continue
        tag = field[:2]
        if tag == b"? ":
            untracked.append(_path(field[2:]))
        elif tag == b"1 ":
            parts = field.split(b" ", 8)
            xy = parts[1]
            staged = staged or xy[:1] != b"."
            if xy[1:2] != b".":
                changed.append(_path(parts[8]))
        elif tag == b"2 ":  # a rename (never asked for): both paths count
            parts = field.split(b" ", 9)
            staged = True
            changed.append(_path(parts[9]))
            if index < len(fields):
                changed.append(_path(fields[index]))
                index += 1
        elif tag == b"u ":
            staged = True
            changed.append(_path(field.split(b" ", 10)[10]))
    return Status(changed, untracked, staged)


def parse_raw_diff(data):
    entries = []
    fields = data.split(b"\0")
    index = 0
    while index + 1 < len(fields):
        meta = fields[index]
        if not meta.startswith(b":"):
            index += 1
            continue
        old_mode, new_mode, old_sha, new_sha, status = meta[1:].decode("ascii").split(" ")
        entries.append(DiffEntry(old_mode, new_mode, old_sha, new_sha, status[:1],
                                 _path(fields[index + 1])))
        index += 2
    return entries


def parse_stdin_diffs(data):
    """{(tree_a, tree_b): [paths]} of `diff-tree --stdin -r -z --name-only` output: each pair's
    paths follow a "<tree_a> <tree_b>\\n" line."""
    result, pair = {}, None
    for field in data.split(b"\0"):
        while len(field) >= 82 and field[81:82] == b"\n" and field[40:41] == b" ":
            pair = tuple(field[:81].decode("ascii").split(" "))
            result.setdefault(pair, [])
            field = field[82:]
        if field and pair is not None:
            result[pair].append(_path(field))
    return result
