"""Split a UTF-8 text file into structure-aware segment files plus an index.json.

Data contract:
- `split_file(path, output_dir, target_bytes, split_type, summarize) -> dict` writes
  `<output_dir>/NNNN-<stem><ext>` segment files and `<output_dir>/index.json`, and returns the
  index it wrote:
    {"version": 1, "source": realpath, "source_sha256": hex, "source_size": bytes,
     "source_lines": n, "split_type": name, "target_bytes": n, "created": ISO-8601 UTC,
     "segments": [{"file": basename, "first_line": 1-based, "last_line": inclusive,
                   "start_byte": offset, "end_byte": exclusive, "bytes": n, "sha256": hex,
                   optional: "summary": str (only when summarised),
                   "inside": first line of the construct the segment was cut out of,
                   "mid_line": "start" | "end" | "both" (starts/ends inside a line over the
                               read limit), "cut_at": "token" | "string" | "char" (how that
                               line was cut at the segment's end)}]}
  Every segment is at most max(target_bytes, READ_SPLIT_THRESHOLD_BYTES) bytes. Concatenating
  the segment files in order reproduces the source byte for byte (LF, CRLF, mixed, no final
  newline, BOM kept in the first segment). An empty file has one empty segment (first_line 1,
  last_line 0). Non-UTF-8 input raises InputError; nothing is decoded lossily.
- `summarize(segment_text, segment_meta) -> str` is an optional callable; it runs for every
  segment before anything is written, so a failing model call leaves the directory untouched.
- Splitting into a directory that already holds a split never loses work: a split of another
  file, a listed segment edited since (its sha256 differs from the index and from what the new
  split writes there), or an unlisted file with a segment's name raises RefusedError with
  nothing changed, unless `force`, which first copies each such file (and, for another file's
  split, its index.json) to `<dir>/kept/<UTC stamp>/` and returns their paths as the index's
  transient "kept_edits" key (never written to index.json). Re-splitting removes only the
  segment files the previous index listed.
- `refresh_split(index_path, force=False)` re-splits the index's source with the index's
  settings under the same rule, keeping summaries of segments whose bytes did not change.
  `load_index` validates the schema and raises InputError for a missing or corrupt index.
"""
import json
import os
import re
import shutil
from datetime import datetime, timezone

from nagent_errors import InputError, RefusedError, UsageError
from nagent_fs import atomic_write, open_dir_nofollow, regular_file_stat, sha256_bytes, write_in_dir
from nagent_split_lexers import invalid_utf8_at
from nagent_splitters import LANGUAGES, looks_like_cpp, split_ranges

INDEX_VERSION = 1
INDEX_NAME = "index.json"
READ_SPLIT_THRESHOLD_BYTES = 64 * 1024
DEFAULT_TARGET_BYTES = 16 * 1024
BOM = b"\xef\xbb\xbf"
ALIASES = {"txt": "text", "md": "markdown", "py": "python", "h": "c", "c++": "cpp", "cc": "cpp",
           "cxx": "cpp", "hpp": "cpp", "htm": "html", "js": "javascript", "ts": "typescript",
           "yml": "yaml", "rs": "rust", "golang": "go", "jsonc": "json"}
_SEGMENT_NAME = re.compile(r"\d{4,}-[^/\\]*")
_HEX64 = re.compile(r"[0-9a-f]{64}")
KEPT_DIR = "kept"
MID_LINE = ("start", "end", "both")
CUT_AT = ("token", "string", "char")


def now_iso():
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


sha256_hex = sha256_bytes  # the name tests use


def split_types():
    return sorted(LANGUAGES)


def _extension_table():
    return {ext: lang.name for lang in LANGUAGES.values() for ext in lang.extensions}


def _sniff_shebang(path):
    try:
        with open(path, "rb") as handle:
            first = handle.readline(200)
    except OSError:
        return None
    if first.startswith(b"#!"):
        if b"python" in first:
            return "python"
        if b"node" in first or b"deno" in first:
            return "javascript"
    return None


def detect_split_type(path, explicit=None, data=None):
    """The canonical split type: `explicit` (names or aliases), else by extension (a `.h` whose
    `data` reads as C++ is cpp), else by a shebang line, else "text". An unknown explicit type
    is a UsageError."""
    if explicit:
        name = ALIASES.get(explicit.lower().lstrip("."), explicit.lower().lstrip("."))
        if name not in LANGUAGES:
            raise UsageError("unknown split type", explicit, "one of: " + ", ".join(split_types()))
        return name
    ext = os.path.splitext(os.fspath(path))[1].lower()
    found = _extension_table().get(ext)
    if found == "c" and ext == ".h" and data is not None and looks_like_cpp(data):
        return "cpp"
    if found:
        return found
    return (_sniff_shebang(path) if not ext else None) or "text"


