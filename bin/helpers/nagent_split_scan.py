"""Boundary scanners: where a chunk may start in a file, and how deep each start is.

Data contract: `scan(data, skip, lang) -> Scan` for a `nagent_splitters.Language` row, over the
UTF-8 bytes `data` (`skip` is 3 after a BOM, else 0). A Scan holds compact arrays, all byte
offsets of line starts in ascending order:
  pos[i], level[i]   candidate chunk starts and their nesting level (bracket depth, indentation
                     column, heading level ...); a deeper construct has a larger level
  pull[i]            where candidate i's chunk starts once the lines that travel with it are
                     pulled in (comments, decorators, attributes, #if lines): pull[i] <= pos[i]
  masks              [start, end) ranges of multi-line tokens and statements: a line start s
                     with start < s < end lies inside one (`masked(s)`), a poor place to cut
Nesting comes from the linear lexers (nagent_split_lexers) and, for Python, from tokenize's
reading (nagent_split_python). Memory: a few bytes per candidate line, never a dict or tuple per
line.
"""
import heapq
import re
from array import array
from bisect import bisect_left

from nagent_split_lexers import SYNTAXES, lex, lex_xml, offset_type
from nagent_split_python import scan_python

ANY_LEVEL = -1
_COMMENT_KINDS = (ord("c"), ord("d"))
_DIRECTIVE_LINE = re.compile(rb"[ \t]*#")
_PP = re.compile(rb"#[ \t]*(if|ifdef|ifndef|elif|else|endif)\b([ \t]+0\b)?")


class Builder:
    """Collects candidates, attach lines and masks in ascending order."""

    def __init__(self, size=0):
        self.offsets = offset_type(size)
        self.cand_pos, self.cand_level = array(self.offsets), array("i")
        self.attach_pos, self.attach_level = array(self.offsets), array("i")
        self.mask_start, self.mask_end = array(self.offsets), array(self.offsets)
        self.mask_kind = array("b")

    def fork(self):
        return Builder(2**31 if self.offsets == "q" else 0)

    def adopt(self, other):
        self.__dict__.update(other.__dict__)

    def candidate(self, s, level):
        if self.cand_pos and self.cand_pos[-1] >= s:
            return
        self.cand_pos.append(s)
        self.cand_level.append(level)

    def attach(self, s, level):
        if self.attach_pos and self.attach_pos[-1] >= s:
            return
        self.attach_pos.append(s)
        self.attach_level.append(level)

    def mask(self, start, end, kind):
        if self.mask_end and start < self.mask_end[-1]:
            return  # nested inside the previous mask
        self.mask_start.append(start)
        self.mask_end.append(end)
        self.mask_kind.append(ord(kind))

    def mask_at(self, s):
        """Index of the mask that s lies strictly inside, or -1."""
        k = bisect_left(self.mask_start, s) - 1
        return k if k >= 0 and s < self.mask_end[k] else -1

    def masked(self, s):
        return self.mask_at(s) >= 0


class Scan(Builder):
    def __init__(self, data, builder):  # noqa: D107 - takes over the builder's arrays
        self.__dict__.update(builder.__dict__)
        self.pos, self.level = self.cand_pos, self.cand_level
        self.pull = _pulls(data, builder)


def _pulls(data, b):
    """pull[i]: walk back from candidate i over attach lines of its level (or any level) and
    lines inside block comments or directives, never into the previous candidate's line."""
    pull = array(b.offsets)
    attach_pos, attach_level = b.attach_pos, b.attach_level
    mask_start, mask_end, mask_kind = b.mask_start, b.mask_end, b.mask_kind
    previous = -1
    for s, level in zip(b.cand_pos, b.cand_level):
        start = s
        while start > 0:
            t = data.rfind(b"\n", 0, start - 1) + 1
            if t <= previous:
                break
            k = bisect_left(attach_pos, t)
            if k < len(attach_pos) and attach_pos[k] == t \
                    and attach_level[k] in (level, ANY_LEVEL):
                start = t
                continue
            m = bisect_left(mask_start, t) - 1
            if m >= 0 and t < mask_end[m] and mask_kind[m] in _COMMENT_KINDS and \
                    data.rfind(b"\n", 0, mask_start[m]) + 1 > previous:
                # Inside a block comment or directive that did not open on the previous
                # candidate's line (a multi-line #define's body stays with the #define).
                start = t
                continue
            break
        pull.append(start)
        previous = s
    return pull


