"""Checkpoints: the fixed-schema record that lets a long run continue after old turns leave
the window. Text rules (pure) and the checkpoint file (I/O); no model call happens here.

Data contract:
- The file (`checkpoint_path(conversation)`, the one place that names it) is a first line
  `<!-- nagent-checkpoint written="ISO" covers_bytes="N" window="W" -->`, `# nagent checkpoint`,
  the fixed schema (## Goal, ## Decisions, ## Current state, ## Next steps, ## Open questions)
  written by one separate model call, then `## User notes`, copied verbatim from the previous
  version so user edits there always survive (the model also sees, and is told to keep, edits
  elsewhere). `covers_bytes` is the window size it describes; `window` the window number.
- `schema_problem(text)` checks the schema: the five headings as `## Name` lines, each once,
  in order, no other level-2 heading, and something under at least one of them. A model
  reply that fails it is rejected (`write_checkpoint` returns the problem and leaves the
  previous file untouched); a file that fails it is not used (`usable_checkpoint`).
- A checkpoint that cannot belong to this conversation (a later window, or covering more bytes
  than the window holds: the file was cleared, loaded or branched) is moved to `archive/`
  (`retire_stale_checkpoint`), never deleted.
- The checkpoint call sees the previous checkpoint and the records since `covers_bytes`, large
  results as head/tail excerpts only (`transcript_since`).
"""
import os
import re

from nagent_conversation import utc_stamp
from nagent_conversation_layout import checkpoint_path as layout_checkpoint_path
from nagent_fs import atomic_write, write_unique

SCHEMA = ("Goal", "Decisions", "Current state", "Next steps", "Open questions")
USER_NOTES = "## User notes"
HEADER_RE = re.compile(r'<!-- nagent-checkpoint written="([^"]*)" covers_bytes="(\d+)" window="(\d+)" -->')
HEADING_RE = re.compile(r"^##[ \t]+(.*?)[ \t]*$", re.M)
SENT_KINDS = ("prompt", "reply", "result", "system", "interrupt", "note")
EXCERPT_CHARS = 2000     # per result in the checkpoint call's transcript


def checkpoint_path(conversation):
    return layout_checkpoint_path(conversation)  # NAME.d/checkpoint.md: the layout's one rule


# -- text (pure) ----------------------------------------------------------------------------
def header_line(written, covers_bytes, window):
    return f'<!-- nagent-checkpoint written="{written}" covers_bytes="{covers_bytes}" window="{window}" -->'


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


def checkpoint_due(size, meta, every, rejected_at=0):
    """Due once the window grew `every` bytes past what the checkpoint covers (or past the
    size at which the last attempt was rejected, so a model that cannot write one is not
    asked again every turn)."""
    if every <= 0:
        return False
    covered = max(meta["covers_bytes"] if meta else 0, rejected_at)
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


def _canonical(name):
    for wanted in SCHEMA:
        if name.lower() == wanted.lower():
            return wanted
    return None


def strip_to_schema(text):
    """The model's sections from the first schema heading on (a fence or preamble dropped, the
    headings in their canonical spelling), without any `## User notes` it wrote."""
    text = text.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[1] if "\n" in text else ""
        text = text.rsplit("```", 1)[0]
    first = next((m for m in HEADING_RE.finditer(text) if _canonical(m.group(1))), None)
    body = text[first.start():] if first else text
    notes = re.search(r"^" + re.escape(USER_NOTES) + r"[ \t]*$", body, re.M)
    body = body[:notes.start()] if notes else body
    body = HEADING_RE.sub(lambda m: f"## {_canonical(m.group(1)) or m.group(1)}", body)
    return body.strip() + "\n"


def schema_problem(body):
    """None when `body` (schema sections, as strip_to_schema returns them) has exactly the fixed
    headings in order and some content; else a short reason."""
    headings = [m.group(1) for m in HEADING_RE.finditer(body)]
    if headings != list(SCHEMA):
        missing = [name for name in SCHEMA if name not in headings]
        extra = [name for name in headings if name not in SCHEMA]
        if missing:
            return "missing section(s) " + ", ".join(missing)
        if extra:
            return "unexpected section(s) " + ", ".join(extra[:3])
        return "sections out of order or repeated"
    if not HEADING_RE.sub("", body).strip():
        return "every section is empty"
    return None


def compose_checkpoint(model_text, previous, covers_bytes, window, written):
    return (f"{header_line(written, covers_bytes, window)}\n# nagent checkpoint\n\n"
            f"{strip_to_schema(model_text)}\n{user_notes(previous)}")


def file_schema_problem(text):
    """schema_problem of a checkpoint file's text (header and user notes aside)."""
    if not HEADER_RE.search(text.split("\n", 1)[0]):
        return "no nagent-checkpoint header line"
    body = text.split("\n", 1)[1] if "\n" in text else ""
    notes = re.search(r"^" + re.escape(USER_NOTES) + r"[ \t]*$", body, re.M)
    body = body[:notes.start()] if notes else body
    body = re.sub(r"\A\s*# nagent checkpoint[ \t]*\n", "", body)
    return schema_problem(body)


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


# -- the file (I/O) -------------------------------------------------------------------------
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


def usable_checkpoint(conversation):
    """(text, problem): the checkpoint file's text when it passes the schema check, else ""
    and why not (None when there is no file at all)."""
    text, _ = read_checkpoint(conversation)
    if not text:
        return "", None
    problem = file_schema_problem(text)
    return ("", problem) if problem else (text, None)


def write_text(path, text):
    atomic_write(path, text.encode("utf-8"), file_mode(path))


def archive_copy(path, data, mode):
    """A complete copy as `archive/{name}-{UTC stamp}[-n]` beside `path`; `path` stays."""
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


def write_checkpoint(conversation, records, size, generate_text, now, window=0, limit=20_000):
    """One model call → (text, result, problem). A reply that passes the schema check is
    written (atomically) and returned as `text`; otherwise `text` is None, `problem` says why,
    and the previous checkpoint file is left as it was."""
    previous, meta = read_checkpoint(conversation)
    offset = meta["covers_bytes"] if meta and meta.get("window", 0) == window else 0
    result = generate_text(checkpoint_prompt(previous, transcript_since(records, offset, limit)))
    problem = schema_problem(strip_to_schema(result.text))
    if problem is None and getattr(result, "finish_reason", "stop") in ("length", "cut"):
        problem = "cut off by the output limit" if result.finish_reason == "length" else \
            "cut off by the connection"
    if problem:
        return None, result, problem
    text = compose_checkpoint(result.text, previous, size, window, now)
    write_text(checkpoint_path(conversation), text)
    return text, result, None


def restamp(conversation, now, covers_bytes, window):
    """Point the checkpoint's header at a new window start (after a rebuild)."""
    text, _ = read_checkpoint(conversation)
    if text:
        write_text(checkpoint_path(conversation),
                   HEADER_RE.sub(header_line(now, covers_bytes, window), text, count=1))
