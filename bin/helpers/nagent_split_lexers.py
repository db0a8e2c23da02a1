"""Linear lexers for the splitters: strings, comments and brackets found with bytes.find and short
compiled searches for the next interesting byte, never with a pattern that matches a whole
string or comment (those build match state per character: ~170 bytes of memory per character).

Data contract: `lex(data, start, end, syntax)` is a generator over the UTF-8 bytes `data` from
`start` to `end` yielding, in order:
  ("o", p) / ("x", p)   an opening / closing bracket at byte p
  (kind, p, q)          a token [p, q): "s" a string, character or regex literal, "c" a comment,
                        "d" a C preprocessor directive through its continuation lines
`lex_xml(data, start, end, html)` yields the same shapes for XML/HTML: "o" an opening tag
(not self-closing, not an HTML void element), "x" a closing tag, "c" a comment, "s" CDATA,
declarations, processing instructions and HTML script/style bodies.
`invalid_utf8_at(data)` is the offset of the first byte that is not UTF-8, or None.
Every syntax byte is ASCII and UTF-8 continuation bytes never are, so scanning bytes is exact.
Memory is constant apart from small nesting stacks. Unterminated tokens end at the end of the
line (single-line kinds) or of the range; a wrong guess moves a cut, never a byte.
"""
import codecs
import re
from dataclasses import dataclass

NL, CR, BSL, SLASH, STAR, DQ, SQ, BT = 10, 13, 92, 47, 42, 34, 39, 96
OPENERS, CLOSERS = frozenset(b"{(["), frozenset(b"})]")
WORD = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$")
SPACE = frozenset(b" \t\r\n\f\v")


def invalid_utf8_at(data):
    """Decoded in 1 MB steps: no text copy is kept."""
    if data.isascii():
        return None
    decoder, step = codecs.getincrementaldecoder("utf-8")(), 1 << 20
    for offset in range(0, len(data), step):
        pending = len(decoder.getstate()[0])
        try:
            decoder.decode(data[offset:offset + step], final=offset + step >= len(data))
        except UnicodeDecodeError as error:
            return offset - pending + error.start
    return None


def offset_type(size):
    """Array type code for byte offsets into `size` bytes: 4-byte ints while they fit."""
    return "i" if size < 2**31 else "q"


@dataclass(frozen=True)
class Syntax:
    brackets: bytes = b"{}()[]"
    line_comment: bool = True      # //
    block_comment: bool = True     # /* */
    nested_comments: bool = False  # Rust
    dq_multiline: bool = False     # "..." may span lines (Rust)
    sq: str = "char"               # "char" literal, "string" (JS) or "" (JSON)
    backtick: str = ""             # "raw" (Go) or "template" (JS)
    raw_cpp: bool = False          # R"delim(...)delim"
    raw_rust: bool = False         # r#"..."#
    text_block: bool = False       # Java """..."""
    regex: bool = False            # JS regex literals
    directives: bool = False       # C preprocessor lines


SYNTAXES = {
    "c": Syntax(directives=True),
    "cpp": Syntax(directives=True, raw_cpp=True),
    "java": Syntax(text_block=True),
    "js": Syntax(sq="string", backtick="template", regex=True),
    "go": Syntax(backtick="raw"),
    "rust": Syntax(nested_comments=True, dq_multiline=True, raw_rust=True),
    "json": Syntax(brackets=b"{}[]", sq=""),
}

_QUOTED = {(DQ, False): re.compile(rb'["\n]'), (DQ, True): re.compile(rb'"'),
           (SQ, False): re.compile(rb"['\n]"), (SQ, True): re.compile(rb"'")}
