"""Write authority: which paths a structured write may touch, and a race-safe atomic writer.

Data contract:
- `WriteMode(kind, target, target_id, segments)` is plain frozen data. kind "main" (the main
  conversation) may write only inside the temp roots. kind "file-edit" may also write the target
  file (`target` is its realpath as recorded when the session started, compared as it is, never
  resolved again), the same file after a rename (an existing path whose "dev:inode",
  nagent_fs.file_id, equals target_id and whose link count is 1, while the target path itself no
  longer exists), and the realpaths in `segments`: the segment files of splits of the target
  that nagent itself made, as its split registry records them
  (nagent_split_registry.granted_segments). No file the model can write (an index.json, a
  segment, a split directory) grants anything.
- nagent's own state (nagent_paths.nagent_state_roots: ~/.nagent and the NAGENT_CONFIG file) is
  never written, in any mode, whatever the temp roots are (HOME may itself lie under /tmp).
- `temp_roots(environ, cwd)` -> realpaths of /tmp, /var/tmp and $TMPDIR, deduplicated, in that
  order. $TMPDIR counts only when absolute, an existing directory, not "/", and not $HOME, an
  ancestor of $HOME or of `cwd` (default: the process cwd), nor inside nagent's state: such a
  TMPDIR grants nothing. `temp_root_problem(environ, cwd)` -> one line saying why $TMPDIR is not
  a temp root, or None. `scratch_root(environ, cwd)` -> where nagent puts scratch directories:
  $TMPDIR when it is a temp root, else the first temp root (InputError when there is none).
- `validate_write_path(path, mode, cwd, environ)` -> the resolved absolute path, or raises
  RefusedError("write refused", path, reason). Relative paths resolve against `cwd`; `~` is never
  expanded. Everything is decided on real paths: symlinks and `..` are resolved before the check,
  a symlink as the final component is always refused (even one pointing inside temp), an existing
  directory is refused, and a file with more than one hard link is refused unless it is the target
  path itself (another link would alias a file we were not asked to write).
- `validate_patch_source(source, mode, environ, cwd)` -> same rules for the file a split patch
  will replace (main: temp roots; file-edit: the target or temp, never a segment).
- `resolve_write_target(path, cwd)` -> the resolved absolute path a write of `path` checks and
  replaces (what an action hook is shown as resolved_path).
- `edit_target(path, cwd, roots, environ, excluded=())` -> the realpath of a file the main
  conversation may hand to a per-file edit session (<nagent-file-edit>, a <nagent-replace> of a
  project file), which the driver runs outside any shell sandbox. Links and `..` are resolved
  first (a final symlink too: the session edits the file it names); the file must exist, be a
  regular file (never opened here: a FIFO cannot block), lie inside one of `roots` (the caller
  passes the working directory, the project root and the temp roots), outside every `excluded`
  tree (the repository's git directory: its hooks and config run later as the user) and outside
  nagent's own state. Else RefusedError("not an edit target", path, reason).
- `write_file_atomic(path, data, mode, cwd, environ, expect_sha256=None, expected=None)` ->
  {path, bytes, created}. With `expected` (the path an action hook allowed) it refuses when the
  path resolves to anything else by now. It validates, then
  walks from "/" with O_DIRECTORY|O_NOFOLLOW directory fds (creating missing parents 0700 only inside
  a temp root), re-checks the opened parent's real path, re-checks the final entry through the dir
  fd, writes a temp file in that directory, fsyncs, keeps the old permission bits, and os.replace()s
  it into place relative to the dir fd, so a hardlink or symlink swapped in at the destination is
  replaced rather than written through. Filesystem failures raise InputError("write failed", ...).
  `expect_sha256` (a replace computed from the bytes it read): right before the rename the
  file in place is hashed through the same dir fd, and anything else there (changed meanwhile,
  gone) is refused (RefusedError "write refused", the file changed since it was read) with
  nothing written.
"""
import errno
import os
import stat
from dataclasses import dataclass

