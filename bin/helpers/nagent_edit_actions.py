"""<nagent-replace> and <nagent-file-edit>: the edit routes of the loop, and what they changed.

Data contract:
- `execute_replace(action, ctx, target=None) -> ActionOutcome`. The body's pairs (nagent_replace, the one
  rule) are applied, all or none:
  * here (`replace_in_place`) to a path the session may write (nagent_write_policy under
    `write_mode_now`: temp files in the main conversation; in a per-file session its target, the
    target renamed, and the segments of splits nagent made of it, so an old spanning a segment
    boundary is a replace of the target);
  * in the main conversation, to any other edit target (`edit_target_of`), through
    `nagent-file-edit --file REAL --replace-file -` with no model call: a
    nested process (nagent_action_batch.run_planned; a fork of the driver, nagent_fork) that records it
    in that file's per-file conversation under that session's write authority, outside any
    shell sandbox, within file_tool_timeout.
  The result `<nagent-replace-result path=.. status="ok" [conversation=..]>` says "replaced N
  pair(s) in PATH (+a −r)" and carries a short diff; a refusal says why (how many matches, the
  closest lines) and nothing is written.
- `replace_in_place(raw, pairs, ctx, expect_sha256=None, expected=None) -> Replaced(path, pairs,
  before, after, change)`: read once (refused unless it has `expect_sha256` when one is given),
  applied, written atomically only while the file still holds the bytes it was read as
  (write_file_atomic's expect_sha256) and, with `expected` (the path the action hook allowed),
  while the path resolves to it: a change racing it is refused, nothing written.
  Raises NagentError (RefusedError "replace refused" with the rule's reason).
- `file_edit_job(action, ctx, target=None) -> nagent_action_batch.Planned | ActionOutcome`: a <nagent-file-edit> in
  the main conversation runs `nagent-file-edit --file REAL -` (instruction on stdin) as the
  driver's own child (a fork of the driver: its SDK is loaded already), like a sub-agent: the
  driver's environment (the session's credentials), its pid, provider, model and shell settings,
  depth + 1, agent_timeout, keyed by the file's id (two sessions of one file, by any of its
  names, never run at once). A refused target, a per-file session (it edits only its own
  target) or the depth limit end it with an error result. Its result `<nagent-file-edit-result path conversation tokens_in tokens_out
  calls>` has exit_code, the session's answer (or error) and the diff the driver saw; its totals
  fold into the run's (a session that timed out counts what its conversation recorded meanwhile).
- `edit_target_of(raw, ctx, target=None)`: nagent_write_policy.edit_target under the working
  directory, the project root (nagent_project) and the temp roots, the repository's git
  directory excluded; with `target` (nagent_action_targets: what the action hook was shown), a
  path that now names another file is refused.
- `observe(path, ctx)` / `observed(outcome, snap, ctx)`: a snapshot before an action and the
  outcome with the file's change added after it (nagent_file_change).
"""
import hashlib
import os
import stat
from collections import namedtuple
from dataclasses import replace

from nagent_accounting import difference
from nagent_action_base import (ActionOutcome, error_block, error_text, refresh_target_id,
                                write_mode_now)
from nagent_agents import Job, delegated_args, setting_args
from nagent_action_batch import Planned, run_planned
from nagent_conversation_layout import conversation_path
from nagent_conversation_tail import read_tail_summary
from nagent_errors import InputError, NagentError, RefusedError
from nagent_file_change import (Snapshot, capped, change_since, shown_path, snapshot, summary,
                                unified_diff)
from nagent_file_edit_lib import lookup_file_edit
from nagent_fs import file_id_for_path
from nagent_paths import within_any
from nagent_project import find_project
from nagent_protocol_blocks import result_block
from nagent_replace import ReplaceRefused, apply_pairs, parse_pairs
from nagent_terminal_text import counted
from nagent_write_policy import edit_target, temp_roots, validate_write_path, write_file_atomic

REPLACE_MAX_BYTES = 64 << 20
SHORT_DIFF_LINES, SHORT_DIFF_BYTES = 40, 4000

Replaced = namedtuple("Replaced", "path pairs before after change")


def observe(path, ctx):
    return snapshot(path, ctx.environ, ctx.cwd)


def observed(outcome, snap, ctx):
    change = change_since(snap, ctx.cwd)
    return replace(outcome, changes=outcome.changes + (change,)) if change else outcome


