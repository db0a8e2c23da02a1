"""Reading a conversation file from its end: status summaries and the torn-tail check.

Data contract (the record format itself is described in nagent_conversation_format):
- `iter_header_offsets(handle, size)` yields the byte offsets of the lines that start with
  "<nagent-record", last first, reading the binary `handle` backwards in chunks.
- `header_at(handle, offset)` -> parse_header of the complete line at `offset`, or None.
- `tail_state(handle, size, source)` -> (records parsed from the last complete record on,
  offset where a torn tail starts or `size`); InputError for an unparsable header there.
- `last_seq(records)` -> highest seq of a non-note record (0 if none); `last_stats(records)` ->
  the last decodable "stats" record, decoded by nagent_stats_format.decode_stats (either
  format), or None.
- `read_tail_summary(path)` -> {"path", "size", "records", "last_seq", "stats", "last_time",
  "prompts_after"}: "stats" as last_stats gives it, "prompts_after" the user prompts written
  after it (a run that failed before its first model call wrote no stats record). A missing
  file gives zeros and None, an unreadable one InputError. The cost does not grow with the
  file: only the tail up to the last stats record is read.
- `window_chain(stats)` -> the archived windows before the one `stats` (decoded) describes,
  oldest first: an older-format record lists them all; a current one names the window before
  it (`previous`), whose own last stats record names the one before, and so on (one tail read
  per window; a missing or unreadable window ends the chain there).
"""
import os

from nagent_conversation_format import HEADER_MARK, Record, parse_header, parse_records
from nagent_errors import InputError
from nagent_run_records import is_user_prompt
from nagent_stats_format import decode_stats

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
    """The last decodable "stats" record, decoded (see nagent_stats_format), or None."""
    for record in reversed(records):
        if record.kind == "stats":
            data = decode_stats(record.body)
            if data is not None:
                return data
    return None


def window_chain(stats, limit=10000):
    """Archived windows before the one `stats` describes, oldest first."""
    if not stats:
        return []
    if stats.get("windows") is not None:
        return list(stats["windows"])
    chain, seen, previous = [], set(), stats.get("previous")
    while previous and previous not in seen and len(chain) < limit:
        seen.add(previous)
        chain.append(previous)
        try:
            before = read_tail_summary(previous)["stats"] if os.path.isfile(previous) else None
        except InputError:
            before = None
        if not before:
            break
        if before.get("windows") is not None:
            chain.extend(reversed(before["windows"]))
            break
        previous = before.get("previous")
    return chain[::-1]


def read_tail_summary(path):
    """{"path", "size", "records", "last_seq", "stats", "last_time", "prompts_after"} from the
    file's tail only:
    headers are found scanning backwards, so the cost does not grow with the file. "records" is
    the last complete record's seq (seqs count records); "stats" is the last stats record,
    decoded; "prompts_after" counts the user prompts after it."""
    path = os.fspath(path)
    summary = {"path": path, "size": 0, "records": 0, "last_seq": 0, "stats": None,
               "last_time": None, "prompts_after": 0}
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
            if header is not None and header[1] == "prompt":
                summary["prompts_after"] += is_user_prompt(Record(header[0], header[1], "", header[3]))
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
