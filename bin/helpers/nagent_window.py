"""Long runs stay bounded and lossless: checkpoints and deterministic window rebuilds.

Data contract:
- A checkpoint is `{conversation}.checkpoint.md`: a first line
  `<!-- nagent-checkpoint written="ISO" covers_bytes="N" window="W" -->`, then the fixed schema
  (## Goal, ## Decisions, ## Current state, ## Next steps, ## Open questions) written by one
  separate model call, then `## User notes`, which is copied verbatim from the previous version so
  user edits there always survive (the model also sees, and is told to keep, edits elsewhere).
  It is refreshed when the window has grown by `checkpoint_every_bytes` past `covers_bytes`.
- A rebuild never asks a model to rewrite history. `rebuild_records(records, ...)` is a pure
  function returning the new window's records: the original initial-context records verbatim, a
  meta record linking the previous window, the checkpoint as a <system> block, every user prompt
  of the old window verbatim, and the most recent raw records (at most `tail_bytes`), where any
  result body over `side_threshold` bytes is moved to a side file and replaced by a pointer with
  its byte count and exit code. The old window is archived whole, so every byte stays on disk.
- `window_settings(settings)` reads the thresholds from config: checkpoint_every_bytes,
  window_max_bytes (default: half the model's context window at ~4 bytes a token, else 400 KB),
  window_tail_bytes, side_threshold_bytes.
"""
import json
import os
import re
from dataclasses import dataclass

SCHEMA = ("Goal", "Decisions", "Current state", "Next steps", "Open questions")
USER_NOTES = "## User notes"
HEADER_RE = re.compile(r'<!-- nagent-checkpoint written="([^"]*)" covers_bytes="(\d+)" window="(\d+)" -->')
SENT_KINDS = ("prompt", "reply", "result", "system", "interrupt", "note")
EXIT_RE = re.compile(r"^exit_code: (\S+)", re.M)


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
        checkpoint_every_bytes=int(config.get("checkpoint_every_bytes", 200_000)),
        window_max_bytes=int(config.get("window_max_bytes", default_max)),
        tail_bytes=int(config.get("window_tail_bytes", 40_000)),
        side_threshold=int(config.get("side_threshold_bytes", 4096)),
    )


def checkpoint_path(conversation):
    return conversation + ".checkpoint.md"


def read_checkpoint(conversation):
    """(text, meta) of the checkpoint file, or ("", None) when there is none."""
    try:
        with open(checkpoint_path(conversation), encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError):
        return "", None
    match = HEADER_RE.search(text.split("\n", 1)[0])
    meta = {"written": match.group(1), "covers_bytes": int(match.group(2)),
            "window": int(match.group(3))} if match else {"covers_bytes": 0, "window": 0}
    return text, meta


def checkpoint_due(size, meta, every):
    if every <= 0:
        return False
    covered = meta["covers_bytes"] if meta else 0
    return size - covered >= every


def user_notes(text):
    index = text.find("\n" + USER_NOTES)
    return text[index + 1:].rstrip() + "\n" if index >= 0 else f"{USER_NOTES}\n\n(anything written here is kept verbatim)\n"


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


def transcript_since(records, offset, limit):
    """The sent records after byte `offset`, as text, keeping the newest `limit` characters."""
    parts = [f"[{r.kind} #{r.seq}]\n{r.body}" for r in records
             if r.offset >= offset and r.kind in SENT_KINDS]
    text = "\n\n".join(parts)
    return text[-limit:] if len(text) > limit else text


