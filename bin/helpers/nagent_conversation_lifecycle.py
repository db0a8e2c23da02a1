"""Conversation lifecycle: where conversation files live, their names, and whole-file operations.

Data contract
-------------
* nagent_home() is $HOME/.nagent; conversations_dir() is its "conversations" subdirectory (callers
  create it, 0700, on demand; the functions here that write create it too). Named and saved
  conversations are files directly in it; the per-shell default is "latest-{hostname}-{pid}";
  "archive/" holds cleared or replaced ones as "{basename}-{UTC stamp}[-n]". Beside a conversation
  live "{conversation}.lock" (its flock), "{conversation}.torn-{stamp}" (recovered torn tails)
  and "{conversation}.d/" (side files, see side_dir/write_side_file).
* Default pid (default_pid), first match wins:
  1. GNU screen: STY set -> "screen-{STY}-{WINDOW}", so each screen window has its own file;
  2. an exported, non-empty BASHPID -> its value;
  3. otherwise the terminal session id, os.getsid(0): the same for every process started from one
     shell, so invocations through make, scripts or xargs append to one file (os.getppid() would
     change with each wrapper); os.getppid() only when getsid fails.
  Each value is sanitised to [A-Za-z0-9._-]. --pid and --conversation NAME override it: callers
  pass pid= to default_conversation_path, or use conversation_path(NAME).
* Names (validate_name) are plain file names: not empty, no "/" or NUL or control characters, not
  "." or "..", no leading "." or "-", at most 200 characters, and not ending in ".lock"/".d" nor
  containing ".torn-" (those are side files). Anything else is a UsageError.
* Every file written here goes through a fsynced temp file in the target directory and os.replace
  (or os.link when it must not replace), keeping the source file's mode. Nothing is lost: a
  conversation about to be replaced is archived first; save_as refuses an existing name
  (RefusedError) unless overwrite=True; a conversation whose lock a running nagent holds is never
  touched (BusyError). A caller holding a ConversationWriter on a path must close it before
  archiving, loading or branching onto that path (flock conflicts within one process too), or
  use archive_locked(), replace the file itself and call writer.reopen().
* Copies take complete records only: a torn tail of the source is left out.
"""
import fcntl
import os
import re
import stat
from time import gmtime, strftime

from nagent_conversation import (HEADER_MARK, Record, conversation_lock, encode_record,
                                 lock_path, parse_records, unescape_body, utc_stamp)
from nagent_conversation_tail import tail_state
from nagent_errors import InputError, RefusedError, UsageError
from nagent_fs import atomic_write, write_unique
from nagent_paths import conversations_dir

LOCK_TIMEOUT = 0.5  # lifecycle commands fail fast: a live run keeps its lock for minutes
HEAD_BYTES = 64 * 1024
NAME_FIX = "use a plain file name: no '/', no leading '.' or '-', at most 200 characters"
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._-]+")


def sanitize(text):
    return _UNSAFE_RE.sub("_", str(text)).lstrip(".-")


def default_pid(environ=None):
    environ = os.environ if environ is None else environ
    sty = environ.get("STY", "")
    if sty:
        window = environ.get("WINDOW", "")
        return sanitize(f"screen-{sty}-{window}" if window else f"screen-{sty}")
    bashpid = sanitize(environ.get("BASHPID", "").strip())
    if bashpid:
        return bashpid
    try:
        return str(os.getsid(0))
    except OSError:
        return str(os.getppid())


def default_conversation_path(environ=None, pid=None, hostname=None):
    host = sanitize(hostname or os.uname().nodename) or "localhost"
    if pid is None:
        pid = default_pid(environ)
    elif not sanitize(pid):
        raise UsageError("invalid pid", pid, "use letters, digits, '.', '_' or '-'")
    return os.path.join(conversations_dir(environ), f"latest-{host}-{sanitize(pid)}")


def validate_name(name):
    if not isinstance(name, str) or not name:
        raise UsageError("invalid conversation name", repr(name), NAME_FIX)
    shown = name if name.isprintable() else repr(name)
    if ("/" in name or os.path.isabs(name) or name in (".", "..") or not name.isprintable()
            or name.startswith((".", "-")) or len(name) > 200):
        raise UsageError("invalid conversation name", shown, NAME_FIX)
    if name.endswith((".lock", ".d")) or ".torn-" in name:
        raise UsageError("invalid conversation name", shown,
                         "names ending in .lock or .d or containing .torn- are side files")
    return name


