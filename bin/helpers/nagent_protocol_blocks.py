"""Driver result blocks and the attribute escaping shared by the tag parser and the driver.

Data contract:
- `escape_attr(value)` escapes & " < > newline CR tab for a double-quoted attribute value (the
  one attribute escaper: protocol blocks and conversation record headers both use it);
  `unescape_attr(value)` undoes it and also decodes &apos; and numeric references (&#NN; &#xHH;);
  a reference to no valid code point (0, surrogates, > 0x10FFFF) stays as written.
- `frame_data(text)`: the one framing rule for data the model reads inside a driver block (file
  text, command output, MCP output through the shell, split segments, context files, hook
  output, a sub-agent's answer). A line that starts — after spaces or tabs and any backslashes —
  with a mark of a block the driver writes into what the model reads (`<nagent-…-result`,
  `<system`, `<initial_context`, or their closing tags; any case) gets one more backslash right
  before its `<`; the model is
  told (the grammar) that such a line in data holds one backslash fewer. So no data can end a
  block or open a note; a line start is a "\\n" or any other line break (CR, VT, FF, NEL,
  U+2028/9). The way the record format escapes `<nagent-record`, for the model's eyes.
- `result_block(tag, body, attrs=None)` -> `<tag a="v">\\nbody\\n</tag>` with `body` through
  frame_data (attrs in the given order, values escaped; the newline before the end tag is added
  only when `body` is non-empty and lacks one). A tag outside [a-z][a-z0-9-]* or an attribute
  name outside ATTR_NAME is a ValueError: the callers are code, not model output.
- `STOP_SEQUENCES`: those blocks at a line start (plain and indented <system>), most common
  first; `stop_block(stop)` names the block a stop sequence starts ("" if not one of them).
  The parser (nagent_protocol) cuts a reply at each of them.
- `correction_text(detail)` is the <system> format correction.
"""
import re

ATTR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.:-]*")
_ENTITY = re.compile(r"&(#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|quot|amp|lt|gt|apos);")
_NAMED_ENTITIES = {"quot": '"', "amp": "&", "lt": "<", "gt": ">", "apos": "'"}
_BLOCK_NAME = re.compile(r"[a-z][a-z0-9-]*")
_DRIVER_MARK = re.compile(r"(?:^|(?<=[\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]))([ \t]*\\*)"
                          r"(?=</?(?:nagent-[a-z0-9-]*-result|system|initial_context)\b)",
                          re.M | re.I)
# Most common first: a provider takes only its first few (OpenAI chat 4, Gemini 5, Anthropic 8).
STOP_SEQUENCES = ("\n<nagent-shell-result", "\n<system>", "\n<nagent-read-result", "\n  <system>",
                  "\n<nagent-write-result", "\n    <system>", "\n<nagent-file-read-result",
                  "\n\t<system>", "\n<nagent-agent-result", "\n<nagent-file-patch-result",
                  "\n  <nagent-shell-result", "\n    <nagent-shell-result")


def escape_attr(value):
    return (value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")
            .replace(">", "&gt;").replace("\n", "&#10;").replace("\r", "&#13;")
            .replace("\t", "&#9;"))


def _entity(match):
    name = match.group(1)
    if not name.startswith("#"):
        return _NAMED_ENTITIES[name]
    code = int(name[2:], 16) if name[1] in "xX" else int(name[1:])
    if 0 < code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF:
        return chr(code)
    return match.group(0)


def unescape_attr(value):
    return _ENTITY.sub(_entity, value) if "&" in value else value


def frame_data(text):
    """Data as a driver block carries it: a driver mark at a line start gets one more backslash."""
    return _DRIVER_MARK.sub(r"\1\\", text) if "<" in text else text


def result_block(tag, body, attrs=None):
    """A driver block: `<tag a="v">\\nbody\\n</tag>`, attribute values escaped, body framed."""
    if not _BLOCK_NAME.fullmatch(tag):
        raise ValueError(f"bad block tag name: {tag!r}")
    parts = []
    for name, value in (attrs or {}).items():
        if not ATTR_NAME.fullmatch(name):
            raise ValueError(f"bad attribute name: {name!r}")
        parts.append(f' {name}="{escape_attr(str(value))}"')
    body = frame_data(body)
    newline = "" if body == "" or body.endswith("\n") else "\n"
    return f"<{tag}{''.join(parts)}>\n{body}{newline}</{tag}>"


def stop_block(stop_sequence):
    """The driver block a stop sequence starts ("\\n  <system>" -> "system"), "" if unknown."""
    name = (stop_sequence or "").strip().lstrip("<").rstrip(">")
    return name if stop_sequence in STOP_SEQUENCES else ""


def correction_text(detail):
    return (f"<system>Invalid nagent response format: {detail} "
            "Respond only with valid nagent tags.</system>")
