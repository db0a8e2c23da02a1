"""Per-language boundary tables and the one engine that turns them into line ranges.

Data contract:
- `LANGUAGES` maps a split type name to a frozen `Language` row. A row is data only: the
  scanner that gives lines a nesting level (`mode`: indent | brackets | xml | markdown | text),
  a tokenizer regex for strings/comments/brackets, regexes for lines that may start a chunk
  (`top` at the outermost level `base`, `nested` deeper), lines that travel with the chunk they
  precede (`attach`: decorators, comments, attributes), whether a start needs the previous code
  line to end in one of `terminators`, and `container`: headers whose body may be cut into
  members when the construct alone is over target (None: any chunk may be cut).
- `split_ranges(text, byte_starts, language, target) -> [(first, end)]` returns 0-based line
  ranges (end exclusive) that cover every line once, in order. `text` is the decoded source
  without a BOM, `byte_starts` the byte offset of each line plus the total size at the end.
  Cuts fall only between lines. A construct over target is refined at the next nesting level
  when it is a container, else kept whole (an oversized range); regions that are no construct
  (no boundary fits) and every range of `split_long` languages fall back to line packing.
Nesting is found approximately (strings and comments skipped by regex, not parsed): a wrong
guess moves a cut, never a byte.
"""
import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass


@dataclass(frozen=True)
class Language:
    name: str
    mode: str                      # indent | brackets | xml | markdown | text
    extensions: tuple = ()
    tokens: str = ""               # named groups: c comment, s string, o/x bracket, t tag
    top: str = ""                  # a chunk may start here at level `base`
    nested: str = ""               # ... or here at a deeper level
    attach: str = ""               # lines that go with the chunk they precede
    terminators: str = ""          # the previous code line must end in one of these ...
    top_terminated: bool = False   # ... for `top` starts
    nested_terminated: bool = False  # ... for `nested` starts
    container: str | None = None   # heads whose bodies may be cut (None: any)
    base: int = 0
    split_long: bool = False       # an over-target chunk may be cut between any lines


_BLOCK = r"(?P<c>//[^\n]*|/\*[\s\S]*?(?:\*/|\Z))"
_DQ = r'"(?:\\[\s\S]|[^"\\\n])*"'
_DQ_MULTI = r'"(?:\\[\s\S]|[^"\\])*"'
_CHAR = r"'(?:\\[^\n][^'\n]{0,8}|[^'\\\n])'"
_SQ = r"'(?:\\[\s\S]|[^'\\\n])*'"
_BR = r"|(?P<o>[{(\[])|(?P<x>[})\]])"
# Each tokenizer opens with a lookahead on its possible first characters: the regex engine
# then skips ordinary text quickly instead of trying every alternative at every offset.
C_TOKENS = r"(?=[/\"'{}()\[\]])(?:" + _BLOCK + r"|(?P<s>" + _DQ + "|" + _CHAR + ")" + _BR + ")"
CPP_TOKENS = (r"(?=[/\"'{}()\[\]RuUL])(?:" + _BLOCK
              + r'|(?P<s>(?:u8|[uUL])?R"(?P<d>[^()\\\s"]{0,16})\([\s\S]*?\)(?P=d)"|' + _DQ + "|"
              + _CHAR + ")" + _BR + ")")
JS_TOKENS = (r"(?=[/\"'`{}()\[\]])(?:" + _BLOCK + r"|(?P<s>" + _DQ + "|" + _SQ
             + r"|`(?:\\[\s\S]|[^`\\])*`)" + _BR + ")")
GO_TOKENS = (r"(?=[/\"'`{}()\[\]])(?:" + _BLOCK + r"|(?P<s>" + _DQ + "|" + _CHAR + r"|`[^`]*`)"
             + _BR + ")")
RUST_TOKENS = (r"(?=[/\"'{}()\[\]rb])(?:" + _BLOCK + r'|(?P<s>r(?P<d>#*)"[\s\S]*?"(?P=d)|b?'
               + _DQ_MULTI + "|b?" + _CHAR + ")" + _BR + ")")
JSON_TOKENS = (r"(?=[/\"{}\[\]])(?:" + _BLOCK + r"|(?P<s>" + _DQ
               + r")|(?P<o>[{\[])|(?P<x>[}\]]))")