def conversation_path(name, environ=None):
    return os.path.join(conversations_dir(environ), validate_name(name))


def is_busy(path):
    """True when a run (in any process, this one included) holds the conversation's lock."""
    try:
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except OSError:
        return True
    finally:
        os.close(fd)


# -- side files ----------------------------------------------------------------------
def side_dir(conversation_path):
    """`{conversation}.d`, created (0700) if missing."""
    path = os.fspath(conversation_path) + ".d"
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except OSError as error:  # a read-only ~/.nagent, or a file where a directory belongs
        raise InputError("cannot create conversation directory", path,
                         error.strerror or str(error)) from None
    return path


def write_side_file(conversation_path, stem, data):
    """Write `data` atomically as a NEW file `{conversation}.d/{stem}` (`{stem}-2`, ... if taken,
    so paths already quoted in a conversation keep their content); returns its path."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    name = sanitize(stem)[:120] or "side"
    return write_unique(os.path.join(side_dir(conversation_path), name), data)


# -- whole-file operations -----------------------------------------------------------
def _snapshot(path):
    """(bytes of the complete records, file mode) of a conversation; InputError if missing."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise InputError("not a conversation file", path, "give a regular file")
            try:
                end = tail_state(handle, info.st_size, path)[1]
            except InputError:
                end = info.st_size  # a hand-broken header is copied as is; readers report it
            handle.seek(0)
            return handle.read(end), stat.S_IMODE(info.st_mode)
    except FileNotFoundError:
        raise InputError("conversation not found", path, "check the name or path") from None
    except IsADirectoryError:
        raise InputError("not a conversation file", path, "give a regular file") from None
    except OSError as error:
        raise InputError("cannot read conversation", path, error.strerror or str(error))


def _same_file(first, second):
    try:
        return os.path.samefile(first, second)
    except OSError:
        return os.path.abspath(first) == os.path.abspath(second)


def _move_unique(source, base):
    """Rename `source` to `base` (or `base-2`, ...) without ever replacing a file."""
    for number in range(1, 10000):
        target = base if number == 1 else f"{base}-{number}"
        if os.path.lexists(target):
            continue
        try:
            os.link(source, target)
        except FileExistsError:
            continue
        except OSError:  # no hard links here: fall back to a checked rename
            os.rename(source, target)
            return target
        os.unlink(source)
        return target
    raise InputError("too many archived conversations with the same name", base,
                     "clean up the archive directory")


def archive_locked(path):
    """archive() for a caller that already holds the conversation's lock."""
    if not os.path.lexists(path):
        return None
    base = os.path.basename(path)
    if base in ("", ".", "..") or not os.path.isfile(path):
        raise InputError("not a conversation file", path, "give a regular file")
    folder = os.path.join(os.path.dirname(os.path.abspath(path)), "archive")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return _move_unique(path, os.path.join(folder, f"{base}-{utc_stamp()}"))


def archive(path, reason="clear", lock_timeout=LOCK_TIMEOUT):
    """Move a conversation to `archive/{basename}-{UTC stamp}[-n]` beside it and return the new
    path (None when there is nothing to archive). `reason` is for the caller's message only.
    Side files (`.d/`, `.torn-*`) stay where they are, so paths quoted in the archived
    conversation remain valid."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        return None
    try:
        with conversation_lock(path, lock_timeout):
            return archive_locked(path)
    except OSError as error:
        raise InputError("cannot archive conversation", path, error.strerror or str(error))


def _write_into(target, data, mode, lock_timeout, replace_existing):
    """Under target's lock: archive an existing target (or refuse unless replace_existing),
    then write atomically."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(target)), mode=0o700, exist_ok=True)
        with conversation_lock(target, lock_timeout):
            if os.path.lexists(target):
                if not replace_existing:
                    raise RefusedError("conversation already exists", target,
                                       "choose another name or ask to overwrite it")
                archive_locked(target)
            atomic_write(target, data, mode)
    except OSError as error:
        raise InputError("cannot write conversation", target, error.strerror or str(error))
    return target


def save_as(path, name, overwrite=False, environ=None, lock_timeout=LOCK_TIMEOUT):
    """Copy conversation `path` to the saved conversation NAME; returns the saved path. An
    existing NAME is refused unless overwrite (then it is archived first, never lost)."""
    path = os.fspath(path)
    target = conversation_path(name, environ)
    if os.path.lexists(target) and _same_file(path, target):
        raise RefusedError("cannot save a conversation onto itself", name, "choose another name")
    data, mode = _snapshot(path)
    return _write_into(target, data, mode, lock_timeout, overwrite)


