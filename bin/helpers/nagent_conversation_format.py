"""The conversation file format: framed records, encoded and parsed (pure: no I/O).

Data contract
-------------
Each record is three parts, the body framed by one header line and one footer line:

    <nagent-record seq="12" kind="result" time="2026-11-22T03:04:05Z" action="shell">
    BODY LINES (escaped)
    </nagent-record>

* Header: "<nagent-record", then NAME="VALUE" attributes (seq, kind, time first, the rest sorted
  by name), then ">". Values are escaped by the protocol's one attribute escaper
  (nagent_protocol_blocks.escape_attr: & < > " newline CR become entities) and read back by its
  unescape_attr. Footer: exactly "</nagent-record>".
* Body escaping, per line (split on "\\n"): a line that starts with zero or more backslashes and
  then "<nagent-record" or "</nagent-record" gets one more leading backslash; the reader removes
  one from such lines. So a line starting with "<nagent-record" or "</nagent-record" is ALWAYS
  framing, and no body text can forge or end a record. The writer adds exactly one "\\n" after the
  escaped body and the reader removes exactly one. Bodies are str stored as UTF-8; "\\r" and
  non-ASCII are kept byte-exactly.
* seq starts at 1 and grows by 1 per record. Kinds (KINDS): context (attr part=static|session),
  prompt (source=argv|stdin|next|delegated), reply (valid, cut, provider, model, finish), result
  (action), system, error, interrupt, stats (JSON totals, never sent to the model), meta (JSON, not
  sent), hook (a hook run: hook, status, exit_code, seconds; not sent).
* `encode_record(seq, kind, body, attrs, time)` is one record's bytes; `encode_records(records,
  time=None)` a whole file's, renumbered from 1 (the one encoder for copies, edits and windows).
* Reading tolerates hand edits: bodies carry no byte counts; non-blank text outside records becomes
  a pseudo-record of kind "note" (seq 0); a record missing its footer ends at the next header; a
  footer may carry trailing CR/blanks; a stray footer outside a record stays inside the note text.
  Only a header whose attributes cannot be parsed (or lacks an integer seq or a kind) is an error:
  InputError naming the line, with the fix "repair the line or run nagent --clear".
* Torn tail: a write killed midway leaves the start of a record at the end of the file (a header
  prefix, a header without footer, a partial footer). `parse_records(data)` returns
  (records, torn tail bytes) so the writer can move those bytes aside. A complete record that only
  lacks its final newline is not torn.
"""
import re
from collections import namedtuple
from time import gmtime, strftime

from nagent_errors import InputError
from nagent_protocol_blocks import escape_attr, unescape_attr

KINDS = ("context", "prompt", "reply", "result", "system", "error", "interrupt", "stats", "meta",
         "hook")
HEADER_MARK = b"<nagent-record"
FOOTER = b"</nagent-record>"
HEAD_FIELDS = ("seq", "kind", "time")
BAD_HEADER_FIX = "repair the line or run nagent --clear"

_NAME = r"[A-Za-z_][A-Za-z0-9_.:-]*"
_NAME_RE = re.compile(_NAME + r"\Z")
_HEADER_RE = re.compile(r'<nagent-record((?:[ \t]+' + _NAME + r'="[^"]*")*)[ \t]*>\Z')
_ATTR_RE = re.compile(r'(' + _NAME + r')="([^"]*)"')
_ESCAPE_RE = re.compile(r"^(\\*</?nagent-record)", re.M)
_UNESCAPE_RE = re.compile(r"^\\(\\*</?nagent-record)", re.M)


class Record(namedtuple("Record", "seq kind body attrs time offset", defaults=((), "", 0))):
    """One record: seq, kind, body, attrs (sorted (name, value) pairs, excluding seq/kind/time),
    time, offset (of the header line; of the text, for notes). A namedtuple, not a dataclass:
    `nagent --status` reads records, and dataclass generation would cost milliseconds there."""
    __slots__ = ()

    def attr(self, name, default=None):
        for key, value in self.attrs:
            if key == name:
                return value
        return default


def utc_now():
    return strftime("%Y-%m-%dT%H:%M:%SZ", gmtime())


def utc_stamp():
    """A compact UTC stamp for file names (archives, torn tails)."""
    return strftime("%Y%m%dT%H%M%SZ", gmtime())


# -- escaping ------------------------------------------------------------------------
def escape_body(text):
    return _ESCAPE_RE.sub(r"\\\1", text)


def unescape_body(text):
    return _UNESCAPE_RE.sub(r"\1", text) if "nagent-record" in text else text


def _utf8(text):
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # Lone surrogates (e.g. from surrogateescape-decoded files) must not crash a write.
        try:
            return text.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            return text.encode("utf-8", "replace")


def attr_items(attrs):
    """Normalise an attrs dict to the sorted (name, str value) pairs a reader gets back."""
    items = []
    for name in sorted(attrs or {}):
        value = attrs[name]
        if value is None:
            continue
        if name in HEAD_FIELDS or not _NAME_RE.match(name):
            raise ValueError(f"bad record attribute name: {name!r}")
        if isinstance(value, bool):
            value = "true" if value else "false"
        items.append((name, str(value)))
    return tuple(items)