from nagent_errors import ConfigError, InputError, RefusedError
from nagent_fs import file_id, open_dir_nofollow, opened_path, write_in_dir
from nagent_paths import home_dir, in_nagent_state, within, within_any

FIXED_TEMP_ROOTS = ("/tmp", "/var/tmp")
PATH_MAX = 4096
NAME_MAX = 255
STATE_REASON = "nagent's own state (~/.nagent, the NAGENT_CONFIG file) is never written"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class WriteMode:
    """Who may write what: the main conversation, or a per-file edit session's target."""

    kind: str = "main"
    target: str | None = None
    target_id: str | None = None
    segments: frozenset = frozenset()

    def __post_init__(self):
        if self.kind not in ("main", "file-edit"):
            raise ValueError(f"unknown write mode kind: {self.kind!r}")


def _tmpdir_problem(tmpdir, environ, cwd):
    """Why `tmpdir` (as given) cannot be a temp root, or None."""
    if not tmpdir:
        return None
    if not os.path.isabs(tmpdir):
        return "it is relative (it would depend on the working directory)"
    if not os.path.isdir(tmpdir):
        return "it is not an existing directory"
    real = os.path.realpath(tmpdir)
    if real == "/":
        return "it resolves to /"
    try:
        home = os.path.realpath(home_dir(environ))
    except ConfigError:
        return "HOME is not an absolute path"
    if within(home, real, inclusive=True):
        return "it is $HOME or an ancestor of $HOME"
    if in_nagent_state(real, environ):
        return "it is inside ~/.nagent"
    try:
        here = os.path.realpath(os.getcwd() if cwd is None else cwd)
    except OSError:
        return "the working directory is gone, so it cannot be shown to lie outside it"
    if within(here, real, inclusive=True):
        return "it is the working directory or an ancestor of it"
    return None


def temp_root_problem(environ=None, cwd=None):
    environ = os.environ if environ is None else environ
    tmpdir = environ.get("TMPDIR") or ""
    problem = _tmpdir_problem(tmpdir, environ, cwd)
    if problem is None:
        return None
    return f"TMPDIR={tmpdir} is not a temp root: {problem}; writes there are refused"


def temp_roots(environ=None, cwd=None) -> tuple[str, ...]:
    environ = os.environ if environ is None else environ
    candidates = list(FIXED_TEMP_ROOTS)
    tmpdir = environ.get("TMPDIR") or ""
    if tmpdir and _tmpdir_problem(tmpdir, environ, cwd) is None:
        candidates.append(tmpdir)
    roots = []
    for candidate in candidates:
        real = os.path.realpath(candidate)
        if real != "/" and os.path.isdir(real) and real not in roots:
            roots.append(real)
    return tuple(roots)


def scratch_root(environ=None, cwd=None):
    environ = os.environ if environ is None else environ
    roots = temp_roots(environ, cwd)
    if not roots:
        raise InputError("no temp directory to work in", "/tmp, /var/tmp and $TMPDIR are unusable",
                         "create /tmp or set TMPDIR to a private directory")
    tmpdir = environ.get("TMPDIR") or ""
    real = os.path.realpath(tmpdir) if tmpdir and os.path.isabs(tmpdir) else None
    return real if real in roots else roots[0]


def _shown(path):
    """The path as it may appear in a one-line error (no control chars, bounded length)."""
    text = path if path.isprintable() else repr(path)
    return text if len(text) <= 300 else text[:300] + "..."


def _refuse(path, reason):
    return RefusedError("write refused", _shown(path), reason)


def _check_syntax(path):
    if not isinstance(path, str):
        raise _refuse(repr(path), "path must be text")
    if path == "":
        raise _refuse("", "empty path")
    if any(ord(ch) < 32 or ord(ch) == 127 for ch in path):
        raise _refuse(path, "control character (NUL/newline) in path")
    try:
        raw = os.fsencode(path)
    except UnicodeError:
        raise _refuse(path, "path is not encodable") from None
    if len(raw) >= PATH_MAX:
        raise _refuse(path, f"path longer than PATH_MAX ({PATH_MAX} bytes)")
    if any(len(part) > NAME_MAX for part in raw.split(b"/")):
        raise _refuse(path, f"a path component is longer than NAME_MAX ({NAME_MAX} bytes)")