_TRIPLE = (r'"""(?:\\[\s\S]|[^\\"]|"(?!""))*(?:"""|\Z)'
           r"|'''(?:\\[\s\S]|[^\\']|'(?!''))*(?:'''|\Z)")
PY_TOKENS = r"(?=[#\"'])(?:(?P<c>#[^\n]*)|(?P<s>" + _TRIPLE + "|" + _DQ + "|" + _SQ + "))"
_XML_REST = (r"|(?P<x></[^>]*>)"
             r"|(?P<t><[A-Za-z_][^>\"']*(?:(?:\"[^\"]*\"|'[^']*')[^>\"']*)*>)")
_XML_COMMENT = r"(?P<c><!--[\s\S]*?(?:-->|\Z))"
_XML_OPAQUE = r"<!\[CDATA\[[\s\S]*?(?:\]\]>|\Z)|<[?!][^>]*>"
# script/style bodies are raw text in HTML: one opaque token, so `<` inside them is not a tag.
_RAW_TEXT = r"|<(?P<d>script|style)\b[^>]*>[\s\S]*?(?:</(?P=d)\s*>|\Z)"
XML_TOKENS = r"(?=<)(?:" + _XML_COMMENT + "|(?P<s>" + _XML_OPAQUE + ")" + _XML_REST + ")"
HTML_TOKENS = (r"(?=<)(?:" + _XML_COMMENT + "|(?P<s>" + _XML_OPAQUE + _RAW_TEXT + ")"
               + _XML_REST + ")")
MD_TOKENS = (r"(?m)(?P<s>^[ \t]{0,3}(?P<d>`{3,}|~{3,})[^\n]*\n[\s\S]*?"
             r"(?:^[ \t]{0,3}(?P=d)[`~]*[ \t]*\r?$|\Z))")

_JS_TOP = (r"(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?(?:async\s+)?"
           r"(?:function\b|class\b|const\b|let\b|var\b|interface\b|type\b|enum\b|namespace\b"
           r"|module\b|import\b|export\b)|module\.exports|exports\."
           r"|(?:describe|suite|it|test)\s*\(")
_JS = dict(mode="brackets", top=_JS_TOP, nested=r"[A-Za-z_$#*\[@'\"]", attach=r"//|/\*|@",
           terminators=";{},", nested_terminated=True,
           container=r"(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:abstract\s+)?"
                     r"(?:class|interface|namespace|module|enum)\b|[^\n]*=\s*\{\s*$"
                     r"|(?:describe|suite|context)\s*\(")
_RUST_ITEM = (r"(?:pub(?:\([^)\n]*\))?\s+)?"
              r"(?:(?:unsafe|async|const|default|extern(?:\s+\"[^\"]*\")?)\s+)*"
              r"(?:fn|struct|enum|union|trait|impl|mod|use|type|const|static|macro_rules!|extern)\b"
              r"|[a-z_][a-z0-9_]*!\s*[({\[]")
_PY_DEF = r"(?:async[ \t]+def|def|class)\b"
_ITEM = r"[A-Za-z_]"

