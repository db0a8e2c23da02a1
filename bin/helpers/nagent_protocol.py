"""The strict nagent tag protocol: parser, driver result blocks, and the grammar the model reads.

Data contract:
- parse_response(text) -> Parse. A valid reply is whitespace-separated action tags (ACTION_TAGS);
  Parse.actions holds them in order (response included) as frozen Action records with character
  offsets into `text`. An invalid reply has no actions and `error` set to one short sentence (the
  DETAIL of correction_text). Leaked <think>/<thinking> blocks and one markdown fence wrapping the
  whole reply are tolerated; any other text outside tags is invalid.
- A driver block (<nagent-…-result …> or <system>) written at the start of a line cuts the reply
  there (cut_at = offset of its "<", cut_tag = its name), wherever it appears: only actions that
  close before the cut survive. If none do, the parse is invalid.
  A thinking block is tolerated only at the very start of a reply (before any action or fence)
  and only if no body tag opened inside it is still unclosed where it ends: else that end may be
  text inside a body (a file being written) and what follows must not run.
- STOP_SEQUENCES are the line-start forms of those driver blocks (plain and indented <system>),
  most common first, for providers that take stop sequences; every one of them is a cut position
  of the parser. A provider stop at one is passed as `stopped_at` and is a cut at the reply's
  end. A block at the very start of a reply cannot be a stop sequence (a provider matches only
  after generated text); the parser cuts it there.
- Parse.truncated: invalid only because the reply ends inside a tag, body or fence (a reply cut
  by the output limit may be continued only then, or when valid).
- A <nagent-replace> body must be old/new pairs (nagent_replace.parse_pairs, the one rule);
  anything else makes the reply invalid, naming the pair.
- Exact consecutive duplicate actions collapse into one; duplicates_dropped counts them.
- Scanning is str.find/anchored-match driven, so time is linear in the reply length.
- Helpers importable from here: grammar_text; from nagent_protocol_blocks (what the driver
  writes) STOP_SEQUENCES, stop_block, correction_text, escape_attr/unescape_attr, result_block;
  from nagent_protocol_text (reply text) kept_reply, trim_partial_tag, clean_user_output.
"""
import re
from dataclasses import dataclass

from nagent_protocol_blocks import ATTR_NAME as _ATTR_NAME
from nagent_protocol_blocks import (STOP_SEQUENCES, correction_text, escape_attr,  # noqa: F401
                                    result_block, stop_block, unescape_attr)
from nagent_protocol_grammar import GRAMMAR
from nagent_protocol_text import (FENCE_OPEN, clean_user_output, drop_leading_newline,  # noqa: F401
                                  drop_trailing_newline, kept_reply, trim_partial_tag)
from nagent_replace import parse_pairs
from nagent_terminal_text import escape

ACTION_TAGS = ("response", "read", "file-read", "file-patch", "write", "replace", "file-edit",
               "shell", "next", "agent")
RESULT_TAGS = ("read-result", "file-read-result", "file-patch-result", "write-result",
               "shell-result", "agent-result", "replace-result", "file-edit-result", "system")
# Every attribute a tag takes is required; tags not listed take none.
TAG_ATTRS = {"read": ("path",), "file-read": ("path",), "file-patch": ("index",), "write": ("path",),
             "replace": ("path",), "file-edit": ("path",)}
SELF_CLOSING = ("read", "file-read", "file-patch")
NEWLINE_TRIMMED = ("response", "shell", "next", "agent", "file-edit")
NEEDS_BODY = ("shell", "next", "agent", "file-edit")   # replace: nagent_replace checks its pairs
THINKING_TAGS = ("think", "thinking")

_WS = re.compile(r"[\s\ufeff]*")
_CUT = re.compile(r"^[ \t]*<(nagent-[A-Za-z0-9_-]*-result|system)(?=[\s>/]|\Z)", re.M)
# _CUT split in two: the first line, or one after "\n" (all that re.M's ^ means). The "\n" literal
# lets the search skip ahead in C instead of trying a match at every offset (4-8x faster).
_CUT_FIRST = re.compile(r"[ \t]*<(nagent-[A-Za-z0-9_-]*-result|system)(?=[\s>/]|\Z)")
_CUT_LATER = re.compile(r"\n[ \t]*<(nagent-[A-Za-z0-9_-]*-result|system)(?=[\s>/]|\Z)")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:-]*")
_BODY_OPEN = re.compile(
    r"<nagent-(response|write|shell|next|agent|replace|file-edit)(?=[\s>/]|\Z)")
