"""Batches of nested nagents the driver runs for one reply: consecutive <nagent-agent> tags, or
consecutive <nagent-file-edit> tags, run concurrently and answer in tag order.

Data contract:
- `Planned(job, finish, start=None)`: one child to run (a nagent_agents.Job), `finish(result)
  -> ActionOutcome` for its nagent_agents.ChildResult, and `start()`, called right before its
  process starts (after any child with the same key ended: a file's snapshot is taken then).
- `process_batch(actions, ctx, ready, prepare, watch=None, hooks=True, targets=None)`: the
  action hook checks each action (in tag order, before any child starts; a refused one does not
  start) with its pinned target (nagent_action_targets.pin_target, or `targets` pinned by the
  caller); `prepare(action, ctx[, target]) -> Planned | ActionOutcome` (the target passed when
  the action has one, for the child to get the file the hook saw; an outcome ends the action there: a
  refusal, a limit); the planned children run at most ctx.max_parallel at once
  (nagent_agents.run_children); `ready(position, outcome)` gets each outcome in tag order as
  soon as every one before it is in. An interruption still reports every action (cut off, not
  started) before it propagates.
- `run_planned(planned, ctx) -> ActionOutcome`: one planned child, run to its end.
"""
from dataclasses import dataclass, replace
from typing import Callable

from nagent_action_base import ActionOutcome, hook_refusal
from nagent_action_targets import pin_target
from nagent_agents import run_children
from nagent_hooks import check_action


@dataclass(frozen=True)
class Planned:
    job: object
    finish: Callable
    start: Callable | None = None


def process_batch(actions, ctx, ready, prepare, watch=None, hooks=True, targets=None):
    outcomes, flushed = [None] * len(actions), 0
    hook_runs, plans = {}, {}

    def flush():
        nonlocal flushed
        while flushed < len(outcomes) and outcomes[flushed] is not None:
            flushed += 1
            ready(flushed - 1, outcomes[flushed - 1])

    for position, action in enumerate(actions):
        # What the hook is shown is what the child gets (nagent_action_targets).
        target = targets[position] if targets is not None else (
            pin_target(action, ctx) if action is not None else None)
        hook = check_action(action, ctx, target) if hooks else None
        if hook is not None and hook.status() != "accepted":
            outcomes[position] = hook_refusal(action, hook)
            continue
        planned = prepare(action, ctx) if target is None else prepare(action, ctx, target)
        if isinstance(planned, ActionOutcome):
            outcomes[position] = replace(planned, hook=hook)
            continue
        hook_runs[position] = hook
        plans[position] = planned
    flush()

    def started(position):
        if plans[position].start is not None:
            plans[position].start()

    def done(position, result):
        outcomes[position] = replace(plans[position].finish(result), hook=hook_runs.get(position))
        flush()

    jobs = [replace(plan.job, index=position) for position, plan in plans.items()]
    run_children(jobs, ctx, done, watch, started)
    flush()


def run_planned(planned, ctx):
    got = []
    process_batch([None], ctx, lambda _position, outcome: got.append(outcome),
                  lambda _action, _ctx: planned, hooks=False)
    return got[0]
