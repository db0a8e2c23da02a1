"""Reply text helpers shared by the parser and the driver: newlines, fences, the part of a
reply kept before a cut, and the final answer as the user sees it. Pure string functions.

Data contract:
- `drop_leading_newline` / `drop_trailing_newline` remove one "\\n" or "\\r\\n".
- `FENCE_OPEN` matches a markdown fence opening line (ticks, info string, end of line).
- `trim_partial_tag(text)` drops a trailing unfinished "<nagent-…"/"</nagent-…" fragment (no
  closing '>'); `kept_reply(text, parse)` is the part of a reply that stays in the conversation:
  everything before `parse.cut_at`, so trimmed (the whole text without a cut).
- `clean_user_output(text)` strips a whole-reply <nagent-response> wrapper and/or one markdown
  fence around all of it; inline tag examples stay.
"""
import re

FENCE_OPEN = re.compile(r"(`{3,})([A-Za-z0-9_.+#-]*)[ \t\r]*(?:\n|\Z)")
FENCE_LINE = re.compile(r"^ {0,3}(`{3,})[ \t\r]*$", re.M)


def drop_leading_newline(body):
    if body.startswith("\r\n"):
        return body[2:]
    return body[1:] if body.startswith("\n") else body


def drop_trailing_newline(body):
    if body.endswith("\r\n"):
        return body[:-2]
    return body[:-1] if body.endswith("\n") else body


def trim_partial_tag(text):
    """Drop a trailing unfinished "<nagent-…" / "</nagent-…" fragment (no closing '>')."""
    at = text.rfind("<")
    if at < 0:
        return text
    fragment = text[at:]
    if ">" in fragment:
        return text
    for opener in ("<nagent-", "</nagent-"):
        if fragment.startswith(opener) or opener.startswith(fragment):
            return text[:at]
    return text


def kept_reply(text, parse):
    """The part of the reply that stays in the conversation: everything before a cut."""
    if parse.cut_at is None:
        return text
    return trim_partial_tag(text[:parse.cut_at])


def _unfence(text):
    """Inner text of one markdown fence wrapping all of `text`, or None."""
    stripped = text.strip()
    match = FENCE_OPEN.match(stripped)
    if not match or not match.group(0).endswith("\n"):
        return None
    ticks = len(match.group(1))
    for line in FENCE_LINE.finditer(stripped, match.end()):
        if len(line.group(1)) >= ticks:
            if line.end() != len(stripped):
                return None
            return drop_trailing_newline(stripped[match.end():line.start()])
    return None


def _unwrap(text):
    """Body of one <nagent-response> wrapping all of `text`, or None."""
    opener, closer = "<nagent-response>", "</nagent-response>"
    stripped = text.strip()
    if not (stripped.startswith(opener) and stripped.endswith(closer)) or \
            stripped.find(closer, len(opener)) != len(stripped) - len(closer):
        return None
    return drop_trailing_newline(drop_leading_newline(stripped[len(opener):-len(closer)]))


def clean_user_output(text):
    """Strip a whole-reply <nagent-response> wrapper and/or one surrounding markdown fence."""
    unwrapped = _unwrap(text)
    unfenced = _unfence(text if unwrapped is None else unwrapped)
    if unfenced is None:
        return text if unwrapped is None else unwrapped
    inner = _unwrap(unfenced) if unwrapped is None else None
    return unfenced if inner is None else inner
