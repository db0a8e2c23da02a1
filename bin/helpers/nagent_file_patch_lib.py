"""Merge edited split segments back into their source file.

Data contract:
- `patch_from_index(index_path, dry_run=False, force=False, authorize=None, expect=None) -> dict`
  returns
    {"status": "applied" | "dry-run" | "unchanged", "source": realpath, "index_path": path,
     "patch_path": path or None, "changed_lines": added + removed, "added_lines": n,
     "removed_lines": n, "hunks": n, "changed_segments": [file names], "forced": bool,
     "source_sha256": hash of the source after the call, "warnings": [str]}
  Order of work: load the index (InputError if missing/corrupt) -> with `expect=(source,
  sha256)`, the index must name that source (same realpath) with that source_sha256, else
  RefusedError "index does not describe the expected source" (never overridden by `force`: the
  caller's own record of the split decides the target, not the index file) -> `authorize(realpath
  of the source)` (raises RefusedError to stop; called before anything is written) -> read the source
  and compare its sha256 with the index (RefusedError unless `force`) -> read every segment
  (a missing one is an InputError; merged bytes must be UTF-8) -> no difference: "unchanged",
  nothing written -> write `<index dir>/patches/<UTC stamp>-<n>.patch` (unified diff with
  `a/<name>` / `b/<name>` headers, original line endings kept) -> unless `dry_run`, replace the
  source atomically through its directory opened without following links
  (nagent_fs.replace_nofollow: the hash re-checked on the bytes read there, permission bits
  kept; a link swapped onto the path meanwhile is RefusedError, nothing written) and rewrite index.json
  with the new source hash/size/lines and per-segment offsets, lines, hashes and "mid_line"
  (from the new bytes); a summary stays while its segment is unchanged, "inside" while the
  segments from its construct's head to it are, "cut_at" while the segment still ends inside a
  line and every segment holding that line is unchanged (else they are dropped, never guessed).
"""
import difflib
import errno
import os
from bisect import bisect_right
from datetime import datetime, timezone
from itertools import accumulate

from nagent_errors import InputError, RefusedError
from nagent_file_split_lib import load_index, now_iso, read_source, resolve_index_path, write_index
from nagent_fs import open_dir_nofollow, replace_nofollow, sha256_bytes

PATCH_DIR = "patches"
CONTEXT_LINES = 3


def split_lines(data):
    """Lines of `data` with their endings (b"\\n" only ends a line)."""
    if not data:
        return []
    lines = data.split(b"\n")
    last = lines.pop()
    out = [line + b"\n" for line in lines]
    if last:
        out.append(last)
    return out


def line_count(data):
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)


class LazyLines:
    """The lines of a file given as consecutive byte blocks that each end on a line boundary
    (the last may not); a block is split into lines only when one of its lines is read."""

    def __init__(self, blocks):
        self.blocks, self.first, total = [], [], 0
        for block in blocks:
            if block:
                self.blocks.append(block)
                self.first.append(total)
                total += line_count(block)
        self.total = total
        self.cache = {}

    def __len__(self):
        return self.total

    def _lines(self, number):
        if number not in self.cache:
            self.cache[number] = split_lines(self.blocks[number])
        return self.cache[number]

    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, _ = key.indices(self.total)
            out = []
            while start < stop:
                number = bisect_right(self.first, start) - 1
                lines = self._lines(number)
                offset = start - self.first[number]
                take = lines[offset:offset + stop - start]
                out.extend(take)
                start += len(take)
            return out
        number = bisect_right(self.first, key) - 1
        return self._lines(number)[key - self.first[number]]


def _middle_opcodes(a, b, a0, a1, b0, b1):
    """Opcodes for a[a0:a1] vs b[b0:b1]: equal prefix/suffix trimmed before difflib runs."""
    codes = []
    start_a, start_b = a0, b0
    while a0 < a1 and b0 < b1 and a[a0] == b[b0]:
        a0, b0 = a0 + 1, b0 + 1
    if a0 > start_a:
        codes.append(("equal", start_a, a0, start_b, b0))
    end_a, end_b = a1, b1
    while a1 > a0 and b1 > b0 and a[a1 - 1] == b[b1 - 1]:
        a1, b1 = a1 - 1, b1 - 1
    if a0 < a1 or b0 < b1:
        # autojunk keeps huge middles fast; small ones get the exact (junk-free) diff.
        small = (a1 - a0) * (b1 - b0) < 4_000_000
        matcher = difflib.SequenceMatcher(None, a[a0:a1], b[b0:b1], autojunk=not small)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            codes.append((tag, a0 + i1, a0 + i2, b0 + j1, b0 + j2))
    if a1 < end_a:
        codes.append(("equal", a1, end_a, b1, end_b))
    return codes