def read_source(path):
    """(realpath, bytes) of a regular file, else InputError."""
    real, _st = regular_file_stat(path)
    try:
        with open(real, "rb") as handle:
            return real, handle.read()
    except OSError as error:
        raise InputError("cannot read file", path, error.strerror) from None


def decode_text(data, path):
    """The text without its BOM; non-UTF-8 bytes are an InputError (never replaced)."""
    try:
        return data[len(BOM):].decode("utf-8") if data.startswith(BOM) else data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise InputError("not UTF-8 text", path,
                         f"invalid byte at offset {error.start}; only UTF-8 text can be split"
                         ) from None


def check_utf8(data, path):
    """InputError unless `data` is UTF-8 (no text copy is kept)."""
    offset = invalid_utf8_at(data)
    if offset is not None:
        raise InputError("not UTF-8 text", path,
                         f"invalid byte at offset {offset}; only UTF-8 text can be split")


def plan_segments(data, split_type, target_bytes):
    """[(start, end, inside, start_mid, end_cut)] byte ranges tiling `data` (one empty range
    for no data), each at most max(target_bytes, READ_SPLIT_THRESHOLD_BYTES) bytes."""
    return split_ranges(data, LANGUAGES[split_type], target_bytes, READ_SPLIT_THRESHOLD_BYTES)


def segment_names(source_path, count):
    base = os.path.basename(source_path)
    stem, ext = os.path.splitext(base)
    width = max(4, len(str(count)))
    return [f"{number:0{width}d}-{stem or base}{ext}" for number in range(1, count + 1)]


def segment_records(data, segments, names):
    records, line = [], 1
    for name, (start, end, inside, start_mid, end_cut) in zip(names, segments):
        chunk = data[start:end]
        breaks = chunk.count(b"\n")
        # A segment that ends inside a line ends on that line; an empty one covers none.
        last = line + breaks - (1 if chunk.endswith(b"\n") or not chunk else 0)
        record = {"file": name, "first_line": line, "last_line": last, "start_byte": start,
                  "end_byte": end, "bytes": len(chunk), "sha256": sha256_bytes(chunk)}
        if inside:
            record["inside"] = inside
        if start_mid or end_cut:
            record["mid_line"] = "both" if start_mid and end_cut else (
                "start" if start_mid else "end")
        if end_cut:
            record["cut_at"] = end_cut
        records.append(record)
        line += breaks
    return records


def write_index(directory, index, follow_links=True):
    """`directory`/index.json, atomically; with follow_links=False `directory` is a resolved path
    opened without following any link (nagent_fs.open_dir_nofollow): one swapped in is refused."""
    data = (json.dumps(index, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    path = os.path.join(directory, INDEX_NAME)
    if follow_links:
        atomic_write(path, data)
        return path
    dir_fd = open_dir_nofollow(directory)
    try:
        write_in_dir(dir_fd, INDEX_NAME, data)
    finally:
        os.close(dir_fd)
    return path


def _prepare_dir(output_dir):
    directory = os.path.abspath(os.fspath(output_dir))
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise InputError("output is not a directory", output_dir)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        raise InputError("cannot create output directory", output_dir, error.strerror) from None


def _previous_index(directory):
    try:
        return load_index(os.path.join(directory, INDEX_NAME))
    except InputError:
        return None


def _check_target(target_bytes):
    if isinstance(target_bytes, bool) or not isinstance(target_bytes, int) or target_bytes < 1:
        raise UsageError("target bytes must be a positive integer", target_bytes)


def split_file(path, output_dir, target_bytes=DEFAULT_TARGET_BYTES, split_type=None,
               summarize=None, reuse_summaries=None, force=False):
    """Split `path` into segment files under `output_dir`; returns the index written (plus
    "kept_edits" when `force` kept copies of edited files)."""
    _check_target(target_bytes)
    real, data = read_source(path)
    name = detect_split_type(path, split_type, data)
    check_utf8(data, path)
    directory = os.path.abspath(os.fspath(output_dir))
    if os.path.dirname(real) == directory and os.path.basename(real) == INDEX_NAME:
        raise InputError("the source would be overwritten by the index", path,
                         "choose another --output directory")
    segments = plan_segments(data, name, target_bytes)
    names = segment_names(real, len(segments))
    if real in {os.path.join(directory, entry) for entry in names}:
        raise InputError("the source would be overwritten by a segment", path,
                         "choose another --output directory")
    records = segment_records(data, segments, names)
    line_count = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    index = {"version": INDEX_VERSION, "source": real, "source_sha256": sha256_bytes(data),
             "source_size": len(data), "source_lines": line_count, "split_type": name,
             "target_bytes": target_bytes, "created": now_iso(), "segments": records}
    previous = _previous_index(directory)
    at_risk = files_at_risk(directory, previous, real, records, force)
    _add_summaries(index, data, summarize, reuse_summaries or {})
    _prepare_dir(output_dir)
    kept = keep_copies(directory, at_risk, previous and previous["source"] != real)
    for record in records:
        atomic_write(os.path.join(directory, record["file"]),
                     data[record["start_byte"]:record["end_byte"]], sync=False)
    write_index(directory, index)
    if previous:
        _remove_stale(directory, previous, set(names))
    return dict(index, kept_edits=kept) if kept else index


def _digest_file(path):
    """sha256 of a file read without following a symlink; None when it is missing; "link"
    for a symlink or anything unreadable (treated as changed)."""
    try:
        with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW)) as handle:
            return sha256_bytes(handle.read())
    except FileNotFoundError:
        return None
    except OSError:
        return "link"


