"""Action handlers: one function per tag, each returning the result block to append.

Data contract: `process_action(action, ctx) -> ActionOutcome` where `ctx` is an
`ActionContext` (cwd, environ, write mode, conversation path, shell policy, settings, agent
depth) and the outcome holds `block` (the full `<nagent-*-result>` text appended to the
conversation), `prompt` (a continuation prompt for <nagent-next>) and `child` (a sub-agent's
recursive token totals). Failures are results carrying an error, never exceptions: every
NagentError raised by a library is turned into an error result here.
"""
import json
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field

from nagent_errors import NagentError
from nagent_file_split_lib import READ_SPLIT_THRESHOLD_BYTES
from nagent_fs import sha256_bytes, sha256_file
from nagent_paths import within_any
from nagent_protocol_blocks import result_block
# Splitting reads the whole file into memory and writes as much again to the temp dir: a
# runaway log or disk image must fail fast instead of filling both.
SPLIT_MAX_BYTES = 256 * 1024 * 1024
BINARY_SNIFF_BYTES = 8192


@dataclass(frozen=True)
class ActionContext:
    cwd: str
    environ: dict
    write_mode: object
    conversation: str
    side_dir: str
    shell_policy: object
    settings: object = None
    pid: str = ""
    depth: int = 0
    max_depth: int = 3
    agent_timeout: float = 1800.0
    nagent_bin: str = ""
    extra_args: tuple = field(default=())
    secret_names: tuple = ()     # variables holding keys the config refers to: kept from shells
    secrets: tuple = ()          # key values: blanked in shell output, side files included


@dataclass(frozen=True)
class ActionOutcome:
    block: str
    prompt: str | None = None
    child: dict | None = None
    failed: bool = False


def error_block(tag, message, attrs=None):
    attrs = dict(attrs or {})
    attrs["status"] = "error"
    return ActionOutcome(result_block(tag, f"error: {message}", attrs), failed=True)


def error_text(error):
    return error.line()[len("Error: "):]


def _resolve(path, ctx):
    expanded = path if os.path.isabs(path) else os.path.join(ctx.cwd, path)
    return os.path.normpath(expanded)


def read_text_file(path, limit=READ_SPLIT_THRESHOLD_BYTES):
    """(text, None) or (None, error message) for an inline read."""
    if "\x00" in path:
        return None, "path contains a NUL byte"
    if not os.path.exists(path):
        return None, "file not found"
    if os.path.isdir(path):
        return None, "is a directory"
    if not os.path.isfile(path):
        return None, "not a regular file"
    try:
        size = os.path.getsize(path)
        if limit is not None and size > limit:
            if _looks_binary(path):
                return None, "binary file (contains NUL bytes); not shown"
            return None, (f"file is {size} bytes, over the {limit}-byte inline limit; use "
                          f'<nagent-file-read path="{path}"/> to split it into segments')
        with open(path, "rb") as handle:
            data = handle.read(limit + 1 if limit is not None else -1)
    except OSError as error:
        return None, f"cannot read: {error.strerror}"
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None, "binary file (contains NUL bytes); not shown"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "not UTF-8 text; not shown"


def execute_read(action, ctx):
    raw = action.attr("path", "")
    path = _resolve(raw, ctx)
    text, problem = read_text_file(path)
    if problem:
        return error_block("nagent-read-result", problem, {"path": raw})
    return ActionOutcome(result_block("nagent-read-result", text, {"path": raw,
                                                                   "bytes": str(len(text.encode()))}))


def splits_root(ctx):
    from nagent_write_policy import temp_roots
    roots = temp_roots(ctx.environ)
    tmpdir = ctx.environ.get("TMPDIR")
    base = os.path.realpath(tmpdir) if tmpdir and os.path.realpath(tmpdir) in roots else roots[0]
    name = os.path.basename(ctx.conversation) or "conversation"
    return os.path.join(base, "nagent-splits", name)


def split_dir_for(path, ctx):
    digest = sha256_bytes(os.path.realpath(path).encode())[:10]
    return os.path.join(splits_root(ctx), f"{os.path.basename(path)}-{digest}")


def _looks_binary(path):
    with open(path, "rb") as handle:
        return b"\x00" in handle.read(BINARY_SNIFF_BYTES)