def _merge_equal(codes):
    merged = []
    for code in codes:
        if merged and code[0] == "equal" and merged[-1][0] == "equal":
            tag, i1, _, j1, _ = merged[-1]
            merged[-1] = ("equal", i1, code[2], j1, code[4])
        elif code[1] != code[2] or code[3] != code[4]:
            merged.append(code)
    return merged


def aligned_blocks(old_parts, new_parts):
    """Group segment pairs into blocks that end on a line boundary on both sides."""
    old_blocks, new_blocks, block_old, block_new = [], [], [], []
    open_old = open_new = False
    for number, (old_part, new_part) in enumerate(zip(old_parts, new_parts)):
        block_old.append(old_part)
        block_new.append(new_part)
        open_old = not old_part.endswith(b"\n") if old_part else open_old
        open_new = not new_part.endswith(b"\n") if new_part else open_new
        if (open_old or open_new) and number < len(old_parts) - 1:
            continue
        old_blocks.append(b"".join(block_old))
        new_blocks.append(b"".join(block_new))
        block_old, block_new = [], []
    return old_blocks, new_blocks


def diff_opcodes(old, new, old_parts=None, new_parts=None):
    """(a, b, opcodes): difflib-style opcodes over the lines of `old` vs `new`. Given the
    old/new segment bytes, only blocks that differ are diffed and split into lines, so a
    100,000-line file with one edited segment stays fast."""
    if not old_parts:
        a, b = LazyLines([old]), LazyLines([new])
        return a, b, _merge_equal(_middle_opcodes(a, b, 0, len(a), 0, len(b)))
    old_blocks, new_blocks = aligned_blocks(old_parts, new_parts)
    a, b = LazyLines(old_blocks), LazyLines(new_blocks)
    codes, ia, ib = [], 0, 0
    for old_block, new_block in zip(old_blocks, new_blocks):
        lines_a, lines_b = line_count(old_block), line_count(new_block)
        if old_block == new_block:
            codes.append(("equal", ia, ia + lines_a, ib, ib + lines_b))
        else:
            codes.extend(_middle_opcodes(a, b, ia, ia + lines_a, ib, ib + lines_b))
        ia, ib = ia + lines_a, ib + lines_b
    return a, b, _merge_equal(codes)


class _Grouper(difflib.SequenceMatcher):
    """difflib's hunk grouping over opcodes computed elsewhere."""

    def __init__(self, codes):  # noqa: D107 - deliberately skips SequenceMatcher's setup
        self._codes = codes

    def get_opcodes(self):
        return self._codes


def _range(start, stop):
    length = stop - start
    if length == 1:
        return f"{start + 1}"
    return f"{start if not length else start + 1},{length}"


def _emit(out, prefix, line):
    out.append(prefix + line)
    if not line.endswith(b"\n"):
        out.append(b"\n\\ No newline at end of file\n")


