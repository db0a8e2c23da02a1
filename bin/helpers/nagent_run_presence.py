"""A run's presence outside its conversation file: its run file and its inbox.

Data contract
-------------
* `registered(session)`: a context manager around one run, entered once the run holds the
  conversation's lock. It writes this process's run file (nagent_instances.RunFile: pid,
  conversation, parent conversation and pid for a sub-agent, depth, invocation) and removes it
  when the block ends, however it ends (return, error, Ctrl-C, SIGTERM/SIGHUP). Yields the
  RunFile.
* `progress(run, action)`: records what the run does now (a one-line `action` such as "model
  call 3", "shell: pytest -q" (the kind and the action's one-line summary,
  nagent_action_view.action_summary), "agents: 2 of 3 running", or None; cut at ACTION_WIDTH
  columns) and its token totals and call count so far (nested nagents' that ended included) in
  its run file; rewritten only when
  something changed.
* `deliver_inbox(run) -> int`: at a turn boundary (the loop calls it before each model call,
  never during a call or an action), every message waiting in the conversation's inbox
  (nagent_inbox.take) is appended as a prompt record with source="inbox" and inbox=ID, then
  dropped from the inbox, and announced as a "prompt" event with source "inbox" (the live
  view's `✉ message delivered`); returns how many were appended. The next request carries them.
* `late_messages(run) -> int`: messages that arrived after the run's last model call; they stay
  queued for the next run.
"""
import contextlib
import os

import nagent_inbox as inbox
from nagent_instances import RunFile

ACTION_WIDTH = 160


@contextlib.contextmanager
def registered(session):
    # Not session.action_context: building it costs start-up time before the first request.
    delegated = session.meta.get("invocation") == "delegated"
    run_file = RunFile.create(
        session.environ or None, conversation=session.path, depth=session.depth,
        invocation=session.meta.get("invocation", "user"),
        parent_conversation=session.meta.get("parent_conversation"),
        parent_pid=os.getppid() if delegated else None, action="starting")
    try:
        yield run_file
    finally:
        run_file.remove()


def progress(run, action):
    instance = getattr(run, "instance", None)
    if instance is None:
        return
    stats = run.run_stats
    if action is not None:
        action = run.redact(action)
        action = action if len(action) <= ACTION_WIDTH else action[:ACTION_WIDTH - 1] + "…"
    instance.update(action=action,
                    tokens={"input": stats.input_tokens, "output": stats.output_tokens},
                    calls=stats.model_calls)


def deliver_inbox(run):
    path = run.session.path
    count = 0
    for name, text in inbox.take(path, run.writer.records):
        record = run.append("prompt", text, {"source": inbox.SOURCE, "inbox": name})
        inbox.delivered(path, name)
        run.emit("prompt", text=record.body, source=inbox.SOURCE)
        count += 1
    return count


def late_messages(run):
    return inbox.waiting(run.session.path)
