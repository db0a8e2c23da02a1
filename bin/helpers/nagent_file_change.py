"""What an action changed in a file: before and after, as counts, hashes and a unified diff.

An action that may change a file outside the temp roots (a replace, a per-file session's write
or patch, a nested edit session) takes a `snapshot` of it first and asks `change_since` after;
the live view shows the change (`✎ src/foo.py +3 −1` and, on a terminal, the diff), --events
reports it (`file_change`), --json lists it, and the result the model reads carries a short diff.
Files inside the temp roots are scratch space: they are not shown.

Data contract:
- `Snapshot(path, data, sha256)`: `data` the file's bytes (None when it is missing, not a regular
  file, unreadable, or over DIFF_MAX_BYTES: then only its sha256 is known). `snapshot(path,
  environ, cwd)` -> a Snapshot, or None for a path inside the temp roots (or one whose links
  change while it is resolved). A FIFO or device is never opened; nothing here raises OSError.
- `change_since(before, cwd) -> FileChange | None`: None when the file is as it was.
  `FileChange(path, shown, added, removed, diff, sha256_before, sha256_after)`: `shown` is the
  path relative to `cwd` when inside it; a sha256 is None for a file that did not exist.
- `unified_diff(before, after, name, context=3) -> (text, added, removed)` (pure): a unified diff
  of two byte strings by line; common leading and trailing lines are set aside first, so a small
  change in a large file costs what the change costs. Lines are shown without their line ending
  (a change of line ending alone still shows as -/+ of the same text), undecodable bytes as U+FFFD.
- `capped(text, max_lines, max_bytes) -> (text, cut)`: the first lines of a diff, with a last
  line saying how many were left out when it had to be cut.
- `summary(change)` -> "src/foo.py +3 −1".
- `between(path, before, after, cwd) -> FileChange | None` (pure): the change from the bytes
  `before` to `after` (None: the file did not exist) of the file at `path`, for changes known
  from elsewhere than a snapshot here (a shell action's, from the run's project snapshots). A
  binary side (a NUL byte in its first BINARY_PROBE bytes, git's rule) gets no diff: counts 0.
"""
import difflib
import hashlib
import os
import stat
from collections import namedtuple
from dataclasses import dataclass

from nagent_paths import within, within_any
from nagent_write_policy import temp_roots

DIFF_MAX_BYTES = 16 << 20
BINARY_PROBE = 8000   # as git: a NUL byte in the first 8000 bytes makes a file binary
MINUS = "\u2212"

Snapshot = namedtuple("Snapshot", "path data sha256")


@dataclass(frozen=True)
class FileChange:
    path: str
    shown: str
    added: int
    removed: int
    diff: str
    sha256_before: str | None
    sha256_after: str | None


def _read(path):
    """(data or None, sha256 or None) of the regular file at `path`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None, None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            return None, None
        if st.st_size <= DIFF_MAX_BYTES:
            data = handle.read()
            return data, hashlib.sha256(data).hexdigest()
        digest = hashlib.sha256()
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
        return None, digest.hexdigest()


def snapshot(path, environ=None, cwd=None):
    try:
        real = os.path.realpath(path)
    except OSError:   # a link swapped under realpath (readlink EINVAL): nothing to show
        return None
    if within_any(real, temp_roots(environ, cwd), inclusive=True):
        return None
    try:
        st = os.stat(real)
    except OSError:
        return Snapshot(real, None, None)
    if not stat.S_ISREG(st.st_mode):
        return Snapshot(real, None, None)
    data, digest = _read(real)
    return Snapshot(real, data, digest)


def shown_path(path, cwd):
    here = os.path.realpath(cwd) if cwd else ""
    return os.path.relpath(path, here) if here and within(path, here) else path


def change_since(before, cwd):
    if before is None:
        return None
    data, digest = _read(before.path)
    if digest == before.sha256:
        return None
    shown = shown_path(before.path, cwd)
    # A missing side (created, deleted) diffs as empty; a side known by its hash alone, not at all.
    old = before.data if before.data is not None else (b"" if before.sha256 is None else None)
    new = data if data is not None else (b"" if digest is None else None)
    if old is not None and new is not None:
        text, added, removed = unified_diff(old, new, shown)
    else:
        text, added, removed = f"(no diff: {shown} is over {DIFF_MAX_BYTES >> 20} MiB)", 0, 0
    return FileChange(before.path, shown, added, removed, text, before.sha256, digest)


def between(path, before, after, cwd):
    if before == after:
        return None
    shown = shown_path(path, cwd)
    if any(b"\0" in (data or b"")[:BINARY_PROBE] for data in (before, after)):
        text, added, removed = f"(no diff: {shown} is binary)\n", 0, 0
    else:
        text, added, removed = unified_diff(before or b"", after or b"", shown)
    digest = (lambda data: None if data is None else hashlib.sha256(data).hexdigest())
    return FileChange(path, shown, added, removed, text, digest(before), digest(after))


# -- the diff (pure) ------------------------------------------------------------------------------

def _common_prefix(a, b):
    limit = min(len(a), len(b))
    count = 0
    while count < limit and a[count] == b[count]:
        count += 1
    return count


def _common_suffix(a, b, prefix):
    limit = min(len(a), len(b)) - prefix
    count = 0
    while count < limit and a[-1 - count] == b[-1 - count]:
        count += 1
    return count


def _range(start, stop):
    """A hunk range as difflib writes it, for the 0-based slice start:stop."""
    length = stop - start
    if length == 1:
        return str(start + 1)
    return f"{start + (1 if length else 0)},{length}"


def _text(line):
    return line.decode("utf-8", "replace").rstrip("\r\n")


def unified_diff(before, after, name, context=3):
    a, b = before.splitlines(keepends=True), after.splitlines(keepends=True)
    prefix = _common_prefix(a, b)
    suffix = _common_suffix(a, b, prefix)
    low = max(0, prefix - context)
    a_mid = a[low:len(a) - max(0, suffix - context)]
    b_mid = b[low:len(b) - max(0, suffix - context)]
    lines, added, removed = [f"--- a/{name}", f"+++ b/{name}"], 0, 0
    matcher = difflib.SequenceMatcher(None, a_mid, b_mid, autojunk=len(a_mid) > 2000)
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        lines.append(f"@@ -{_range(low + first[1], low + last[2])} "
                     f"+{_range(low + first[3], low + last[4])} @@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [" " + _text(line) for line in a_mid[i1:i2]]
                continue
            lines += ["-" + _text(line) for line in a_mid[i1:i2]]
            lines += ["+" + _text(line) for line in b_mid[j1:j2]]
            removed += i2 - i1
            added += j2 - j1
    return "\n".join(lines) + "\n", added, removed


def capped(text, max_lines, max_bytes):
    lines = text.splitlines()
    kept, size = [], 0
    for line in lines:
        size += len(line.encode("utf-8", "replace")) + 1
        if len(kept) >= max_lines or size > max_bytes:
            break
        kept.append(line)
    if len(kept) == len(lines):
        return text, False
    return "\n".join(kept) + f"\n[diff cut: {len(lines) - len(kept)} more lines]\n", True


def summary(change):
    return f"{change.shown} +{change.added} {MINUS}{change.removed}"