def unified_diff(a, b, codes, name, context=CONTEXT_LINES):
    """(patch bytes, added, removed, hunks) for opcodes over line lists `a` and `b`."""
    out = [f"--- a/{name}\n+++ b/{name}\n".encode("utf-8")]
    added = removed = hunks = 0
    for group in _Grouper(codes).get_grouped_opcodes(context):
        hunks += 1
        first, last = group[0], group[-1]
        out.append(f"@@ -{_range(first[1], last[2])} +{_range(first[3], last[4])} @@\n"
                   .encode("ascii"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                for line in a[i1:i2]:
                    _emit(out, b" ", line)
                continue
            for line in a[i1:i2]:
                _emit(out, b"-", line)
            for line in b[j1:j2]:
                _emit(out, b"+", line)
            removed += i2 - i1
            added += j2 - j1
    return b"".join(out), added, removed, hunks


def write_patch_artifact(directory, data, now=None):
    """Create `<directory>/patches/<UTC stamp>-<n>.patch` without overwriting; returns its path."""
    folder = os.path.join(directory, PATCH_DIR)
    try:
        # No link as patches/ or on the way: it would carry the artifact out of the split.
        dir_fd = open_dir_nofollow(folder, make=lambda child: child == folder)
    except OSError as error:
        raise RefusedError("patch directory is a symlink or not a directory", folder,
                           error.strerror) from None
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    number = 1
    try:
        while True:
            name = f"{stamp}-{number}.patch"
            try:
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644,
                             dir_fd=dir_fd)
            except FileExistsError:
                number += 1
                continue
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            return os.path.join(folder, name)
    finally:
        os.close(dir_fd)


def _no_follow(path, flags):
    return os.open(path, flags | getattr(os, "O_NOFOLLOW", 0))


def read_segments(directory, index):
    parts = []
    for record in index["segments"]:
        path = os.path.join(directory, record["file"])
        try:
            # A segment that became a symlink could smuggle another file into the source.
            with open(path, "rb", opener=_no_follow) as handle:
                parts.append(handle.read())
        except FileNotFoundError:
            raise InputError("split segment is missing", path,
                             "restore it or re-split with nagent-file-split --refresh") from None
        except OSError as error:
            raise InputError("cannot read split segment", path, error.strerror) from None
    return parts


def _check_utf8(parts, index, directory):
    for record, part in zip(index["segments"], parts):
        try:
            part.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError("split segment is not UTF-8 text",
                             os.path.join(directory, record["file"])) from None


def _old_parts(index, old):
    """The source cut at the index's offsets, when those offsets tile it exactly."""
    offset, parts = 0, []
    for record in index["segments"]:
        if record["start_byte"] != offset or record["end_byte"] < offset:
            return None
        parts.append(old[offset:record["end_byte"]])
        offset = record["end_byte"]
    return parts if offset == len(old) else None


def _mid_line(new, start, end):
    """The splitter's "mid_line" for bytes [start, end) of `new`, or None (on a line's ends)."""
    starts = 0 < start and new[start - 1:start] != b"\n"
    ends = 0 < end < len(new) and new[end - 1:end] != b"\n"
    return "both" if starts and ends else "start" if starts else "end" if ends else None


def _labels_kept(records, same):
    """Per segment, whether it still lies inside the construct its "inside" names: it and every
    segment from the one before that label's first use (where the construct's head line may
    sit, when a data format packed it behind another) up to it are unchanged."""
    first, changed, kept = {}, list(accumulate((not flag for flag in same), initial=0)), []
    for number, record in enumerate(records):
        label = record.get("inside")
        start = max(first.setdefault(label, number) - 1, 0)
        kept.append(label is not None and changed[number + 1] == changed[start])
    return kept


def _line_kept(old, new, same, number):
    """Whether every segment holding a part of the line cut at the end of segment `number`,
    before or after the edit (`old` and `new` mid_line values), is unchanged: then the cut's
    description ("cut_at") still tells how it was made."""
    def starts_mid(n):
        return old[n] in ("start", "both") or new[n] in ("start", "both")

    def ends_mid(n):
        return old[n] in ("end", "both") or new[n] in ("end", "both")
    low, high = number, number + 1
    while low > 0 and starts_mid(low):
        low -= 1
    while high < len(old) - 1 and ends_mid(high):
        high += 1
    return all(same[low:high + 1])


def refreshed_index(index, parts, digests, new):
    """The index after `new` (made of `parts`, with sha256 `digests`) replaced the source.
    Positions, hashes and "mid_line" are derived from the new bytes; a summary is kept while its
    segment is unchanged, "inside" while the segments from its construct's head to it are, and
    "cut_at" while the segment still ends inside a line and every segment of that line is
    unchanged."""
    same = [digest == record["sha256"] for record, digest in zip(index["segments"], digests)]
    ends = list(accumulate(map(len, parts)))
    labels = _labels_kept(index["segments"], same)
    old_mid = [record.get("mid_line") for record in index["segments"]]
    new_mid = [_mid_line(new, end - len(part), end) for part, end in zip(parts, ends)]
    records, line = [], 1
    for number, (record, part, digest) in enumerate(zip(index["segments"], parts, digests)):
        breaks = part.count(b"\n")
        # An empty segment covers no line: last_line = first_line - 1, as split_file writes it.
        last_line = line + breaks - (1 if part.endswith(b"\n") or not part else 0)
        entry = {"file": record["file"], "first_line": line, "last_line": last_line,
                 "start_byte": ends[number] - len(part), "end_byte": ends[number],
                 "bytes": len(part), "sha256": digest}
        if "summary" in record and same[number]:
            entry["summary"] = record["summary"]
        if labels[number]:
            entry["inside"] = record["inside"]
        if new_mid[number]:
            entry["mid_line"] = new_mid[number]
        if "cut_at" in record and new_mid[number] in ("end", "both") and \
                _line_kept(old_mid, new_mid, same, number):
            entry["cut_at"] = record["cut_at"]
        records.append(entry)
        line += breaks
    updated = dict(index, source_sha256=sha256_bytes(new), source_size=len(new),
                   source_lines=line_count(new), updated=now_iso(), segments=records)
    return updated


def _warnings(index, parts):
    notes = []
    for record, part in zip(index["segments"][:-1], parts[:-1]):
        if part and not part.endswith(b"\n"):
            notes.append(f"{record['file']} does not end with a newline: its last line joins "
                         "the next segment's first line")
    return notes


def check_expected(index, source, expect, path):
    """RefusedError unless the index names the expected source with the expected hash."""
    want_source, want_sha = expect
    if source != os.path.realpath(want_source) or index["source_sha256"] != want_sha:
        raise RefusedError("index does not describe the expected source", path,
                           f"expected {want_source} with sha256 {want_sha}; the index names "
                           f"{index['source']} with {index['source_sha256']}: it changed since "
                           "the split was made, so split the file again")


def patch_from_index(index_path, dry_run=False, force=False, authorize=None, expect=None):
    path = resolve_index_path(index_path)
    index = load_index(path)
    directory = os.path.dirname(os.path.realpath(path))   # written through, never re-resolved
    source = os.path.realpath(index["source"])
    if expect is not None:
        check_expected(index, source, expect, path)
    if authorize is not None:
        authorize(source)
    _, old = read_source(source)
    mismatch = sha256_bytes(old) != index["source_sha256"]
    if mismatch and not force:
        raise RefusedError("source changed since it was split", source,
                           "re-split with nagent-file-split --refresh, or pass --force to "
                           "overwrite the current source with the segments")
    parts = read_segments(directory, index)
    _check_utf8(parts, index, directory)
    new = b"".join(parts)
    digests = [sha256_bytes(part) for part in parts]
    changed = [record["file"] for record, digest in zip(index["segments"], digests)
               if digest != record["sha256"]]
    result = {"status": "unchanged", "source": source, "index_path": path, "patch_path": None,
              "changed_lines": 0, "added_lines": 0, "removed_lines": 0, "hunks": 0,
              "changed_segments": changed, "forced": bool(force and mismatch),
              "source_sha256": sha256_bytes(old), "warnings": _warnings(index, parts)}
    if new == old:
        return result
    old_parts = None if mismatch else _old_parts(index, old)
    a, b, codes = diff_opcodes(old, new, old_parts, parts if old_parts else None)
    patch, added, removed, hunks = unified_diff(a, b, codes, os.path.basename(source))
    result.update(patch_path=write_patch_artifact(directory, patch), added_lines=added,
                  removed_lines=removed, changed_lines=added + removed, hunks=hunks,
                  status="dry-run" if dry_run else "applied")
    if dry_run:
        return result
    def unchanged(current):   # read through the directory the write goes through
        if not force and sha256_bytes(current) != index["source_sha256"]:
            raise RefusedError("source changed while patching", source, "run nagent-file-patch again")
    try:
        replace_nofollow(source, new, check=unchanged)
    except OSError as error:
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            raise RefusedError("patch refused", source, f"a link was put on its path while patching, "
                               f"at {error.filename}; nothing written") from None
        raise InputError("cannot write source file", source, error.strerror) from None
    try:
        write_index(directory, refreshed_index(index, parts, digests, new), follow_links=False)
    except OSError as error:
        raise InputError("source patched, but its index.json could not be rewritten", directory,
                         f"{error.strerror or error}; split the file again") from None
    result["source_sha256"] = sha256_bytes(new)
    return result