_CHAR = re.compile(rb"'(?:\\[^\n]{1,10}?|[^'\\\n])'")
_RAW_DELIM = re.compile(rb'([^()\\\s"]{0,16})\(')
_TEXT_BLOCK_END = re.compile(rb'\\|"""')
_REGEX_SPECIAL = re.compile(rb"[\\/\[\]\n]")
_REGEX_FLAGS = re.compile(rb"[A-Za-z]*")
_TEMPLATE_TEXT = re.compile(rb"[`\\$]")
_TEMPLATE_CODE = re.compile(rb"""[{}"'`/]""")
_DIRECTIVE_AT = re.compile(rb"[ \t]*#")
_REGEX_AFTER = frozenset(b"(,=:[!&|?{};+-*%<>~^")
_REGEX_KEYWORDS = frozenset((b"return", b"typeof", b"case", b"do", b"else", b"in", b"of", b"new",
                             b"delete", b"void", b"throw", b"instanceof", b"yield", b"await"))


def _specials(syntax):
    chars = syntax.brackets + b'"'
    chars += b"/" if syntax.line_comment or syntax.block_comment or syntax.regex else b""
    chars += b"'" if syntax.sq else b""
    chars += b"`" if syntax.backtick else b""
    pattern = b"[" + re.escape(chars) + b"]"
    if syntax.directives:
        pattern += rb"|\n[ \t]*#"
    return re.compile(pattern)


_SPECIALS = {name: _specials(syntax) for name, syntax in SYNTAXES.items()}
_SPECIALS_BY_SYNTAX = {syntax: _SPECIALS[name] for name, syntax in SYNTAXES.items()}


def escaped(data, floor, j):
    """Whether the byte at j follows an odd run of backslashes (that starts after floor)."""
    run, k = 0, j
    while k > floor:
        chunk = data[max(floor, k - 64):k]
        tail = len(chunk) - len(chunk.rstrip(b"\\"))
        run += tail
        if tail < len(chunk):
            break
        k -= len(chunk)
    return run % 2 == 1


def skip_quoted(data, p, end, multiline=False):
    """End of the quoted literal opening at p (a backslash escapes the next byte, a newline
    too; a single-line literal left open ends before its newline). Only candidate ends are
    visited, so a string of a million escapes costs one search."""
    pattern = _QUOTED[(data[p], multiline)]
    i = p + 1
    while True:
        m = pattern.search(data, i, end)
        if m is None:
            return end
        j = m.start()
        if escaped(data, p, j):
            i = j + 1
        elif data[j] == NL:
            return j
        else:
            return j + 1


def _skip_block_comment(data, p, end, nested):
    if not nested:
        q = data.find(b"*/", p + 2, end)
        return end if q == -1 else q + 2
    depth, i = 1, p + 2
    while depth:
        close = data.find(b"*/", i, end)
        if close == -1:
            return end
        opening = data.find(b"/*", i, close)
        if opening != -1:
            depth, i = depth + 1, opening + 2
        else:
            depth, i = depth - 1, close + 2
    return i


def _raw_string_end(data, p, end, syntax):
    """End of a raw string whose quote is at p, or None when it is not one."""
    if syntax.raw_rust:
        j = p - 1
        while j >= 0 and data[j] == 35:  # '#'
            j -= 1
        hashes = p - 1 - j
        if j >= 0 and data[j] == 114 and (j == 0 or data[j - 1] not in WORD or (
                data[j - 1] == 98 and (j < 2 or data[j - 2] not in WORD))):  # r, br
            q = data.find(b'"' + b"#" * hashes, p + 1, end)
            return end if q == -1 else q + 1 + hashes
        return None
    if syntax.raw_cpp and p and data[p - 1] == 82:  # R
        j = p - 1
        prefix = data[max(0, j - 2):j]
        if prefix.endswith((b"u8", b"U8")):
            j -= 2
        elif prefix[-1:] in (b"u", b"U", b"L"):
            j -= 1
        if j and data[j - 1] in WORD:
            return None
        m = _RAW_DELIM.match(data, p + 1, end)
        if m is None:
            return None
        q = data.find(b")" + m.group(1) + b'"', m.end(), end)
        return end if q == -1 else q + len(m.group(1)) + 2
    return None


def _text_block_end(data, p, end):
    i = p + 3
    while True:
        m = _TEXT_BLOCK_END.search(data, i, end)
        if m is None:
            return end
        if data[m.start()] == BSL:
            i = m.start() + 2
        else:
            return m.end()