def _queries(pattern, data, skip):
    """(line start, match) for every line where `pattern` (which opens with a newline) matches;
    line 0 is matched through a one-line copy with a newline in front."""
    end = data.find(b"\n", skip)
    head = b"\n" + data[skip:len(data) if end == -1 else end + 1]
    m = pattern.match(head)
    if m:
        yield 0, m, skip - 1
    for m in pattern.finditer(data, max(0, end)) if end != -1 else ():
        yield m.start() + 1, m, 0


def _line_regex(attach, candidate):
    parts = []
    if attach:
        parts.append(b"(?P<a>" + attach + b")")
    if candidate:
        parts.append(b"(?P<n>" + candidate + b")")
    return re.compile(rb"\n(?P<i>[ \t]*)(?:" + b"|".join(parts) + b")")


def _code_tail(data, t, e):
    """Last character of the code on line [t, e) (a trailing // or /* comment dropped when the
    quotes before it balance), or None for a blank line."""
    line = data[t:e]
    for marker in (b"//", b"/*"):
        at = line.find(marker)
        while at != -1:
            if line.count(b'"', 0, at) % 2 == 0:
                line = line[:at]
                break
            at = line.find(marker, at + 2)
    line = line.rstrip()
    return line[-1:] or None


def _after_terminator(data, s, b, terminators, directives):
    """True when the code line before s ends a statement or opens a block (or there is none);
    comments, attach lines and (in C) preprocessor lines are looked past."""
    while s > 0:
        t = data.rfind(b"\n", 0, s - 1) + 1
        k = bisect_left(b.attach_pos, t)
        m = bisect_left(b.mask_start, t) - 1
        if (k < len(b.attach_pos) and b.attach_pos[k] == t) or (
                m >= 0 and t < b.mask_end[m] and b.mask_kind[m] in _COMMENT_KINDS) or (
                directives and _DIRECTIVE_LINE.match(data, t)):
            s = t
            continue
        tail = _code_tail(data, t, s - 1)
        if tail is not None:
            return tail in terminators
        s = t
    return True


def _scan_bracketed(data, skip, lang, tokens, b):
    """Bracket depth at each line the language's patterns select, by walking `tokens`."""
    top = re.compile(lang.top) if lang.top else None
    nested = re.compile(lang.nested) if lang.nested else None
    closer = re.compile(lang.closer) if lang.closer else None
    candidate = b"|".join(p for p in (lang.top, lang.nested) if p)
    queries = _queries(_line_regex(lang.attach, candidate), data, skip)
    depth, stack = 0, []  # stack: [depth at #if, depth after the first live branch, dead?]
    directives = lang.mode == "brackets" and SYNTAXES[lang.syntax].directives

    def handle(query, depth):
        s, m, delta = query
        if m.group("a") is not None:
            b.attach(s, depth)
            return
        k = m.end("i") + delta
        if closer is not None and closer.match(data, k):
            return
        if depth == lang.base:
            ok, terminated = top is not None and top.match(data, k), lang.top_terminated
        else:
            ok, terminated = (depth > lang.base and nested is not None
                              and nested.match(data, k)), lang.nested_terminated
        if ok and (not terminated or (directives and data[k] == 35)
                   or _after_terminator(data, s, b, lang.terminators, directives)):
            b.candidate(s, depth)

    query = next(queries, None)
    for token in tokens:
        p = token[1]
        while query is not None and query[0] <= p:
            handle(query, depth)
            query = next(queries, None)
        kind = token[0]
        if kind == "o":
            depth += 1
        elif kind == "x":
            depth = depth - 1 if depth else 0
        else:
            q = token[2]
            if kind == "d":
                depth = _preprocess(data, p, depth, stack)
            if data.find(b"\n", p, q) != -1:
                b.mask(p, q, kind)
                while query is not None and query[0] < q:
                    query = next(queries, None)
    while query is not None:
        handle(query, depth)
        query = next(queries, None)


