"""Large files in the loop: the split and patch tools run as processes, under nagent's registry.

The loop uses the same tools the user does: `<nagent-file-read>` of a large file runs
`nagent-file-split --json`, `<nagent-file-patch>` runs `nagent-file-patch --json`, each a child
process of nagent's own install (never one found on PATH), so a splitter that blows up or crashes
costs an error result, not the loop. Authority stays with the driver: which split may be reused
or patched, and onto which source, comes from nagent_split_registry, never from the split's files.

Data contract (`ctx` is the action context: cwd, environ, side_dir (the conversation's state
directory), write_mode, secret_names, file_tool_timeout seconds, file_tool_memory bytes, 0 = no
limit):
- `run_tool(name, args, ctx) -> dict`: runs bin/<name> with `args` in its own session, stdin
  closed, the shell's scrubbed environment (no provider keys), address space capped at
  file_tool_memory, killed (whole process group) after file_tool_timeout; returns the JSON
  object it printed. A tool's own error (an `Error:` line or a JSON error object) is raised as
  the matching NagentError; a crash, a signal, a timeout, output that is not one JSON object, or
  more than MAX_OUTPUT bytes raise NagentError("<name> failed: ...").
- `split_for_read(path, ctx, fd=None) -> SplitOutcome(index_path, index, reused, notes)`: with
  `fd`, the file that descriptor holds is the source (its path from /proc, its hash from the
  descriptor); a split whose bytes hash to anything but the checked file is an error. Reuses the
  newest split nagent made of this source when the source still has the recorded sha256, the
  split's directory is still private and inside a temp root, and its index.json and every
  segment still match the record; otherwise splits
  afresh into a new private directory. Older splits of the source with unmerged edits are kept
  and named in `notes`; those without are deleted. Binary files and files over SPLIT_MAX_BYTES
  are refused (InputError) before anything is read whole.
- `registered_source(index_path, ctx)` -> the source the registry says a patch of that index
  replaces, or None (what the action hook and the permission rules judge a patch by). `patch_registered(index_path, ctx, shown, expect_source=None) -> dict`: the
  tool's JSON result. Refused (RefusedError, also when the source is not `expect_source`,
  nothing run) unless the index is one nagent made in this conversation, its directory is still
  private, its index.json is byte for byte what was recorded, and the recorded source is
  writable in the current mode; the tool is told the recorded source and hash
  (--expect-source/--expect-sha256). After "applied" the registry takes the new hashes.
- `describe_split(outcome) -> str`: the result text the model reads: one line per segment
  (`- path: lines a-b, n bytes`, then `; starts|ends|starts and ends mid-line (cut ...)` and
  `; inside: <construct's first line>` when the splitter recorded them).
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass

import nagent_split_registry as registry_lib
from nagent_errors import EXIT_CODES, InputError, NagentError, RefusedError
from nagent_file_split_lib import INDEX_NAME, load_index
from nagent_fs import file_id, file_id_for_path, opened_path, regular_file_stat, sha256_fd, sha256_file
from nagent_install import tool_target
from nagent_paths import within_any
from nagent_secrets import scrubbed_env
from nagent_terminal_text import escape
from nagent_write_policy import scratch_root, temp_roots, validate_patch_source

# Splitting reads the whole file into memory and writes as much again to the temp dir: a
# runaway log or disk image must fail fast instead of filling both.
SPLIT_MAX_BYTES = 256 * 1024 * 1024
BINARY_SNIFF_BYTES = 8192
DEFAULT_TIMEOUT = 300.0
DEFAULT_MEMORY = 4096 << 20
MAX_OUTPUT = 64 << 20
_ERROR_TYPES = {cls.kind: cls for cls in NagentError.__subclasses__()}
_KIND_BY_CODE = {code: kind for kind, code in EXIT_CODES.items()}

# Runs a tool under an address-space cap set inside the child itself (no preexec_fn: the loop
# has a spinner thread), then runs the tool as __main__ in the same interpreter: the bin/ file
# of a checkout, or the tool's module when installed (nagent_install.tool_target).
RUNNER = """import resource, runpy, sys
limit = int(sys.argv[1])
if limit > 0:
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    limit = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
kind, sys.argv = sys.argv[2], sys.argv[3:]
if kind == "path":
    runpy.run_path(sys.argv[0], run_name="__main__")
else:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class SplitOutcome:
    index_path: str
    index: dict
    reused: bool
    notes: tuple = ()


# -- tool processes ---------------------------------------------------------------------------

def _tool_env(ctx):
    return scrubbed_env(ctx.environ, tuple(getattr(ctx, "secret_names", ())))


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _limits(ctx):
    timeout = float(getattr(ctx, "file_tool_timeout", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT)
    memory = int(getattr(ctx, "file_tool_memory", DEFAULT_MEMORY) or 0)
    return timeout, memory


def _hint(memory):
    limit = f"memory limit {memory >> 20} MiB" if memory else "no memory limit"
    return f"{limit}; file_tool_memory_mb and file_tool_timeout in the config raise the limits"


def _read_tail(handle, size=4096):
    handle.seek(0, os.SEEK_END)
    handle.seek(max(0, handle.tell() - size))
    return handle.read().decode("utf-8", "replace")


def _tool_error(name, code, stdout, stderr, memory):
    """The NagentError for a tool that exited non-zero."""
    if code < 0:
        try:
            signame = signal.Signals(-code).name
        except ValueError:
            signame = f"signal {-code}"
        return NagentError(f"{name} failed: killed by signal {signame}", "", _hint(memory))
    data = _json_object(stdout)
    if data and isinstance(data.get("error"), str):
        cls = _ERROR_TYPES.get(data.get("kind"), NagentError)
        return cls(data["error"], data.get("value", ""), data.get("fix", ""))
    lines = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    if lines:
        cls = _ERROR_TYPES.get(_KIND_BY_CODE.get(code), NagentError)
        return cls(lines[-1][len("Error: "):])
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    return NagentError(f"{name} failed (exit code {code})", last[:300], _hint(memory))


def _json_object(raw):
    import json
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def run_tool(name, args, ctx):
    timeout, memory = _limits(ctx)
    # -P: the tool's cwd ("/") is not put on sys.path.
    argv = [sys.executable, "-P", "-c", RUNNER, str(memory), *tool_target(name), *args]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err, cwd="/",
                                    env=_tool_env(ctx), start_new_session=True, close_fds=True)
        except OSError as error:
            raise NagentError(f"{name} failed: cannot start it", error.strerror or str(error)) from None
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            raise NagentError(f"{name} failed: timed out after {timeout:g} s and was stopped", "",
                              _hint(memory)) from None
        except BaseException:   # Ctrl-C or a signal: the tool must not outlive the loop
            _kill_group(proc)
            raise
        stderr = _read_tail(err)
        size = out.seek(0, os.SEEK_END)
        if size > MAX_OUTPUT:
            raise NagentError(f"{name} failed: printed more than {MAX_OUTPUT} bytes", size)
        out.seek(0)
        stdout = out.read()
    if code != 0:
        raise _tool_error(name, code, stdout, stderr, memory)
    data = _json_object(stdout)
    if data is None:
        raise NagentError(f"{name} failed: printed no JSON result", stdout[:120].decode("utf-8", "replace"))
    return data


# -- split for <nagent-file-read> -------------------------------------------------------------

def looks_binary(path):
    """True when the first BINARY_SNIFF_BYTES hold a NUL byte (OSError if unreadable)."""
    with open(path, "rb") as handle:
        return b"\x00" in handle.read(BINARY_SNIFF_BYTES)


def _check_splittable(path, fd=None):
    """(realpath, source_id, sha256) of a file that may be split; with `fd`, of the file that
    descriptor holds (the one an action hook was shown), never of what the path names now."""
    try:
        if fd is None:
            real, st = regular_file_stat(path)
            binary = looks_binary(real)
            digest = None
        else:
            real, st = opened_path(fd) or os.path.realpath(path), os.fstat(fd)
            binary = b"\x00" in os.pread(fd, BINARY_SNIFF_BYTES, 0)
            digest = sha256_fd(fd)
    except OSError as error:
        raise InputError("cannot read file", path, error.strerror or str(error)) from None
    if binary:
        raise InputError("binary file (contains NUL bytes); not split", path,
                         "inspect it with a shell command such as file or xxd | head")
    if st.st_size > SPLIT_MAX_BYTES:
        raise InputError(f"file is too large to split ({st.st_size} bytes, limit {SPLIT_MAX_BYTES})",
                         path, "read parts of it with a shell command such as head, tail or grep")
    if digest is None:
        try:
            digest = sha256_file(real)
        except OSError as error:
            raise InputError("cannot read file", path, error.strerror or str(error)) from None
    return real, file_id(st), digest