def files_at_risk(directory, previous, source, records, force):
    """Names of the files in `directory` a split of `source` into `records` would destroy:
    edited listed segments and unlisted files under a segment's name. Raises RefusedError,
    naming them, unless `force`."""
    new_hash = {record["file"]: record["sha256"] for record in records}
    listed = {}
    if previous:
        listed = {record["file"]: record["sha256"] for record in previous["segments"]}
        if previous["source"] != source and not force:
            raise RefusedError("the output directory holds the split of another file", directory,
                               f"it splits {previous['source']}; choose another --output, or pass"
                               " --force to replace it, keeping edited segments first")
    at_risk = []
    for name in sorted(set(listed) | set(new_hash)):
        digest = _digest_file(os.path.join(directory, name))
        if digest is None or digest == new_hash.get(name):
            continue
        if name in listed and digest != listed[name]:
            at_risk.append(name)
        elif name not in listed and name in new_hash:
            at_risk.append(name)
    if at_risk and not force:
        edited = all(name in listed for name in at_risk)
        raise RefusedError("segments have unmerged edits" if edited else
                           "files in the output directory would be overwritten",
                           ", ".join(at_risk),
                           "apply edits with nagent-file-patch first, or pass --force to keep a "
                           f"copy under {os.path.join(directory, KEPT_DIR)}/ and re-split")
    return at_risk


def keep_copies(directory, names, other_source):
    """Copy `names` (and index.json when the split was of another file) into a new
    `<directory>/kept/<UTC stamp>[-n]/`; returns the copies' paths."""
    if not names and not other_source:
        return []
    root = os.path.join(directory, KEPT_DIR)
    if os.path.islink(root) or (os.path.lexists(root) and not os.path.isdir(root)):
        # A link here could carry the copies out of the split's directory.
        raise RefusedError("kept-copies directory is a symlink or not a directory", root,
                           "remove it, then run again")
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    number = 1
    while True:
        folder = os.path.join(root, stamp if number == 1 else f"{stamp}-{number}")
        try:
            os.makedirs(folder)
            break
        except FileExistsError:
            number += 1
        except OSError as error:
            raise InputError("cannot create the kept-copies directory", folder,
                             error.strerror) from None
    kept = []
    for name in list(names) + ([INDEX_NAME] if other_source else []):
        target = os.path.join(folder, name)
        try:
            shutil.copy2(os.path.join(directory, name), target, follow_symlinks=False)
        except OSError as error:
            raise InputError("cannot keep a copy of", os.path.join(directory, name),
                             error.strerror) from None
        kept.append(target)
    return kept


