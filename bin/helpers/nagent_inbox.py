"""The inbox of a conversation: messages sent to it (`nagent --send`) while it runs or between runs.

Data contract
-------------
Layout, inside the conversation's state dir (nagent_conversation_layout.state_dir, `NAME.d/`):

    inbox/msg-{time ns:020d}-{pid}-{random hex}   one message each (UTF-8 text, 0600), waiting
    inbox/claimed/msg-...                         taken by the run holding NAME's lock, being
                                                  appended (gone once it is in the file)

* `send(path, text, environ=None) -> message id`: needs no lock. The message is written whole
  to a temp file and linked into `inbox/` under a name that cannot exist yet (atomic_write with
  exclusive=True), so a reader sees a message whole or not at all, and concurrent senders never
  overwrite each other. Names sort by send time. InputError: empty, not UTF-8 text, or over
  MAX_MESSAGE_BYTES (nothing is written then).
* `waiting(path)` -> how many messages wait in `inbox/` (one listdir: cheap at every turn).
* `take(path, records) -> [(id, text)]` (`records`: a callable returning the conversation's records,
  called only when left-overs need checking), in send order, for the ONE process holding the
  conversation's lock (the running instance): each waiting message is claimed by an atomic rename
  into `claimed/` and read. Left-overs in `claimed/` from a run killed after claiming come first:
  a message whose id a record of `records` already carries (attribute `inbox`) was appended
  before the kill and is dropped; the others are taken again. An entry that is not a regular
  file (a symlink, a FIFO: not something `send` wrote) is dropped unread. The caller appends each message
  as a prompt record with source="inbox" and inbox=ID, then calls `delivered(path, id)`, which
  removes the claimed copy. So every message is appended exactly once.
* A message is data the user sends, like a prompt: stored as a prompt record's body (the record
  format escapes it); the request builder frames it (nagent_requests).
"""
import os
import re
import time

from nagent_conversation_layout import state_dir
from nagent_errors import InputError
from nagent_fs import atomic_write, read_regular

MAX_MESSAGE_BYTES = 64 * 1024
MESSAGE_RE = re.compile(r"msg-\d{20}-\d+-[0-9a-f]{16}\Z")
SOURCE = "inbox"


def inbox_dir(path):
    return os.path.join(state_dir(path), "inbox")


def claimed_dir(path):
    return os.path.join(inbox_dir(path), "claimed")


def check_message(text):
    """The message as UTF-8 bytes, or InputError."""
    data = text.encode("utf-8", "surrogateescape") if isinstance(text, str) else bytes(text)
    if len(data) > MAX_MESSAGE_BYTES:
        raise InputError("message too large", f"{len(data)} bytes",
                         f"at most {MAX_MESSAGE_BYTES} bytes; put longer text in a file and send "
                         "its path")
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("message is not UTF-8 text", f"{len(data)} bytes", "send text") from None
    if not decoded.strip():
        raise InputError("empty message", repr(decoded[:20]), "give the running nagent something to read")
    return data


def send(path, text, environ=None):
    data = check_message(text)
    folder = inbox_dir(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    except OSError as error:
        raise InputError("cannot create the inbox", folder, error.strerror or str(error)) from None
    for _ in range(100):
        name = f"msg-{time.time_ns():020d}-{os.getpid()}-{os.urandom(8).hex()}"
        try:
            atomic_write(os.path.join(folder, name), data, 0o600, exclusive=True)
            return name
        except FileExistsError:
            continue
        except OSError as error:
            raise InputError("cannot write the message", folder, error.strerror or str(error)) from None
    raise InputError("cannot name the message", folder, "try again")


def _names(folder):
    try:
        return sorted(name for name in os.listdir(folder) if MESSAGE_RE.match(name))
    except OSError:
        return []


def waiting(path):
    return len(_names(inbox_dir(path)))


def _read(path):
    """A message's text; None when it is not a regular file (a link, a FIFO) or unreadable."""
    data = read_regular(path, MAX_MESSAGE_BYTES)
    return None if data is None else data.decode("utf-8", "replace")


def take(path, records):
    claimed = claimed_dir(path)
    taken = []
    leftovers = _names(claimed)
    if leftovers:
        appended = {record.attr(SOURCE) for record in records()
                    if record.kind == "prompt" and record.attr("source") == SOURCE}
        for name in leftovers:
            if name in appended:
                delivered(path, name)
                continue
            text = _read(os.path.join(claimed, name))
            if text is None:
                delivered(path, name)   # not a message nagent wrote (a link, a FIFO): dropped
            else:
                taken.append((name, text))
    names = _names(inbox_dir(path))
    if not names:
        return taken
    try:
        os.makedirs(claimed, mode=0o700, exist_ok=True)
    except OSError:
        return taken
    for name in names:
        target = os.path.join(claimed, name)
        try:
            os.rename(os.path.join(inbox_dir(path), name), target)
        except OSError:
            continue
        text = _read(target)
        if text is None:
            delivered(path, name)
        else:
            taken.append((name, text))
    return taken


def delivered(path, name):
    try:
        os.unlink(os.path.join(claimed_dir(path), name))
    except OSError:
        pass