def edit_target_of(raw, ctx, target=None):
    """The realpath of an edit target of the main conversation (write_policy.edit_target): in
    the working directory, the project root or a temp root, not in the git directory; with
    `target` (what the action hook was shown, nagent_action_targets), the same file or a
    RefusedError."""
    project = find_project(ctx.cwd, ctx.environ, ctx.secret_names)
    roots = [os.path.realpath(ctx.cwd)] + ([project.root] if project else [])
    excluded = (os.path.realpath(project.git_dir), os.path.join(project.root, ".git")) \
        if project else ()
    real = edit_target(raw, ctx.cwd, tuple(roots) + temp_roots(ctx.environ, ctx.cwd), ctx.environ,
                       excluded)
    if target is not None and real != target.real:
        raise RefusedError("not an edit target", raw, f"the path changed after the action hook "
                           f"allowed it: it allowed {target.real}, the path now names {real}")
    return real


def short_diff(text):
    return capped(text, SHORT_DIFF_LINES, SHORT_DIFF_BYTES)[0]


def _pairs_word(count):
    return counted(count, "pair")


def _file_key(real):
    """One key per file, whatever link names it: its id (the per-file index's key too)."""
    try:
        return file_id_for_path(real)
    except NagentError:
        return real


# -- <nagent-replace> -----------------------------------------------------------------------------