def write_checkpoint(conversation, records, size, settings, generate_text, now, window=0):
    """One model call → a fresh checkpoint file (atomically); returns (text, result)."""
    previous, meta = read_checkpoint(conversation)
    offset = meta["covers_bytes"] if meta and meta.get("window", 0) == window else 0
    limit = max(20_000, window_settings(settings).window_max_bytes // 2)
    result = generate_text(checkpoint_prompt(previous, transcript_since(records, offset, limit)))
    text = compose_checkpoint(result.text, previous, size, window, now)
    atomic_write(checkpoint_path(conversation), text.encode("utf-8"))
    return text, result


def atomic_write(path, data):
    temp = f"{path}.tmp-{os.getpid()}"
    with open(temp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def tail_start(records, tail_bytes):
    """Index of the first record of the carried tail: it starts at a prompt or a reply."""
    total, start = 0, len(records)
    for index in range(len(records) - 1, -1, -1):
        total += len(records[index].body.encode("utf-8"))
        if total > tail_bytes and start < len(records):
            break
        start = index
    while start < len(records) and records[start].kind not in ("prompt", "reply"):
        start += 1
    return start


def pointer_for(record, side_path):
    body = record.body
    first_line = body.split("\n", 1)[0] if body.startswith("<nagent-") else "<system>"
    closing = "</" + first_line[1:].split(" ", 1)[0].split(">", 1)[0] + ">"
    exit_match = EXIT_RE.search(body)
    exit_text = f"; exit_code: {exit_match.group(1)}" if exit_match else ""
    size = len(body.encode("utf-8"))
    return (f"{first_line if first_line.endswith('>') else first_line + '>'}\n"
            f"[result body moved to {side_path}: {size} bytes{exit_text}; read it with "
            f"<nagent-read> or <nagent-file-read> if you need it]\n{closing}")


def rebuild_records(records, checkpoint_text, previous_window, window, settings_w, side_dir):
    """The new window as ([(kind, body, attrs)], [(side path, bytes)]) — deterministic."""
    context = [r for r in records if r.kind == "context"]
    sent = [r for r in records if r.kind in SENT_KINDS]
    start = tail_start(sent, settings_w.tail_bytes)
    tail, earlier = sent[start:], sent[:start]
    out = [("context", r.body, dict(r.attrs)) for r in context]
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
        attrs = dict(record.attrs)
        body = record.body
        if record.kind == "result" and len(body.encode("utf-8")) > settings_w.side_threshold:
            side_path = os.path.join(side_dir, f"window-{window}-record-{record.seq}.txt")
            side_files.append((side_path, body.encode("utf-8")))
            body = pointer_for(record, side_path)
            attrs["moved"] = side_path
        out.append((record.kind, body, attrs))
    return out, side_files


# -- I/O edges: used by the loop (holding the conversation lock) and by --compact ---------
def current_window(records):
    window = 1
    for record in records:
        if record.kind == "meta":
            try:
                window = int(json.loads(record.body).get("window", window))
            except (ValueError, AttributeError):
                pass
    return window


def refresh_checkpoint(run, now):
    """Write a checkpoint covering the current window; its model call counts in the totals."""
    from nagent_llm import generate_text
    records = run.writer.records()
    size = os.path.getsize(run.session.path)
    results = []

    def call(prompt):
        result = generate_text(prompt, run.session.settings)
        results.append(result)
        return result

    text, _ = write_checkpoint(run.session.path, records, size, run.session.settings, call, now,
                               window=current_window(records))
    for result in results:
        run.count_call(result)
    return text


def maybe_checkpoint(run, now):
    w = window_settings(run.session.settings)
    _, meta = read_checkpoint(run.session.path)
    size = os.path.getsize(run.session.path)
    window = current_window(run.writer.records())
    if meta and meta.get("window", 0) != window:
        meta = None
    if checkpoint_due(size, meta, w.checkpoint_every_bytes):
        refresh_checkpoint(run, now)
        return True
    return False


def rebuild_window(run, now, reason="size"):
    """Archive the current window and start the next one from its checkpoint and tail."""
    import nagent_conversation_lifecycle as lifecycle
    from nagent_conversation import encode_record
    path = run.session.path
    checkpoint = refresh_checkpoint(run, now)
    records = run.writer.records()
    window = current_window(records) + 1
    archived = lifecycle.archive_locked(path)
    new_records, side_files = rebuild_records(records, checkpoint, archived, window,
                                              window_settings(run.session.settings),
                                              lifecycle.side_dir(path))
    for side_path, data in side_files:
        atomic_write(side_path, data)
    data = b"".join(encode_record(seq, kind, body, attrs, now)
                    for seq, (kind, body, attrs) in enumerate(new_records, start=1))
    atomic_write(path, data)
    run.writer.reopen()
    run.windows = run.windows + [archived]
    run.record_stats()
    # The checkpoint now covers everything up to the new window's start.
    text, _ = read_checkpoint(path)
    size = os.path.getsize(path)
    atomic_write(checkpoint_path(path), HEADER_RE.sub(
        f'<!-- nagent-checkpoint written="{now}" covers_bytes="{size}" window="{window}" -->',
        text, count=1).encode("utf-8"))
    return {"archived": archived, "window": window, "reason": reason, "records": len(new_records),
            "side_files": [p for p, _ in side_files]}


def maybe_compact(run, now):
    """Between turns: refresh the checkpoint when due; rebuild when the window is too big."""
    w = window_settings(run.session.settings)
    size = os.path.getsize(run.session.path)
    if w.window_max_bytes > 0 and size > w.window_max_bytes:
        return rebuild_window(run, now)
    maybe_checkpoint(run, now)
    return None


def compact_now(path, options):
    """`nagent --compact`: rebuild the selected conversation's window now."""
    from nagent_conversation import utc_now
    from nagent_errors import InputError
    from nagent_loop import Run
    from nagent_conversation import ConversationWriter
    from nagent_session import build_session
    import os as _os
    if not _os.path.exists(path) or _os.path.getsize(path) == 0:
        raise InputError("no conversation to compact", path, "run a prompt first")
    session = build_session(options, dict(_os.environ), _os.getcwd())
    with ConversationWriter(session.path, lock_timeout=session.limits.lock_timeout) as writer:
        run = Run(session, writer)
        info = rebuild_window(run, utc_now(), reason="requested")
    info["conversation"] = session.path
    info["totals"] = run.conv_stats.as_dict()
    return info, (f"window {info['window']} started; previous window archived at {info['archived']}"
                  f" ({len(info['side_files'])} large results moved to side files)")
