"""Conversation lifecycle: whole-file operations on conversations (archive, save, load, branch) and
the listing.

Data contract
-------------
* Where a conversation and its state live, valid names and ids: nagent_conversation_layout (its
  names are re-exported here). A conversation's checkpoint (NAME.d/checkpoint.md) belongs to its
  records and moves with them: archiving moves it to the archived copy's ARCHIVED.d/; save and
  load copy it with the records (a target's old checkpoint goes to the archive with the old
  target); a branch of a whole conversation copies it, a branch cut at a turn does not (it would
  describe turns the branch drops). Side files and torn tails stay where they were written: the
  conversation quotes them by path.
* Every file written here goes through a fsynced temp file in the target directory and os.replace
  (or os.link when it must not replace), keeping the source file's mode. Nothing is lost: a
  conversation about to be replaced is archived first ("archive/{basename}-{UTC stamp}[-n]"
  beside it); save_as refuses an existing name (RefusedError) unless overwrite=True; a
  conversation whose lock a running nagent holds is never touched (BusyError).
* Each operation validates everything (names, sources, the turn, the target's lock) before it
  changes anything: a refused or failed operation leaves every file as it was.
* A caller holding a ConversationWriter on a path must close it before archiving, loading or
  branching onto that path (flock conflicts within one process too), or use archive_locked(),
  replace the file itself and call writer.reopen().
* Copies take complete records only: a torn tail of the source is left out.
* `list_conversations(environ)`: one entry per conversation file, never nagent's own files (state
  dirs, old-layout locks, torn tails, checkpoints, indexes). Its kind: "archived" under archive/;
  else what the run that started it recorded (its meta record, in the first 64 KiB): "file-edit"
  for a per-file edit session, "agent" for a sub-agent; else "latest" for latest-*, else
  "saved". A file-edit conversation whose meta lies past the head is still found by the
  per-shell file-edit indexes (nagent's own records of which conversation edits which file).
"""
import os
import stat
from time import gmtime, strftime

from nagent_conversation_format import (HEADER_MARK, Record, encode_records, parse_records,
                                        unescape_body, utc_stamp)
from nagent_conversation_layout import (NAME_FIX, archive_dir, checkpoint_path,  # noqa: F401
                                        conversation_path, default_conversation_path, default_pid,
                                        file_index_dir, is_state_name, sanitize,
                                        selected_conversation, side_dir, state_dir, valid_pid,
                                        validate_name)
from nagent_conversation_lock import conversation_lock, is_busy  # noqa: F401
from nagent_conversation_tail import tail_state
from nagent_errors import InputError, RefusedError, UsageError
from nagent_fs import atomic_write, write_unique
from nagent_paths import conversations_dir
from nagent_run_records import is_user_prompt
from nagent_terminal_text import counted

LOCK_TIMEOUT = 0.5  # lifecycle commands fail fast: a live run keeps its lock for minutes
HEAD_BYTES = 64 * 1024
OVERWRITE_FIX = "choose another name, or pass --force to archive the old one and replace it"