def regex_allowed(data, p, floor):
    """Whether a `/` at p starts a regex literal (after an operator, an opening bracket, a
    keyword or nothing) rather than a division (after a name, a number, `)` or `]`)."""
    j = p - 1
    while j >= floor and data[j] in SPACE:
        j -= 1
    if j < floor:
        return True
    c = data[j]
    if c in _REGEX_AFTER or c == 125:  # after `}` a statement starts
        return True
    if c in WORD:
        k = j
        while k >= floor and j - k < 12 and data[k] in WORD:
            k -= 1
        return data[k + 1:j + 1] in _REGEX_KEYWORDS
    return False


def skip_regex(data, p, end):
    """End of the regex literal opening at p, or None when the line ends first."""
    i, in_class = p + 1, False
    while True:
        m = _REGEX_SPECIAL.search(data, i, end)
        if m is None:
            return None
        j = m.start()
        c = data[j]
        if c == BSL:
            if j + 1 < end and data[j + 1] == NL:
                return None
            i = j + 2
        elif c == NL:
            return None
        elif c == 91:  # [
            in_class, i = True, j + 1
        elif c == 93:  # ]
            in_class, i = False, j + 1
        elif in_class:
            i = j + 1
        else:
            return _REGEX_FLAGS.match(data, j + 1, end).end()


def skip_template(data, p, end):
    """End of the JS template literal opening at p, `${ ... }` expressions (with their own
    strings, comments, braces and nested templates) included."""
    stack, i = [-1], p + 1  # -1: template text; n >= 0: an expression n braces deep
    while stack:
        if stack[-1] < 0:
            m = _TEMPLATE_TEXT.search(data, i, end)
            if m is None:
                return end
            j = m.start()
            c = data[j]
            if c == BSL:
                i = j + 2
            elif c == BT:
                stack.pop()
                i = j + 1
            elif data[j + 1:j + 2] == b"{":
                stack.append(0)
                i = j + 2
            else:
                i = j + 1
            continue
        m = _TEMPLATE_CODE.search(data, i, end)
        if m is None:
            return end
        j = m.start()
        c = data[j]
        if c == 123:
            stack[-1] += 1
            i = j + 1
        elif c == 125:
            if stack[-1]:
                stack[-1] -= 1
            else:
                stack.pop()
            i = j + 1
        elif c == BT:
            stack.append(-1)
            i = j + 1
        elif c == SLASH:
            nxt = data[j + 1:j + 2]
            i = (_line_end(data, j, end) if nxt == b"/" else
                 _skip_block_comment(data, j, end, False) if nxt == b"*" else j + 1)
        else:
            i = skip_quoted(data, j, end)
    return i


def _line_end(data, p, end):
    q = data.find(b"\n", p, end)
    return end if q == -1 else q


def directive_end(data, p, end):
    """End of the preprocessor directive at p: its line, backslash continuations, and a block
    comment that opens on it and closes on a later line."""
    i = p
    while True:
        e = data.find(b"\n", i, end)
        if e == -1:
            return end
        c = data.find(b"/*", i, e)
        if c != -1:
            close = data.find(b"*/", c + 2, end)
            if close == -1:
                return end
            i = close + 2
            continue
        if data[e - 1] == BSL or (data[e - 1] == CR and data[e - 2] == BSL):
            i = e + 1
            continue
        return e


