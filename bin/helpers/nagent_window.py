"""Long runs stay bounded and lossless: checkpoints and deterministic window rebuilds.

Data contract:
- A checkpoint is `{conversation}.checkpoint.md`: a first line
  `<!-- nagent-checkpoint written="ISO" covers_bytes="N" window="W" -->`, then the fixed schema
  (## Goal, ## Decisions, ## Current state, ## Next steps, ## Open questions) written by one
  separate model call, then `## User notes`, which is copied verbatim from the previous version so
  user edits there always survive (the model also sees, and is told to keep, edits elsewhere).
  It is refreshed when the window has grown by `checkpoint_every_bytes` past `covers_bytes`. A
  checkpoint that cannot belong to this conversation (a later window, or covering more bytes
  than the window holds: the file was cleared, loaded or branched) is moved to `archive/` and
  a fresh one started. The checkpoint call sees large results as head/tail excerpts only.
- A rebuild never asks a model to rewrite history. `rebuild_records(records, ...)` is a pure
  function returning the new window's records: the original initial-context and session-meta
  records verbatim, a meta record linking the previous window, the checkpoint as a <system>
  block, every user prompt of the old window verbatim (model-written `next` prompts excepted),
  and the most recent raw records (about `tail_bytes` once large results are moved; always at
  least the newest prompt or reply and everything after it). A result body over
  `side_threshold` bytes is moved to a side file `{conversation}.d/{archive name}-record-{seq}.txt`
  and replaced by a pointer with its byte count (and exit code for shell results). Tail records
  carry `carried="tail"`. The old window is first copied whole to `archive/` (the live file is
  replaced only after the copy and side files are on disk), so every byte stays on disk.
- A window is rebuilt when it is over `window_max_bytes` and has grown by a quarter of that
  since its own rebuild (carried prompts alone can never trigger a rebuild per turn).
- `window_settings(settings)` reads the thresholds from config: checkpoint_every_bytes,
  window_max_bytes (default: half the model's context window at ~4 bytes a token, else 400 KB),
  window_tail_bytes, side_threshold_bytes.
"""
import json
import os
import re
from dataclasses import dataclass
from nagent_config import config_number

SCHEMA = ("Goal", "Decisions", "Current state", "Next steps", "Open questions")
USER_NOTES = "## User notes"
HEADER_RE = re.compile(r'<!-- nagent-checkpoint written="([^"]*)" covers_bytes="(\d+)" window="(\d+)" -->')
SENT_KINDS = ("prompt", "reply", "result", "system", "interrupt", "note")
EXIT_RE = re.compile(r"^exit_code: (\S+)", re.M)
EXCERPT_CHARS = 2000     # per result in the checkpoint call's transcript
POINTER_BYTES = 260      # about the size of a pointer, for the tail budget


@dataclass(frozen=True)
class WindowSettings:
    checkpoint_every_bytes: int = 200_000
    window_max_bytes: int = 400_000
    tail_bytes: int = 40_000
    side_threshold: int = 4096


def window_settings(settings):
    config = settings.config
    window = settings.provider.context_window
    default_max = int(window * 4 * 0.5) if window else 400_000
    return WindowSettings(
        checkpoint_every_bytes=int(config_number(config, "checkpoint_every_bytes", 200_000)),
        window_max_bytes=int(config_number(config, "window_max_bytes", default_max)),
        tail_bytes=int(config_number(config, "window_tail_bytes", 40_000)),
        side_threshold=int(config_number(config, "side_threshold_bytes", 4096)),
    )


# -- checkpoint text (pure) ----------------------------------------------------------------
def checkpoint_path(conversation):
    return conversation + ".checkpoint.md"


def parse_checkpoint_meta(text):
    match = HEADER_RE.search(text.split("\n", 1)[0])
    if not match:
        return {"covers_bytes": 0, "window": 0}
    return {"written": match.group(1), "covers_bytes": int(match.group(2)),
            "window": int(match.group(3))}


def is_stale(meta, size, window):
    """True when the checkpoint cannot describe this conversation's current window."""
    if not meta or not meta.get("window"):
        return False
    return meta["window"] > window or (meta["window"] == window and meta["covers_bytes"] > size)


def checkpoint_due(size, meta, every):
    if every <= 0:
        return False
    covered = meta["covers_bytes"] if meta else 0
    return size - covered >= every