def write_side_file(conversation_path, stem, data):
    """Write `data` atomically as a NEW file `NAME.d/side/{stem}` (`{stem}-2`, ... if taken, so
    paths already quoted in a conversation keep their content); returns its path."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    name = sanitize(stem)[:120] or "side"
    return write_unique(os.path.join(side_dir(conversation_path), name), data)


# -- reading ------------------------------------------------------------------------------
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


def read_checkpoint(path):
    """The bytes of conversation `path`'s checkpoint, or None."""
    try:
        with open(checkpoint_path(path), "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise InputError("cannot read checkpoint", checkpoint_path(path), error.strerror or str(error))


def _same_file(first, second):
    try:
        return os.path.samefile(first, second)
    except OSError:
        return os.path.abspath(first) == os.path.abspath(second)


# -- archiving ----------------------------------------------------------------------------
def _move_unique(source, base):
    """Rename `source` to `base` (or `base-2`, ...) without ever replacing a file."""
    for number in range(1, 10000):
        target = base if number == 1 else f"{base}-{number}"
        if os.path.lexists(target) or os.path.lexists(state_dir(target)):
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


def _move_checkpoint(path, archived):
    """Move conversation `path`'s checkpoint to `archived`'s state dir (where it belongs now)."""
    source = checkpoint_path(path)
    if not os.path.lexists(source):
        return None
    target = checkpoint_path(archived)
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    os.replace(source, target)  # `archived` is new: nothing of its own to replace
    return target


def archive_locked(path):
    """archive() for a caller that already holds the conversation's lock. A checkpoint without
    its conversation (left by a crash between the two moves) is archived alone."""
    base = os.path.basename(path)
    folder = archive_dir(path)
    if not os.path.lexists(path):
        if os.path.lexists(checkpoint_path(path)):
            os.makedirs(folder, mode=0o700, exist_ok=True)
            orphan = os.path.join(folder, f"{base}-{utc_stamp()}-checkpoint")
            for number in range(1, 10000):
                candidate = orphan if number == 1 else f"{orphan}-{number}"
                if not os.path.lexists(state_dir(candidate)):
                    _move_checkpoint(path, candidate)
                    break
        return None
    if base in ("", ".", "..") or not os.path.isfile(path):
        raise InputError("not a conversation file", path, "give a regular file")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    archived = _move_unique(path, os.path.join(folder, f"{base}-{utc_stamp()}"))
    _move_checkpoint(path, archived)
    return archived


def archive(path, reason="clear", lock_timeout=LOCK_TIMEOUT):
    """Move a conversation (and its checkpoint) to `archive/{basename}-{UTC stamp}[-n]` beside it
    and return the new path (None when there is nothing to archive). `reason` is for the caller's
    message only. Side files and torn tails stay where they are, so paths quoted in the archived
    conversation remain valid."""
    path = os.fspath(path)
    if not os.path.lexists(path):
        return None
    try:
        with conversation_lock(path, lock_timeout):
            return archive_locked(path)
    except OSError as error:
        raise InputError("cannot archive conversation", path, error.strerror or str(error))


# -- writing a whole conversation ---------------------------------------------------------
def _write_into(target, content, lock_timeout, replace_existing):
    """Under target's lock: compute `content()` -> (data, mode, checkpoint bytes or None) (it may
    raise: nothing has changed yet), refuse an existing target unless replace_existing, archive
    it (with its checkpoint), then write data and checkpoint atomically. Returns the archived
    path or None."""
    try:
        os.makedirs(os.path.dirname(os.path.abspath(target)), mode=0o700, exist_ok=True)
        with conversation_lock(target, lock_timeout):
            if os.path.lexists(target) and not replace_existing:
                raise RefusedError("conversation already exists", target, OVERWRITE_FIX)
            data, mode, checkpoint = content()
            archived = archive_locked(target)
            atomic_write(target, data, mode)
            if checkpoint is not None:
                atomic_write(checkpoint_path(target), checkpoint, 0o600)
    except OSError as error:
        raise InputError("cannot write conversation", target, error.strerror or str(error))
    return archived


def save_as(path, name, overwrite=False, environ=None, lock_timeout=LOCK_TIMEOUT):
    """Copy conversation `path` (and its checkpoint) to the saved conversation NAME; returns
    (saved path, archived previous NAME or None). An existing NAME is refused unless overwrite
    (then it is archived first, never lost)."""
    path = os.fspath(path)
    target = conversation_path(name, environ)
    if os.path.lexists(target) and _same_file(path, target):
        raise RefusedError("cannot save a conversation onto itself", name, "choose another name")
    data, mode = _snapshot(path)
    checkpoint = read_checkpoint(path)
    archived = _write_into(target, lambda: (data, mode, checkpoint), lock_timeout, overwrite)
    return target, archived


def load(name, current_path, environ=None, lock_timeout=LOCK_TIMEOUT):
    """Archive the current conversation, then put a copy of saved conversation NAME (and its
    checkpoint) in its place; returns the archived path (None when nothing was there)."""
    current_path = os.fspath(current_path)
    source = conversation_path(name, environ)
    if not os.path.isfile(source):
        raise InputError("no saved conversation", name, "list them with nagent --list-conversations")
    if os.path.lexists(current_path) and _same_file(source, current_path):
        return None
    data, mode = _snapshot(source)
    checkpoint = read_checkpoint(source)
    return _write_into(current_path, lambda: (data, mode, checkpoint), lock_timeout, True)


def records_through_turn(records, turn):
    """Records of the first N turns. A turn is one user prompt (nagent_run_records.is_user_prompt:
    any prompt but a <nagent-next> continuation) and everything after it up to the next user
    prompt: replies, results, continuations, notes."""
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise UsageError("invalid turn", turn, "turns are numbered from 1")
    prompts = 0
    for index, record in enumerate(records):
        if is_user_prompt(record):
            prompts += 1
            if prompts > turn:
                return records[:index]
    if prompts < turn:
        raise UsageError("no such turn", turn, f"the conversation has {counted(prompts, 'turn')}, "
                         "one per user prompt")
    return list(records)


def branch_content(source_path, turn=None):
    """(data, mode, checkpoint) of a branch of `source_path` (through `turn`, if given), records
    renumbered; the checkpoint comes along only for a whole branch. Raises before any change."""
    data, mode = _snapshot(source_path)
    records = parse_records(data, source=source_path)[0]
    if turn is not None:
        records = records_through_turn(records, turn)
    return encode_records(records), mode, None if turn is not None else read_checkpoint(source_path)


def branch(source_path, new_path, turn=None, lock_timeout=LOCK_TIMEOUT):
    """Write the source's records (through `turn`, if given) re-numbered to new_path, archiving
    what was there; returns the archived path or None. Everything (the source, the turn, a busy
    new_path) is checked before anything changes; source and new_path may be the same file: the
    branch is then made from it, under its lock, before it is archived."""
    source_path, new_path = os.fspath(source_path), os.fspath(new_path)
    if not os.path.isfile(source_path):
        raise InputError("no such conversation", source_path, "check the name")
    if _same_file(source_path, new_path):
        return _write_into(new_path, lambda: branch_content(new_path, turn), lock_timeout, True)
    content = branch_content(source_path, turn)
    return _write_into(new_path, lambda: content, lock_timeout, True)


# -- listing ------------------------------------------------------------------------------
def head_records(head):
    """The complete records in a file's first bytes, plus the torn record at their end (the
    first prompt may be longer than the head: its start is what we have)."""
    try:
        records, torn = parse_records(head)
    except InputError:
        return []
    records = list(records)
    if torn.startswith(HEADER_MARK) and b"\n" in torn:
        line, _, rest = torn.partition(b"\n")
        records.append(Record(0, "prompt" if b' kind="prompt"' in line else "torn",
                              unescape_body(rest.decode("utf-8", "replace"))))
    return records


def prompt_line(records):
    """The first prompt's text, whitespace collapsed, at most 80 characters."""
    return next((" ".join(r.body.split())[:80] for r in records if r.kind == "prompt"), "")


def first_prompt(head):
    """The first prompt's text (prompt_line) from a file's first bytes."""
    return prompt_line(head_records(head))


def started_as(records):
    """"file-edit" or "agent" when the conversation's meta record says its run was one, else
    None. The meta is the driver's own record, written when the conversation started."""
    import json
    for record in records:
        if record.kind == "meta":
            try:
                meta = json.loads(record.body)
            except ValueError:
                return None
            if not isinstance(meta, dict):
                return None
            if meta.get("file_edit"):
                return "file-edit"
            return "agent" if meta.get("invocation") == "delegated" else None
    return None


def _entry(folder, name, kind, file_edits=()):
    path = os.path.join(folder, name)
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None
            head = handle.read(HEAD_BYTES)
    except OSError:
        return None
    if HEADER_MARK not in head:
        return None  # not a conversation: empty, an old-layout lock or checkpoint, an index
    records = head_records(head)
    if kind is None:
        kind = started_as(records) or ("file-edit" if name in file_edits else
                                       "latest" if name.startswith("latest-") else "saved")
    prompt = prompt_line(records)
    return {"name": name, "path": path, "kind": kind, "size": info.st_size,
            "modified": strftime("%Y-%m-%dT%H:%M:%SZ", gmtime(info.st_mtime)),
            "first_prompt": prompt, "_id": (info.st_dev, info.st_ino)}


def file_edit_names(environ=None):
    """Conversation names the per-shell file-edit indexes give to files (unreadable: none)."""
    import json
    folder = file_index_dir(environ)
    names = set()
    try:
        listing = [entry for entry in os.listdir(folder) if entry.endswith(".json")]
    except OSError:
        return names
    for entry in listing:
        try:
            with open(os.path.join(folder, entry), encoding="utf-8") as handle:
                data = json.load(handle)
            names.update(record["conversation"] for record in data["by_file_id"].values()
                          if isinstance(record.get("conversation"), str))
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            continue
    return names


def list_conversations(environ=None):
    """Latest-*, saved, file-edit, agent and archived conversations, newest first within each
    kind; reads only the first 64 KiB of each file."""
    folder = conversations_dir(environ)
    entries = []
    file_edits = file_edit_names(environ)
    for where, kind in ((folder, None), (os.path.join(folder, "archive"), "archived")):
        try:
            names = os.listdir(where)
        except OSError:
            continue
        for name in names:
            if not is_state_name(name):
                entry = _entry(where, name, kind, file_edits)
                if entry is not None:
                    entries.append(entry)
    order = {"latest": 0, "saved": 1, "file-edit": 2, "agent": 3, "archived": 4}
    entries.sort(key=lambda entry: entry["name"])
    entries.sort(key=lambda entry: entry["modified"], reverse=True)
    entries.sort(key=lambda entry: order[entry["kind"]])
    # One row per conversation: a second name for the same file (a hard link left by an
    # interrupted archive move, a symlink) is not another conversation.
    seen, unique = set(), []
    for entry in entries:
        identity = entry.pop("_id")
        if identity not in seen:
            seen.add(identity)
            unique.append(entry)
    return unique
