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
Permission rules and plan mode (nagent_permission_gate, over ctx.policy) judge each action
before anything else: a refused one does not run and its result carries the refusal line
(`✗ denied by rule NAME (FILE)`); a shell command is judged inside run_shell, after the
sandbox is planned, so a prompt comes only for a command that could run.
An action hook (settings.hooks.action, nagent_hooks.check_action) runs before each action but
<nagent-next>: exit 0 lets the action run, exit 2 makes the result a refusal carrying the hook's
output, anything else (a timeout, a crash) an error result; the action then does not run. The
hook's run rides along in `ActionOutcome.hook` for the loop to record. The hook is shown the
file action's pinned target (nagent_action_targets: a read's file opened first, a write's
resolved path, a patch's registered source) and the action uses that same target.
Consecutive <nagent-agent> actions are one batch (`process_agents`): children run concurrently,
at most `max_parallel` at once, and their outcomes come back in tag order. The processes, their
timeouts and how they end are nagent_agents'; a child that timed out or was cut off still counts
its tokens (read from its conversation). `execute_agent` is a batch of one.
"""
import os
from dataclasses import replace

from nagent_action_base import (ActionContext, ActionOutcome, error_block, error_text,  # noqa: F401
                                hook_refusal, refresh_target_id, resolve_path, write_mode_now)
from nagent_action_batch import Planned, process_batch
from nagent_action_targets import pin_target, release
from nagent_agents import Job, child_args, child_name
from nagent_budget import decode, exhausted
from nagent_edit_actions import execute_replace, file_edit_job, observe, observed
from nagent_errors import NagentError
from nagent_file_split_lib import READ_SPLIT_THRESHOLD_BYTES
from nagent_file_tools import BINARY_SNIFF_BYTES, describe_split, patch_registered, split_for_read
from nagent_hooks import check_action
from nagent_permission_gate import check_permission, shell_gate, shell_time
from nagent_protocol_blocks import result_block
from nagent_shell import format_shell_result, run_shell
from nagent_split_registry import find_by_index, load as load_registry
from nagent_write_policy import validate_write_path, write_file_atomic

_resolve = resolve_path


def read_target(target, path, limit=READ_SPLIT_THRESHOLD_BYTES):
    """(text, None) or (None, error message) for an inline read of a pinned target
    (nagent_action_targets): read from its descriptor, never from `path` (shown in hints)."""
    if target.problem:
        return None, target.problem
    try:
        size = os.fstat(target.fd).st_size
        if limit is not None and size > limit:
            if b"\x00" in os.pread(target.fd, BINARY_SNIFF_BYTES, 0):
                return None, "binary file (contains NUL bytes); not shown"
            return None, (f"file is {size} bytes, over the {limit}-byte inline limit; use "
                          f'<nagent-file-read path="{path}"/> to split it into segments')
        parts, offset, want = [], 0, (limit + 1 if limit is not None else size + 1)
        while offset < want:
            part = os.pread(target.fd, want - offset, offset)
            if not part:
                break
            parts.append(part)
            offset += len(part)
        data = b"".join(parts)
    except OSError as error:
        return None, f"cannot read: {error.strerror}"
    if b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return None, "binary file (contains NUL bytes); not shown"
    try:
        return data.decode("utf-8"), None
    except UnicodeDecodeError:
        return None, "not UTF-8 text; not shown"


def _pinned(action, ctx, target):
    """(target, owned): the target process_action pinned before the hook, or one pinned now."""
    return (target, False) if target is not None else (pin_target(action, ctx), True)


def execute_read(action, ctx, target=None):
    raw = action.attr("path", "")
    target, owned = _pinned(action, ctx, target)
    try:
        text, problem = read_target(target, _resolve(raw, ctx))
    finally:
        if owned:
            release(target)
    if problem:
        return error_block("nagent-read-result", problem, {"path": raw})
    return ActionOutcome(result_block("nagent-read-result", text, {"path": raw,
                                                                   "bytes": str(len(text.encode()))}))


def ensure_split(path, ctx):
    """(index path, index, reused) of nagent's split of `path` (see nagent_file_tools)."""
    outcome = split_for_read(path, ctx)
    return outcome.index_path, outcome.index, outcome.reused


