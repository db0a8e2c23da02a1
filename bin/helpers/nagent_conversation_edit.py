"""`nagent --edit-conversation "instruction"`: rewrite a conversation through a per-file edit session.

Data contract: `edit_conversation(path, instruction, settings, environ=None, cwd=None) -> (data,
text)`.
- `instruction_text(instruction, extra)` is the instruction: --edit-conversation's text with
  `extra` appended (the prompt words, stdin too after a trailing "-", read by the command). `settings` are the edit session's: the
  command resolves them with the flags of PASSED_OPTIONS (provider/model/timeout/max_calls/shell).
- Steps: (1) under a brief lock on `path` (BusyError if a run holds it) take a snapshot of its
  complete records; (2) write it, encoded (below), to a fresh working copy
  `<scratch root>/nagent-edit-<name>-<random>/conversation.txt` (nagent_write_policy.scratch_root:
  $TMPDIR when it is a temp root, else /tmp; InputError when there is none); (3) run a
  per-file edit session on the copy in-process, NOT holding the conversation's lock; its index
  is the separate per-shell id EDIT_INDEX_PID so temp copies never clutter the user's
  `--list-file-edits`, and each run starts a fresh edit conversation; (4) decode and validate
  the copy: it parses, has no torn tail, only known record kinds, no new text outside records,
  and the context records unchanged; (5) under the conversation's lock, if it is still
  byte-identical to the snapshot, archive it (nagent_conversation_lifecycle.archive_locked; its
  checkpoint goes with it) and write the edited records, renumbered from 1, in its place
  atomically, with a copy of the checkpoint.
- Any failure (session error, invalid copy, conversation changed meanwhile) leaves the current
  conversation untouched and raises a typed error naming the edited copy, which is kept.
- Result data: {conversation, archived, edited_copy, edit_session, response, totals, status
  ("edited" | "unchanged"), records_before, records_after}. An unchanged copy archives nothing.
- Working-copy encoding: a conversation is full of nagent tags, and a <nagent-write> body cannot
  hold "</nagent-write>", a line-start result block cuts a reply, and result tags are provider
  stop sequences. So in the copy every "<" that starts a nagent tag (other than the record
  framing), a <system> or an <initial_context> tag is written "&lt;" (so nothing in it is a
  driver mark nagent_protocol_blocks.frame_data would escape when the session reads it), and
  every "&" already followed by "amp;" or "lt;" is written "&amp;". decode_copy(encode_copy(x))
  == x for every text x.
"""
import os
import re
import stat
import tempfile

import nagent_conversation_lifecycle as lifecycle
import nagent_file_edit_lib as file_edit
from nagent_conversation_format import KINDS, encode_records, parse_records
from nagent_conversation_layout import Selection
from nagent_conversation_lock import conversation_lock
from nagent_conversation_tail import tail_state
from nagent_errors import EXIT_CODES, InputError, NagentError, RefusedError, UsageError
from nagent_fs import atomic_write, sha256_bytes
from nagent_loop import run_agent_loop
from nagent_paths import current_cwd
from nagent_session import build_session
from nagent_write_policy import scratch_root

EDIT_INDEX_PID = "conversation-edit"
COPY_NAME = "conversation.txt"
PASSED_OPTIONS = ("provider", "model", "connect_timeout", "read_timeout", "max_attempts",
                  "max_calls", "shell_approval", "shell_sandbox", "shell_timeout")
_ENCODE_RE = re.compile(r"&(?=(?:amp|lt);)|<(?=/?(?:system|initial_context|nagent-(?!record[\s>])))")
_DECODE_RE = re.compile(r"&(amp|lt);")
KEEP_FIX = "the current conversation is unchanged; the edited copy is kept for inspection"


def encode_copy(text):
    return _ENCODE_RE.sub(lambda m: "&amp;" if m.group() == "&" else "&lt;", text)


def decode_copy(text):
    return _DECODE_RE.sub(lambda m: "&" if m.group(1) == "amp" else "<", text)


def edit_prompt(instruction, copy_path):
    return f"""Edit the nagent conversation file {copy_path} as instructed below, then answer with \
<nagent-response> saying in a few lines what you changed.

Instruction: {instruction}

File format: a sequence of records. Each record starts with a header line \
`<nagent-record seq="N" kind="KIND" time="..." ...>` and ends with a footer line \
`</nagent-record>`; the lines between are the record's body.
- Keep every header and footer line exactly as it is. To drop a record, delete its header, body \
and footer together. Edit bodies freely (shorten, summarise, remove noise) as the instruction asks.
- Never put text outside records. Keep the records of kind "context" unchanged.
- Records of kind "stats" and "meta" are JSON bookkeeping: keep them unless you drop their turn.
- In this working copy "<" of every nagent tag, <system> and <initial_context> tag inside a body is written "&lt;" \
(and "&" before "amp;" or "lt;" as "&amp;") so the file can pass through <nagent-write>. Keep that \
form; it is decoded when the file is loaded back. A body line starting with a backslash before \
"<nagent-record" is escaped on purpose: keep it.
- Write the whole edited file back (for a large file: its segments, then the patch). \
The file is validated before it replaces the conversation; an invalid file changes nothing."""


def instruction_text(instruction, extra=""):
    instruction = (instruction or "").strip()
    extra = (extra or "").strip()
    if extra:
        instruction = f"{instruction} {extra}".strip() if instruction else extra
    if not instruction:
        raise UsageError("empty edit instruction", "", 'say what to change: nagent --edit-conversation '
                         '"drop the stale shell output"')
    return instruction