def ensure_split(path, ctx):
    """Split `path` into the conversation's scratch dir, reusing an up-to-date split.
    Files over SPLIT_MAX_BYTES and binary files (NUL bytes) are refused with InputError."""
    import nagent_file_split_lib as split_lib
    from nagent_errors import InputError
    try:
        size = os.path.getsize(path)
        binary = _looks_binary(path)
    except OSError as error:
        raise InputError("cannot read file", path, error.strerror or str(error)) from None
    if binary:
        raise InputError("binary file (contains NUL bytes); not split", path,
                         "inspect it with a shell command such as file or xxd | head")
    if size > SPLIT_MAX_BYTES:
        raise InputError(f"file is too large to split ({size} bytes, limit {SPLIT_MAX_BYTES})", path,
                         "read parts of it with a shell command such as head, tail or grep")
    out_dir = split_dir_for(path, ctx)
    index_path = os.path.join(out_dir, "index.json")
    if os.path.exists(index_path):
        try:
            index = split_lib.load_index(index_path)
            if index.get("source_sha256") == sha256_file(path):
                return index_path, index, True
        except NagentError:
            pass
    os.makedirs(out_dir, mode=0o700, exist_ok=True)
    return index_path, split_lib.split_file(path, out_dir), False


def describe_split(index_path, index, reused):
    lines = [f"index: {index_path}", f"source: {index['source']} ({index['source_size']} bytes, "
             f"{len(index['segments'])} segments, type {index['split_type']})"
             + (" [reused: source unchanged]" if reused else "")]
    directory = os.path.dirname(index_path)
    for segment in index["segments"]:
        lines.append(f"- {os.path.join(directory, segment['file'])}: lines {segment['first_line']}-"
                     f"{segment['last_line']}, {segment['bytes']} bytes")
    lines.append("Read segments with <nagent-read>, rewrite a segment whole with <nagent-write>, then "
                 f'apply with <nagent-file-patch index="{index_path}"/>.')
    return "\n".join(lines)


def execute_file_read(action, ctx):
    raw = action.attr("path", "")
    path = _resolve(raw, ctx)
    if "\x00" not in path and os.path.isfile(path) and os.path.getsize(path) > READ_SPLIT_THRESHOLD_BYTES:
        try:
            index_path, index, reused = ensure_split(path, ctx)
        except NagentError as error:
            return error_block("nagent-file-read-result", error_text(error), {"path": raw})
        except OSError as error:
            return error_block("nagent-file-read-result", f"cannot split: {error.strerror}", {"path": raw})
        return ActionOutcome(result_block("nagent-file-read-result",
                                          describe_split(index_path, index, reused),
                                          {"path": raw, "split": "true"}))
    text, problem = read_text_file(path)
    if problem:
        return error_block("nagent-file-read-result", problem, {"path": raw})
    return ActionOutcome(result_block("nagent-file-read-result", text,
                                      {"path": raw, "bytes": str(len(text.encode()))}))


def execute_file_patch(action, ctx):
    import nagent_file_patch_lib as patch_lib
    from nagent_errors import RefusedError
    from nagent_write_policy import temp_roots, validate_patch_source
    raw = action.attr("index", "")
    index_path = _resolve(raw, ctx)

    def authorize(source):
        final = validate_patch_source(source, ctx.write_mode, ctx.environ)
        # The patch also rewrites index.json and adds patches/ beside it: that directory must be
        # temp, or (per-file edit) a split of the target itself.
        directory = os.path.realpath(os.path.dirname(patch_lib.resolve_index_path(index_path)))
        if not within_any(directory, temp_roots(ctx.environ)) \
                and not (ctx.write_mode.kind == "file-edit" and ctx.write_mode.target
                         and final == os.path.realpath(ctx.write_mode.target)):
            raise RefusedError("patch refused", raw, "the split's directory is outside the temp "
                               "roots and is not a split of this session's target")

    try:
        outcome = patch_lib.patch_from_index(index_path, authorize=authorize)
    except NagentError as error:
        return error_block("nagent-file-patch-result", error_text(error), {"index": raw})
    if outcome.get("status") == "applied" and outcome.get("source"):
        refresh_target_id(outcome["source"], ctx)
    body = "\n".join(f"{key}: {value}" for key, value in outcome.items() if value is not None)
    return ActionOutcome(result_block("nagent-file-patch-result", body,
                                      {"index": raw, "status": str(outcome.get("status", ""))}))


