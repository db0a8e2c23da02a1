"""Per-language boundary tables, and the one entry point that turns them into segments.

Data contract:
- `LANGUAGES` maps a split type name to a frozen `Language` row. A row is data only: the
  scanner (`mode`: python | brackets | xml | indent | markdown | text), the lexer (`syntax`, a
  key of nagent_split_lexers.SYNTAXES) that finds strings, comments, brackets and directives,
  bytes regexes for lines that may start a chunk (`top` at the outermost level `base`, `nested`
  deeper), lines that travel with the chunk they precede (`attach`: comments, decorators,
  attributes, #if lines), lines that close a block and so never start a segment (`closer`),
  whether a start needs the previous code line to end in one of `terminators`, and
  `container`: heads whose bodies are cut into members as soon as the construct is over the
  target (other constructs stay whole up to the read limit), and `join_across`: whether a
  segment may mix pieces of different constructs (documents, data). Patterns never cross a
  line, and never repeat a group without a bound (each repetition would keep match state: a
  5 MB line of `unsafe unsafe ...` would cost hundreds of MB).
- `split_ranges(data, lang, target, limit)` returns segments [(start, end, inside, start_mid,
  end_cut)] (nagent_split_engine) tiling the UTF-8 bytes `data` (BOM included) in order; each
  is at most max(target, limit) bytes.
- `looks_like_cpp(data)`: a `.h` file whose code (comments and strings aside) is C++:
  namespace, template<, a class with a base or a body, access specifiers, `::`.
Structure is found by linear lexers (Python: as the standard library's tokenize reads it) and
bytes regexes anchored at line starts; memory stays linear in the file size. A wrong guess moves a cut, never
a byte.
"""
import re
from dataclasses import dataclass

from nagent_split_engine import Engine
from nagent_split_lexers import SYNTAXES, lex
from nagent_split_scan import scan

BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True)
class Language:
    name: str
    mode: str                      # python | brackets | xml | indent | markdown | text
    extensions: tuple = ()
    syntax: str = ""               # lexer for brackets mode
    top: bytes = b""               # a chunk may start here at level `base`
    nested: bytes = b""            # ... or here at a deeper level
    attach: bytes = b""            # lines that go with the chunk they precede
    closer: bytes = b""            # lines that close a block: never a segment's first line
    terminators: bytes = b""       # the previous code line must end in one of these ...
    top_terminated: bool = False   # ... for `top` starts
    nested_terminated: bool = False  # ... for `nested` starts
    container: bytes | None = None  # heads whose bodies are cut at the target (None: any)
    container_next_line: bool = True  # a head may continue on the next line (template <..>)
    base: int = 0
    split_long: bool = False       # an over-target chunk is cut between lines, never kept whole
    join_across: bool = False      # documents and data: pack pieces of different constructs


_CLOSE = rb"[}\])]"
_C_CLOSE = (_CLOSE + rb"|#[ \t]*(?:endif|else|elif)\b|(?:[A-Z0-9_]*_)?END(?:_[A-Z0-9_]*)?\b"
            rb"(?![ \t]*[=:;])")
_C_ATTACH = rb"//|/\*|#(?![ \t]*(?:endif|else|elif|define|undef)\b)"
_DEFINE = rb"|#[ \t]*(?:define|undef)\b"  # a run of macros is cut between them
_JS_TOP = (rb"(?:export[ \t]+)?(?:default[ \t]+)?(?:declare[ \t]+)?(?:abstract[ \t]+)?"
           rb"(?:async[ \t]+)?(?:function\b|class\b|const\b|let\b|var\b|interface\b|type\b"
           rb"|enum\b|namespace\b|module\b|import\b|export\b|global\b)|module\.exports|exports\."
           rb"|(?:describe|suite|it|test)[ \t]*\(")
_JS = dict(mode="brackets", syntax="js", top=_JS_TOP, nested=rb"[A-Za-z_$#*\['\"]",
           attach=rb"//|/\*|@", closer=_CLOSE, terminators=b";{},", nested_terminated=True,
           container=rb"(?:export[ \t]+)?(?:default[ \t]+)?(?:declare[ \t]+)?(?:abstract[ \t]+)?"
                     rb"(?:class|interface|namespace|module|enum|global)\b"
                     rb"|[^\n]*=[ \t]*\{[ \t]*$|(?:describe|suite|context)[ \t]*\(")
_RUST_ITEM = (rb"(?:pub(?:\([^)\n]*\))?[ \t]+)?"
              rb"(?:(?:unsafe|async|const|default|extern(?:[ \t]+\"[^\"\n]*\")?)[ \t]+){0,6}"
              rb"(?:fn|struct|enum|union|trait|impl|mod|use|type|const|static|macro_rules!"
              rb"|extern)\b|[a-z_][a-z0-9_]*![ \t]*[({\[]")
_ITEM = rb"[A-Za-z_]"