def execute_file_read(action, ctx, target=None):
    raw = action.attr("path", "")
    path = _resolve(raw, ctx)
    target, owned = _pinned(action, ctx, target)
    try:
        if not target.problem and os.fstat(target.fd).st_size > READ_SPLIT_THRESHOLD_BYTES:
            try:
                outcome = split_for_read(path, ctx, fd=target.fd)
            except NagentError as error:
                return error_block("nagent-file-read-result", error_text(error), {"path": raw})
            except OSError as error:
                return error_block("nagent-file-read-result", f"cannot split: {error.strerror}",
                                   {"path": raw})
            return ActionOutcome(result_block("nagent-file-read-result", describe_split(outcome),
                                              {"path": raw, "split": "true"}))
        text, problem = read_target(target, path)
    finally:
        if owned:
            release(target)
    if problem:
        return error_block("nagent-file-read-result", problem, {"path": raw})
    return ActionOutcome(result_block("nagent-file-read-result", text,
                                      {"path": raw, "bytes": str(len(text.encode()))}))


def execute_file_patch(action, ctx, target=None):
    raw = action.attr("index", "")
    index = _resolve(raw, ctx)
    # For the view only (the authority is patch_registered's): the source nagent recorded.
    entry = find_by_index(load_registry(ctx.side_dir), index) if ctx.side_dir else None
    before = observe(entry["source"], ctx) if entry else None
    try:
        outcome = patch_registered(index, ctx, shown=raw,
                                   expect_source=target.source if target is not None else None)
    except NagentError as error:
        return error_block("nagent-file-patch-result", error_text(error), {"index": raw})
    if outcome.get("status") == "applied" and outcome.get("source"):
        refresh_target_id(outcome["source"], ctx)
    body = "\n".join(f"{key}: {value}" for key, value in outcome.items() if value is not None)
    return observed(ActionOutcome(result_block("nagent-file-patch-result", body, {
        "index": raw, "status": str(outcome.get("status", ""))})), before, ctx)


def execute_write(action, ctx, target=None):
    raw = action.attr("path", "")
    mode = write_mode_now(ctx)
    try:
        before = observe(validate_write_path(raw, mode, ctx.cwd, ctx.environ), ctx)
        written = write_file_atomic(raw, action.body.encode("utf-8"), mode, ctx.cwd, ctx.environ,
                                    expected=target.real if target is not None else None)
    except NagentError as error:
        return error_block("nagent-write-result", error_text(error), {"path": raw})
    refresh_target_id(written["path"], ctx)
    verb = "created" if written.get("created") else "replaced"
    return observed(ActionOutcome(result_block("nagent-write-result", f"{verb} {written['path']} "
                                               f"({written['bytes']} bytes)",
                                               {"path": raw, "status": "ok"})), before, ctx)


def execute_shell(action, ctx):
    policy, gate = ctx.shell_policy, None
    if ctx.policy is not None:
        policy = shell_time(policy, ctx.deadline)
        gate = shell_gate(action.body, ctx)
    try:
        outcome = run_shell(action.body, ctx.cwd, policy, ctx.side_dir, ctx.environ,
                            secret_names=ctx.secret_names, secrets=ctx.secrets, gate=gate,
                            mcp=ctx.mcp)
    except NagentError as error:
        return error_block("nagent-shell-result", error_text(error))
    # The first stderr line that says something (a rule of ===== says nothing).
    why = next((line for line in outcome.stderr.splitlines() if any(ch.isalnum() for ch in line)),
               "") if outcome.exit_code not in (0, None) else ""
    return ActionOutcome(result_block("nagent-shell-result", format_shell_result(outcome)),
                         failed=outcome.exit_code != 0, why=why)


def agent_outcome(result, attrs):
    """The <nagent-agent-result> of a child's ChildResult (see nagent_agents)."""
    totals = result.totals or {}
    attrs = dict(attrs, tokens_in=str(totals.get("input_tokens", 0)),
                 tokens_out=str(totals.get("output_tokens", 0)))
    child = totals or None
    if result.status == "finished":
        output = result.response if result.response is not None else (result.error_line or "(no output)")
        body = f"exit_code: {result.exit_code}\noutput:\n{output}"
        return ActionOutcome(result_block("nagent-agent-result", body, attrs), child=child,
                             failed=result.exit_code != 0)
    if result.status == "timed_out":
        body = f"error: sub-agent {result.reason}; it and its commands were ended"
    elif result.status == "cut_off":
        body = (f"error: sub-agent cut off: the run was ended by {result.reason}; it and its "
                "commands were ended (its conversation keeps what it did)")
    elif result.status == "not_started":
        body = f"error: sub-agent not started: the run was ended by {result.reason}"
    else:
        body = f"error: {result.reason}"
    attrs["status"] = "error"
    cut = result.name if result.status == "cut_off" else ""
    return ActionOutcome(result_block("nagent-agent-result", body, attrs), child=child,
                         failed=True, cut_off=cut)


