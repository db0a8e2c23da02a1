"""Action handlers: one function per tag, each returning the result block to append.

Data contract: `process_action(action, ctx) -> ActionOutcome` where `ctx` is an
`ActionContext` (cwd, environ, write mode, conversation path, shell policy, settings, agent
depth) and the outcome holds `block` (the full `<nagent-*-result>` text appended to the
conversation), `prompt` (a continuation prompt for <nagent-next>) and `child` (a sub-agent's
recursive token totals). Failures are results carrying an error, never exceptions: every
NagentError raised by a library is turned into an error result here.
Large files go through nagent_file_tools (the split/patch tools run as processes, under the
conversation's split registry in `side_dir`); a write in a per-file session gets the segments
that registry grants for its target (`write_mode_now`).
An action hook (settings.hooks.action, nagent_hooks.check_action) runs before each action but
<nagent-next>: exit 0 lets the action run, exit 2 makes the result a refusal carrying the hook's
output, anything else (a timeout, a crash) an error result; the action then does not run. The
hook's run rides along in `ActionOutcome.hook` for the loop to record.
A sub-agent is a child `nagent` in conversation `agent-{uuid4 hex}-{conversation pid}`. On
its timeout (or when this process is interrupted or signalled) the child gets SIGTERM, ends
its own shell commands and records why; after AGENT_TERM_GRACE seconds the child and every
process it left are killed. A timed-out child's tokens still count: they are read from the
last stats record of its conversation.
"""
import json
import os
import signal
import subprocess
import uuid
from dataclasses import dataclass, field, replace

import nagent_conversation_lifecycle as lifecycle
from nagent_conversation_tail import read_tail_summary
from nagent_errors import NagentError
from nagent_file_split_lib import READ_SPLIT_THRESHOLD_BYTES
from nagent_file_tools import (BINARY_SNIFF_BYTES, DEFAULT_MEMORY, DEFAULT_TIMEOUT, describe_split,
                               looks_binary, patch_registered, split_for_read)
from nagent_hooks import check_action
from nagent_install import tool_argv
from nagent_procs import end_process_tree
from nagent_protocol_blocks import result_block

AGENT_TERM_GRACE = 5.0   # a timed-out child's time to end its shell groups and record why


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
    extra_args: tuple = field(default=())
    secret_names: tuple = ()     # variables holding keys the config refers to: kept from shells
    secrets: tuple = ()          # key values: blanked in shell output, side files included
    file_tool_timeout: float = DEFAULT_TIMEOUT   # split/patch tool processes
    file_tool_memory: int = DEFAULT_MEMORY       # their address-space cap in bytes, 0 = none


@dataclass(frozen=True)
class ActionOutcome:
    block: str
    prompt: str | None = None
    child: dict | None = None
    failed: bool = False
    hook: object = None          # the action hook's run (nagent_hooks.HookRun), recorded first


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
            if looks_binary(path):
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


def ensure_split(path, ctx):
    """(index path, index, reused) of nagent's split of `path` (see nagent_file_tools)."""
    outcome = split_for_read(path, ctx)
    return outcome.index_path, outcome.index, outcome.reused


def execute_file_read(action, ctx):
    raw = action.attr("path", "")
    path = _resolve(raw, ctx)
    if "\x00" not in path and os.path.isfile(path) and os.path.getsize(path) > READ_SPLIT_THRESHOLD_BYTES:
        try:
            outcome = split_for_read(path, ctx)
        except NagentError as error:
            return error_block("nagent-file-read-result", error_text(error), {"path": raw})
        except OSError as error:
            return error_block("nagent-file-read-result", f"cannot split: {error.strerror}", {"path": raw})
        return ActionOutcome(result_block("nagent-file-read-result", describe_split(outcome),
                                          {"path": raw, "split": "true"}))
    text, problem = read_text_file(path)
    if problem:
        return error_block("nagent-file-read-result", problem, {"path": raw})
    return ActionOutcome(result_block("nagent-file-read-result", text,
                                      {"path": raw, "bytes": str(len(text.encode()))}))


def execute_file_patch(action, ctx):
    raw = action.attr("index", "")
    try:
        outcome = patch_registered(_resolve(raw, ctx), ctx, shown=raw)
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


def write_mode_now(ctx):
    """The session's write mode plus, in a per-file session, the segments of the splits nagent
    made of the target, from its own registry (never from an index.json the model can write)."""
    mode = ctx.write_mode
    if mode.kind != "file-edit" or not ctx.side_dir:
        return mode
    import nagent_split_registry as registry_lib
    registry = registry_lib.load(ctx.side_dir)
    return replace(mode, segments=registry_lib.granted_segments(registry, mode.target, mode.target_id))


