"""Where a conversation and everything nagent keeps about it live, and which names and ids are valid.

Data contract
-------------
Layout of `conversations_dir()` (~/.nagent/conversations, see nagent_paths):

    NAME                  the conversation file of NAME (named, saved, or "latest-{host}-{pid}")
    NAME.d/               everything nagent keeps about NAME, and nothing else lives there:
        lock              its flock (left in place: deleting lock files races)
        checkpoint.md     its checkpoint; it belongs to NAME's records and moves with them
        torn-{stamp}      torn tails recovered from NAME (quoted by path in NAME: they stay)
        side/             side files: large shell output, scripts, results moved out of a window
                          (quoted by path in NAME: they stay, even when NAME is archived)
    archive/              archived conversations; an archived one keeps its own ARCHIVED.d/

So a name can never reach another conversation's state or nagent's own files: a name is
`[A-Za-z0-9_][A-Za-z0-9._-]*` (at most 200 characters), never ends in ".d" (state dirs), and is
not "archive". The per-shell file-edit indexes live outside conversations/ altogether, in
~/.nagent/file-edits/index-{pid}.json (plus its .lock and .corrupt), where no name leads.
The same layout holds for a conversation file anywhere (an archived one, an edit copy):
everything is derived from its path.

Conversation ids (the {pid} of "latest-{host}-{pid}" and of the file-edit index), one rule:
`valid_pid(pid)` accepts `[A-Za-z0-9_][A-Za-z0-9._-]*` up to 64 characters and raises UsageError
otherwise (a --pid is never silently rewritten); `default_pid(environ)` computes one, first match:
  1. GNU screen: STY set -> "screen-{STY}-{WINDOW}", so each screen window has its own file;
  2. an exported, non-empty BASHPID -> its value;
  3. otherwise the terminal session id, os.getsid(0): the same for every process started from one
     shell, so invocations through make, scripts or xargs append to one file (os.getppid() would
     change with each wrapper); os.getppid() only when getsid fails.
  Computed values are sanitised into the same alphabet.

Old layout (before NAME.d/ held everything): "NAME.lock", "NAME.torn-{stamp}" and
"conversations/file-index-{pid}.json" are no longer read or written (they are never listed as
conversations, and can be deleted); "NAME.checkpoint.md" is adopted into NAME.d/checkpoint.md by
`adopt_legacy_checkpoint` the next time a run opens NAME, if NAME has no checkpoint there yet.
`selected_pid(pid, environ)` -> the conversation id a command means, the one rule every
command uses (the conversation, the file-edit index): --pid ID checked by `valid_pid`, else (no
--pid: None; an empty one is refused) `default_pid(environ)`, this shell's id from the
environment given.
`given_name(text, environ)` -> the name a user gave: a name, or the path of a conversation in
conversations_dir as the commands print it (--status, --ps, --list-conversations --json);
whatever one command prints, the others accept.
`Selection` (frozen): conversation, pid, file_edit, as a command line gives them.
`selected_conversation(selection, environ)` -> (path, pid) that --conversation NAME (or its path)
and --pid ID select (this shell's default without them), checked by the rules above; a --file-edit
conversation is found through the file-edit index instead (nagent_session.resolve_conversation).
Every function here is pure path arithmetic except `side_dir` (creates the directory, 0700) and
`adopt_legacy_checkpoint`.
"""
import os
import re
from collections import namedtuple

from nagent_errors import InputError, UsageError
from nagent_paths import conversations_dir, home_dir, nagent_home

STATE_SUFFIX = ".d"
ARCHIVE_DIR = "archive"
RESERVED_NAMES = (ARCHIVE_DIR,)
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")
PID_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,63}")
NAME_FIX = ("use letters, digits, '.', '_' and '-', not starting with '.' or '-', at most 200 "
            "characters, not ending in .d")
LEGACY_TORN_RE = re.compile(r"\.torn-\d{8}T\d{6}Z(?:-\d+)?\Z")
_UNSAFE_RE = re.compile(r"[^A-Za-z0-9._-]+")


class Selection(namedtuple("Selection", "conversation pid file_edit", defaults=(None, None, None))):
    """What selects a conversation on a command line: --conversation NAME (or its path), --pid
    ID and --file-edit PATH; None where not given. Frozen; a namedtuple, not a dataclass: the
    commands that use it (--status ...) must not pay for dataclass generation."""
    __slots__ = ()


def sanitize(text):
    """`text` made into the id alphabet (for computed ids, never for a name the user gave)."""
    return _UNSAFE_RE.sub("_", str(text)).lstrip(".-")


# -- names and ids ------------------------------------------------------------------------
def validate_name(name):
    if not isinstance(name, str) or not name:
        raise UsageError("invalid conversation name", repr(name), NAME_FIX)
    shown = name if name.isprintable() else repr(name)
    if not NAME_RE.fullmatch(name):
        raise UsageError("invalid conversation name", shown, NAME_FIX)
    if name.endswith(STATE_SUFFIX) or name in RESERVED_NAMES:
        raise UsageError("invalid conversation name", shown,
                         "names ending in .d and the name archive are nagent's own")
    return name


