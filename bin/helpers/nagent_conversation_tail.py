"""Reading a conversation file from its end: status summaries and the torn-tail check.

Data contract (the record format itself is described in nagent_conversation_format):
- `iter_header_offsets(handle, size)` yields the byte offsets of the lines that start with
  "<nagent-record", last first, reading the binary `handle` backwards in chunks.
- `header_at(handle, offset)` -> parse_header of the complete line at `offset`, or None.
- `tail_state(handle, size, source)` -> (records parsed from the last complete record on,
  offset where a torn tail starts or `size`); InputError for an unparsable header there.
- `last_seq(records)` -> highest seq of a non-note record (0 if none); `last_stats(records)` ->
  the JSON object of the last parseable "stats" record, or None.
- `read_tail_summary(path)` -> {"path", "size", "records", "last_seq", "stats", "last_time"};
  a missing file gives zeros and None, an unreadable one InputError. The cost does not grow
  with the file: only the tail up to the last stats record is read.
"""
import json
import os

from nagent_conversation_format import HEADER_MARK, parse_header, parse_records
from nagent_errors import InputError

_BACK_MARK = b"\n" + HEADER_MARK
_CHUNK = 1 << 18


def iter_header_offsets(handle, size, chunk=_CHUNK):
    """Offsets of lines starting with "<nagent-record", last first, reading backwards."""
    pos = size
    while pos > 0:
        start = max(0, pos - chunk)
        handle.seek(start)
        # Overlap by len(mark)-1 so a mark straddling `pos` is seen once, here.
        buf = handle.read(min(size, pos + len(_BACK_MARK) - 1) - start)
        hit = len(buf)
        while True:
            hit = buf.rfind(_BACK_MARK, 0, hit)
            if hit < 0:
                break
            yield start + hit + 1
        pos = start
    if size:
        handle.seek(0)
        if handle.read(len(HEADER_MARK)) == HEADER_MARK:
            yield 0


def header_at(handle, offset, limit=1 << 20):
    """parse_header of the complete line at `offset`, or None."""
    handle.seek(offset)
    line = handle.readline(limit)
    if not line.endswith(b"\n"):
        return None
    return parse_header(line[:-1].decode("utf-8", "replace"))


def tail_state(handle, size, source=""):
    """(records parsed from the last complete record on, offset where a torn tail starts or
    `size`), reading only the tail of the file."""
    for offset in iter_header_offsets(handle, size):
        handle.seek(offset)
        records, torn = parse_records(handle.read(size - offset), source=source, offset=offset)
        if any(record.kind != "note" for record in records):
            return records, size - len(torn)
    handle.seek(0)
    records, torn = parse_records(handle.read(size), source=source)
    return records, size - len(torn)


def last_seq(records):
    return max((record.seq for record in records if record.kind != "note"), default=0)


def last_stats(records):
    """The JSON object of the last parseable "stats" record, or None."""
    for record in reversed(records):
        if record.kind == "stats":
            try:
                data = json.loads(record.body)
            except ValueError:
                continue
            if isinstance(data, dict):
                return data
    return None


def read_tail_summary(path):
    """{"path", "size", "records", "last_seq", "stats", "last_time"} from the file's tail only:
    headers are found scanning backwards, so the cost does not grow with the file. "records" is
    the last complete record's seq (seqs count records); "stats" is the last stats JSON."""
    path = os.fspath(path)
    summary = {"path": path, "size": 0, "records": 0, "last_seq": 0, "stats": None,
               "last_time": None}
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        return summary
    except OSError as error:
        raise InputError("cannot read conversation", path, error.strerror or str(error))
    with handle:
        size = os.fstat(handle.fileno()).st_size
        summary["size"] = size
        have_last, end = False, size
        for offset in iter_header_offsets(handle, size):
            header = header_at(handle, offset)
            if header is not None and (not have_last or header[1] == "stats"):
                handle.seek(offset)
                try:
                    records = parse_records(handle.read(end - offset), offset=offset)[0]
                except InputError:
                    records = []
                records = [record for record in records if record.kind != "note"]
                if records and not have_last:
                    have_last = True
                    summary.update(records=records[-1].seq, last_seq=records[-1].seq,
                                   last_time=records[-1].time or None)
                summary["stats"] = last_stats(records[:1])
                if summary["stats"] is not None:
                    break
            end = offset
    return summary