LANGUAGES = {lang.name: lang for lang in (
    Language("text", "text", (".txt", ".text", ".log", ".rst", ".csv", ".tsv"), split_long=True),
    Language("markdown", "markdown", (".md", ".markdown", ".mdx", ".mkd"), tokens=MD_TOKENS),
    Language("python", "indent", (".py", ".pyi", ".pyw"), tokens=PY_TOKENS, top=_PY_DEF,
             nested=_PY_DEF, attach=r"@|#", container=r"class\b"),
    Language("c", "brackets", (".c", ".h"), tokens=C_TOKENS, top=_ITEM, nested=_ITEM,
             attach=r"//|/\*|#", terminators=";{}", top_terminated=True, nested_terminated=True,
             container=r"(?:typedef\s+)?(?:struct|union|enum)\b[^(]*$|extern\s*\"C\""),
    Language("cpp", "brackets", (".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".ipp",
                                 ".inl", ".tpp"), tokens=CPP_TOKENS,
             top=r"[A-Za-z_~]|::|\[\[", nested=r"[A-Za-z_~]|::|\[\[", attach=r"//|/\*|#",
             terminators=";{}:", top_terminated=True, nested_terminated=True,
             container=r"(?:template\s*<[^\n]*>\s*)?(?:class|struct|union|enum)\b[^(]*$"
                       r"|(?:inline\s+)?namespace\b|extern\s*\"C\""),
    Language("java", "brackets", (".java",), tokens=C_TOKENS, top=_ITEM, nested=r"[A-Za-z_<]",
             attach=r"//|/\*|@", terminators=";{}", top_terminated=True, nested_terminated=True,
             container=r"(?:(?:public|protected|private|static|abstract|final|sealed|non-sealed"
                       r"|strictfp)\s+)*(?:class|interface|enum|record|@interface)\b"),
    Language("javascript", extensions=(".js", ".mjs", ".cjs", ".jsx"), tokens=JS_TOKENS, **_JS),
    Language("typescript", extensions=(".ts", ".tsx", ".mts", ".cts"), tokens=JS_TOKENS, **_JS),
    Language("go", "brackets", (".go",), tokens=GO_TOKENS,
             top=r"(?:func|type|var|const|import|package)\b", attach=r"//|/\*"),
    Language("rust", "brackets", (".rs",), tokens=RUST_TOKENS, top=_RUST_ITEM, nested=_RUST_ITEM,
             attach=r"//|/\*|#!?\[",
             container=r"(?:pub(?:\([^)\n]*\))?\s+)?(?:unsafe\s+)?(?:impl|trait|mod|extern)\b"),
    Language("json", "brackets", (".json", ".jsonc", ".geojson", ".ipynb", ".webmanifest"),
             tokens=JSON_TOKENS, top=r"[\"\[{0-9tfn-]", nested=r"[\"\[{0-9tfn-]",
             attach=r"//|/\*", terminators=",[{", top_terminated=True, nested_terminated=True,
             base=1),
    Language("yaml", "indent", (".yaml", ".yml"), top=r"(?!---|\.\.\.)[^\s#]",
             nested=r"[^\s#]", attach=r"#|---|\.\.\."),
    Language("xml", "xml", (".xml", ".xsd", ".xsl", ".xslt", ".svg", ".plist", ".rss", ".atom",
                            ".csproj", ".xaml", ".kml"),
             tokens=XML_TOKENS, top=r"<[A-Za-z_]", nested=r"<[A-Za-z_]", attach=r"<!--"),
    Language("html", "xml", (".html", ".htm", ".xhtml"), tokens=HTML_TOKENS, top=r"<[A-Za-z_]",
             nested=r"<[A-Za-z_]", attach=r"<!--"),
)}


@dataclass(frozen=True)
class Scan:
    """Candidate chunk starts (sorted lines + their levels) and attach lines (line -> level;
    None for lines inside a block comment, which attach at any level)."""
    lines: list
    levels: list
    attach: dict


def line_starts(text):
    """Offsets of each line start in `text` (a final newline starts no line)."""
    starts = [0]
    starts.extend(m.end() for m in re.finditer("\n", text))
    if len(starts) > 1 and starts[-1] == len(text):
        starts.pop()
    return starts


def _match_lines(pattern, padded, starts):
    r"""Lines where `[ 	]*(?:pattern)` matches at the line start: {line: indent width}.
    `padded` is "
" + text: anchoring on a newline lets the regex engine skip ahead fast,
    and a match at padded offset p is a line starting at text offset p."""
    if not pattern:
        return {}
    found = {}
    for m in re.finditer(r"\n([ \t]*)(?:" + pattern + ")", padded):
        found[bisect_right(starts, m.start()) - 1] = len(m.group(1))
    return found


def _walk(text, starts, tokens, queries, tag_delta=None):
    """Bracket depth at each queried line start, and lines that start inside a multi-line
    string ('s') or comment ('c')."""
    depth_at, masked = {}, {}
    if not tokens:
        return dict.fromkeys(queries, 0), masked
    qi, nq, depth = 0, len(queries), 0
    for m in re.finditer(tokens, text):
        p = m.start()
        while qi < nq and starts[queries[qi]] <= p:
            depth_at[queries[qi]] = depth
            qi += 1
        kind = m.lastgroup
        if kind == "o":
            depth += 1
        elif kind == "x":
            depth = depth - 1 if depth else 0
        elif kind == "t":
            depth += tag_delta(m.group())
        else:
            end = m.end()
            if text.find("\n", p, end) != -1:
                for line in range(bisect_right(starts, p), bisect_left(starts, end)):
                    masked[line] = kind
    while qi < nq:
        depth_at[queries[qi]] = depth
        qi += 1
    return depth_at, masked