def valid_pid(pid):
    pid = str(pid)
    if not PID_RE.fullmatch(pid):
        raise UsageError("invalid pid", pid or repr(pid),
                         "use letters, digits, '.', '_' or '-', e.g. --pid \"$BASHPID\"")
    return pid


def default_pid(environ=None):
    environ = os.environ if environ is None else environ
    sty = environ.get("STY", "")
    if sty:
        window = environ.get("WINDOW", "")
        return sanitize(f"screen-{sty}-{window}" if window else f"screen-{sty}")[:64]
    bashpid = sanitize(environ.get("BASHPID", "").strip())[:64]
    if bashpid:
        return bashpid
    try:
        return str(os.getsid(0))
    except OSError:
        return str(os.getppid())


def selected_pid(pid, environ=None):
    # An empty --pid (a script's unset "$VAR") is refused like any bad one, never this shell's.
    return default_pid(environ) if pid is None else valid_pid(pid)


def conversation_path(name, environ=None):
    return os.path.join(conversations_dir(environ), validate_name(name))


def given_name(text, environ=None):
    """A conversation as a user gives it: its name, or its absolute path as --status, --ps and
    --list-conversations print it (a file directly in conversations_dir). The name, checked;
    any other path is a UsageError."""
    text = str(text)
    if not text.startswith((os.sep, "~" + os.sep)):
        return validate_name(text)    # "../x" is a bad name, never a path
    folder = conversations_dir(environ)
    if text.startswith("~"):
        text = os.path.join(home_dir(environ), text[2:])
    parent, name = os.path.split(os.path.normpath(text))
    if parent not in (folder, os.path.realpath(folder)):
        raise UsageError("invalid conversation name", text,
                         f"give a name, or the path of a conversation in {folder}")
    return validate_name(name)


def default_conversation_path(environ=None, pid=None, hostname=None):
    host = sanitize(hostname or os.uname().nodename)[:100] or "localhost"
    pid = default_pid(environ) if pid is None else valid_pid(pid)
    return os.path.join(conversations_dir(environ), f"latest-{host}-{pid}")


# -- what nagent keeps about a conversation ----------------------------------------------
def selected_conversation(selection, environ=None):
    pid = selected_pid(selection.pid, environ)
    if selection.conversation:
        return conversation_path(given_name(selection.conversation, environ), environ), pid
    return default_conversation_path(environ, pid=pid), pid


def state_dir(path):
    return os.fspath(path) + STATE_SUFFIX


def lock_path(path):
    return os.path.join(state_dir(path), "lock")


def checkpoint_path(path):
    return os.path.join(state_dir(path), "checkpoint.md")


def torn_path(path, stamp):
    return os.path.join(state_dir(path), f"torn-{stamp}")


def replaced_path(path, stamp):
    return os.path.join(state_dir(path), f"replaced-{stamp}")


def side_dir(path):
    """`NAME.d/side`, created (0700, parents too) if missing."""
    folder = os.path.join(state_dir(path), "side")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError as error:  # a read-only ~/.nagent, or a file where a directory belongs
        raise InputError("cannot create conversation directory", folder,
                         error.strerror or str(error)) from None
    return folder


def archive_dir(path):
    """The archive/ folder beside conversation `path`."""
    return os.path.join(os.path.dirname(os.path.abspath(os.fspath(path))), ARCHIVE_DIR)


def file_index_dir(environ=None):
    return os.path.join(nagent_home(environ), "file-edits")


def file_index_path(pid, environ=None):
    return os.path.join(file_index_dir(environ), f"index-{valid_pid(pid)}.json")


def is_state_name(name):
    """True for entries of conversations/ that are nagent's own, old layout included: state dirs,
    archive/, temp files of atomic writes (".NAME.HEX.tmp"), old-layout torn tails."""
    return (name.startswith(".") or name.endswith(STATE_SUFFIX) or name in RESERVED_NAMES
            or bool(LEGACY_TORN_RE.search(name)))


# -- the old layout -----------------------------------------------------------------------
def legacy_checkpoint_path(path):
    return os.fspath(path) + ".checkpoint.md"


def adopt_legacy_checkpoint(path):
    """Move an old-layout `NAME.checkpoint.md` to NAME.d/checkpoint.md when NAME has none there;
    returns the new path or None. Only a file that starts like a checkpoint is taken: under the
    old layout a conversation could itself be named "x.checkpoint.md". Call under NAME's lock."""
    old, new = legacy_checkpoint_path(path), checkpoint_path(path)
    try:
        with open(old, "rb") as handle:
            if not handle.read(64).startswith(b"<!-- nagent-checkpoint"):
                return None
        if os.path.lexists(new):
            return None
        os.makedirs(state_dir(path), mode=0o700, exist_ok=True)
        os.link(old, new)
        os.unlink(old)
    except OSError:
        return None
    return new
