"""What every action handler shares: the action context, the outcome, error and refusal results,
and the write authority of the session right now.

Data contract:
- `ActionContext` (frozen): cwd, environ (the driver's own environment: keys included, for the
  driver's own children; the model's shell gets a scrubbed copy), write mode, conversation path,
  side_dir (its state directory), shell policy, settings, pid, agent depth and limits, file tool
  limits, the key variable names and values to keep from and blank in what children return,
  the permission policy (nagent_policy.Policy), what a nested nagent may spend of the run's
  budget (`child_budget`, nagent_budget.encode), the time cap's deadline, the run's MCP
  channel (`mcp`: shell actions reach the run's live MCP sessions through it) and whether
  nested nagents start as forks of the driver (`warm_children`, config warm_children).
- `ActionOutcome` (frozen): `block` (the full `<nagent-*-result>` text appended to the
  conversation), `prompt` (a continuation prompt for <nagent-next>), `child` (a nested nagent's
  recursive totals, folded into the run's by nagent_accounting.add_child), `failed`, `hook` (the
  action hook's run, recorded first), `cut_off` (a nested conversation the run's end cut off) and
  `changes` (nagent_file_change.FileChange of every file outside the temp roots the action
  changed: the live view, --events and --json show them) and `why` (for a failure, the line
  that says why, e.g. a command's first stderr line: the live view shows it).
- `error_block(tag, message, attrs)` -> a failed outcome whose block says `error: message`;
  `error_text(error)` a NagentError's line without "Error: ".
- `resolve_path(raw, ctx)`: a model's path, relative to the session's cwd, normalised.
- `write_mode_now(ctx)`: the session's write mode plus, in a per-file session, the segments of
  the splits nagent made of the target, from its own registry (never from an index.json the model
  can write). `refresh_target_id(path, ctx)`: after the target was replaced (a new inode), its
  file-index record follows the new id.
- `hook_refusal(action, hook)`: the result of an action the action hook did not allow.
"""
import os
from dataclasses import dataclass, field, replace

import nagent_split_registry as registry_lib
from nagent_errors import NagentError
from nagent_file_edit_lib import resolve_file_edit
from nagent_file_tools import DEFAULT_MEMORY, DEFAULT_TIMEOUT
from nagent_protocol_blocks import result_block


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
    max_parallel: int = 4        # nested nagents of one batch running at once
    policy: object = None        # nagent_policy.Policy: rules, guard, mode (None: none apply)
    child_budget: str = ""       # nagent_budget.encode of what a child may spend ("": no caps)
    deadline: float | None = None   # time.monotonic() past which the run's time cap is spent
    mcp: object = None           # the run's MCP channel (nagent_mcp_channel.Channel), or None
    warm_children: bool = True   # nested nagents as forks of the driver (nagent_agents.start_tool)


@dataclass(frozen=True)
class ActionOutcome:
    block: str
    prompt: str | None = None
    child: dict | None = None
    failed: bool = False
    hook: object = None          # the action hook's run (nagent_hooks.HookRun), recorded first
    cut_off: str = ""            # a nested conversation's name when the run's end cut it off
    changes: tuple = ()          # nagent_file_change.FileChange, one per changed file
    why: str = ""                # a failure's reason in one line (the first stderr line)


def error_block(tag, message, attrs=None):
    attrs = dict(attrs or {})
    attrs["status"] = "error"
    return ActionOutcome(result_block(tag, f"error: {message}", attrs), failed=True)


def error_text(error):
    return error.line()[len("Error: "):]


def resolve_path(path, ctx):
    expanded = path if os.path.isabs(path) else os.path.join(ctx.cwd, path)
    return os.path.normpath(expanded)


def refresh_target_id(path, ctx):
    """After the target was replaced (a new inode), re-key its file-index record to the new id,
    so a later rename still finds this conversation. Best effort: the write already happened."""
    mode = ctx.write_mode
    if mode.kind != "file-edit" or not mode.target or not ctx.pid \
            or os.path.realpath(path) != os.path.realpath(mode.target):
        return
    try:
        resolve_file_edit(mode.target, ctx.pid, ctx.environ)
    except NagentError:
        pass


def write_mode_now(ctx):
    mode = ctx.write_mode
    if mode.kind != "file-edit" or not ctx.side_dir:
        return mode
    registry = registry_lib.load(ctx.side_dir)
    return replace(mode, segments=registry_lib.granted_segments(registry, mode.target, mode.target_id))


def hook_refusal(action, hook):
    """Exit 2 refuses with the hook's output; any other failure is an error result. The action
    does not run."""
    tag = f"nagent-{action.kind}-result"
    attrs = {name: action.attr(name) for name in ("path", "index") if action.attr(name) is not None}
    if hook.status() == "refused":
        outcome = ActionOutcome(result_block(tag, f"refused by the action hook: {hook.output()}",
                                             dict(attrs, status="refused")), failed=True)
    else:
        outcome = error_block(tag, f"the action hook failed ({hook.describe()}), so the action did "
                              f"not run: {hook.output()}", attrs)
    return replace(outcome, hook=hook)