def _state_dir(ctx):
    os.makedirs(ctx.side_dir, mode=0o700, exist_ok=True)
    return ctx.side_dir


def _reusable(entry, digest, roots):
    # A split left outside today's temp roots (TMPDIR changed) could not be edited in main mode.
    if entry["source_sha256"] != digest or not within_any(entry["directory"], roots):
        return False
    check = registry_lib.check_split(entry)
    return not (check.unsafe or check.index_changed or check.edited)


def _retire(registry, entries):
    """Forget older splits of a source: delete those that hold no edits, name those that do."""
    notes = []
    for entry in entries:
        check = registry_lib.check_split(entry)
        if check.unsafe:   # no longer ours to trust or to delete
            registry_lib.drop(registry, entry)
        elif check.edited:
            notes.append(f"Note: an earlier split of this file, {entry['directory']}, has unmerged "
                         f"edits in {', '.join(check.edited)}; it is kept as it was (nothing lost). "
                         f"Apply it with <nagent-file-patch index=\"{entry['index']}\"/> if the "
                         "source has not changed since, or carry the edits over to the new "
                         "segments below.")
        else:
            shutil.rmtree(entry["directory"], ignore_errors=True)
            registry_lib.drop(registry, entry)
    return tuple(notes)


def _new_split(registry, real, source_id, ctx, expect_sha256):
    root = registry_lib.ensure_root(registry, scratch_root(ctx.environ, ctx.cwd),
                                    temp_roots(ctx.environ, ctx.cwd))
    directory = registry_lib.new_split_dir(root, real)
    try:
        data = run_tool("nagent-file-split", ["--file", real, "--output", directory, "--json"], ctx)
        if data.get("source") != real or not isinstance(data.get("segments"), list):
            raise NagentError("nagent-file-split failed: its result does not describe the file",
                              str(data.get("source")))
        if data.get("source_sha256") != expect_sha256:
            # The tool opens the path itself: what it split must be the file nagent checked
            # (and, for an action, holds open), or the registry would pair one file's id and
            # another's bytes.
            raise InputError("the file changed while nagent split it", real, "read it again")
        index_path = os.path.join(directory, INDEX_NAME)
        names = [seg.get("file") if isinstance(seg, dict) else None for seg in data["segments"]]
        entry = registry_lib.entry_from_files(real, source_id, directory, index_path, names,
                                              str(data.get("source_sha256")))
        index = load_index(index_path)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return entry, index


def split_for_read(path, ctx, fd=None):
    real, source_id, digest = _check_splittable(path, fd)
    state_dir = _state_dir(ctx)
    registry = registry_lib.load(state_dir)
    earlier = registry_lib.splits_of(registry, real)
    if earlier and _reusable(earlier[-1], digest, temp_roots(ctx.environ, ctx.cwd)):
        entry = earlier[-1]
        if entry.get("source_id") != source_id:
            registry_lib.put(registry, dict(entry, source_id=source_id))
            registry_lib.save(state_dir, registry)
        return SplitOutcome(entry["index"], load_index(entry["index"]), True)
    try:
        entry, index = _new_split(registry, real, source_id, ctx, digest)
    finally:
        registry_lib.save(state_dir, registry)   # a new private root is recorded even on failure
    notes = _retire(registry, earlier)
    registry_lib.put(registry, entry)
    registry_lib.save(state_dir, registry)
    return SplitOutcome(entry["index"], index, False, notes)


_MID_LINE = {"start": "starts mid-line", "end": "ends mid-line",
             "both": "starts and ends mid-line"}
_CUT_AT = {"token": "cut between tokens", "string": "cut at a space in a string or comment",
           "char": "cut between characters"}


def _label(text):
    # The construct's first line is file text: no control character may break the listing.
    return escape(text)