def execute_write(action, ctx):
    from nagent_write_policy import write_file_atomic
    raw = action.attr("path", "")
    try:
        written = write_file_atomic(raw, action.body.encode("utf-8"), write_mode_now(ctx), ctx.cwd,
                                    ctx.environ)
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
    command = [*tool_argv("nagent"), "--conversation", name, "--pid", ctx.pid,
               "--invocation", "delegated", "--parent-conversation", ctx.conversation,
               "--depth", str(ctx.depth + 1), "--json"]
    if settings is not None:
        command += ["--provider", settings.provider.name, "--model", settings.model]
    return command + list(ctx.extra_args) + ["-"]


def child_name(ctx):
    """A sub-agent's conversation: a full UUID plus the conversation pid passed through (the
    same for every agent of one shell), never this process's OS pid."""
    return f"agent-{uuid.uuid4().hex}-{lifecycle.sanitize(ctx.pid) or 'none'}"


def child_totals(name, ctx):
    """The token totals a child recorded in its conversation (its last stats record): what a
    child that timed out, or died without printing JSON, still spent."""
    try:
        stats = read_tail_summary(lifecycle.conversation_path(name, ctx.environ))["stats"]
    except NagentError:
        return {}
    totals = (stats or {}).get("run")
    return totals if isinstance(totals, dict) else {}


def execute_agent(action, ctx):
    task = action.body.strip()
    name = child_name(ctx)
    attrs = {"conversation": name, "tokens_in": "0", "tokens_out": "0"}
    if ctx.depth + 1 > ctx.max_depth:
        return error_block("nagent-agent-result", f"sub-agent nesting limit ({ctx.max_depth}) reached; "
                           "do this task yourself", attrs)
    if not task:
        return error_block("nagent-agent-result", "empty task", attrs)
    try:
        # The task goes on stdin: argv breaks past 128 KiB and on a leading "-".
        proc = subprocess.Popen(child_command(ctx, name), stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                cwd=ctx.cwd, env=ctx.environ)
    except OSError as error:
        return error_block("nagent-agent-result", f"cannot start sub-agent: {error.strerror}", attrs)
    timed_out = False
    try:
        out, err = proc.communicate(task, timeout=ctx.agent_timeout)
    except subprocess.TimeoutExpired:
        # The child's shell commands run in sessions of their own: the child ends them on
        # SIGTERM; whatever is left after the grace period is killed with the whole tree.
        timed_out = True
        out, err = end_process_tree(proc, AGENT_TERM_GRACE)
    except KeyboardInterrupt:
        # Ctrl-C on the terminal reached the child too (same process group): let it finish first.
        end_process_tree(proc, AGENT_TERM_GRACE, signals=(None, signal.SIGTERM))
        raise
    except BaseException:
        end_process_tree(proc, AGENT_TERM_GRACE)   # SIGTERM, SIGHUP: the child ends with us
        raise
    try:
        data = json.loads(out) if out.strip() and not timed_out else {}
    except json.JSONDecodeError:
        data = {}
    totals = data.get("totals") if isinstance(data.get("totals"), dict) else child_totals(name, ctx)
    attrs.update(tokens_in=str(totals.get("input_tokens", 0)), tokens_out=str(totals.get("output_tokens", 0)))
    if timed_out:
        attrs["status"] = "error"
        body = f"error: sub-agent timed out after {ctx.agent_timeout:g} s; it and its commands were ended"
        return ActionOutcome(result_block("nagent-agent-result", body, attrs), child=totals or None,
                             failed=True)
    output = data.get("response")
    if output is None:
        lines = [line for line in err.splitlines() if line.strip()]
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


def hook_refusal(action, hook):
    """The result of an action the action hook did not allow: exit 2 refuses with the hook's
    output; any other failure is an error result. The action does not run."""
    tag = f"nagent-{action.kind}-result"
    attrs = {name: action.attr(name) for name in ("path", "index") if action.attr(name) is not None}
    if hook.status() == "refused":
        outcome = ActionOutcome(result_block(tag, f"refused by the action hook: {hook.output()}",
                                             dict(attrs, status="refused")), failed=True)
    else:
        outcome = error_block(tag, f"the action hook failed ({hook.describe()}), so the action did "
                              f"not run: {hook.output()}", attrs)
    return replace(outcome, hook=hook)


def process_action(action, ctx):
    handler = HANDLERS.get(action.kind)
    if handler is None:
        return error_block("system", f"no handler for <nagent-{action.kind}>")
    hook = check_action(action, ctx)  # the action hook, when one is configured
    if hook is not None:
        if hook.status() != "accepted":
            return hook_refusal(action, hook)
        return replace(_dispatch(handler, action, ctx), hook=hook)
    return _dispatch(handler, action, ctx)


def _dispatch(handler, action, ctx):
    try:
        return handler(action, ctx)
    except NagentError as error:
        return error_block(f"nagent-{action.kind}-result", error_text(error))
    except OSError as error:
        return error_block(f"nagent-{action.kind}-result", f"{error.strerror or error}")