def user_notes(text):
    index = text.find("\n" + USER_NOTES)
    if index < 0:
        return f"{USER_NOTES}\n\n(anything written here is kept verbatim)\n"
    return text[index + 1:].rstrip() + "\n"


def checkpoint_prompt(previous, transcript):
    sections = "\n".join(f"## {name}\n..." for name in SCHEMA)
    return ("You maintain the checkpoint of a long agent conversation: a short, factual record that "
            "lets the work continue after older turns leave the context window. Write exactly these "
            f"markdown sections and nothing else:\n\n{sections}\n\n"
            "Keep every point of the previous checkpoint that is still true, including anything the "
            "user edited by hand; update it with the new part of the conversation. Be concrete: file "
            "paths, commands, results, decisions and their reasons.\n\n"
            f"<previous_checkpoint>\n{previous or '(none yet)'}\n</previous_checkpoint>\n\n"
            f"<new_conversation_part>\n{transcript}\n</new_conversation_part>\n")


def strip_to_schema(text):
    """Keep the model's sections from the first schema heading on; drop a fence or preamble."""
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    start = text.find("## ")
    body = text[start:] if start >= 0 else text
    cut = body.find(USER_NOTES)
    return (body[:cut] if cut >= 0 else body).strip() + "\n"


def compose_checkpoint(model_text, previous, covers_bytes, window, written):
    header = f'<!-- nagent-checkpoint written="{written}" covers_bytes="{covers_bytes}" window="{window}" -->'
    return f"{header}\n# nagent checkpoint\n\n{strip_to_schema(model_text)}\n{user_notes(previous)}"