# The common shape (no attribute or one plain double-quoted one) skips the general loop.
_OPEN_FAST = re.compile(r'(?:[ \t]+([A-Za-z_][A-Za-z0-9_.:-]*)="([^"&\n]*)")?[ \t]*(/?)>')
_FENCE_CLOSE = re.compile(r"`{3,}[ \t\r]*(?:\n|\Z)")
_STUTTER_MAX = 65536  # stutters are short tags; don't copy huge bodies just to compare them
# Fast path for the commonest tags (no attributes, trimmed body); anything unusual re-parses slowly.
# Group 1 is the opening tag, 2 its kind, 3 the body minus its leading newline. A body without
# '<' needs no search for its closing tag or for a second opening tag.
_SIMPLE_KINDS = ("shell", "next", "agent", "response")
_SIMPLE = re.compile(
    r"[\s\ufeff]*+(<nagent-(shell|next|agent|response)>)(?:\r?\n)?([^<]*+)</nagent-\2>")


@dataclass(frozen=True, slots=True)
class Action:
    kind: str
    body: str = ""
    attrs: tuple = ()
    start: int = 0
    end: int = 0

    def attr(self, name, default=None):
        for key, value in self.attrs:
            if key == name:
                return value
        return default

    def as_dict(self):
        return {"kind": self.kind, "attrs": dict(self.attrs), "body": self.body,
                "start": self.start, "end": self.end}


def _action_maker():
    """An Action constructor that skips the frozen __init__'s generic setattr calls (2x faster)."""
    new = object.__new__
    set_kind, set_body, set_attrs, set_start, set_end = (
        Action.__dict__[name].__set__ for name in ("kind", "body", "attrs", "start", "end"))

    def make(kind, body, attrs, start, end):
        action = new(Action)
        set_kind(action, kind)
        set_body(action, body)
        set_attrs(action, attrs)
        set_start(action, start)
        set_end(action, end)
        return action
    return make


_make_action = _action_maker()


@dataclass(frozen=True, slots=True)
class Parse:
    actions: tuple = ()
    error: str | None = None
    cut_at: int | None = None
    cut_tag: str | None = None
    duplicates_dropped: int = 0
    truncated: bool = False  # invalid only because it ends inside a tag, body or fence

    @property
    def valid(self):
        return self.error is None

    def as_dict(self):
        return {"valid": self.valid, "error": self.error, "cut_at": self.cut_at,
                "cut_tag": self.cut_tag, "duplicates_dropped": self.duplicates_dropped,
                "truncated": self.truncated,
                "actions": [action.as_dict() for action in self.actions]}


class _Invalid(Exception):
    def __init__(self, detail):
        super().__init__(detail)
        self.detail = detail


class _Truncated(_Invalid):
    """The reply ended inside a tag or body: an error, unless a cut explains the ending."""


def _line(text, pos):
    return text.count("\n", 0, pos) + 1


def _snippet(text, pos, limit=40):
    end = text.find("\n", pos, pos + limit + 1)
    piece = text[pos:pos + limit + 1] if end < 0 else text[pos:end]
    piece = piece.rstrip("\r")
    if len(piece) > limit:
        piece = piece[:limit] + "…"
    return escape(piece)


def _outside(text, pos):
    return _Invalid(f"text outside tags at line {_line(text, pos)}: '{_snippet(text, pos)}'.")


def _fabricated(name, where=""):
    return (f"reply wrote the driver's <{name}> block{where}; stop before results, "
            "the driver appends them.")


def _open_body(text, start, end):
    """The first body tag (<nagent-write …>, <nagent-shell> …) opened in text[start:end] and not
    closed there, as (name, offset); None if none. A `backticked` mention opens nothing; text
    inside a closed body is skipped, as the parser would."""
    pos = start
    while True:
        match = _BODY_OPEN.search(text, pos, end)
        if not match:
            return None
        if match.start() > 0 and text[match.start() - 1] == "`":
            pos = match.end()
            continue
        close = text.find(f"</nagent-{match.group(1)}>", match.end(), end)
        if close < 0:
            return match.group(0), match.start()
        pos = close


