"""The conversation store: one append-only text file of framed records per conversation.

Data contract
-------------
Each record is three parts, the body framed by one header line and one footer line:

    <nagent-record seq="12" kind="result" time="2026-11-22T03:04:05Z" action="shell">
    BODY LINES (escaped)
    </nagent-record>

* Header: "<nagent-record", then NAME="VALUE" attributes (seq, kind, time first, the rest sorted
  by name), then ">". Values are XML-escaped: & < > " newline CR tab become &amp; &lt; &gt; &quot;
  &#10; &#13; &#9;. Footer: exactly "</nagent-record>".
* Body escaping, per line (split on "\\n"): a line that starts with zero or more backslashes and
  then "<nagent-record" or "</nagent-record" gets one more leading backslash; the reader removes
  one from such lines. So a line starting with "<nagent-record" or "</nagent-record" is ALWAYS
  framing, and no body text can forge or end a record. The writer adds exactly one "\\n" after the
  escaped body and the reader removes exactly one. Bodies are str stored as UTF-8; "\\r" and
  non-ASCII are kept byte-exactly.
* seq starts at 1 and grows by 1 per record. Kinds (KINDS): context (attr part=static|session),
  prompt (source=argv|stdin|next|delegated), reply (valid, cut, provider, model, finish), result
  (action), system, error, interrupt, stats (JSON totals, never sent to the model), meta (JSON, not
  sent).
* Reading tolerates hand edits: bodies carry no byte counts; non-blank text outside records becomes
  a pseudo-record of kind "note" (seq 0); a record missing its footer ends at the next header; a
  footer may carry trailing CR/blanks; a stray footer outside a record stays inside the note text.
  Only a header whose attributes cannot be parsed (or lacks an integer seq or a kind) is an error:
  InputError naming the line, with the fix "repair the line or run nagent --clear".
* Torn tail: a write killed midway leaves the start of a record at the end of the file (a header
  prefix, a header without footer, a partial footer). parse_records returns those bytes apart;
  ConversationWriter, under the lock, copies them to "{conversation}.torn-{UTC stamp}", truncates
  them away and sets `.torn` so the loop can append a "system" record saying so. A complete record
  that only lacks its final newline is not torn: the next append starts with the missing "\\n".
* Writing: one ConversationWriter per run holds an exclusive fcntl.flock on "{conversation}.lock"
  (polling up to lock_timeout seconds, then BusyError; the lock file is left in place because
  deleting lock files races). Each record is ONE os.write on an O_APPEND descriptor; bytes already
  in the file are never rewritten (only a torn tail is cut). Page-cache data survives SIGKILL, so
  there is no fsync per record; sync() does it on demand.
"""
import errno
import fcntl
import os
import re
from contextlib import contextmanager
from dataclasses import dataclass
from time import gmtime, monotonic, sleep, strftime

from nagent_errors import BusyError, InputError
from nagent_fs import write_unique

KINDS = ("context", "prompt", "reply", "result", "system", "error", "interrupt", "stats", "meta")
HEADER_MARK = b"<nagent-record"
FOOTER = b"</nagent-record>"
HEAD_FIELDS = ("seq", "kind", "time")
BAD_HEADER_FIX = "repair the line or run nagent --clear"
BUSY_FIX = "another nagent run is using it; wait or use --conversation NAME"

_NAME = r"[A-Za-z_][A-Za-z0-9_.:-]*"
_NAME_RE = re.compile(_NAME + r"\Z")
_HEADER_RE = re.compile(r'<nagent-record((?:[ \t]+' + _NAME + r'="[^"]*")*)[ \t]*>\Z')
_ATTR_RE = re.compile(r'(' + _NAME + r')="([^"]*)"')
_ESCAPE_RE = re.compile(r"^(\\*</?nagent-record)", re.M)
_UNESCAPE_RE = re.compile(r"^\\(\\*</?nagent-record)", re.M)
_ATTR_SPECIAL_RE = re.compile(r'[&<>"\n\r\t]')
_ATTR_ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "\n": "&#10;",
                 "\r": "&#13;", "\t": "&#9;"}


@dataclass(frozen=True)
class Record:
    seq: int
    kind: str
    body: str
    attrs: tuple = ()  # sorted (name, value) pairs, excluding seq/kind/time
    time: str = ""
    offset: int = 0    # byte offset of the header line (of the text, for notes)

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


def escape_attr(value):
    return _ATTR_SPECIAL_RE.sub(lambda m: _ATTR_ESCAPES[m.group()], value)


def unescape_attr(value):
    if "&" not in value:
        return value
    from html import unescape  # lazily: its entity table is only needed for odd headers
    return unescape(value)


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


def read_records(path):
    """All records of a conversation file ([] when it is missing); a torn tail is ignored."""
    path = os.fspath(path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except FileNotFoundError:
        return []
    except OSError as error:
        raise InputError("cannot read conversation", path, error.strerror or str(error))
    return parse_records(data, source=path)[0]


# -- locking -------------------------------------------------------------------------
def lock_path(path):
    return os.fspath(path) + ".lock"


def acquire_lock(path, timeout=3.0, poll=0.05):
    """An fd holding the exclusive flock of conversation `path`; BusyError after `timeout` s."""
    path = os.fspath(path)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), mode=0o700, exist_ok=True)
        fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    except OSError as error:
        raise InputError("cannot lock conversation", path, error.strerror or str(error))
    deadline = monotonic() + max(0.0, timeout or 0.0)
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError as error:
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                os.close(fd)
                raise InputError("cannot lock conversation", path, error.strerror or str(error))
        left = deadline - monotonic()
        if left <= 0:
            os.close(fd)
            raise BusyError("conversation is busy", path, BUSY_FIX)
        sleep(min(poll, left))


