"""The splitting engine: turns a Scan into byte ranges that each fit the read limit.

Data contract: `Engine(data, lang, scan, target, limit).segments()` returns
[(start, end, inside, start_mid, end_cut)] tiling `data` in order (never empty, never cutting
inside a UTF-8 sequence or between CR and LF), where
  inside     None, or the first line of the construct the segment was cut out of
  start_mid  True when the segment starts inside a line
  end_cut    None when it ends at a line end; else how the line was cut: "token" (outside
             strings and comments, between tokens), "string" (at a space inside a string or
             comment) or "char" (no such place: at a character boundary)
Rules, in order, for a range [lo, hi) headed by candidate `head`:
  1. at most `target` bytes: one piece;
  2. a construct that is no container (a function, a statement) up to `limit`: one piece,
     kept whole even over the target;
  3. cut at the shallowest boundary level inside it (class members, statements, ...), the
     pieces remembering the construct (`inside`);
  4. no boundary inside: whole lines up to `target` (after a blank line, then any line that
     is no closing line and not inside a multi-line token or statement);
  5. a single line over `limit`: cut inside the line (see end_cut).
Refinement stops MAX_NESTING constructs deep (then rule 4), which bounds time and memory.
Pieces are then packed greedily up to `target`; pieces of different constructs are not joined
(unless the language's `join_across`, for documents and data); a construct's opening piece (its
head line before the first member) always joins the piece after it within `limit`, so no
segment is a lone `class Foo {`. Every segment is at most max(target, limit) bytes.
"""
import re
from array import array
from bisect import bisect_left, bisect_right

from nagent_split_lexers import CR, NL, SYNTAXES, lex, lex_xml, offset_type
from nagent_split_python import py_spans

LABEL_MAX = 120
MAX_NESTING = 32
_SAFE_FIRST = {"brackets": b";},", "python": b",;)]}", "xml": b">", "indent": b"",
               "markdown": b"", "text": b""}
_SAFE_SECOND = b"{([)]> \t"