_VOID = frozenset("area base br col embed hr img input link meta param source track wbr "
                  "command keygen".split())


def _html_delta(tag):
    if tag.endswith("/>"):
        return 0
    name = re.match(r"<([A-Za-z_][\w:.-]*)", tag).group(1).lower()
    return 0 if name in _VOID else 1


def _xml_delta(tag):
    return 0 if tag.endswith("/>") else 1


def _scan_nested(text, starts, lang):
    """indent / brackets / xml modes: levels from indentation or bracket depth."""
    padded = "\n" + text
    top = _match_lines(lang.top, padded, starts)
    nested = top if lang.nested == lang.top else _match_lines(lang.nested, padded, starts)
    attach = _match_lines(lang.attach, padded, starts)
    if lang.mode == "indent":
        _, masked = _walk(text, starts, lang.tokens, [])
        level = {**top, **nested, **attach}
    else:
        delta = _html_delta if lang.name == "html" else _xml_delta
        queries = sorted(set(top) | set(nested) | set(attach))
        level, masked = _walk(text, starts, lang.tokens, queries, delta)
    cands = {}
    for table, wanted, terminated in ((top, lambda d: d == lang.base, lang.top_terminated),
                                      (nested, lambda d: d > lang.base, lang.nested_terminated)):
        for line in table:
            if line in masked or line in cands or not wanted(level[line]):
                continue
            if terminated and not _after_terminator(text, starts, line, attach, masked, lang):
                continue
            cands[line] = level[line]
    attached = {line: level[line] for line in attach if line not in masked}
    attached.update((line, None) for line, kind in masked.items() if kind == "c")
    ordered = sorted(cands)
    return Scan(ordered, [cands[line] for line in ordered], attached)


def _line(text, starts, line):
    end = starts[line + 1] if line + 1 < len(starts) else len(text)
    return text[starts[line]:end]


def _code_part(line):
    """The line without a trailing // or /* */ comment (only when quotes before it balance)."""
    for marker in ("//", "/*"):
        at = line.find(marker)
        while at != -1:
            if line.count('"', 0, at) % 2 == 0:
                return line[:at]
            at = line.find(marker, at + 2)
    return line


def _after_terminator(text, starts, line, attach, masked, lang):
    """True when the previous code line ends a statement or opens a block (or there is none)."""
    j = line - 1
    while j >= 0:
        if j in attach or masked.get(j) == "c":
            j -= 1
            continue
        code = _code_part(_line(text, starts, j)).strip()
        if code:
            return code[-1] in lang.terminators
        j -= 1
    return True


def _scan_markdown(text, starts, lang):
    _, masked = _walk(text, starts, lang.tokens, [])
    padded, cands = "\n" + text, {}
    for m in re.finditer(r"\n[ \t]*\r?(?=\n[ \t]*\S)", padded):
        cands[bisect_right(starts, m.end()) - 1] = 6
    for m in re.finditer(r"\n[ \t]{0,3}(=+|-+)[ \t]*\r?(?=\n|\Z)", padded):
        line = bisect_right(starts, m.start()) - 1
        title = _line(text, starts, line - 1) if line > 0 else ""
        if title.strip() and not re.match(r"[ \t]*[-*+>|#=]", title):
            cands[line - 1] = 0 if m.group(1)[0] == "=" else 1
    for m in re.finditer(r"\n(#{1,6})(?=[ \t]|\r?\n|\r?\Z)", padded):
        cands[bisect_right(starts, m.start()) - 1] = len(m.group(1)) - 1
    ordered = sorted(line for line in cands if line not in masked)
    return Scan(ordered, [cands[line] for line in ordered], {})


def _scan_text(text, starts, lang):
    # A paragraph starts on a non-blank line after a blank one.
    ends = re.finditer(r"\n[ \t\r\f\v]*(?=\n[^\n]*\S)", "\n" + text)
    ordered = sorted({bisect_right(starts, m.end()) - 1 for m in ends})
    return Scan(ordered, [0] * len(ordered), {})