def release_lock(fd):
    try:
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextmanager
def conversation_lock(path, timeout=3.0):
    fd = acquire_lock(path, timeout)
    try:
        yield fd
    finally:
        release_lock(fd)


# -- re-exports ----------------------------------------------------------------------
# The tail readers moved to nagent_conversation_tail; their names stay importable from here,
# lazily because nagent_conversation_tail imports this module. (The file writers moved to
# nagent_fs with a different default mode, so they are deliberately not re-exported.)
_TAIL_NAMES = ("header_at", "iter_header_offsets", "last_seq", "last_stats", "read_tail_summary",
               "tail_state")


def __getattr__(name):
    if name in _TAIL_NAMES:
        import nagent_conversation_tail
        return getattr(nagent_conversation_tail, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- the writer ----------------------------------------------------------------------
def _read_fully(fd, size):
    parts, done = [], 0
    while done < size:
        part = os.pread(fd, size - done, done)
        if not part:
            break
        parts.append(part)
        done += len(part)
    return b"".join(parts)


class ConversationWriter:
    """The one appender of a conversation during a run; holds its flock until close()."""

    def __init__(self, path, lock_timeout=3.0):
        self.path = os.fspath(path)
        self.torn = None        # side-file path when a torn tail was moved away
        self.torn_size = 0
        self.next_seq = 1
        self._fd = None
        self._lock_fd = None
        self._cache = None      # ((size, mtime_ns), records)
        self._lock_fd = acquire_lock(self.path, lock_timeout)
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _open(self):
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC,
                               0o600)
            self._recover()
        except OSError as error:
            raise InputError("cannot open conversation", self.path, error.strerror or str(error))

    def reopen(self):
        """Keep the lock but re-open `path`, after the holder replaced the file (os.replace)."""
        if self._lock_fd is None:
            raise ValueError("conversation writer is closed")
        fd, self._fd, self._cache = self._fd, None, None
        if fd is not None:
            os.close(fd)
        try:
            self._open()
        except BaseException:
            self.close()
            raise

    def _recover(self):
        from nagent_conversation_tail import last_seq, tail_state  # lazily: it imports this module
        size = os.fstat(self._fd).st_size
        with open(os.dup(self._fd), "rb") as handle:
            try:
                records, torn_start = tail_state(handle, size, self.path)
            except InputError:
                # Re-parse everything so the error names the right line number.
                parse_records(_read_fully(self._fd, size), source=self.path)
                raise
        if torn_start < size:
            torn = _read_fully(self._fd, size)[torn_start:]
            self.torn = write_unique(f"{self.path}.torn-{utc_stamp()}", torn)
            self.torn_size = len(torn)
            os.ftruncate(self._fd, torn_start)
            os.fsync(self._fd)
            size = torn_start
        self.next_seq = last_seq(records) + 1
        self._size = size
        self._needs_newline = size > 0 and os.pread(self._fd, 1, size - 1) != b"\n"

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def append(self, kind, body, attrs=None):
        """Append one record with a single os.write; returns it as a reader would see it."""
        if self._fd is None:
            raise ValueError("conversation writer is closed")
        time = utc_now()
        data = encode_record(self.next_seq, kind, body, attrs, time)
        prefix = b"\n" if self._needs_newline else b""
        record = Record(self.next_seq, kind, body, attr_items(attrs), time,
                        self._size + len(prefix))
        key = self._cache_key() if self._cache is not None else None
        view = memoryview(prefix + data)
        try:
            view = view[os.write(self._fd, view):]
            while view:  # a short write only happens on a full disk or a signal
                view = view[os.write(self._fd, view):]
        except OSError as error:
            raise InputError("cannot append to conversation", self.path,
                             error.strerror or str(error))
        self._size += len(prefix) + len(data)
        self._needs_newline = False
        self.next_seq += 1
        if self._cache is not None and self._cache[0] == key:
            self._cache = (self._cache_key(), self._cache[1] + [record])
        return record

    def _cache_key(self):
        stat = os.fstat(self._fd)
        return stat.st_size, stat.st_mtime_ns

    def records(self):
        """All records of the file, re-read only when it changed since the last call."""
        key = self._cache_key()
        if self._cache is None or self._cache[0] != key:
            data = _read_fully(self._fd, key[0])
            self._cache = (key, parse_records(data, source=self.path)[0])
        return list(self._cache[1])

    def sync(self):
        if self._fd is not None:
            os.fsync(self._fd)

    def close(self):
        fd, self._fd = self._fd, None
        lock_fd, self._lock_fd = self._lock_fd, None
        if fd is not None:
            os.close(fd)
        if lock_fd is not None:
            release_lock(lock_fd)