def lex(data, start, end, syntax):
    find = _SPECIALS_BY_SYNTAX.get(syntax) or _specials(syntax)
    find = find.search
    p = start
    if syntax.directives and (p == 0 or data[p - 1] == NL):
        m = _DIRECTIVE_AT.match(data, p, end)
        if m:
            q = directive_end(data, m.end() - 1, end)
            yield ("d", m.end() - 1, q)
            p = q
    while True:
        m = find(data, p, end)
        if m is None:
            return
        p = m.start()
        c = data[p]
        if c in OPENERS:
            yield ("o", p)
            p += 1
        elif c in CLOSERS:
            yield ("x", p)
            p += 1
        elif c == NL:  # a directive: newline, blanks, '#'
            hash_at = m.end() - 1
            q = directive_end(data, hash_at, end)
            yield ("d", hash_at, q)
            p = q
        elif c == SLASH:
            nxt = data[p + 1:p + 2]
            if nxt == b"/" and syntax.line_comment:
                q = _line_end(data, p, end)
                yield ("c", p, q)
                p = q
            elif nxt == b"*" and syntax.block_comment:
                q = _skip_block_comment(data, p, end, syntax.nested_comments)
                yield ("c", p, q)
                p = q
            elif syntax.regex and regex_allowed(data, p, start):
                q = skip_regex(data, p, end)
                if q is None:
                    p += 1
                else:
                    yield ("s", p, q)
                    p = q
            else:
                p += 1
        elif c == DQ:
            q = _raw_string_end(data, p, end, syntax) if (syntax.raw_cpp or syntax.raw_rust) \
                else None
            if q is None:
                if syntax.text_block and data.startswith(b'"""', p):
                    q = _text_block_end(data, p, end)
                else:
                    q = skip_quoted(data, p, end, syntax.dq_multiline)
            yield ("s", p, q)
            p = q
        elif c == SQ:
            if syntax.sq == "string":
                q = skip_quoted(data, p, end)
            else:
                m = _CHAR.match(data, p, end)
                q = m.end() if m else None
            if q is None:
                p += 1
            else:
                yield ("s", p, q)
                p = q
        else:  # backtick
            if syntax.backtick == "template":
                q = skip_template(data, p, end)
            else:
                q = data.find(b"`", p + 1, end)
                q = end if q == -1 else q + 1
            yield ("s", p, q)
            p = q


VOID_ELEMENTS = frozenset(b"area base br col embed hr img input link meta param source track "
                          b"wbr command keygen".split())
_TAG_NAME = re.compile(rb"[A-Za-z_][\w:.-]*")
_TAG_SPECIAL = re.compile(rb"""[>"']""")
_RAW_TEXT_END = {b"script": re.compile(rb"</script\s*>", re.I),
                 b"style": re.compile(rb"</style\s*>", re.I)}


def _tag_end(data, p, end):
    """End of the tag opening at p (quoted attribute values skipped), or None if unclosed."""
    i = p + 1
    while True:
        m = _TAG_SPECIAL.search(data, i, end)
        if m is None:
            return None
        j = m.start()
        if data[j] == 62:  # >
            return j + 1
        q = data.find(data[j:j + 1], j + 1, end)
        if q == -1:
            return None
        i = q + 1


def _find_end(data, marker, p, end):
    q = data.find(marker, p, end)
    return end if q == -1 else q + len(marker)


def lex_xml(data, start, end, html=False):
    i = start
    while True:
        j = data.find(b"<", i, end)
        if j == -1:
            return
        nxt = data[j + 1:j + 2]
        if data.startswith(b"<!--", j):
            q = _find_end(data, b"-->", j + 4, end)
            yield ("c", j, q)
        elif data.startswith(b"<![CDATA[", j):
            q = _find_end(data, b"]]>", j + 9, end)
            yield ("s", j, q)
        elif nxt in (b"?", b"!"):
            q = _find_end(data, b">", j, end)
            yield ("s", j, q)
        elif nxt == b"/":
            q = _find_end(data, b">", j, end)
            yield ("x", j)
        elif _TAG_NAME.match(data, j + 1, end):
            q = _tag_end(data, j, end)
            if q is None:
                i = j + 1
                continue
            name = _TAG_NAME.match(data, j + 1, end).group().lower()
            if data[q - 2] != SLASH and not (html and name in VOID_ELEMENTS):
                yield ("o", j)
            if html and name in _RAW_TEXT_END:
                m = _RAW_TEXT_END[name].search(data, q, end)
                body_end = m.start() if m else end
                if body_end > q:
                    yield ("s", q, body_end)
                q = body_end
        else:
            q = j + 1
        i = q


def spans(tokens, start, end):
    """[(p, q)] of the string and comment tokens that overlap [start, end)."""
    found = []
    for token in tokens:
        if len(token) == 3 and token[0] in "scd" and token[2] > start and token[1] < end:
            found.append((token[1], token[2]))
    return found