def refresh_target_id(path, ctx):
    """After the target was replaced (a new inode), re-key its file-index record to the new id,
    so a later rename still finds this conversation. Best effort: the write already happened."""
    mode = ctx.write_mode
    if mode.kind != "file-edit" or not mode.target or not ctx.pid \
            or os.path.realpath(path) != os.path.realpath(mode.target):
        return
    import nagent_file_edit_lib as file_edit
    try:
        file_edit.resolve_file_edit(mode.target, ctx.pid, ctx.environ)
    except NagentError:
        pass


def execute_write(action, ctx):
    from nagent_write_policy import write_file_atomic
    raw = action.attr("path", "")
    try:
        written = write_file_atomic(raw, action.body.encode("utf-8"), ctx.write_mode, ctx.cwd, ctx.environ)
    except NagentError as error:
        return error_block("nagent-write-result", error_text(error), {"path": raw})
    refresh_target_id(written["path"], ctx)
    verb = "created" if written.get("created") else "replaced"
    return ActionOutcome(result_block("nagent-write-result", f"{verb} {written['path']} "
                                      f"({written['bytes']} bytes)", {"path": raw, "status": "ok"}))


def execute_shell(action, ctx):
    from nagent_shell import format_shell_result, run_shell
    try:
        outcome = run_shell(action.body, ctx.cwd, ctx.shell_policy, ctx.side_dir, ctx.environ,
                            secret_names=ctx.secret_names, secrets=ctx.secrets)
    except NagentError as error:
        return error_block("nagent-shell-result", error_text(error))
    return ActionOutcome(result_block("nagent-shell-result", format_shell_result(outcome)),
                         failed=outcome.exit_code != 0)


def child_command(ctx, name):
    settings = ctx.settings
    command = [sys.executable, ctx.nagent_bin, "--conversation", name, "--pid", ctx.pid,
               "--invocation", "delegated", "--parent-conversation", ctx.conversation,
               "--depth", str(ctx.depth + 1), "--json"]
    if settings is not None:
        command += ["--provider", settings.provider.name, "--model", settings.model]
    return command + list(ctx.extra_args) + ["-"]


def execute_agent(action, ctx):
    task = action.body.strip()
    name = f"agent-{uuid.uuid4().hex[:12]}-{os.getpid()}"
    attrs = {"conversation": name, "tokens_in": "0", "tokens_out": "0"}
    if ctx.depth + 1 > ctx.max_depth:
        return error_block("nagent-agent-result", f"sub-agent nesting limit ({ctx.max_depth}) reached; "
                           "do this task yourself", attrs)
    if not task:
        return error_block("nagent-agent-result", "empty task", attrs)
    try:
        # The task goes on stdin: argv breaks past 128 KiB and on a leading "-".
        proc = subprocess.run(child_command(ctx, name), input=task, capture_output=True, text=True,
                              cwd=ctx.cwd, env=ctx.environ, timeout=ctx.agent_timeout)
    except subprocess.TimeoutExpired:
        return error_block("nagent-agent-result", f"sub-agent timed out after {ctx.agent_timeout:.0f} s",
                           attrs)
    except OSError as error:
        return error_block("nagent-agent-result", f"cannot start sub-agent: {error.strerror}", attrs)
    try:
        data = json.loads(proc.stdout) if proc.stdout.strip() else {}
    except json.JSONDecodeError:
        data = {}
    totals = data.get("totals") if isinstance(data.get("totals"), dict) else {}
    attrs.update(tokens_in=str(totals.get("input_tokens", 0)), tokens_out=str(totals.get("output_tokens", 0)))
    output = data.get("response")
    if output is None:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        output = lines[-1] if lines else "(no output)"
    body = f"exit_code: {proc.returncode}\noutput:\n{output}"
    return ActionOutcome(result_block("nagent-agent-result", body, attrs), child=totals or None,
                         failed=proc.returncode != 0)


def execute_next(action, ctx):
    return ActionOutcome(block="", prompt=action.body.strip() or "Continue.")


HANDLERS = {
    "read": execute_read, "file-read": execute_file_read, "file-patch": execute_file_patch,
    "write": execute_write, "shell": execute_shell, "agent": execute_agent, "next": execute_next,
}


def process_action(action, ctx):
    handler = HANDLERS.get(action.kind)
    if handler is None:
        return error_block("system", f"no handler for <nagent-{action.kind}>")
    try:
        return handler(action, ctx)
    except NagentError as error:
        return error_block(f"nagent-{action.kind}-result", error_text(error))
    except OSError as error:
        return error_block(f"nagent-{action.kind}-result", f"{error.strerror or error}")