def _preprocess(data, p, depth, stack):
    """Depth after a directive: each #if branch starts from the depth at #if, and after #endif
    the depth is the one the first live branch ended with (an `#if 0` branch is dead)."""
    m = _PP.match(data, p)
    if not m:
        return depth
    word = m.group(1)
    if word.startswith(b"if"):
        stack.append([depth, None, word == b"if" and m.group(2) is not None])
        return depth
    if not stack:
        return depth
    top = stack[-1]
    if word in (b"elif", b"else"):
        if top[1] is None:
            if top[2]:
                top[2] = False
            else:
                top[1] = depth
        return top[0]
    stack.pop()
    if top[1] is not None:
        return top[1]
    return top[0] if top[2] else depth


def _scan_indent(data, skip, lang, b):
    """YAML-like: the level is the indentation width."""
    top, nested = re.compile(lang.top), re.compile(lang.nested)
    for s, m, delta in _queries(_line_regex(lang.attach, lang.nested + b"|" + lang.top),
                                data, skip):
        width = len(m.group("i"))
        if m.group("a") is not None:
            b.attach(s, width)
            continue
        k = m.end("i") + delta
        if (top if width == 0 else nested).match(data, k):
            b.candidate(s, width)


_FENCE = re.compile(rb"\n[ \t]{0,3}(`{3,}|~{3,})([^\n]*)")
_ATX = re.compile(rb"\n(#{1,6})(?=[ \t]|\r?\n|\r?\Z)")
_SETEXT = re.compile(rb"\n[ \t]{0,3}(=+|-+)[ \t]*\r?(?=\n|\Z)")
_BLANK_THEN_TEXT = re.compile(rb"\n[ \t\r\f\v]*\n(?=[^\n]*\S)")
_LIST_ITEM = re.compile(rb"\n([ \t]*)(?:[-*+]|\d{1,9}[.)])[ \t]")
_SETEXT_TITLE_BAD = re.compile(rb"[ \t]*(?:[-*+>|#=]|\r?$)")
PARAGRAPH_LEVEL, LIST_LEVEL = 6, 7


def _fences(data, skip, b):
    opened = None
    for s, m, _ in _queries(_FENCE, data, skip):
        fence, rest = m.group(1), m.group(2)
        if opened is None:
            opened = (s, fence)
        elif fence[0] == opened[1][0] and len(fence) >= len(opened[1]) and not rest.strip():
            e = data.find(b"\n", s)
            b.mask(opened[0], len(data) if e == -1 else e + 1, "s")
            opened = None
    if opened is not None:
        b.mask(opened[0], len(data), "s")


def _markdown_starts(data, skip):
    def atx():
        for s, m, _ in _queries(_ATX, data, skip):
            yield s, len(m.group(1)) - 1

    def setext():
        for m in _SETEXT.finditer(data):
            line = m.start()
            if line <= skip:
                continue
            title = data.rfind(b"\n", 0, line) + 1
            if not _SETEXT_TITLE_BAD.match(data, skip if title == 0 else title, line):
                yield title, 0 if m.group(1)[:1] == b"=" else 1

    def paragraphs():
        for m in _BLANK_THEN_TEXT.finditer(data):
            yield m.end(), PARAGRAPH_LEVEL

    def items():
        for s, m, _ in _queries(_LIST_ITEM, data, skip):
            yield s, LIST_LEVEL + (len(m.group(1)) >= 2)

    return heapq.merge(atx(), setext(), paragraphs(), items())


def _scan_markdown(data, skip, lang, b):
    _fences(data, skip, b)
    last, best = None, None
    for s, level in _markdown_starts(data, skip):
        if s == last:
            best = min(best, level)
            continue
        if last is not None and not b.masked(last):
            b.candidate(last, best)
        last, best = s, level
    if last is not None and not b.masked(last):
        b.candidate(last, best)


def _scan_text(data, skip, lang, b):
    for m in _BLANK_THEN_TEXT.finditer(data):
        b.candidate(m.end(), 0)


def scan(data, skip, lang):
    b = Builder(len(data))
    if lang.mode == "python":
        scan_python(data, skip, b)
    elif lang.mode == "brackets":
        _scan_bracketed(data, skip, lang, lex(data, skip, len(data), SYNTAXES[lang.syntax]), b)
    elif lang.mode == "xml":
        _scan_bracketed(data, skip, lang, lex_xml(data, skip, len(data), lang.name == "html"), b)
    elif lang.mode == "indent":
        _scan_indent(data, skip, lang, b)
    elif lang.mode == "markdown":
        _scan_markdown(data, skip, lang, b)
    else:
        _scan_text(data, skip, lang, b)
    return Scan(data, b)