class Engine:
    def __init__(self, data, lang, scan, target, limit):
        self.data, self.lang, self.scan = data, lang, scan
        self.target, self.limit = target, max(target, limit)
        self.container = re.compile(lang.container, re.M) if lang.container else None
        self.closer = re.compile(rb"[ \t]*(?:" + lang.closer + rb")") if lang.closer else None

    # -- constructs -------------------------------------------------------------------------
    def line_end(self, s):
        e = self.data.find(b"\n", s)
        return len(self.data) if e == -1 else e

    def head_text(self, head):
        s = self.scan.pos[head]
        return self.data[s:self.line_end(s)].strip()

    def next_head_line(self, head, first):
        """The line after a head that continues there (`template <...>` / `class X {`)."""
        if not self.lang.container_next_line or any(c in first for c in b"{;"):
            return None
        s = self.line_end(self.scan.pos[head]) + 1
        return self.data[s:self.line_end(s)].strip() if s < len(self.data) else None

    def label(self, head):
        text = self.head_text(head)
        more = self.next_head_line(head, text)
        if more and self.container is not None and self.container.match(more):
            text += b" " + more
        return text[:LABEL_MAX * 4].decode("utf-8", "replace")[:LABEL_MAX]

    def is_container(self, head):
        if head is None or self.container is None:
            return True
        first = self.head_text(head)
        if self.container.match(first):
            return True
        more = self.next_head_line(head, first)
        return more is not None and bool(self.container.match(more))

    def cut_level(self, lo, hi, floor):
        """(shallowest level deeper than floor with a boundary after lo, candidate at lo of
        that level or None); (None, None) when there is none."""
        pos, level = self.scan.pos, self.scan.level
        i0, i1 = bisect_right(pos, lo), bisect_left(pos, hi)
        best = min((level[i] for i in range(i0, i1) if level[i] > floor), default=None)
        if best is None:
            return None, None
        j = i0 - 1
        return best, (j if j >= 0 and pos[j] == lo and level[j] == best else None)

    def subranges(self, lo, hi, level, head, inside, opening):
        """Sub-ranges of [lo, hi) cut before each candidate of `level`; the first one is the
        construct's opening when `opening` (its head line and what precedes the members)."""
        pos, levels, pull = self.scan.pos, self.scan.level, self.scan.pull
        start = lo
        for i in range(bisect_right(pos, lo), bisect_left(pos, hi)):
            if levels[i] != level:
                continue
            cut = pull[i] if pull[i] > start else pos[i]
            yield start, cut, level, head, inside, opening
            start, head, opening = cut, i, False
        yield start, hi, level, head, inside, opening

    def pieces(self):
        """(start, end, inside, start_mid, end_cut, opening) pieces in file order."""
        stack = [iter(((0, len(self.data), self.lang.base - 1, None, None, False),))]
        keep_whole = not self.lang.split_long
        while stack:
            item = next(stack[-1], None)
            if item is None:
                stack.pop()
                continue
            lo, hi, floor, head, inside, opening = item
            size = hi - lo
            if size <= self.target:
                yield lo, hi, inside, False, None, opening
                continue
            if keep_whole and head is not None and size <= self.limit and \
                    not self.is_container(head):
                yield lo, hi, inside, False, None, False
                continue
            # Past MAX_NESTING refinements a construct is cut between whole lines: the work
            # stack and the rescans stay bounded on input nested 100,000 deep.
            level, first = (self.cut_level(lo, hi, floor) if len(stack) <= MAX_NESTING
                            else (None, None))
            within = inside if head is None else self.label(head)
            if level is not None:
                stack.append(self.subranges(lo, hi, level, head if first is None else first,
                                            within, head is not None and first is None))
            elif keep_whole and head is not None and size <= self.limit:
                yield lo, hi, inside, False, None, False
            else:
                yield from self.line_pieces(lo, hi, within)

    # -- whole lines ------------------------------------------------------------------------
    def is_closer(self, s):
        return self.closer is not None and self.closer.match(self.data, s) is not None

    def blank_before(self, s):
        t = self.data.rfind(b"\n", 0, s - 1) + 1
        return not self.data[t:s].strip()

    def line_cut(self, p, w):
        """The best line start in (p, w], or None when the line at p reaches past w."""
        data, half = self.data, p + self.target // 2
        best_ok = best_any = None
        i = data.rfind(b"\n", p, w)
        while i != -1:
            s = i + 1
            if best_any is None:
                best_any = s
            if s < half and best_ok is not None:
                break
            if not self.scan.masked(s) and not self.is_closer(s):
                if s >= half and self.blank_before(s):
                    return s
                if best_ok is None:
                    best_ok = s
            i = data.rfind(b"\n", p, i)
        return best_ok if best_ok is not None else best_any

    def past_closers(self, p, s, hi):
        """Keep closing lines with the block they close while the piece fits the limit."""
        while s < hi and self.is_closer(s):
            e = min(self.line_end(s) + 1, hi)
            if e - p > self.limit:
                break
            s = e
        return s

    def line_pieces(self, lo, hi, inside):
        p = lo
        while p < hi:
            if hi - p <= self.target:
                yield p, hi, inside, False, None, False
                return
            cut = self.line_cut(p, min(hi, p + self.target))
            if cut is None:
                e = min(self.line_end(p) + 1, hi)
                if e - p > self.limit:
                    yield from self.mid_line(p, e, inside)
                    p = e
                    continue
                cut = e
            cut = self.past_closers(p, cut, hi)
            yield p, cut, inside, False, None, False
            p = cut

    # -- inside one long line ---------------------------------------------------------------
    def line_spans(self, p, e):
        """(starts, ends) of the string and comment spans overlapping the line [p, e)."""
        mode, data = self.lang.mode, self.data
        k = self.scan.mask_at(p)
        begin = p if k < 0 else self.scan.mask_start[k]
        if mode == "python":
            found = py_spans(data, begin, e)
        elif mode in ("brackets", "xml"):
            if k >= 0:  # the line starts inside a multi-line token: it is one span
                begin = min(self.scan.mask_end[k], e)
            tokens = (lex(data, begin, e, SYNTAXES[self.lang.syntax]) if mode == "brackets"
                      else lex_xml(data, begin, e, self.lang.name == "html"))
            found = (t[1:] for t in tokens if len(t) == 3)
            if k >= 0:
                found = _chain(((self.scan.mask_start[k], self.scan.mask_end[k]),), found)
        else:
            found = ()
        starts, ends = array(offset_type(len(data))), array(offset_type(len(data)))
        for a, b in found:
            if b > p:
                starts.append(a)
                ends.append(b)
        return starts, ends

    def mid_line(self, p, e, inside):
        spans = self.line_spans(p, e)
        q = p
        while e - q > self.target:
            cut, how = self.mid_cut(q, q + self.target, spans)
            yield q, cut, inside, q != p, how, False
            q = cut
        yield q, e, inside, q != p, None, False

    def mid_cut(self, q, w, spans):
        data = self.data
        first = self.safe_after(q, w, _SAFE_FIRST[self.lang.mode], spans)
        if first is None or first < q + self.target // 4:
            second = self.safe_after(q, w, _SAFE_SECOND, spans)
            if second is not None and (first is None or second > first):
                first = second
        if first is not None:
            return first, "token"
        space = max(data.rfind(b" ", q + 1, w), data.rfind(b"\t", q + 1, w))
        if space > q:
            return space + 1, "string"
        c = w
        while c > q + 1 and (data[c] & 0xC0) == 0x80:
            c -= 1
        if data[c - 1] == CR and data[c] == NL and c > q + 1:
            c -= 1
        return c, "char"

    def safe_after(self, q, w, chars, spans):
        """The last position in (q, w] right after one of `chars` outside every span."""
        starts, ends = spans
        data = self.data
        while w > q + 1:
            at = max((data.rfind(bytes((c,)), q, w - 1) for c in chars), default=-1)
            if at < q:
                return None
            k = bisect_right(starts, at) - 1
            if k >= 0 and at < ends[k]:
                w = starts[k] + 1
                continue
            return at + 1
        return None

    # -- packing ----------------------------------------------------------------------------
    def segments(self):
        out, current, opening = [], None, False
        across = self.lang.join_across
        for start, end, inside, start_mid, end_cut, piece_opening in self.pieces():
            if current is not None and (across or inside == current[2]):
                size = end - current[0]
                if size <= self.target or (opening and size <= self.limit):
                    current = (current[0], end, current[2], current[3], end_cut)
                    opening = False
                    continue
            if current is not None:
                out.append(current)
            current, opening = (start, end, inside, start_mid, end_cut), piece_opening
        out.append(current)
        return out


def _chain(*iterables):
    for iterable in iterables:
        yield from iterable