def excerpt(body, limit=EXCERPT_CHARS):
    # The checkpoint needs what a result showed, not all of it; the archive keeps every byte.
    if len(body) <= limit:
        return body
    head, tail = body[: limit * 2 // 3], body[-(limit // 3):]
    return f"{head}\n[... {len(body) - len(head) - len(tail)} characters omitted ...]\n{tail}"


def transcript_since(records, offset, limit):
    """The sent records after byte `offset`, as text (results as excerpts), newest `limit` chars."""
    parts = [f"[{r.kind} #{r.seq}]\n{excerpt(r.body) if r.kind == 'result' else r.body}"
             for r in records if r.offset >= offset and r.kind in SENT_KINDS]
    text = "\n\n".join(parts)
    return text[-limit:] if len(text) > limit else text


# -- rebuild (pure) ------------------------------------------------------------------------
def byte_len(text):
    return len(text.encode("utf-8"))


def carried_bytes(record, side_threshold):
    size = byte_len(record.body)
    return POINTER_BYTES if record.kind == "result" and size > side_threshold else size


def tail_start(records, tail_bytes, side_threshold=None):
    """Index of the first record of the carried tail: a prompt or reply, the oldest one whose
    tail (large results counted as pointers) fits `tail_bytes`, and never after the newest one."""
    threshold = tail_bytes if side_threshold is None else side_threshold
    total, start = 0, len(records)
    for index in range(len(records) - 1, -1, -1):
        total += carried_bytes(records[index], threshold)
        if records[index].kind in ("prompt", "reply"):
            if total > tail_bytes and start < len(records):
                break
            start = index
    return start


def pointer_for(record, side_path):
    body = record.body
    first_line = body.split("\n", 1)[0] if body.startswith("<nagent-") else "<system>"
    closing = "</" + first_line[1:].split(" ", 1)[0].split(">", 1)[0] + ">"
    shell = first_line.startswith("<nagent-shell-result") or record.attr("action") == "shell"
    exit_match = EXIT_RE.search(body) if shell else None
    exit_text = f"; exit_code: {exit_match.group(1)}" if exit_match else ""
    return (f"{first_line if first_line.endswith('>') else first_line + '>'}\n"
            f"[result body moved to {side_path}: {byte_len(body)} bytes{exit_text}; read it with "
            f"<nagent-read> or <nagent-file-read> if you need it]\n{closing}")


def side_file_path(side_dir, previous_window, record):
    # The archive's name is unique, so side files of different windows never collide.
    return os.path.join(side_dir, f"{os.path.basename(previous_window)}-record-{record.seq}.txt")


def rebuild_records(records, checkpoint_text, previous_window, window, settings_w, side_dir):
    """The new window as ([(kind, body, attrs)], [(side path, bytes)]) — deterministic."""
    keep = [r for r in records if r.kind == "context"
            or (r.kind == "meta" and "window" not in _json_object(r.body))]
    sent = [r for r in records if r.kind in SENT_KINDS]
    start = tail_start(sent, settings_w.tail_bytes, settings_w.side_threshold)
    tail, earlier = sent[start:], sent[:start]
    out = [(r.kind, r.body, dict(r.attrs)) for r in keep]
    out.append(("meta", json.dumps({"window": window, "previous_window": previous_window},
                                   sort_keys=True), None))
    out.append(("system", f"<system>This conversation continues in window {window}. The previous "
                f"window is archived whole at {previous_window}. Its checkpoint:\n\n"
                f"{checkpoint_text.strip()}\n</system>", {"carried": "checkpoint"}))
    for record in earlier:
        if record.kind == "prompt" and record.attr("source") != "next":
            out.append(("prompt", record.body, {"source": record.attr("source", "argv"),
                                                "carried": "true"}))
    side_files = []
    for record in tail:
        attrs = dict(record.attrs, carried="tail")
        body = record.body
        if record.kind == "result" and byte_len(body) > settings_w.side_threshold:
            side_path = side_file_path(side_dir, previous_window, record)
            side_files.append((side_path, body.encode("utf-8")))
            body = pointer_for(record, side_path)
            attrs["moved"] = side_path
        out.append((record.kind, body, attrs))
    return out, side_files


def encode_window(new_records, now):
    from nagent_conversation import encode_record
    parts, seq = [], 0
    for kind, body, attrs in new_records:
        if kind == "note":  # hand-written text outside records stays plain text
            parts.append(body.encode("utf-8") + b"\n")
            continue
        seq += 1
        parts.append(encode_record(seq, kind, body, attrs, now))
    return b"".join(parts)


def _json_object(text):
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def current_window(records):
    window = 1
    for record in records:
        if record.kind == "meta":
            value = _json_object(record.body).get("window", window)
            window = value if isinstance(value, int) and not isinstance(value, bool) else window
    return window


def window_growth(records, size):
    """Bytes appended since this window was rebuilt (the whole size for a first window)."""
    last = None
    for index, record in enumerate(records):
        if record.attr("carried") is not None:
            last = index
    if last is None:
        return size
    return size - (records[last + 1].offset if last + 1 < len(records) else size)


# -- I/O edges: used by the loop (holding the conversation lock) and by --compact ---------
def file_mode(path, default=0o600):
    try:
        return os.stat(path).st_mode & 0o777
    except OSError:
        return default


def read_checkpoint(conversation):
    """(text, meta) of the checkpoint file, or ("", None) when there is none."""
    try:
        with open(checkpoint_path(conversation), encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return "", None
    return text, parse_checkpoint_meta(text)


def write_text(path, text):
    from nagent_fs import atomic_write
    atomic_write(path, text.encode("utf-8"), file_mode(path))


def archive_copy(path, data, mode):
    """A complete copy of the window as `archive/{name}-{UTC stamp}[-n]`; the live file stays."""
    from nagent_conversation import utc_stamp
    from nagent_fs import write_unique
    folder = os.path.join(os.path.dirname(os.path.abspath(path)), "archive")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    return write_unique(os.path.join(folder, f"{os.path.basename(path)}-{utc_stamp()}"), data, mode)


def retire_stale_checkpoint(conversation, window, size):
    """Move a checkpoint left by another conversation at this path to archive/ (never delete)."""
    text, meta = read_checkpoint(conversation)
    if not is_stale(meta, size, window):
        return False
    path = checkpoint_path(conversation)
    archive_copy(path, text.encode("utf-8"), file_mode(path))
    os.unlink(path)
    return True


def write_checkpoint(conversation, records, size, settings, generate_text, now, window=0):
    """One model call → a fresh checkpoint file (atomically); returns (text, result)."""
    previous, meta = read_checkpoint(conversation)
    offset = meta["covers_bytes"] if meta and meta.get("window", 0) == window else 0
    limit = max(20_000, window_settings(settings).window_max_bytes // 2)
    result = generate_text(checkpoint_prompt(previous, transcript_since(records, offset, limit)))
    text = compose_checkpoint(result.text, previous, size, window, now)
    write_text(checkpoint_path(conversation), text)
    return text, result


def refresh_checkpoint(run, now):
    """Write a checkpoint covering the current window; its model call counts in the totals."""
    from nagent_llm import generate_text
    records = run.writer.records()
    size = os.path.getsize(run.session.path)
    window = current_window(records)
    retire_stale_checkpoint(run.session.path, window, size)
    settings = run.session.settings
    text, result = write_checkpoint(run.session.path, records, size, settings,
                                    lambda prompt: generate_text(prompt, settings, client=run.provider_client()),
                                    now, window=window)
    run.count_call(result)
    return text


def maybe_checkpoint(run, now, every_bytes, size):
    window = current_window(run.writer.records())
    if retire_stale_checkpoint(run.session.path, window, size):
        meta = None
    else:
        _, meta = read_checkpoint(run.session.path)
    if meta and meta.get("window", 0) != window:
        meta = None
    if checkpoint_due(size, meta, every_bytes):
        refresh_checkpoint(run, now)
        return True
    return False


def rebuild_window(run, now, reason="size"):
    """Archive the current window and start the next one from its checkpoint and tail."""
    import nagent_conversation_lifecycle as lifecycle
    from nagent_errors import InputError
    from nagent_fs import atomic_write, write_unique
    path = run.session.path
    checkpoint = refresh_checkpoint(run, now)
    records = run.writer.records()
    window = current_window(records) + 1
    mode = file_mode(path)
    with open(path, "rb") as handle:
        old = handle.read()
    archived = archive_copy(path, old, mode)
    new_records, side_files = rebuild_records(records, checkpoint, archived, window,
                                              window_settings(run.session.settings),
                                              lifecycle.side_dir(path))
    for side_path, data in side_files:
        if write_unique(side_path, data) != side_path:  # names embed the archive's: never taken
            raise InputError("side file name already taken", side_path, "move that file away")
    atomic_write(path, encode_window(new_records, now), mode)
    run.writer.reopen()
    run.windows = run.windows + [archived]
    run.record_stats()
    # The checkpoint now covers everything up to the new window's start.
    text, _ = read_checkpoint(path)
    size = os.path.getsize(path)
    write_text(checkpoint_path(path), HEADER_RE.sub(
        f'<!-- nagent-checkpoint written="{now}" covers_bytes="{size}" window="{window}" -->',
        text, count=1))
    return {"archived": archived, "window": window, "reason": reason, "records": len(new_records),
            "side_files": [p for p, _ in side_files], "bytes_before": len(old), "bytes_after": size}


def maybe_compact(run, now):
    """Between turns: refresh the checkpoint when due; rebuild when the window is too big."""
    w = window_settings(run.session.settings)
    try:
        size = os.path.getsize(run.session.path)
        if w.window_max_bytes > 0 and size > w.window_max_bytes and \
                window_growth(run.writer.records(), size) >= w.window_max_bytes // 4:
            return rebuild_window(run, now)
        maybe_checkpoint(run, now, w.checkpoint_every_bytes, size)
    except OSError as error:
        raise _io_error(run.session.path, error) from None
    return None


def _io_error(path, error):
    from nagent_errors import InputError
    return InputError("cannot write the checkpoint or new window", getattr(error, "filename", None)
                      or path, error.strerror or str(error))


def compact_now(path, options):
    """`nagent --compact`: rebuild the selected conversation's window now."""
    from nagent_conversation import ConversationWriter, utc_now
    from nagent_errors import InputError
    from nagent_loop import Run
    from nagent_session import build_session
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        raise InputError("no conversation to compact", path, "run a prompt first")
    session = build_session(options, dict(os.environ), os.getcwd())
    with ConversationWriter(session.path, lock_timeout=session.limits.lock_timeout) as writer:
        run = Run(session, writer)
        try:
            info = rebuild_window(run, utc_now(), reason="requested")
        except OSError as error:
            raise _io_error(session.path, error) from None
    info["conversation"] = session.path
    info["totals"] = run.conv_stats.as_dict()
    return info, (f"window {info['window']} started; previous window archived at {info['archived']}"
                  f" ({len(info['side_files'])} large results moved to side files)")
