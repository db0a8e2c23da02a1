"""Python logical lines at regex speed: the structure the splitter's tokenize scan finds
(nagent_split_python.scan_exact), or no answer.

Data contract: `scan_lines(data, skip, builder) -> bool` either feeds `builder` exactly the
candidate, attach and mask calls scan_exact would make for the UTF-8 bytes `data` (`skip` is 3
after a BOM) and returns True, or returns False having fed it something to throw away: the
caller then runs scan_exact. It answers for files made of logical lines this module can read
whole; anything else makes it step aside rather than guess.

How: one pattern (`_logical`) matches a run of blank lines and then one comment line
or one logical line, with brackets nested up to MAX_DEPTH, strings as tokenize's own patterns
read them, and backslash continuations. It steps aside on whatever could make tokenize's
reading differ or fail: a lone CR outside a string, a backslash that continues no line, a
quote tokenize would not close on its line, a closing bracket with none open, a dedent to no
outer level, a vertical tab where a statement starts, a backslash line that
starts a statement, the end of the file inside a statement, a last line without a newline that
reads as a comment (tokenize ends no statement there), a line over TOKENIZE_MAX_LINE, bytes
that are not UTF-8. What it does not step aside on, it reads as tokenize reads the reduced
lines scan_exact feeds it (see there):
  - a statement's first token is at its indentation (spaces, tabs, form feeds); it is `@`, a
    name of the same ASCII letters as scan_exact's reduced line, or anything else (a candidate);
  - only line ends at bracket depth 0 outside strings end a statement, and the depth there is
    the same whether the brackets before a line's first quote, `#` or backslash are collapsed
    to their net count (as the reduced line does) or not;
  - a string opens at the first quote outside strings and comments and closes where
    tokenize's String and Single3/Double3 patterns close it (a backslash escapes the next
    character, but not the newline ending a line of a triple-quoted string);
  - a comment runs to the line end (none holds a lone CR).
Checked against scan_exact on the standard library, site-packages and generated adversarial
inputs (benchmarks/split_identity.py, tests/test_split_python_scan.py).
Memory: every repeat in the pattern is possessive, so matching keeps no per-character state.
"""
import re

from nagent_split_lexers import invalid_utf8_at

# tokenize's string patterns keep per-character match state: a line this long goes to the
# linear fallback instead (its memory is then constant). The bound of both scans.
TOKENIZE_MAX_LINE = 16 * 1024
SHALLOW_DEPTH, MAX_DEPTH = 8, 32
CLOSERS = frozenset((b"else", b"elif", b"except", b"finally"))

_CODE = rb"[^\n\r'\"#\\()\[\]{}]++"


def _strings(q):
    """tokenize's strings opened by quote `q`: triple-quoted (Single3/Double3 from the opening
    on, one line at a time: a backslash does not escape a line's newline), and single-quoted
    (never at a triple quote), closed on its line or continued by a backslash at the line end
    (ContStr, then Single/Double on each next line, which must close or end in a backslash)."""
    triple = (q * 3 + rb"(?:[^" + q + rb"\\]++|\\[^\n]|\\(?=\n)|" + q + rb"(?!" + q * 2 + rb"))*+"
              + q * 3)
    escape = rb"\\(?:[^\r\n]|\r(?!\n))"  # (a backslash before CR LF continues the line)
    first_line = rb"[^\n" + q + rb"\\]*+(?:" + escape + rb"[^\n" + q + rb"\\]*+)*+"
    next_line = rb"(?:[^\n" + q + rb"\\]++|" + escape + rb")*+"
    single = (rb"(?!" + q * 3 + rb")" + q + first_line + rb"(?:" + q + rb"|\\\r?\n(?:" + next_line
              + rb"\\\r?\n)*+" + next_line + q + rb")")
    return triple + rb"|" + single


_ATOM = _CODE + rb"|" + _strings(b"'") + rb"|" + _strings(b'"')


