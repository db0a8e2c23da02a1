"""Python structure for the splitter, as the standard library's `tokenize` reads it (exact:
logical lines, indentation, decorators, strings), with a linear fallback lexer for files tokenize
rejects (inconsistent dedents, unterminated strings and brackets) or that hold a line long
enough to make tokenize's own string patterns costly.

Data contract: `scan_python(data, skip, builder)` feeds `builder` (nagent_split_scan.Builder)
what `scan_exact(data, skip, builder)` feeds it: the regex reading of nagent_split_pylines when
that answers (most files; about 9x faster), else tokenize and the fallback. scan_exact is the
definition:
  candidate(line_start, level)  every logical line start, level = its indentation column;
                                `else`/`elif`/`except`/`finally` lines are none (they close
                                the block above)
  attach(line_start, level)     comment-only lines, and every physical line of a decorator
                                (a multi-line `@app.route(...)` included)
  mask(start, end, kind)        a logical line over several physical lines ("l"): no cut between
                                them
`skip` is 3 after a BOM. `py_spans(data, start, end)` lists string and comment spans inside
[start, end) for cutting a single over-long line.
Speed: the code of a line before its first quote, `#` or backslash holds no string, comment or
continuation, so tokenize is fed only what of it can matter (`reduced_line`): the indentation,
the first word (or `@`) and the net bracket depth change; the rest of the line follows unchanged (a
`#` with no quote or backslash after it as a bare `#` on a comment-only line, and not at all
after code). Rows, indentation, bracket depth,
logical lines, strings and first tokens come out as for the full line (checked against
unreduced tokenize on every .py of the standard library and site-packages).
"""
import re
import tokenize
from array import array

from nagent_split_lexers import BSL, CR, NL, escaped, offset_type, skip_quoted
from nagent_split_pylines import CLOSERS, TOKENIZE_MAX_LINE, scan_lines

_CLOSERS = frozenset(word.decode() for word in CLOSERS)
_CLOSER_BYTES = re.compile(rb"(?:" + b"|".join(sorted(CLOSERS)) + rb")\b")
_SPECIAL = re.compile(rb"""[#'"\n()\[\]{}]""")
_INDENT = re.compile(rb"[ \t\f]*")
_BLANK_RUN = re.compile(rb"[ \t\f\r\n]*")
_LINE_END = frozenset(b"\r\n")


_PREFIX = re.compile(rb"[ \t\f]*(?:@|[A-Za-z_][A-Za-z_0-9]*)?")
_NOT_BRACKET = bytes(c for c in range(256) if c not in b"()[]{}")
_CODE_END = re.compile(rb"""[#'"\\]""")
_QUOTE_OR_BACKSLASH = re.compile(rb"""['"\\]""")


class _LongLine(Exception):
    pass


def reduced_line(line):
    """What tokenize needs of a physical line (with its line ending): see the module
    docstring. Only the code before the first quote, `#` or backslash is reduced; from a quote
    or backslash on, the line is kept as it is (a string may hold anything)."""
    body = line.rstrip(b"\r\n")
    cut = _CODE_END.search(body)
    code = body if cut is None else body[:cut.start()]
    head = _PREFIX.match(code).group()
    brackets = code[len(head):].translate(None, _NOT_BRACKET)
    # tokenize only counts bracket depth, and only its value at the line end decides NL or
    # NEWLINE: the net change stands for the whole sequence.
    net = len(brackets) - 2 * (brackets.count(b")") + brackets.count(b"]")
                               + brackets.count(b"}"))
    rest = b"(" * net if net > 0 else b")" * -net
    if not head.strip() and not rest and code.strip():
        head += b"x"  # a statement such as `...` or `-x`: still one token
    if cut is None:
        return head + rest + line[len(body):]
    if body[cut.start()] == 35 and _QUOTE_OR_BACKSLASH.search(body, cut.start() + 1) is None:
        # A comment, or text in a multi-line string: with no quote or backslash after the
        # `#`, it neither opens nor closes a string. Only a comment-only line needs its mark.
        return head + rest + (b"" if head.strip() or rest else b"#") + line[len(body):]
    lead = head + rest
    return (lead + b" " if lead.strip() else lead) + line[cut.start():]


def scan_python(data, skip, builder):
    staged = builder.fork()
    if scan_lines(data, skip, staged):
        builder.adopt(staged)
        return
    scan_exact(data, skip, builder)


def scan_exact(data, skip, builder):
    staged = builder.fork()
    try:
        _scan_tokenize(data, skip, staged)
    except (_LongLine, tokenize.TokenError, SyntaxError, UnicodeDecodeError):
        _scan_fallback(data, skip, builder)
        return
    builder.adopt(staged)