SCANNERS = {"indent": _scan_nested, "brackets": _scan_nested, "xml": _scan_nested,
            "markdown": _scan_markdown, "text": _scan_text}


class _Engine:
    """Cuts line ranges at the shallowest boundary level inside each over-target range."""

    def __init__(self, text, starts, byte_starts, lang, scan, target):
        self.text, self.starts, self.bs = text, starts, byte_starts
        self.lang, self.scan, self.target = lang, scan, target
        self.container = re.compile(lang.container) if lang.container else None

    def size(self, lo, hi):
        return self.bs[hi] - self.bs[lo]

    def is_container(self, head):
        if head is None or self.container is None:
            return True
        first = _line(self.text, self.starts, head).lstrip()
        if self.container.match(first):
            return True
        # A header that continues on the next line (`template <...>` then `class X {`).
        if head + 1 < len(self.starts) and not any(c in first for c in "{;"):
            return bool(self.container.match(_line(self.text, self.starts, head + 1).lstrip()))
        return False

    def attach_start(self, line, lo, level):
        attach = self.scan.attach
        while line - 1 > lo and line - 1 in attach and attach[line - 1] in (None, level):
            line -= 1
        return line

    def cuts(self, lo, hi, floor):
        """(level, head of the first part, [(start, head)]) cutting [lo, hi) at the shallowest
        level deeper than `floor` that has a boundary after `lo`; no cuts when none does."""
        lines, levels = self.scan.lines, self.scan.levels
        i0, i1 = bisect_left(lines, lo), bisect_left(lines, hi)
        for level in sorted({levels[i] for i in range(i0, i1) if levels[i] > floor}):
            heads = [lines[i] for i in range(i0, i1) if levels[i] == level]
            cuts, previous = [], lo
            for head in heads:
                if head > lo:
                    cuts.append((max(self.attach_start(head, lo, level), previous + 1), head))
                    previous = head
            if cuts:
                return level, (lo if heads[0] == lo else None), cuts
        return None, None, []

    def pieces(self, n):
        out, stack = [], [(0, n, self.lang.base - 1, None)]
        while stack:
            lo, hi, floor, head = stack.pop()
            if self.size(lo, hi) <= self.target or hi - lo == 1:
                out.append((lo, hi))
                continue
            level, first, cuts = (self.cuts(lo, hi, floor) if self.is_container(head)
                                  else (None, None, []))
            if not cuts:
                if head is None or self.lang.split_long:
                    out.extend((line, line + 1) for line in range(lo, hi))
                else:
                    out.append((lo, hi))
                continue
            edges = [lo] + [start for start, _ in cuts] + [hi]
            heads = [head if first is None else first] + [h for _, h in cuts]
            subs = [(edges[k], edges[k + 1], level, heads[k]) for k in range(len(heads))]
            stack.extend(reversed(subs))
        return out


def pack(pieces, byte_starts, target):
    """Greedily join consecutive pieces up to `target` bytes; an over-target piece stays alone."""
    segments = []
    cur_lo = cur_hi = None
    for lo, hi in pieces:
        if cur_lo is None:
            cur_lo, cur_hi = lo, hi
        elif byte_starts[hi] - byte_starts[cur_lo] <= target:
            cur_hi = hi
        else:
            segments.append((cur_lo, cur_hi))
            cur_lo, cur_hi = lo, hi
    if cur_lo is not None:
        segments.append((cur_lo, cur_hi))
    return segments


def split_ranges(text, byte_starts, lang, target):
    n = len(byte_starts) - 1
    if n <= 0:
        return [(0, 0)]
    skew = byte_starts[-1] - len(text)  # 3 for a BOM-only difference
    if skew in (0, 3) and text.isascii():
        # ASCII text: character offsets are the byte offsets (minus the BOM), no second scan.
        starts = [offset - skew if offset else 0 for offset in byte_starts[:-1]]
    else:
        starts = line_starts(text)
    if len(starts) != n:
        raise ValueError("text and byte line counts differ")
    scan = SCANNERS[lang.mode](text, starts, lang)
    engine = _Engine(text, starts, byte_starts, lang, scan, target)
    return pack(engine.pieces(n), byte_starts, target)