def _group(depth, deepest):
    """A bracket pair and what it holds: lines, comments, continuations, deeper pairs."""
    inner = _ATOM + rb"|\r?\n|\#[^\r\n]*+(?=\r?\n)|\\\r?\n"
    if depth < deepest:
        inner += rb"|" + _group(depth + 1, deepest)
    return rb"[(\[{](?:" + inner + rb")*+[)\]}]"


def _logical(depth):
    """A run of blank lines, then one comment line, one logical line or the end of the file;
    group 1 is the line's indentation, group 2 its first word (or `@`)."""
    statement = (rb"(?:" + _ATOM + rb"|" + _group(1, depth) + rb"|\\\r?\n(?!\Z))*+"
                 rb"(?:\#[^\r\n]*+)?(?:\r?\n|\Z)")
    return (rb"(?:[ \t\f]*+\r?\n)*+([ \t\f]*+)"
            rb"(?:\#[^\r\n]*+(?:\r?\n|\Z)"
            rb"|(?=[^ \t\f\v\r\n#\\])(@|[A-Za-z_][A-Za-z0-9_]*+)?" + statement + rb"|\Z)")


# Compiling costs about 0.7 ms per level: most files need the shallow pattern only, and a line
# it cannot read is tried again with the deep one, compiled on first need (re caches both).
_SHALLOW, _DEEP = _logical(SHALLOW_DEPTH), _logical(MAX_DEPTH)


def _long_line(data, start, end):
    line = start
    while line < end:
        stop = data.find(b"\n", line, end)
        stop = end if stop == -1 else stop + 1
        if stop - line > TOKENIZE_MAX_LINE:
            return True
        line = stop
    return False


def _column(data, start, end):
    """tokenize's indentation column: tabs to the next multiple of 8, a form feed resets."""
    column = 0
    for c in data[start:end]:
        column = column + 1 if c == 32 else (column // 8 + 1) * 8 if c == 9 else 0
    return column


def scan_lines(data, skip, out):
    n = len(data)
    if invalid_utf8_at(data) is not None:
        return False
    # tokenize ends no statement on a last line without a newline that reads as a comment.
    comment_tail = not data.endswith(b"\n") and \
        data[data.rfind(b"\n") + 1:].lstrip().startswith(b"#")
    plain_indents = b"\t" not in data and b"\f" not in data
    match = re.compile(_SHALLOW).match
    attach, mask = out.attach, out.mask
    # Logical lines come in order, so candidates go straight into the builder's arrays.
    candidate_pos, candidate_level = out.cand_pos.append, out.cand_level.append
    indents, top = [0], 0
    pos = skip
    while pos < n:
        m = match(data, pos) or re.compile(_DEEP).match(data, pos)
        if m is None:
            return False
        s, k = m.span(1)
        e = m.end()
        if e - pos > TOKENIZE_MAX_LINE and _long_line(data, pos, e):
            return False
        pos = e
        if k == e:  # spaces at the end of the file
            break
        line = 0 if s == skip else s  # (the first line starts before the BOM)
        if data[k] == 35:  # '#': a comment line
            attach(line, k - s)
            continue
        column = k - s if plain_indents else _column(data, s, k)
        if column != top:
            if column > top:
                indents.append(column)
            while column < indents[-1]:
                if column not in indents:
                    return False  # tokenize's IndentationError
                indents.pop()
            top = column
        word = m.group(2)
        decorator = None
        if word == b"@":
            decorator = k - s
            attach(line, decorator)
        elif word not in CLOSERS:
            candidate_pos(line)
            candidate_level(k - s)
        last = data.rfind(b"\n", s, e - 1)
        if last == -1:
            continue
        if e == n and comment_tail:
            return False
        mask(line, last + 2, "l")
        if decorator is not None:  # every physical line, blank ones included
            while line <= last:
                line = data.find(b"\n", line, last + 1) + 1
                attach(line, decorator)
    return True