def _check_thinking(text, start, end):
    """A thinking block may not end inside a body it opened: that "</think>" may be text of the
    body (a file being written, a draft), and what follows it must not run as actions."""
    opened = _open_body(text, start, end)
    if opened:
        raise _Invalid(f"thinking ending at line {_line(text, end)} leaves {opened[0]}> (line "
                       f"{_line(text, opened[1])}) unclosed; end thinking before any action and "
                       "quote tag names in backticks.")


def _leaked_thinking_end(text):
    """Offset just past a leading `prose…</think>` whose opening tag the model never printed."""
    first = _WS.match(text).end()
    if text.startswith(("<", "`"), first):
        return 0
    found = [at for at in (text.find("</think>"), text.find("</thinking>")) if at >= 0]
    if not found:
        return 0
    at = min(found)
    _check_thinking(text, first, at)
    return text.index(">", at) + 1


def _bad(text, kind, tag_at, problem, cls=_Invalid):
    # Line numbers are counted only here, on failure, to keep the happy path linear.
    return cls(f"<nagent-{kind}> at line {_line(text, tag_at)}: {problem}.")


def _open_tag(text, pos, kind, tag_at):
    """Parse attributes from `pos` to the tag end. Returns (sorted attrs, end, self_closing)."""
    fast = _OPEN_FAST.match(text, pos)
    if fast:
        name, value, slash = fast.groups()
        return ((name, value),) if name else (), fast.end(), slash == "/"
    return _open_tag_slow(text, pos, kind, tag_at)


def _open_tag_slow(text, pos, kind, tag_at):
    n, attrs = len(text), {}
    while True:
        pos = _WS.match(text, pos).end()
        if text.startswith(">", pos) or text.startswith("/>", pos):
            closed = text[pos] == "/"
            return tuple(sorted(attrs.items())), pos + 1 + closed, closed
        match = _ATTR_NAME.match(text, pos)
        if pos >= n or (pos + 1 == n and text[pos] == "/"):
            raise _bad(text, kind, tag_at, "unfinished tag", _Truncated)
        if not match:
            raise _bad(text, kind, tag_at, f"unexpected '{_snippet(text, pos, 12)}' in the tag")
        name = match.group()
        pos = _WS.match(text, match.end()).end()
        if text.startswith("=", pos):
            pos = _WS.match(text, pos + 1).end()
        elif pos < n:
            raise _bad(text, kind, tag_at, f"attribute {name} needs a quoted value")
        if pos >= n:
            raise _bad(text, kind, tag_at, "unfinished tag", _Truncated)
        quote = text[pos]
        if quote not in "\"'":
            raise _bad(text, kind, tag_at, f"attribute {name} must be quoted")
        close = text.find(quote, pos + 1)
        if close < 0:
            raise _bad(text, kind, tag_at, f"unterminated {name} attribute", _Truncated)
        if text.find("\n", pos + 1, close) >= 0:
            raise _bad(text, kind, tag_at, f"unterminated {name} attribute")
        if name in attrs:
            raise _bad(text, kind, tag_at, f"duplicate attribute {name}")
        attrs[name] = unescape_attr(text[pos + 1:close])
        pos = close + 1
        if pos < n and text[pos] not in " \t\r\n>/":
            raise _bad(text, kind, tag_at, f"unexpected '{_snippet(text, pos, 12)}' in the tag")


def _check_attrs(text, kind, attrs, tag_at):
    wanted = TAG_ATTRS.get(kind, ())
    if len(attrs) == len(wanted) and all(
            have[0] == name and have[1].strip() for have, name in zip(attrs, wanted)):
        return
    present = dict(attrs)
    for name in present:
        if name not in wanted:
            raise _bad(text, kind, tag_at, f"unknown attribute {name}")
    for name in wanted:
        if not present.get(name, "").strip():
            empty = "" if name not in present else "non-empty "
            raise _Invalid(f"<nagent-{kind}> needs a {empty}{name} attribute "
                           f"(line {_line(text, tag_at)}).")


