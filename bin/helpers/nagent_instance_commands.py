"""`nagent --ps` (running instances as a tree) and `nagent --send TARGET MESSAGE` (the inbox).

Data contract: like nagent_lifecycle_commands, each command takes the parsed options dict and
the resolved Settings and returns `(data, text)`.
* `ps`: data {"instances": [tree]} where each node is a run file record (nagent_instances) plus
  "name" (the conversation's file name), "elapsed" (seconds) and "children" (nodes); text: a
  table, one line per instance, children indented under their parent. Stale run files are
  cleaned up on the way.
* `send`: TARGET is the pid of a running nagent (as --ps shows it), a conversation name, or the
  conversation's path as --ps --json shows it;
  the message comes from the words after it (or stdin, as a prompt does). The message goes into
  the conversation's inbox (nagent_inbox.send; no lock needed); data {"conversation", "message"
  (its id), "bytes", "running" (the pid holding the conversation, or null), "queued" (true when
  nothing runs on it: it is appended at the start of the next run)}. A pid is only trusted when
  its run file names a conversation under conversations_dir that is valid and locked.
* `running_status(path, environ)` -> (data, lines) for --status: the instance running on the
  conversation (or None) and the messages waiting in its inbox.
"""
import os
import time

import nagent_inbox as inbox
import nagent_instances as instances
from nagent_cli import read_prompt
from nagent_conversation_layout import conversation_path, given_name, validate_name
from nagent_conversation_lock import is_busy
from nagent_errors import InputError, UsageError
from nagent_paths import conversations_dir
from nagent_terminal_text import counted, one_line

PS_FIX = "nagent --ps lists running instances, nagent --list-conversations the conversations"


def elapsed_text(seconds):
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def count(value):
    # The live view's rule for token counts; imported here, since --status and --config load
    # this module at start-up and only --ps prints counts.
    from nagent_action_view import human_count
    return human_count(int(value or 0))


def _node(record, now):
    node = {key: value for key, value in record.items() if key != "children"}
    node["name"] = os.path.basename(record.get("conversation") or "") or None
    node["elapsed"] = round(now - (record.get("started_at") or now), 1)
    node["children"] = [_node(child, now) for child in record.get("children", ())]
    return node


def ps(options, settings):
    environ = dict(os.environ)
    now = time.time()
    tree = [_node(root, now) for root in instances.instance_tree(instances.list_instances(environ))]
    data = {"instances": tree}
    if not tree:
        return data, "no nagent is running"
    lines = [f"{'PID':<14} {'ELAPSED':>8} {'CALLS':>5} {'TOKENS IN/OUT':>14}  {'NOW':<34} CONVERSATION"]
    for root in tree:
        lines += _tree_lines(root, "", True, True)
    return data, "\n".join(lines)


def _tree_lines(node, prefix, last, root):
    mark = "" if root else prefix + ("└─ " if last else "├─ ")
    tokens = node.get("tokens") or {}
    line = (f"{mark + one_line(node.get('pid')):<14} {elapsed_text(node['elapsed']):>8} "
            f"{int(node.get('calls') or 0):>5} "
            f"{count(tokens.get('input')) + '/' + count(tokens.get('output')):>14}  "
            f"{one_line(node.get('action') or '-', 34):<34} {one_line(node.get('name') or '?')}")
    lines = [line]
    inner = "" if root else prefix + ("   " if last else "│  ")
    for number, child in enumerate(node["children"]):
        lines += _tree_lines(child, inner, number == len(node["children"]) - 1, False)
    return lines


def _trusted_conversation(record, environ):
    """The conversation a run file names, when it is a valid one under conversations_dir."""
    path = record.get("conversation")
    if not isinstance(path, str) or os.path.dirname(path) != conversations_dir(environ):
        return None
    try:
        validate_name(os.path.basename(path))
    except UsageError:
        return None
    return path


def resolve_target(target, environ):
    """(conversation path, running instance or None) that TARGET names."""
    target = str(target)
    if target.isdigit():
        record = instances.by_pid(int(target), environ)
        if record is not None:
            path = _trusted_conversation(record, environ)
            if path is None:
                raise InputError("that nagent's run file names no conversation of yours", target, PS_FIX)
            named = os.path.join(conversations_dir(environ), target)
            if os.path.lexists(named) and named != path:
                raise UsageError("ambiguous target: a running pid and a conversation name", target,
                                 "rename the conversation, or send by the other")
            return path, record
    try:
        path = conversation_path(given_name(target, environ), environ)
    except UsageError:
        raise UsageError("not a running pid or a conversation name", target, PS_FIX) from None
    record = instances.running_on(path, environ)
    if record is None and not os.path.exists(path):
        raise InputError("no running nagent and no conversation of that name", target, PS_FIX)
    return path, record


def send(options, settings):
    environ = dict(os.environ)
    import sys
    path, record = resolve_target(options.send, environ)
    words = list(options.prompt)
    if not words and (sys.stdin is None or sys.stdin.isatty()):
        raise UsageError("no message", "", 'nagent --send TARGET "message", or - to read it from stdin')
    text, _source = read_prompt(words, sys.stdin)
    message = inbox.send(path, text, environ)
    running = record["pid"] if record is not None and is_busy(path) else None
    data = {"conversation": path, "message": message, "bytes": len(text.encode("utf-8", "replace")),
            "running": running, "queued": running is None}
    name = os.path.basename(path)
    if running:
        return data, (f"sent to pid {running} (conversation {name}): it reads the message at its "
                      "next turn boundary")
    return data, (f"queued for {name}: nothing is running on it; the message is appended at the "
                  "start of its next run")


def running_status(path, environ):
    record = instances.running_on(path, environ)
    waiting = inbox.waiting(path)
    lines = []
    data = None
    if record is not None:
        elapsed = time.time() - (record.get("started_at") or time.time())
        data = {"pid": record["pid"], "started": record.get("started"), "elapsed": round(elapsed, 1),
                "action": record.get("action"), "depth": record.get("depth", 0),
                "parent_conversation": record.get("parent_conversation")}
        lines.append(f"running: pid {record['pid']} for {elapsed_text(elapsed)}, now: "
                     f"{one_line(record.get('action') or '-', 80)}")
    if waiting:
        lines.append(f"inbox: {counted(waiting, 'message')} waiting for "
                     f"{'its next turn' if record else 'the next run'}")
    return {"running": data, "inbox_waiting": waiting}, lines