def _scan_tokenize(data, skip, out):
    n = len(data)
    if n - skip > TOKENIZE_MAX_LINE and data.find(b"\n", skip) == -1:
        raise _LongLine
    starts = array(offset_type(n))  # byte offset of each line fed to tokenize, by row
    pos, continued = skip, False

    def readline():
        nonlocal pos, continued
        if pos >= n:
            return ""
        if starts and not continued and data[pos] in _LINE_END:
            # Empty lines change no token that matters: skip a run of blank lines at once
            # (rows then count fed lines; `starts` maps them back to byte offsets).
            last = data.rfind(b"\n", pos, _BLANK_RUN.match(data, pos).end())
            if last != -1:  # (a lone CR is no line end)
                pos = last + 1
                if pos >= n:
                    return ""
        end = data.find(b"\n", pos)
        end = n if end == -1 else end + 1
        if end - pos > TOKENIZE_MAX_LINE:
            raise _LongLine
        starts.append(pos if starts else 0)
        line = data[pos:end]
        pos = end
        continued = line.endswith((b"\\\n", b"\\\r\n"))
        return reduced_line(line).decode("utf-8")

    NEWLINE, NL_, COMMENT = tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT
    skipped = {tokenize.ENCODING, tokenize.ENDMARKER, tokenize.INDENT, tokenize.DEDENT, NL_}
    first_row = None      # row of the current logical line's first token (0-based)
    decorator = None      # its column when that line is a decorator
    for kind, string, (row, col), _end, _line in tokenize.generate_tokens(readline):
        if kind == NEWLINE:
            last_row = row - 1
            if first_row is not None and last_row > first_row:
                out.mask(starts[first_row], starts[last_row] + 1, "l")
                if decorator is not None:  # every physical line, blank ones included
                    line, stop = starts[first_row], starts[last_row]
                    while line < stop:
                        line = data.find(b"\n", line, stop) + 1
                        out.attach(line, decorator)
            first_row = decorator = None
        elif kind in skipped or first_row is not None:
            continue
        elif kind == COMMENT:
            out.attach(starts[row - 1], col)
        else:
            first_row = row - 1
            if string == "@":
                decorator = col
                out.attach(starts[first_row], col)
            elif string not in _CLOSERS:
                out.candidate(starts[first_row], col)
    # Ending inside a statement or an open bracket raises TokenError (-> fallback) above.
    return out


def _lex_python(data, start, end):
    """Tokens of a Python range: ("s"|"c", p, q), ("o"|"x", p), ("n", p) for a newline outside
    strings and comments."""
    p = start
    while True:
        m = _SPECIAL.search(data, p, end)
        if m is None:
            return
        p = m.start()
        c = data[p]
        if c == NL:
            yield ("n", p)
            p += 1
        elif c == 35:  # '#'
            q = data.find(b"\n", p, end)
            q = end if q == -1 else q
            yield ("c", p, q)
            p = q
        elif c in b"([{":
            yield ("o", p)
            p += 1
        elif c in b")]}":
            yield ("x", p)
            p += 1
        else:
            quote = data[p:p + 1]
            if data.startswith(quote * 3, p):
                q = _triple_end(data, p, end, quote)
            else:
                q = skip_quoted(data, p, end)
            yield ("s", p, q)
            p = q


def _triple_end(data, p, end, quote):
    i = p + 3
    closing = quote * 3
    while True:
        j = data.find(closing, i, end)
        if j == -1:
            return end
        if escaped(data, p + 2, j):
            i = j + 1
        else:
            return j + 3


def py_spans(data, start, end):
    return [(tok[1], tok[2]) for tok in _lex_python(data, start, end) if len(tok) == 3]


def _continued(data, p, comment_end):
    """A backslash before the newline at p continues the logical line (not one in a comment)."""
    if comment_end == p:
        return False
    before = p - 1
    if before >= 0 and data[before] == CR:
        before -= 1
    return before >= 0 and data[before] == BSL


def _scan_fallback(data, skip, out):
    n = len(data)
    depth, comment_end, logical = 0, -1, None  # logical: (start, column, decorator?)

    def begin(s):
        k = _INDENT.match(data, s, n).end()
        if k >= n or data[k] in b"\r\n":
            return None
        column = k - s
        s = 0 if s == skip else s  # line 0 starts before the BOM
        if data[k] == 35:
            out.attach(s, column)
            return None
        if data[k] == 64:  # '@'
            out.attach(s, column)
            return (s, column, True)
        if not _CLOSER_BYTES.match(data, k, n):
            out.candidate(s, column)
        return (s, column, False)

    def finish(logical, p):
        s, column, decorator = logical
        if data.find(b"\n", s, p) == -1:
            return
        out.mask(s, p, "l")
        if decorator:
            line = data.find(b"\n", s, p)
            while line != -1:
                out.attach(line + 1, column)
                line = data.find(b"\n", line + 1, p)

    logical = begin(skip)
    for tok in _lex_python(data, skip, n):
        kind = tok[0]
        if kind == "o":
            depth += 1
        elif kind == "x":
            depth = depth - 1 if depth else 0
        elif kind == "c":
            comment_end = tok[2]
        elif kind == "n":
            p = tok[1]
            if logical is not None and (depth or _continued(data, p, comment_end)):
                continue
            if logical is not None:
                finish(logical, p)
            logical = begin(p + 1) if p + 1 < n else None
    if logical is not None:
        finish(logical, n)