def _read_for_replace(final):
    try:
        fd = os.open(final, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as error:
        raise InputError("cannot read the file to replace in", final, error.strerror) from None
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(handle.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise RefusedError("replace refused", f"{final} is not a regular file")
        if st.st_size > REPLACE_MAX_BYTES:
            raise InputError("file too large to replace in", f"{st.st_size} bytes",
                             f"limit {REPLACE_MAX_BYTES} bytes")
        return handle.read()


def replace_in_place(raw, pairs, ctx, expect_sha256=None, expected=None):
    mode = write_mode_now(ctx)
    final = validate_write_path(raw, mode, ctx.cwd, ctx.environ)
    data = _read_for_replace(final)
    digest = hashlib.sha256(data).hexdigest()
    if expect_sha256 is not None and digest != expect_sha256.lower():
        raise RefusedError("replace refused", f"the file's sha256 is {digest}, not {expect_sha256}",
                           "nothing was written; read the file again")
    try:
        after = apply_pairs(data, pairs)
    except ReplaceRefused as refused:
        raise RefusedError("replace refused", refused.reason,
                           "nothing was written; copy <old> exactly from the file") from None
    shown_before = None if within_any(final, temp_roots(ctx.environ, ctx.cwd), inclusive=True) \
        else Snapshot(final, data, digest)
    write_file_atomic(raw, after, mode, ctx.cwd, ctx.environ, expect_sha256=digest, expected=expected)
    refresh_target_id(final, ctx)
    return Replaced(final, pairs, data, after, change_since(shown_before, ctx.cwd))


def replace_block(raw, done, cwd, conversation=None):
    """The result of a replace that was applied."""
    shown = shown_path(done.path, cwd)
    diff, added, removed = unified_diff(done.before, done.after, shown)
    counts = f"+{added} \u2212{removed}"
    attrs = {"path": raw, "status": "ok"}
    if conversation:
        attrs["conversation"] = conversation
    text = f"replaced {_pairs_word(len(done.pairs))} in {shown} ({counts})"
    if conversation:
        text += f"; recorded in its per-file conversation {conversation}"
    return result_block("nagent-replace-result", f"{text}\ndiff:\n{short_diff(diff)}", attrs)


def execute_replace(action, ctx, target=None):
    raw = action.attr("path", "")
    try:
        pairs = parse_pairs(action.body)
    except ValueError as problem:   # the parser checked it: only a hand-made action gets here
        return error_block("nagent-replace-result", str(problem), {"path": raw})
    if ctx.write_mode.kind == "main":
        try:
            validate_write_path(raw, ctx.write_mode, ctx.cwd, ctx.environ)
        except RefusedError:   # not a temp file: a project file, for its per-file session
            return _replace_through_session(action, raw, ctx, target)
    try:
        done = replace_in_place(raw, pairs, ctx, expected=None if target is None else target.real)
    except NagentError as error:
        return error_block("nagent-replace-result", error_text(error), {"path": raw})
    outcome = ActionOutcome(replace_block(raw, done, ctx.cwd))
    return replace(outcome, changes=(done.change,)) if done.change else outcome


def _replace_through_session(action, raw, ctx, target=None):
    """A project file's replace from the main conversation: its per-file session applies it."""
    try:
        real = edit_target_of(raw, ctx, target)
    except NagentError as error:
        return error_block("nagent-replace-result", error_text(error), {"path": raw})
    args = ["--file", real, "--replace-file", "-", *delegated_args(ctx), *setting_args(ctx.settings)]
    job = Job(0, f"replace {os.path.basename(real)}", action.body, tuple(args),
              timeout=ctx.file_tool_timeout, key=_file_key(real), totals=dict,
              tool="nagent-file-edit")
    state = {}

    def start():
        state["before"] = observe(real, ctx)

    def finish(result):
        attrs = {"path": raw}
        data = result.data
        if result.status != "finished":
            return observed(error_block("nagent-replace-result", f"nagent-file-edit "
                                        f"{result.status.replace('_', ' ')}: {result.reason}",
                                        attrs), state.get("before"), ctx)
        if result.exit_code != 0 or data.get("status") != "replaced":
            message = data.get("error") and f"{data['error']}: {data.get('value', '')}"
            return error_block("nagent-replace-result", message or result.error_line
                               or f"nagent-file-edit exit {result.exit_code}", attrs)
        conversation = os.path.basename(str(data.get("conversation") or ""))
        before = state.get("before")
        after = observe(real, ctx)
        done = Replaced(real, parse_pairs(action.body), before.data if before else b"",
                        after.data if after and after.data is not None else b"", None)
        return observed(ActionOutcome(replace_block(raw, done, ctx.cwd, conversation)), before, ctx)

    return run_planned(Planned(job, finish, start), ctx)


# -- <nagent-file-edit> ---------------------------------------------------------------------------

def _conversation_totals(real, ctx):
    """The per-file conversation's recorded totals now ({} when it has none yet)."""
    try:
        record = lookup_file_edit(real, ctx.pid, ctx.environ)
        if record is None:
            return {}, None
        path = conversation_path(record["conversation"], ctx.environ)
        stats = read_tail_summary(path)["stats"] or {}
    except NagentError:
        return {}, None
    totals = stats.get("conversation")
    return (totals if isinstance(totals, dict) else {}), record["conversation"]


def file_edit_job(action, ctx, target=None):
    raw = action.attr("path", "")
    attrs = {"path": raw}
    if ctx.write_mode.kind == "file-edit":
        return error_block("nagent-file-edit-result", "a per-file edit session changes only its "
                           "own target: edit it with <nagent-replace> or <nagent-write>", attrs)
    if ctx.depth + 1 > ctx.max_depth:
        return error_block("nagent-file-edit-result", f"nesting limit ({ctx.max_depth}) reached; "
                           "make this change with <nagent-replace>", attrs)
    try:
        real = edit_target_of(raw, ctx, target)
    except NagentError as error:
        return error_block("nagent-file-edit-result", error_text(error), attrs)
    args = ["--file", real, *delegated_args(ctx), *setting_args(ctx.settings), "-"]
    state = {}

    def start():
        state["before"] = observe(real, ctx)
        state["totals"] = _conversation_totals(real, ctx)[0]

    def totals():
        return difference(_conversation_totals(real, ctx)[0], state.get("totals", {}))

    job = Job(0, f"file {os.path.basename(real)}", action.body.strip(), tuple(args),
              key=_file_key(real), totals=totals, tool="nagent-file-edit")
    return Planned(job, lambda result: file_edit_outcome(result, raw, real, state, ctx), start)


def file_edit_outcome(result, raw, real, state, ctx):
    conversation = os.path.basename(str(result.data.get("conversation") or "")) \
        or _conversation_totals(real, ctx)[1] or ""
    totals = result.totals or {}
    attrs = {"path": raw, "conversation": conversation,
             "tokens_in": str(totals.get("input_tokens", 0)),
             "tokens_out": str(totals.get("output_tokens", 0)),
             "calls": str(totals.get("model_calls", 0))}
    outcome = observed(ActionOutcome("", child=totals or None), state.get("before"), ctx)
    change = outcome.changes[0] if outcome.changes else None
    diff = f"diff ({summary(change)}):\n{short_diff(change.diff)}" if change else \
        "diff: none (the file is unchanged)"
    failed = result.status != "finished" or result.exit_code != 0
    if result.status == "finished":
        lines = [f"exit_code: {result.exit_code}"]
        if result.response is not None and result.exit_code == 0:
            lines += ["answer:", result.response]
        else:
            error = result.data.get("error")
            lines.append("error: " + (f"{error}: {result.data.get('value', '')}" if error
                                      else result.error_line or "(no output)"))
            if result.response is not None:
                lines += ["answer:", result.response]
    else:
        verb = {"timed_out": "timed out", "cut_off": "cut off", "not_started": "not started"}
        lines = ["exit_code: none",
                 f"error: edit session {verb.get(result.status, 'failed')}: {result.reason}"
                 + ("; it and its commands were ended (its conversation keeps what it did)"
                    if result.status in ("timed_out", "cut_off") else "")]
    if failed:
        attrs["status"] = "error"
    block = result_block("nagent-file-edit-result", "\n".join(lines + [diff]), attrs)
    return replace(outcome, block=block, failed=failed,
                   cut_off=conversation if result.status == "cut_off" else "")
