"""Reading a conversation from its start: the session meta record it begins with.

Data contract: `session_meta(path) -> dict | None` is the JSON object of the first "meta" record
of conversation `path` (written once, when the conversation starts, after the initial context:
invocation, the context files read, the origin of a user's conversation, ...), or None when the
file is missing or unreadable, or has no such record before its first record that is neither
context nor meta (a file older than meta records, a conversation not started yet). Only the
head is read: 64 KiB, then four times more while the context records go on, up to HEAD_LIMIT.
A window rebuild carries this record verbatim, so every window of a conversation answers alike.
"""
import json

from nagent_conversation_format import parse_records
from nagent_errors import InputError

HEAD_LIMIT = 4 << 20


def session_meta(path):
    size = 64 << 10
    while True:
        try:
            with open(path, "rb") as handle:
                data = handle.read(size)
        except OSError:
            return None
        try:
            records = parse_records(data)[0]
        except InputError:   # a hand-broken header: no meta to trust
            return None
        for record in records:
            if record.kind == "meta":
                try:
                    meta = json.loads(record.body)
                except ValueError:
                    continue
                if isinstance(meta, dict):
                    return meta
            elif record.kind not in ("context", "note"):
                return None
        if len(data) < size or size >= HEAD_LIMIT:
            return None
        size *= 4  # the context records are larger than this: read further