LANGUAGES = {lang.name: lang for lang in (
    Language("text", "text", (".txt", ".text", ".log", ".rst", ".csv", ".tsv"), split_long=True,
             join_across=True),
    Language("markdown", "markdown", (".md", ".markdown", ".mdx", ".mkd"), join_across=True),
    Language("python", "python", (".py", ".pyi", ".pyw"), container_next_line=False,
             closer=rb"(?:else|elif|except|finally)\b|[)\]}]",
             container=rb"(?:class|if|elif|else|try|except|finally|with|async[ \t]+with"
                       rb"|match)\b"),
    Language("c", "brackets", (".c", ".h"), syntax="c", top=_ITEM + _DEFINE, nested=_ITEM + _DEFINE,
             attach=_C_ATTACH, closer=_C_CLOSE, terminators=b";{}", top_terminated=True,
             nested_terminated=True,
             container=rb"(?:typedef[ \t]+)?(?:struct|union|enum)\b[^(\n]*$|extern[ \t]*\"C\""),
    Language("cpp", "brackets", (".cc", ".cpp", ".cxx", ".c++", ".hpp", ".hh", ".hxx", ".ipp",
                                 ".inl", ".tpp"), syntax="cpp",
             top=rb"[A-Za-z_~]|::|\[\[" + _DEFINE, nested=rb"[A-Za-z_~]|::|\[\[" + _DEFINE,
             attach=_C_ATTACH,
             closer=_C_CLOSE, terminators=b";{}:", top_terminated=True, nested_terminated=True,
             container=rb"(?:template[ \t]*<[^\n]*>[ \t]*)?(?:class|struct|union|enum)\b[^(\n]*$"
                       rb"|(?:inline[ \t]+)?namespace\b|extern[ \t]*\"C(?:\+\+)?\""),
    Language("java", "brackets", (".java",), syntax="java", top=_ITEM, nested=rb"[A-Za-z_<]",
             attach=rb"//|/\*|@", closer=_CLOSE, terminators=b";{}", top_terminated=True,
             nested_terminated=True,
             container=rb"(?:(?:public|protected|private|static|abstract|final|sealed"
                       rb"|non-sealed|strictfp)[ \t]+){0,8}(?:class|interface|enum|record"
                       rb"|@interface)\b"),
    Language("javascript", extensions=(".js", ".mjs", ".cjs", ".jsx"), **_JS),
    Language("typescript", extensions=(".ts", ".tsx", ".mts", ".cts"), **_JS),
    Language("go", "brackets", (".go",), syntax="go",
             top=rb"(?:func|type|var|const|import|package)\b", nested=_ITEM,
             attach=rb"//|/\*", closer=_CLOSE,
             container=rb"type\b[^\n]*(?:struct|interface)[ \t]*\{|(?:var|const|import|type)"
                       rb"[ \t]*\("),
    Language("rust", "brackets", (".rs",), syntax="rust", top=_RUST_ITEM, nested=_RUST_ITEM,
             attach=rb"//|/\*|#!?\[", closer=_CLOSE,
             container=rb"(?:pub(?:\([^)\n]*\))?[ \t]+)?(?:unsafe[ \t]+)?"
                       rb"(?:impl|trait|mod|extern)\b|[a-z_][a-z0-9_]*![ \t]*\{"),
    Language("json", "brackets", (".json", ".jsonc", ".geojson", ".ipynb", ".webmanifest"),
             syntax="json", top=rb"[\"\[{0-9tfn-]", nested=rb"[\"\[{0-9tfn-]",
             attach=rb"//|/\*", closer=rb"[}\]]", terminators=b",[{", top_terminated=True,
             nested_terminated=True, base=1, join_across=True),
    Language("yaml", "indent", (".yaml", ".yml"), top=rb"(?!---|\.\.\.)[^\s#]",
             nested=rb"[^\s#]", attach=rb"#|---|\.\.\.", join_across=True),
    Language("xml", "xml", (".xml", ".xsd", ".xsl", ".xslt", ".svg", ".plist", ".rss", ".atom",
                            ".csproj", ".xaml", ".kml"),
             top=rb"<[A-Za-z_]", nested=rb"<[A-Za-z_]", attach=rb"<!--", closer=rb"</",
             join_across=True),
    Language("html", "xml", (".html", ".htm", ".xhtml"), top=rb"<[A-Za-z_]",
             nested=rb"<[A-Za-z_]", attach=rb"<!--", closer=rb"</", join_across=True),
)}

_CPP_SIGNS = re.compile(rb"(?m)^[ \t]*(?:(?:using[ \t]+)?namespace[ \t]+\w+(?:::\w+){0,8}[ \t]*"
                        rb"(?:[{;=]|$)|template[ \t]*<|(?:public|private|protected)[ \t]*:"
                        rb"|class[ \t]+\w+[ \t]*(?:final[ \t]*)?[:{])|\w::~?\w")


def looks_like_cpp(data):
    """C++ signs in the code of a header (comments and strings skipped: a C header may say
    `Windows::Storage` or `namespace processing` in its prose)."""
    pos = 0
    for token in lex(data, 0, len(data), SYNTAXES["c"]):
        if len(token) == 3 and token[0] in "cs":
            if _CPP_SIGNS.search(data, pos, token[1]):
                return True
            pos = token[2]
    return _CPP_SIGNS.search(data, pos) is not None


def split_ranges(data, lang, target, limit):
    if not data:
        return [(0, 0, None, False, None)]
    skip = len(BOM) if data.startswith(BOM) else 0
    return Engine(data, lang, scan(data, skip, lang), target, limit).segments()