def segment_line(directory, segment):
    """`- path: lines a-b, n bytes` plus the splitter's notes: the mid-line cut, then the
    construct the segment was cut out of (last: it is file text, and runs to the line's end)."""
    line = (f"- {os.path.join(directory, segment['file'])}: lines {segment['first_line']}-"
            f"{segment['last_line']}, {segment['bytes']} bytes")
    mid = _MID_LINE.get(segment.get("mid_line"))
    if mid:
        cut = _CUT_AT.get(segment.get("cut_at"))
        line += f"; {mid}" + (f" ({cut})" if cut else "")
    if segment.get("inside"):
        line += f"; inside: {_label(segment['inside'])}"
    return line


def describe_split(outcome):
    index, directory = outcome.index, os.path.dirname(outcome.index_path)
    lines = list(outcome.notes)
    lines += [f"index: {outcome.index_path}",
              f"source: {index['source']} ({index['source_size']} bytes, {len(index['segments'])} "
              f"segments, type {index['split_type']})"
              + (" [reused: nagent's split, source and segments unchanged]" if outcome.reused else "")]
    lines += [segment_line(directory, segment) for segment in index["segments"]]
    if any(segment.get("mid_line") for segment in index["segments"]):
        lines.append("A mid-line segment shares one long line with its neighbour: keep the bytes "
                     "at each cut as they are (add no newline there).")
    lines.append("Read segments with <nagent-read>, rewrite a segment whole with <nagent-write>, then "
                 f'apply with <nagent-file-patch index="{outcome.index_path}"/>.')
    return "\n".join(lines)


# -- <nagent-file-patch> ----------------------------------------------------------------------

def _refuse(shown, reason):
    return RefusedError("patch refused", shown, reason)


def _registered(index_path, ctx):
    """(registry, entry or None) of the split whose index `index_path` names."""
    real = os.path.realpath(index_path)
    if os.path.isdir(real):
        real = os.path.join(real, INDEX_NAME)
    registry = registry_lib.load(_state_dir(ctx))
    return registry, registry_lib.find_by_index(registry, real)


def registered_source(index_path, ctx):
    """The source file a patch of `index_path` would replace, from nagent's registry; None when
    the index is not a split nagent made in this conversation."""
    entry = _registered(index_path, ctx)[1]
    return None if entry is None else entry["source"]


def patch_registered(index_path, ctx, shown=None, expect_source=None):
    shown = index_path if shown is None else shown
    state_dir = _state_dir(ctx)
    registry, entry = _registered(index_path, ctx)
    if entry is None:
        raise _refuse(shown, "not a split nagent made in this conversation: read the file with "
                             "<nagent-file-read> and edit the segments of the split it lists")
    if expect_source is not None and entry["source"] != expect_source:
        raise _refuse(shown, f"the split now patches {entry['source']}, not the {expect_source} "
                             "the action hook allowed")
    validate_patch_source(entry["source"], ctx.write_mode, ctx.environ, ctx.cwd)
    unsafe = registry_lib.split_dir_problem(entry["directory"])
    if unsafe:
        raise _refuse(shown, f"the split's directory can no longer be trusted ({unsafe})")
    try:
        index_same = registry_lib.file_sha256(entry["index"]) == entry["index_sha256"]
    except OSError:
        index_same = False
    if not index_same:
        raise _refuse(shown, "its index.json changed since nagent made the split; read the file "
                             "again with <nagent-file-read> for a fresh split")
    result = run_tool("nagent-file-patch", ["--index", entry["index"], "--json", "--expect-source",
                                            entry["source"], "--expect-sha256",
                                            entry["source_sha256"]], ctx)
    if result.get("status") == "applied":
        _record_patched(registry, entry, result, state_dir)
    return result


def _record_patched(registry, entry, result, state_dir):
    """The split now describes the patched source: record the new hashes, from the files."""
    try:
        index = load_index(entry["index"])
        if os.path.realpath(index["source"]) != entry["source"]:
            raise InputError("the patched split names another source", index["source"])
        updated = registry_lib.entry_from_files(
            entry["source"], file_id_for_path(entry["source"]), entry["directory"], entry["index"],
            [seg["file"] for seg in index["segments"]], str(result.get("source_sha256")),
            created=entry.get("created"))
    except (NagentError, OSError):
        # Something changed the split right after the patch: it stays patchable only by a fresh
        # read, which then finds the segments unlike the record and keeps them as unmerged edits.
        updated = dict(entry, index_sha256="changed-after-patch")
    registry_lib.put(registry, updated)
    registry_lib.save(state_dir, registry)