def load(name, current_path, environ=None, lock_timeout=LOCK_TIMEOUT):
    """Archive the current conversation, then put a copy of saved conversation NAME in its place;
    returns current_path. (Call archive() first to learn the archived path.)"""
    current_path = os.fspath(current_path)
    source = conversation_path(name, environ)
    if not os.path.isfile(source):
        raise InputError("no saved conversation", name, "list them with nagent --status or ls")
    if os.path.lexists(current_path) and _same_file(source, current_path):
        return current_path
    data, mode = _snapshot(source)
    return _write_into(current_path, data, mode, lock_timeout, True)


def records_through_turn(records, turn):
    """Records up to turn N: the N-th "reply" and what follows it up to the next reply/prompt."""
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise UsageError("invalid turn", turn, "turns are numbered from 1")
    replies = 0
    for index, record in enumerate(records):
        if record.kind == "reply":
            replies += 1
            if replies > turn:
                return records[:index]
        elif record.kind == "prompt" and replies >= turn:
            return records[:index]
    if replies < turn:
        raise UsageError("no such turn", turn, f"the conversation has {replies} turns")
    return list(records)


def encode_records(records):
    """Records re-encoded and re-numbered from 1; notes are kept as plain text."""
    parts, seq = [], 0
    for record in records:
        if record.kind == "note":
            parts.append(record.body.encode("utf-8") + b"\n")
            continue
        seq += 1
        parts.append(encode_record(seq, record.kind, record.body, dict(record.attrs),
                                   record.time or None))
    return b"".join(parts)


def branch(source_path, new_path, turn=None, lock_timeout=LOCK_TIMEOUT):
    """Write the source's records (through `turn`, if given) re-numbered to new_path, archiving
    what was there; refuses (BusyError) when new_path is in use by a run. Returns new_path."""
    source_path, new_path = os.fspath(source_path), os.fspath(new_path)
    data, mode = _snapshot(source_path)
    records = parse_records(data, source=source_path)[0]
    if turn is not None:
        records = records_through_turn(records, turn)
    return _write_into(new_path, encode_records(records), mode, lock_timeout, True)


# -- listing -------------------------------------------------------------------------
def _is_side_name(name):
    return (name.startswith(".") or name.endswith((".lock", ".d", ".json")) or ".torn-" in name
            or ".tmp-" in name)


def first_prompt(head):
    """The first prompt's text (whitespace collapsed, 80 chars) from a file's first bytes."""
    try:
        records, torn = parse_records(head)
    except InputError:
        return ""
    records = list(records)
    if torn.startswith(HEADER_MARK) and b"\n" in torn:
        # The first prompt may be longer than the head: use what of it we have.
        line, _, rest = torn.partition(b"\n")
        records.append(Record(0, "prompt" if b' kind="prompt"' in line else "torn",
                              unescape_body(rest.decode("utf-8", "replace"))))
    for record in records:
        if record.kind == "prompt":
            return " ".join(record.body.split())[:80]
    return ""


def _entry(folder, name, kind):
    path = os.path.join(folder, name)
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None
            head = handle.read(HEAD_BYTES)
    except OSError:
        return None
    if head and HEADER_MARK not in head:
        return None  # not a conversation (an index or a stray file)
    if kind is None:
        kind = "latest" if name.startswith("latest-") else "saved"
    return {"name": name, "path": path, "kind": kind, "size": info.st_size,
            "modified": strftime("%Y-%m-%dT%H:%M:%SZ", gmtime(info.st_mtime)),
            "first_prompt": first_prompt(head)}


def list_conversations(environ=None):
    """Saved, latest-* and archived conversations, newest first within each kind; reads only
    the first 64 KiB of each file."""
    folder = conversations_dir(environ)
    entries = []
    for where, kind in ((folder, None), (os.path.join(folder, "archive"), "archived")):
        try:
            names = os.listdir(where)
        except OSError:
            continue
        for name in names:
            if not _is_side_name(name):
                entry = _entry(where, name, kind)
                if entry is not None:
                    entries.append(entry)
    order = {"latest": 0, "saved": 1, "archived": 2}
    entries.sort(key=lambda entry: entry["name"])
    entries.sort(key=lambda entry: entry["modified"], reverse=True)
    entries.sort(key=lambda entry: order[entry["kind"]])
    return entries