def _action(text, tag_at, kind, pos):
    """Parse one action whose name ends at `pos`. Returns the Action (ending at action.end)."""
    attrs, tag_end, self_closing = _open_tag(text, pos, kind, tag_at)
    _check_attrs(text, kind, attrs, tag_at)
    close = f"</nagent-{kind}>"
    if kind in SELF_CLOSING:
        if self_closing:
            return Action(kind, "", attrs, tag_at, tag_end)
        after = _WS.match(text, tag_end).end()
        if text.startswith(close, after):
            return Action(kind, "", attrs, tag_at, after + len(close))
        if close.startswith(text[after:after + len(close)]):
            raise _Truncated(f"unclosed <nagent-{kind}> opened at line {_line(text, tag_at)}.")
        example = f'<nagent-{kind} {TAG_ATTRS[kind][0]}="…"/>'
        raise _bad(text, kind, tag_at, f"must be self-closing, like {example}")
    if self_closing:
        raise _bad(text, kind, tag_at, f"needs a body and a closing {close}")
    end = text.find(close, tag_end)
    if end < 0:
        raise _Truncated(f"unclosed <nagent-{kind}> opened at line {_line(text, tag_at)}.")
    body = text[tag_end:end]
    if kind in NEWLINE_TRIMMED:
        body = drop_trailing_newline(drop_leading_newline(body))
    else:
        body = drop_leading_newline(body)
    if kind == "replace":
        try:
            parse_pairs(body)
        except ValueError as problem:
            raise _bad(text, kind, tag_at, str(problem)) from None
    if kind in NEEDS_BODY:
        again = _find_open(text, f"<nagent-{kind}", tag_end, end)
        if again >= 0:
            raise _Invalid(f"unclosed <nagent-{kind}> opened at line {_line(text, tag_at)}: "
                           f"another <nagent-{kind}> starts at line {_line(text, again)}.")
        if not body.strip():
            raise _Invalid(f"empty <nagent-{kind}> body at line {_line(text, tag_at)}.")
    return Action(kind, body, attrs, tag_at, end + len(close))


def _find_open(text, opener, start, end):
    """First `opener` in text[start:end] that is a whole tag name (followed by space, > or /)."""
    while True:
        at = text.find(opener, start, end)
        if at < 0:
            return -1
        nxt = at + len(opener)
        if nxt < end and text[nxt] in " \t\r\n>/":
            return at
        start = nxt


def _tag(text, pos, actions, fence):
    """Handle one top-level '<' at `pos`: append an action or skip thinking. Returns new pos."""
    n = len(text)
    closing = text.startswith("</", pos)
    match = _NAME.match(text, pos + (2 if closing else 1))
    if not match:
        if ("</nagent-" if closing else "<nagent-").startswith(text[pos:pos + 10]):
            raise _Truncated(f"unfinished tag at line {_line(text, pos)}.")
        raise _outside(text, pos)
    name, after = match.group(), match.end()
    if after >= n and (name.startswith("nagent-") or "nagent-".startswith(name)):
        raise _Truncated(f"unfinished tag <{'/' if closing else ''}{name} at line {_line(text, pos)}.")
    if after < n and text[after] not in " \t\r\n>/":
        raise _Invalid(f"unknown tag <{_snippet(text, pos + 1, 30)} at line {_line(text, pos)}.")
    if closing:
        raise _Invalid(f"stray closing tag </{name}> at line {_line(text, pos)}.")
    if name in THINKING_TAGS:
        if actions or fence[0] is not None:
            raise _Invalid(f"<{name}> at line {_line(text, pos)}: thinking is only tolerated at "
                           "the very start of a reply.")
        close = f"</{name}>"
        end = text.find(close, after)
        if end < 0:
            raise _Truncated(f"unclosed <{name}> opened at line {_line(text, pos)}.")
        _check_thinking(text, after, end)
        return end + len(close)
    kind = name[len("nagent-"):] if name.startswith("nagent-") else None
    if name == "system" or (kind and kind.endswith("-result")):
        raise _Invalid(_fabricated(name, f" at line {_line(text, pos)}"))
    if kind not in ACTION_TAGS:
        raise _Invalid(f"unknown tag <{name}> at line {_line(text, pos)}.")
    if fence[0] == "closed":
        raise _Invalid(f"<{name}> at line {_line(text, pos)} comes after the closing markdown fence.")
    action = _action(text, pos, kind, after)
    actions.append(action)
    return action.end


def _fence(text, pos, actions, fence):
    """Handle a top-level ``` at `pos` (one fence around the whole reply). Returns new pos."""
    line_start = text.rfind("\n", 0, pos) + 1
    if text[line_start:pos].strip(" \t\r\ufeff"):
        raise _outside(text, pos)
    if fence[0] is None and not actions:
        match = FENCE_OPEN.match(text, pos)
        if match:
            fence[0], fence[1] = "open", pos
            return match.end()
    elif fence[0] == "open":
        match = _FENCE_CLOSE.match(text, pos)
        if match:
            fence[0] = "closed"
            return match.end()
    raise _Invalid(f"markdown fence at line {_line(text, pos)} does not wrap the whole reply.")