def _complete_bytes(path):
    """(complete-record bytes, mode) of the conversation; the caller holds its lock."""
    try:
        with open(path, "rb") as handle:
            info = os.fstat(handle.fileno())
            end = tail_state(handle, info.st_size, path)[1]
            handle.seek(0)
            return handle.read(end), stat.S_IMODE(info.st_mode)
    except OSError as error:
        raise InputError("cannot read conversation", path, error.strerror or str(error)) from None


def snapshot(path, lock_timeout):
    """(complete-record bytes, mode) of the conversation, read under its lock."""
    if not os.path.isfile(path):
        raise InputError("no conversation to edit", path, "run a prompt first")
    with conversation_lock(path, lock_timeout):
        return _complete_bytes(path)


def working_copy(path, data, environ, cwd):
    folder = tempfile.mkdtemp(prefix=f"nagent-edit-{os.path.basename(path)[:80]}-",
                              dir=scratch_root(environ, cwd))
    copy = os.path.join(folder, COPY_NAME)
    atomic_write(copy, encode_copy(data.decode("utf-8", "surrogateescape")).encode(
        "utf-8", "surrogateescape"), 0o600)
    return copy


def run_session(copy, instruction, settings, parent, environ, cwd):
    # Always a fresh session: an inode freed by an earlier copy may be reused by this one, and
    # the index (keyed by file id) would otherwise resume that earlier, unrelated edit.
    file_edit.clear_file_edit(copy, EDIT_INDEX_PID, environ)
    session = build_session(Selection(file_edit=copy, pid=EDIT_INDEX_PID), environ, cwd, settings,
                            invocation="delegated", parent_conversation=parent)
    return run_agent_loop(session, edit_prompt(instruction, copy), "argv")


def session_error(outcome, copy):
    if outcome.exit_code == EXIT_CODES["interrupted"]:
        return KeyboardInterrupt()
    error = outcome.error or {}
    kind = error.get("kind", "failure")
    cls = next((c for c in NagentError.__subclasses__() if c.kind == kind), NagentError)
    detail = error.get("error", "run failed")
    return cls(f"conversation edit session failed ({detail})", copy, KEEP_FIX)


def validate_copy(copy, original):
    """Decoded bytes of the edited copy, or InputError naming it."""
    try:
        with open(copy, "rb") as handle:
            data = decode_copy(handle.read().decode("utf-8", "surrogateescape")).encode(
                "utf-8", "surrogateescape")
    except OSError as error:
        raise InputError("cannot read the edited conversation copy", copy,
                         error.strerror or str(error)) from None

    def bad(why):
        return InputError(f"edited conversation is invalid ({why})", copy, KEEP_FIX)

    try:
        records, torn = parse_records(data, source=copy)
    except InputError as error:
        raise bad(f"{error.what}: {error.value}") from None
    if torn.strip():
        raise bad("it ends in an unfinished record")
    unknown = sorted({r.kind for r in records if r.kind != "note" and r.kind not in KINDS})
    if unknown:
        raise bad("unknown record kind " + ", ".join(unknown))
    old_notes = {r.body.strip() for r in original if r.kind == "note"}
    if any(r.kind == "note" and r.body.strip() not in old_notes for r in records):
        raise bad("text outside records")
    context = [(r.attrs, r.body) for r in records if r.kind == "context"]
    if context != [(r.attrs, r.body) for r in original if r.kind == "context"]:
        raise bad("the context records were changed or dropped")
    if not any(r.kind != "note" for r in records):
        raise bad("no records left")
    return data, records


def install(path, data, mode, expected_sha, copy, lock_timeout):
    """Under the conversation's lock: refuse if it changed meanwhile, archive it (its checkpoint
    goes with it) and put `data` in its place with a copy of that checkpoint: the edited records
    are the same conversation, and the checkpoint's User notes are the user's."""
    with conversation_lock(path, lock_timeout):
        current, _mode = _complete_bytes(path)
        if sha256_bytes(current) != expected_sha:
            raise RefusedError("conversation changed while it was being edited", path,
                               f"nothing replaced; the edited copy is {copy}")
        checkpoint, archived = lifecycle.read_checkpoint(path), None
        try:
            archived = lifecycle.archive_locked(path)
            atomic_write(path, data, mode, exclusive=True)
            if checkpoint is not None:
                atomic_write(lifecycle.checkpoint_path(path), checkpoint, 0o600)
        except OSError as error:
            raise InputError("cannot write conversation", path,
                             f"{error.strerror}; previous version archived at {archived}") from None
    return archived


def edit_conversation(path, instruction, settings, environ=None, cwd=None):
    environ = dict(os.environ) if environ is None else environ
    if cwd is None:
        cwd = current_cwd()
    lock_timeout = lifecycle.LOCK_TIMEOUT
    original_bytes, mode = snapshot(path, lock_timeout)
    original = parse_records(original_bytes, source=path)[0]
    copy = working_copy(path, original_bytes, environ, cwd)
    outcome = run_session(copy, instruction, settings, path, environ, cwd)
    if outcome.exit_code != EXIT_CODES["ok"]:
        raise session_error(outcome, copy)
    edited, records = validate_copy(copy, original)
    data = {"conversation": path, "archived": None, "edited_copy": copy,
            "edit_session": outcome.conversation, "response": outcome.response,
            "totals": outcome.run_stats.as_dict(), "status": "unchanged",
            "records_before": sum(1 for r in original if r.kind != "note"),
            "records_after": sum(1 for r in records if r.kind != "note")}
    if edited != original_bytes:
        renumbered = encode_records(records)
        data["archived"] = install(path, renumbered, mode, sha256_bytes(original_bytes),
                                   copy, lock_timeout)
        data["status"] = "edited"
    head = (f"edited {path} ({data['records_before']} → {data['records_after']} records); previous "
            f"version archived at {data['archived']}" if data["archived"]
            else f"no change to {path}")
    return data, head + ("\n" + outcome.response if outcome.response else "")