def agent_job(action, ctx):
    """A sub-agent to start (nagent_action_batch.Planned), or an error outcome."""
    name = child_name(ctx.pid)
    attrs = {"conversation": name, "tokens_in": "0", "tokens_out": "0"}
    if ctx.depth + 1 > ctx.max_depth:
        return error_block("nagent-agent-result", f"sub-agent nesting limit "
                           f"({ctx.max_depth}) reached; do this task yourself", attrs)
    task = action.body.strip()
    if not task:
        return error_block("nagent-agent-result", "empty task", attrs)
    return Planned(Job(0, name, task, tuple(child_args(ctx, name)), tool="nagent"),
                   lambda result: agent_outcome(result, {"conversation": result.name}))


def refusal_outcome(action, ctx, target=None):
    """The result of an action the permission rules or plan mode refuse (the same line the user
    sees), or None (nagent_permission_gate.check_permission, on the pinned `target`)."""
    refused = check_permission(action, ctx, target=target)
    if refused is None:
        return None
    attrs = {name: action.attr(name) for name in ("path", "index") if action.attr(name) is not None}
    return ActionOutcome(result_block(f"nagent-{action.kind}-result", refused,
                                      dict(attrs, status="refused")), failed=True)


def checked(prepare):
    """A batch's prepare step behind the rules and the budget: a nested nagent starts only
    when they allow it and something is left to spend."""
    def plan(action, ctx, target=None):
        if ctx.child_budget and exhausted(decode(ctx.child_budget)):
            return error_block(f"nagent-{action.kind}-result", "not started: the run's budget is "
                               "spent (--max-cost, --max-tokens, --max-time)",
                               {"path": action.attr("path")} if action.attr("path") else None)
        return refusal_outcome(action, ctx, target) or (
            prepare(action, ctx) if target is None else prepare(action, ctx, target))
    return plan


BATCHES = {"agent": checked(agent_job), "file-edit": checked(file_edit_job)}


def process_agents(actions, ctx, ready, watch=None, hooks=True, targets=None):
    """Consecutive <nagent-agent> (or <nagent-file-edit>) actions as one batch
    (nagent_action_batch.process_batch): the action hook checks each before any starts, the children
    run concurrently, `ready(position, outcome)` gets the outcomes in tag order."""
    process_batch(actions, ctx, ready, BATCHES[actions[0].kind], watch, hooks, targets)


def execute_agent(action, ctx, target=None):
    """One sub-agent or file-edit session (process_action already ran the action hook, on
    `target`)."""
    got = []
    process_agents([action], ctx, lambda _position, outcome: got.append(outcome), hooks=False,
                   targets=[target])
    return got[0]


def execute_next(action, ctx):
    return ActionOutcome(block="", prompt=action.body.strip() or "Continue.")


HANDLERS = {
    "read": execute_read, "file-read": execute_file_read, "file-patch": execute_file_patch,
    "write": execute_write, "shell": execute_shell, "agent": execute_agent, "next": execute_next,
    "replace": execute_replace, "file-edit": execute_agent,
}


def process_action(action, ctx):
    handler = HANDLERS.get(action.kind)
    if handler is None:
        return error_block("system", f"no handler for <nagent-{action.kind}>")
    target = pin_target(action, ctx)   # what the rules and the hook see is what the action uses
    try:
        # Rules and plan mode before the hook runs (a batch's kinds: in its prepare step, once).
        refused = None if action.kind in BATCHES else refusal_outcome(action, ctx, target)
        if refused is not None:
            return refused
        hook = check_action(action, ctx, target)  # the action hook, when one is configured
        if hook is not None and hook.status() != "accepted":
            return hook_refusal(action, hook)
        outcome = _dispatch(handler, action, ctx, target)
        return outcome if hook is None else replace(outcome, hook=hook)
    finally:
        release(target)


def _dispatch(handler, action, ctx, target):
    try:
        return handler(action, ctx) if target is None else handler(action, ctx, target)
    except NagentError as error:
        return error_block(f"nagent-{action.kind}-result", error_text(error))
    except OSError as error:
        return error_block(f"nagent-{action.kind}-result", f"{error.strerror or error}")