def _add_summaries(index, data, summarize, reuse):
    count = len(index["segments"])
    for number, record in enumerate(index["segments"], 1):
        if record["sha256"] in reuse:
            record["summary"] = reuse[record["sha256"]]
        elif summarize is not None:
            chunk = data[record["start_byte"]:record["end_byte"]]
            meta = dict(record, source=index["source"], split_type=index["split_type"],
                        number=number, count=count)
            record["summary"] = str(summarize(chunk.decode("utf-8", "replace"), meta)).strip()


def _remove_stale(directory, previous, keep):
    """Delete the previous index's segment files that the new split no longer uses."""
    for record in previous["segments"]:
        name = record["file"]
        if name in keep or not _SEGMENT_NAME.fullmatch(name):
            continue
        try:
            os.unlink(os.path.join(directory, name))
        except FileNotFoundError:
            pass
        except OSError as error:
            raise InputError("cannot remove stale segment", os.path.join(directory, name),
                             error.strerror) from None


def resolve_index_path(index_path):
    path = os.path.abspath(os.fspath(index_path))
    return os.path.join(path, INDEX_NAME) if os.path.isdir(path) else path


def refresh_split(index_path, summarize=None, target_bytes=None, split_type=None, force=False):
    """Re-split the index's source into the index's directory with the index's settings
    (or the given overrides); summaries of byte-identical segments are kept. Unmerged segment
    edits are refused unless `force` (see split_file)."""
    path = resolve_index_path(index_path)
    index = load_index(path)
    reuse = {record["sha256"]: record["summary"] for record in index["segments"]
             if isinstance(record.get("summary"), str)}
    return split_file(index["source"], os.path.dirname(path),
                      target_bytes=index["target_bytes"] if target_bytes is None else target_bytes,
                      split_type=split_type or index["split_type"], summarize=summarize,
                      reuse_summaries=reuse, force=force)


_INT_FIELDS = ("first_line", "last_line", "start_byte", "end_byte", "bytes")


def _valid_name(name):
    return (isinstance(name, str) and name not in ("", ".", "..", INDEX_NAME)
            and "/" not in name and "\\" not in name and "\0" not in name)


def validate_index(index):
    """The reason `index` breaks the schema, or None."""
    if not isinstance(index, dict):
        return "not a JSON object"
    if index.get("version") != INDEX_VERSION:
        return f"unsupported version {index.get('version')!r}"
    source = index.get("source")
    if not isinstance(source, str) or not os.path.isabs(source):
        return "source is not an absolute path"
    if not isinstance(index.get("source_sha256"), str) or not _HEX64.fullmatch(
            index["source_sha256"]):
        return "source_sha256 is not a sha256 hex digest"
    for key in ("source_size", "target_bytes"):
        if isinstance(index.get(key), bool) or not isinstance(index.get(key), int) \
                or index[key] < (1 if key == "target_bytes" else 0):
            return f"{key} is not a valid integer"
    if index.get("split_type") not in LANGUAGES:
        return f"unknown split_type {index.get('split_type')!r}"
    segments = index.get("segments")
    if not isinstance(segments, list) or not segments:
        return "segments is not a non-empty list"
    seen = set()
    for number, record in enumerate(segments, 1):
        if not isinstance(record, dict) or not _valid_name(record.get("file")):
            return f"segment {number} has no valid file name"
        if record["file"] in seen:
            return f"segment file {record['file']} is listed twice"
        seen.add(record["file"])
        for key in _INT_FIELDS:
            if isinstance(record.get(key), bool) or not isinstance(record.get(key), int):
                return f"segment {number} field {key} is not an integer"
        if not isinstance(record.get("sha256"), str) or not _HEX64.fullmatch(record["sha256"]):
            return f"segment {number} sha256 is not a hex digest"
        for key, allowed in (("summary", None), ("inside", None), ("mid_line", MID_LINE),
                             ("cut_at", CUT_AT)):
            if key in record and not (isinstance(record[key], str) and (
                    allowed is None or record[key] in allowed)):
                return f"segment {number} {key} is not valid"
    return None


def load_index(index_path):
    """The validated index dict; a missing, unreadable or malformed index is an InputError."""
    path = resolve_index_path(index_path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
    except FileNotFoundError:
        raise InputError("split index not found", index_path) from None
    except OSError as error:
        raise InputError("cannot read split index", index_path, error.strerror) from None
    try:
        index = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as error:
        raise InputError("split index is not valid JSON", index_path, str(error)) from None
    problem = validate_index(index)
    if problem:
        raise InputError("split index is corrupt", f"{index_path}: {problem}",
                         "re-create it with nagent-file-split") from None
    return index