def _lstat(path, dir_fd=None):
    try:
        return os.lstat(path, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as error:
        raise _refuse(path, f"cannot inspect path: {error.strerror}") from None


def _authorize(final, st, mode, roots, environ, allow_segments):
    """Return None when `final` (a resolved path whose lstat is `st`) may be written, else a reason."""
    if in_nagent_state(final, environ):
        return STATE_REASON
    if st is not None and stat.S_ISLNK(st.st_mode):
        return "the final path component is a symlink (write the real file instead)"
    if st is not None and stat.S_ISDIR(st.st_mode):
        return "path is an existing directory"
    if st is not None and not stat.S_ISREG(st.st_mode):
        return "path is not a regular file"
    # The target is the real path recorded when the session started, never resolved again: a
    # directory on its way swapped for a link would make "the target" the file the link reaches.
    is_target_path = mode.kind == "file-edit" and bool(mode.target) and final == mode.target
    if st is not None and st.st_nlink > 1 and not is_target_path:
        return "file has more than one hard link (it would alias another file)"
    if within_any(final, roots):
        return None
    if mode.kind == "main":
        return _outside_temp("main conversation may write only under ", roots, environ)
    if is_target_path:
        return None
    # The file id stands for the target only once its path is gone (renamed): after our own
    # atomic replace the old inode lives on under any other hard link, which is not the target.
    if st is not None and mode.target_id and file_id(st) == mode.target_id \
            and not (mode.target and os.path.lexists(mode.target)):
        return None
    if allow_segments and final in mode.segments:
        return None
    return _outside_temp("file-edit session may write only its target, the segments of splits "
                         "nagent made of it, or ", roots, environ)


def _outside_temp(prefix, roots, environ):
    problem = temp_root_problem(environ)
    return prefix + ", ".join(roots) + (f" ({problem})" if problem else "")


def _resolve(path, cwd):
    joined = path if os.path.isabs(path) else os.path.join(os.path.abspath(cwd), path)
    head, name = os.path.split(joined)
    if name in ("", ".", ".."):
        raise _refuse(path, "path names a directory, not a file")
    try:
        final = os.path.join(os.path.realpath(head), name)
    except OSError as error:
        raise _refuse(path, f"cannot resolve path: {error.strerror}") from None
    if len(os.fsencode(final)) >= PATH_MAX:
        raise _refuse(path, f"resolved path longer than PATH_MAX ({PATH_MAX} bytes)")
    return final


def resolve_write_target(path, cwd):
    """The absolute path a write of `path` would check and replace: its directory resolved
    (links, ".."), its last component as written (a link there is refused, never followed).
    RefusedError for a path no write accepts (empty, control characters, too long)."""
    _check_syntax(path)
    return _resolve(path, cwd)


def validate_write_path(path: str, mode: WriteMode, cwd: str, environ=None) -> str:
    _check_syntax(path)
    final = _resolve(path, cwd)
    reason = _authorize(final, _lstat(final), mode, temp_roots(environ, cwd), environ,
                        allow_segments=True)
    if reason:
        raise _refuse(path, reason)
    return final


def validate_patch_source(source: str, mode: WriteMode, environ=None, cwd=None) -> str:
    _check_syntax(source)
    if not os.path.isabs(source):
        raise _refuse(source, "patch source must be an absolute path")
    final = _resolve(source, "/")
    reason = _authorize(final, _lstat(final), mode, temp_roots(environ, cwd), environ,
                        allow_segments=False)
    if reason:
        raise _refuse(source, reason)
    return final


def edit_target(path: str, cwd: str, roots, environ=None, excluded=()) -> str:
    _check_syntax(path)
    joined = path if os.path.isabs(path) else os.path.join(os.path.abspath(cwd), path)
    real = os.path.realpath(joined)

    def refuse(reason):
        return RefusedError("not an edit target", _shown(path), reason)
    if in_nagent_state(real, environ):
        raise refuse(STATE_REASON)
    try:
        st = os.stat(real)
    except FileNotFoundError:
        raise refuse("no such file (a per-file session edits an existing file; create a new "
                     "one with a shell command)") from None
    except OSError as error:
        raise refuse(f"cannot inspect it: {error.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise refuse("it is a directory (give one file)")
    if not stat.S_ISREG(st.st_mode):
        raise refuse("it is not a regular file")
    if within_any(real, excluded, inclusive=True):
        raise refuse("it is inside the repository's git directory (hooks and config that git "
                     "runs later): change it yourself")
    if not within_any(real, roots):
        raise refuse(f"{_shown(real)} is outside " + ", ".join(roots)
                     + ": the main conversation edits files of the project (the working "
                       "directory and the project root) and temp files")
    return real


# -- the writer ------------------------------------------------------------------------------

def _check_opened(fd, expected):
    """The directory we hold must still be the one we validated (defeats swaps during the walk)."""
    actual = opened_path(fd)
    if actual is None:  # no /proc: fall back to comparing identities
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(expected))
        except OSError:
            same = False
        if not same:
            raise _refuse(expected, "parent directory changed while writing")
    elif actual != expected:
        raise _refuse(expected, f"parent directory changed while writing (now {_shown(actual)})")


def _open_parent(parent, roots, environ):
    """Open `parent` (a resolved absolute path) component by component without following links."""
    def may_create(child):
        return within_any(child, roots) and not in_nagent_state(child, environ)
    try:
        fd = open_dir_nofollow(parent, make=may_create)
    except FileNotFoundError as error:
        raise _refuse(error.filename or parent,
                      "parent directory does not exist (created only inside temp)") from None
    except OSError as error:
        reason = "a path component is a symlink or not a directory" \
            if error.errno in (errno.ELOOP, errno.ENOTDIR) else f"cannot open directory: {error.strerror}"
        raise _refuse(error.filename or parent, reason) from None
    try:
        _check_opened(fd, parent)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _sha256_at(name, dir_fd):
    """sha256 of the regular file `name` in `dir_fd` (no symlink followed), or None."""
    import hashlib
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return None
        digest = hashlib.sha256()
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _write_validated(final, data, mode, environ=None, cwd=None, expect_sha256=None) -> dict:
    """Write `data` to an already validated resolved path, re-checking everything via dir fds."""
    roots = temp_roots(environ, cwd)
    parent, name = os.path.split(final)
    try:
        dir_fd = _open_parent(parent, roots, environ)
    except OSError as error:
        raise InputError("write failed", _shown(final), error.strerror) from None
    try:
        st = _lstat(name, dir_fd=dir_fd)
        reason = _authorize(final, st, mode, roots, environ, allow_segments=True)
        if reason:
            raise _refuse(final, reason)

        def unchanged():   # the file as it is now, read through the same directory
            if expect_sha256 is not None and _sha256_at(name, dir_fd) != expect_sha256:
                raise _refuse(final, "the file changed since it was read (its sha256 is no longer "
                                     "what the edit was computed from); nothing was written: read it "
                                     "again")
        write_in_dir(dir_fd, name, data, None if st is None else stat.S_IMODE(st.st_mode) & 0o777,
                     check=unchanged)
        return {"path": final, "bytes": len(data), "created": st is None}
    except OSError as error:
        raise InputError("write failed", _shown(final), error.strerror) from None
    finally:
        os.close(dir_fd)


def write_file_atomic(path: str, data: bytes, mode: WriteMode, cwd: str, environ=None,
                      expect_sha256=None, expected=None) -> dict:
    if isinstance(data, str):
        data = data.encode("utf-8")
    final = validate_write_path(path, mode, cwd, environ)
    if expected is not None and final != expected:
        raise _refuse(path, f"the path changed after the action hook allowed it (it allowed "
                            f"{_shown(expected)}, the path now resolves to {_shown(final)})")
    return _write_validated(final, bytes(data), mode, environ, cwd, expect_sha256)
