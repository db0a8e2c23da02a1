"""Running one valid reply's actions inside a run: in reply order, consecutive <nagent-agent>
tags (or consecutive <nagent-file-edit> tags) as one concurrent batch, each result recorded and
announced.

Data contract: `process_tags(run, actions)` runs `actions` (parsed, non-response) for the Run
`run` (nagent_run): each action is announced (action_start), run through the session's
handlers (`run.session.actions`: nagent_actions, which the session imports once a reply asks
for an action, so that this module and the loop stay light before the first request), its
outcome announced (action_end, then one file_change event per file it changed outside the temp
roots: path, added, removed, the diff cut at EVENT_DIFF_LINES lines with a note, `truncated`,
sha256 before and after) and recorded (hook record, result, continuation prompt, a nested
nagent's totals folded in, a cut-off child remembered); an action that can change files gets a
snapshot before and after it (run.snapshots, nagent_run_snapshots; a batch one pair for the
batch); a shell action's closing snapshot is taken at once, and the files it changed are
announced as an edit tag's are (run.snapshots.close_now). A batch runs concurrently (nagent_actions.process_agents), is a barrier for what
follows, appends results in tag order and emits "agents" events while its children run.
`repeated_too_often(run, actions, limit)` is the repeated-action guard's count
(run.recent_actions). The loop imports this module when a reply is in, or sooner in its preload
thread while the run's first reply arrives (nagent_loop.FIRST_STEP_MODULES). Nothing here prints.
"""
import time
from dataclasses import replace

from nagent_accounting import add_child
from nagent_action_view import action_result, action_summary
from nagent_file_change import capped
from nagent_run_presence import progress

EVENT_DIFF_LINES, EVENT_DIFF_BYTES = 2000, 256 * 1024
BATCHED = ("agent", "file-edit")


def action_key(action):
    return (action.kind, action.attrs, action.body)


def repeated_too_often(run, actions, limit):
    """True when the same action has now run `limit` times in a row."""
    for action in actions:
        key = action_key(action)
        if run.recent_actions and run.recent_actions[-1][0] == key:
            run.recent_actions[-1] = (key, run.recent_actions[-1][1] + 1)
        else:
            run.recent_actions.append((key, 1))
    return bool(run.recent_actions) and run.recent_actions[-1][1] >= limit


def record_outcome(run, action, outcome):
    """Append what the action left; returns its result record (None when it has none)."""
    result = None
    if outcome.hook:
        run.append("hook", *outcome.hook.record())
    if outcome.block:
        result = run.append("result", outcome.block, {"action": action.kind})
    if outcome.prompt is not None:
        run.append("prompt", outcome.prompt, {"source": "next"})
    if outcome.child:
        run.run_stats = add_child(run.run_stats, outcome.child)
        run.conv_stats = add_child(run.conv_stats, outcome.child)
        run.record_stats()
    if outcome.cut_off:
        run.cut_off.append(outcome.cut_off)
    return result


def snapshot_before(run, action, summary):
    """The snapshot before an action that can change files (nagent_run_snapshots)."""
    return run.snapshots.before_action(action, summary) if run.snapshots else None


def snapshot_after(run, entry_id, result):
    """The snapshot that closes the action (`result`: its result record, or None)."""
    if run.snapshots and entry_id is not None:
        run.snapshots.after_action(entry_id, None if result is None else result.seq)


def action_groups(actions):
    """The reply's actions in order, consecutive agents (or file-edits) as one batch."""
    groups = []
    for action in actions:
        if action.kind in BATCHED and groups and groups[-1][0].kind == action.kind:
            groups[-1].append(action)
        else:
            groups.append([action])
    return groups


def shell_changes(run, entry_id, outcome):
    """The shell action's outcome with the files it changed (from the run's snapshots; none
    when they are off) and how many more changed than are shown."""
    if not run.snapshots or entry_id is None:
        return outcome, 0
    changes, more = run.snapshots.close_now(entry_id)
    return (replace(outcome, changes=outcome.changes + changes) if changes else outcome), more


def summary_of(run, action):
    """An action's redacted one-line summary."""
    return run.redact(action_summary(action))


def start_action(run, action, summary):
    """Announce an action: (its index in the run, its summary)."""
    run.actions_run += 1
    run.emit("action_start", index=run.actions_run, kind=action.kind, summary=summary)
    return run.actions_run, summary


def end_action(run, action, start, outcome, seconds):
    view = action_result(action, outcome, seconds)
    view["outcome"] = run.redact(view["outcome"])
    run.emit("action_end", index=start[0], kind=action.kind, summary=start[1], **view)
    for change in outcome.changes:
        diff, cut = capped(change.diff, EVENT_DIFF_LINES, EVENT_DIFF_BYTES)
        run.emit("file_change", index=start[0], path=change.shown, added=change.added,
                 removed=change.removed, diff=run.redact(diff), truncated=cut,
                 sha256_before=change.sha256_before, sha256_after=change.sha256_after)


def process_tags(run, actions):
    """Run the actions in reply order, appending each result (and any continuation prompt); a
    batch of agents runs concurrently and is a barrier, its results appended in tag order."""
    for group in action_groups(actions):
        ctx = run.action_context(len(group))   # what is left of the budget, shared by the group
        if group[0].kind in BATCHED:
            run_batch(run, group, ctx)
            continue
        action = group[0]
        summary = summary_of(run, action)
        snapshot = snapshot_before(run, action, summary)
        start = start_action(run, action, summary)
        progress(run, f"{action.kind}: {start[1]}")
        began = time.monotonic()
        outcome, more = run.session.actions.process_action(action, ctx), 0
        if action.kind == "shell":
            outcome, more = shell_changes(run, snapshot, outcome)
        end_action(run, action, start, outcome, time.monotonic() - began)
        if more:
            run.emit("note", text=f"and {more} more files changed (nagent --changes --last)")
        snapshot_after(run, snapshot, record_outcome(run, action, outcome))


def run_batch(run, group, ctx):
    """Consecutive agents (or file-edits), concurrently (nagent_actions.process_agents): each
    announced in tag order, each result appended and announced in tag order; while they run, an
    "agents" event whenever the running children or what they do changes (the display's table
    of children)."""
    summaries = [summary_of(run, action) for action in group]
    more = f" (and {len(group) - 1} more)" if len(group) > 1 else ""
    snapshot = snapshot_before(run, group[0], summaries[0] + more)
    began = time.monotonic()
    starts = [start_action(run, action, summary) for action, summary in zip(group, summaries)]
    progress(run, f"{group[0].kind}s: {len(group)}")
    shown = []

    results = []

    def ready(position, outcome):
        end_action(run, group[position], starts[position], outcome, time.monotonic() - began)
        results.append(record_outcome(run, group[position], outcome))

    def watch(views):
        progress(run, f"{group[0].kind}s: {len(views)} of {len(group)} running")
        rows = [{"index": starts[view["index"]][0], "conversation": view["name"], "pid": view["pid"],
                 "action": run.redact(view["action"]) if view["action"] else None,
                 "elapsed": view["elapsed"], "calls": view["calls"]} for view in views]
        key = [(row["index"], row["action"]) for row in rows]
        if key != shown:
            shown[:] = key
            run.emit("agents", running=rows, total=len(group))

    try:
        run.session.actions.process_agents(group, ctx, ready, watch)
    finally:
        run.emit("agents", running=[], total=len(group))
    snapshot_after(run, snapshot, results[0] if results else None)