def encode_record(seq, kind, body, attrs=None, time=None):
    """The bytes of one framed record (header line, escaped body, newline, footer line)."""
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise ValueError(f"bad record seq: {seq!r}")
    if not isinstance(kind, str) or not _NAME_RE.match(kind):
        raise ValueError(f"bad record kind: {kind!r}")
    fields = (("seq", str(seq)), ("kind", kind), ("time", time or utc_now())) + attr_items(attrs)
    header = "<nagent-record" + "".join(f' {n}="{escape_attr(v)}"' for n, v in fields) + ">\n"
    return _utf8(header) + _utf8(escape_body(body)) + b"\n" + FOOTER + b"\n"


def encode_records(records, time=None):
    """Records encoded and numbered from 1, in order; notes are kept as plain text. Each item is
    a Record or a (kind, body, attrs) triple. `time` stamps every record (else its own time, else
    now). The one encoder of whole files: lifecycle copies, edits and window rebuilds."""
    parts, seq = [], 0
    for record in records:
        if isinstance(record, Record):
            kind, body, attrs, own_time = record.kind, record.body, dict(record.attrs), record.time
        else:
            (kind, body, attrs), own_time = record, None
        if kind == "note":
            parts.append(_utf8(body) + b"\n")
            continue
        seq += 1
        parts.append(encode_record(seq, kind, body, attrs, time or own_time or None))
    return b"".join(parts)


# -- parsing -------------------------------------------------------------------------
def parse_header(line):
    """(seq, kind, time, attrs) from one header line (str, no newline), or None if unparsable."""
    match = _HEADER_RE.match(line.rstrip("\r"))
    if not match:
        return None
    fields = {name: unescape_attr(value) for name, value in _ATTR_RE.findall(match.group(1))}
    seq, kind = fields.pop("seq", ""), fields.pop("kind", "")
    if not re.fullmatch(r"[0-9]{1,18}", seq) or not _NAME_RE.match(kind):
        return None
    time = fields.pop("time", "")
    return int(seq), kind, time, tuple(sorted(fields.items()))


def _note(records, data, start, end, offset):
    chunk = data[start:end]
    if chunk.strip():
        records.append(Record(0, "note", chunk.decode("utf-8", "replace").strip("\n"),
                              offset=offset + start))


def _finish(records, data, head, body_end):
    seq, kind, time, attrs, offset, body_start = head
    body = data[body_start:body_end]
    if body.endswith(b"\n"):
        body = body[:-1]
    records.append(Record(seq, kind, unescape_body(body.decode("utf-8", "replace")), attrs,
                          time, offset))


def _frame_lines(data):
    """(start, end) of each line starting with "<nagent-record" or "</nagent-record" (end includes
    the newline, if any); bytes.find keeps this near memchr speed on big files."""
    find, at = data.find, 0
    while True:
        hit = find(b"nagent-record", at)
        if hit < 0:
            return
        if hit >= 1 and data[hit - 1] == 60:        # "<nagent-record"
            start = hit - 1
        elif hit >= 2 and data[hit - 2:hit] == b"</":
            start = hit - 2
        else:
            start = -1
        if start < 0 or (start > 0 and data[start - 1] != 10):  # not at a line start
            at = hit + 1
            continue
        end = find(b"\n", hit)
        end = len(data) if end < 0 else end + 1
        yield start, end
        at = end


def parse_records(data, *, source="", offset=0):
    """(records, torn_tail_bytes) from the bytes of a conversation file (or a suffix of one that
    starts at a line boundary; `offset` is that suffix's position, for Record.offset)."""
    records, current, pos, torn_start = [], None, 0, None
    for start, end in _frame_lines(data):
        line = data[start:end]
        complete = line.endswith(b"\n")
        if line.startswith(HEADER_MARK):
            if current is not None:
                _finish(records, data, current, start)  # footer was deleted by hand
                current = None
            else:
                _note(records, data, pos, start, offset)
            pos = start
            if not complete:
                torn_start = start
                break
            header = parse_header(line[:-1].decode("utf-8", "replace"))
            if header is None:
                where = "line %d" % (data.count(b"\n", 0, start) + 1)
                raise InputError("unparsable conversation record header",
                                 f"{source}: {where}" if source else where, BAD_HEADER_FIX)
            current = header + (offset + start, end)
        elif current is not None:
            if not complete and line.rstrip(b" \t\r") != FOOTER:
                break  # partial footer at the very end: torn
            _finish(records, data, current, start)
            current, pos = None, end
    if torn_start is None:
        if current is not None:
            torn_start = current[4] - offset
        else:
            last_line_start = max(pos, data.rfind(b"\n", pos) + 1)
            last_line = data[last_line_start:]
            if last_line and HEADER_MARK.startswith(last_line):
                torn_start = last_line_start
            _note(records, data, pos, len(data) if torn_start is None else torn_start, offset)
    return records, (b"" if torn_start is None else data[torn_start:])