def _scan(text, cut):
    """(actions, skipped stutters) in `text` (already cut); raises _Invalid.
    A cut forgives a truncated tail."""
    n = len(text)
    pos = _leaked_thinking_end(text)
    actions, fence, repeats, last_raw = [], [None, 0], 0, None
    skip_ws, simple_at, append = _WS.match, _SIMPLE.match, actions.append
    fast = True  # off after a general-path read/write, whose stutters the fast path can't match
    try:
        while True:
            simple = simple_at(text, pos) if fast else None
            if simple and fence[0] != "closed":
                # The general path below, inlined for a '<'-free body; odd cases fall through.
                # Here a stutter (last_raw prefixing the text) is exactly raw == last_raw.
                at, pos = simple.start(1), simple.end()
                raw = text[at:pos] if pos - at <= _STUTTER_MAX else None
                if raw is not None and raw == last_raw:
                    repeats += 1
                    continue
                kind, body = simple.group(2, 3)
                if kind == "response" or (body and not body.isspace()):
                    if body and body[-1] == "\n":
                        body = body[:-2] if body[-2:] == "\r\n" else body[:-1]
                    append(_make_action(kind, body, (), at, pos))
                    last_raw = raw
                    continue
                pos = at
            pos = skip_ws(text, pos).end()
            if pos >= n:
                break
            if last_raw and fence[0] != "closed" and text.startswith(last_raw, pos):
                # A byte-identical stutter parses identically: skip it without re-parsing.
                repeats += 1
                pos += len(last_raw)
            elif text[pos] == "<":
                count = len(actions)
                pos = _tag(text, pos, actions, fence)
                grew = len(actions) > count and pos - actions[-1].start <= _STUTTER_MAX
                last_raw = text[actions[-1].start:pos] if grew else None
                fast = not grew or actions[-1].kind in _SIMPLE_KINDS
            elif text.startswith("```", pos):
                pos = _fence(text, pos, actions, fence)
            else:
                raise _outside(text, pos)
    except _Truncated:
        if not cut:
            raise
        return actions, repeats, True
    if fence[0] == "open":
        if not cut:
            raise _Truncated(f"unclosed markdown fence opened at line {_line(text, fence[1])}.")
        return actions, repeats, True
    return actions, repeats, False


def _collapse(actions):
    kept, dropped, last = [], 0, None
    for action in actions:
        if last is not None and action.body == last.body and action.kind == last.kind \
                and action.attrs == last.attrs:
            dropped += 1
            continue
        kept.append(action)
        last = action
    return kept, dropped


def parse_response(text, stopped_at=None):
    """Parse one model reply strictly. Never raises for any str input.

    `stopped_at` says the provider ended the reply at one of STOP_SEQUENCES: the driver block's
    name ("system", "nagent-shell-result" ...), or "" when the provider does not say which
    (it reports a plain stop). The end of the text is then a cut like the parser's own: a
    known block always, an unknown one when the reply ends inside a tag or body."""
    if not text.strip():
        if stopped_at:
            return Parse(error=_fabricated(stopped_at), cut_at=0, cut_tag=stopped_at)
        return Parse(error="empty reply.")
    cut_at = cut_tag = None
    match = _CUT_FIRST.match(text) or _CUT_LATER.search(text)
    if match:
        cut_at, cut_tag = match.start(1) - 1, match.group(1)
    try:
        actions, repeats, truncated = _scan(text if cut_at is None else text[:cut_at],
                                            cut_at is not None or stopped_at is not None)
    except _Invalid as exc:
        return Parse(error=exc.detail, cut_at=cut_at, cut_tag=cut_tag,
                     truncated=isinstance(exc, _Truncated))
    if cut_at is None and (stopped_at or (stopped_at is not None and truncated)):
        cut_at, cut_tag = len(text), stopped_at
    if not actions and cut_tag == "":
        return parse_response(text)  # an unknown stop explains nothing: the scan's own error
    if not actions:
        detail = _fabricated(cut_tag) if cut_tag else "no nagent tags in reply."
        return Parse(error=detail, cut_at=cut_at, cut_tag=cut_tag)
    actions, dropped = _collapse(actions)
    return Parse(tuple(actions), None, cut_at, cut_tag, dropped + repeats)


def grammar_text():
    """The tag grammar and rules as the model reads them in the initial context."""
    return GRAMMAR
