"""The deterministic window rebuild, as pure functions over records: no model, no files.

Data contract:
- `rebuild_records(records, checkpoint_text, previous_window, window, settings_w, side_dir)`
  returns (new records as [(kind, body, attrs)], side files as [(path, bytes)]). The new window
  holds, in order: the original initial-context and session-meta records verbatim, a meta
  record linking the previous window, the checkpoint as a <system> block, then from the part
  of the old window before the kept tail every user prompt verbatim (model-written `next`
  prompts excepted), every hand-typed note and every failed-run marker, in their order (all
  carried="true"; notes stay plain text), and last the most recent raw records (about
  `tail_bytes` once large results are moved; always at least the newest prompt or reply and
  everything after it), each with carried="tail". A result body over `side_threshold` bytes
  is moved to `{side_dir}/{archive name}-record-{seq}.txt` (side_dir: `NAME.d/side`) and replaced by a pointer with its
  byte count (and exit code for shell results).
- A window is rebuilt when it is over `window_max_bytes` and has grown by a quarter of that
  since its own rebuild (`window_growth`), so carried prompts alone never trigger a rebuild
  per turn. `current_window(records)` is the number the last window meta record gives (1).
- `window_settings(settings)` is `settings.windows` (resolved once in nagent_config):
  checkpoint_every_bytes, window_max_bytes (default: half the model's context window at ~4
  bytes a token, else 400 KB), tail_bytes (window_tail_bytes), side_threshold
  (side_threshold_bytes).
"""
import json
import os
import re
from dataclasses import dataclass

from nagent_conversation_format import encode_records
from nagent_protocol_blocks import frame_data
from nagent_run_records import is_failure_marker, is_inbox_message, is_user_prompt

SENT_KINDS = ("prompt", "reply", "result", "system", "interrupt", "note")
EXIT_RE = re.compile(r"^exit_code: (\S+)", re.M)
POINTER_BYTES = 260      # about the size of a pointer, for the tail budget


@dataclass(frozen=True)
class WindowSettings:
    """The window thresholds: checkpoint growth, window size, kept tail, side-file size."""

    checkpoint_every_bytes: int = 200_000
    window_max_bytes: int = 400_000
    tail_bytes: int = 40_000
    side_threshold: int = 4096


def window_settings(settings):
    """The thresholds, resolved once in config (settings.windows has these four fields)."""
    return settings.windows


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


def carried_before_tail(record):
    """The new window keeps what the user wrote (prompts, hand-typed notes) and the markers of
    failed runs, so a failed prompt never reads as part of the next one."""
    return (is_user_prompt(record) or is_inbox_message(record) or record.kind == "note"
            or is_failure_marker(record))


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
                f"{frame_data(checkpoint_text.strip())}\n</system>", {"carried": "checkpoint"}))
    for record in earlier:
        if not carried_before_tail(record):
            continue
        if record.kind == "prompt":
            attrs = {"source": record.attr("source", "argv"), "carried": "true"}
            for name in ("inbox", "turn_id"):   # turn_id: its snapshots (--changes, --rewind)
                if record.attr(name):
                    attrs[name] = record.attr(name)
            out.append(("prompt", record.body, attrs))
        else:
            out.append((record.kind, record.body, dict(record.attrs, carried="true")))
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
    return encode_records(new_records, time=now)  # the store's one record encoder


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
