"""The conversation store: reading a conversation file and the one appender of a run.

Data contract
-------------
* The record format (framing, escaping, kinds, torn tails) is nagent_conversation_format; the lock
  is nagent_conversation_lock; where a conversation's files live is nagent_conversation_layout.
  Their main names, and the tail readers of nagent_conversation_tail, are re-exported here for
  callers that only read or append.
* `read_records(path)` returns all records of a conversation file ([] when it is missing); a torn
  tail is ignored. InputError when it cannot be read or has an unparsable header.
* Writing: one ConversationWriter per run holds the conversation's exclusive lock (polling up to
  lock_timeout seconds, then BusyError). Each record is ONE os.write on an O_APPEND descriptor;
  bytes already in the file are never rewritten (only a torn tail is cut). Page-cache data
  survives SIGKILL, so there is no fsync per record; sync() does it on demand.
* Torn tail: on open, under the lock, a torn tail (see the format) is copied to
  `NAME.d/torn-{UTC stamp}` (layout.torn_path), truncated away, and `.torn` names the copy so the
  loop can append a "system" record saying so. An old-layout `NAME.checkpoint.md` is adopted into
  `NAME.d/checkpoint.md` (layout.adopt_legacy_checkpoint).
* `append(kind, body, attrs)` returns the Record as a reader would see it; `records()` re-reads
  the file only when it changed; `reopen()` keeps the lock but re-opens the path after the holder
  replaced the file (os.replace).
* A file replaced behind the writer (`sed -i`, an editor's save-by-rename, `mv`, `rm`): before
  each append and each records() the writer checks that its path still names the file it holds
  (device and inode). If not, the bytes of the file it holds are kept in `NAME.d/replaced-{UTC
  stamp}` (layout.replaced_path), and then: when the path names a file again, the writer
  re-opens it (recovering a torn tail as on open) and appends a "system" record naming the
  kept copy before the record asked for; when it names nothing, InputError ("conversation file
  was removed during the run"), for this and every later append. Nothing is ever written into
  an unlinked file.
* The lock is checked the same way before each append: when `NAME.d/lock` no longer names the
  file whose flock the writer holds (the state dir was removed), the writer takes the lock at
  the path again (BusyError, nothing appended, when another run holds it by then).
"""
import os

from nagent_conversation_format import (BAD_HEADER_FIX, FOOTER, HEADER_MARK, KINDS,  # noqa: F401
                                        Record, attr_items, encode_record, encode_records,
                                        escape_body, parse_header, parse_records, unescape_body,
                                        utc_now, utc_stamp)
from nagent_conversation_layout import (adopt_legacy_checkpoint, lock_path, replaced_path,  # noqa: F401
                                        state_dir, torn_path)
from nagent_conversation_lock import (BUSY_FIX, acquire_lock, conversation_lock,  # noqa: F401
                                      is_busy, release_lock)
from nagent_conversation_tail import (header_at, iter_header_offsets, last_seq,  # noqa: F401
                                      last_stats, read_tail_summary, tail_state, window_chain)
from nagent_errors import InputError
from nagent_fs import write_unique


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
        self._removed = None    # the InputError once the path named no file any more
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
        adopt_legacy_checkpoint(self.path)
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
            self.torn = write_unique(torn_path(self.path, utc_stamp()), torn)
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

    def _keep_lock(self):
        """The flock is held on an inode: when `NAME.d/lock` no longer names it (a removed state
        dir), take the lock at the path again, or stop: another run may hold the new one."""
        try:
            named = os.stat(lock_path(self.path))
            held = os.fstat(self._lock_fd)
            if (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
                return
        except OSError:
            pass
        fresh = acquire_lock(self.path, 0)   # BusyError when another run took it meanwhile
        old, self._lock_fd = self._lock_fd, fresh
        release_lock(old)

    def _still_named(self):
        """True while `path` names the file this writer holds."""
        try:
            named = os.stat(self.path)
        except OSError:
            return False
        held = os.fstat(self._fd)
        return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)

    def _follow_replacement(self):
        """The path names another file, or none: keep what this writer holds, then re-open the
        path and say so in it, or stop."""
        if self._removed is not None:
            raise self._removed
        kept = write_unique(replaced_path(self.path, utc_stamp()),
                            _read_fully(self._fd, os.fstat(self._fd).st_size))
        if not os.path.exists(self.path):
            self._removed = InputError("conversation file was removed during the run", self.path,
                                       f"what the run had written is kept in {kept}; nothing "
                                       "more was appended")
            raise self._removed
        self.reopen()
        self.append("system", f"<system>The conversation file was replaced during this run (an "
                    f"editor or sed -i); nagent goes on in the file now at this path. The file "
                    f"as this run had it is kept in {kept}.</system>", {"replaced": kept})

    def append(self, kind, body, attrs=None):
        """Append one record with a single os.write; returns it as a reader would see it."""
        if self._fd is None:
            raise ValueError("conversation writer is closed")
        self._keep_lock()
        if self._removed is not None or not self._still_named():
            self._follow_replacement()
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
        if self._removed is None and not self._still_named():
            self._follow_replacement()
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
