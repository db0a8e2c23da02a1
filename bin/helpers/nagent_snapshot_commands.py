"""`nagent --changes` and `nagent --rewind`: what the agent changed in the project, and undoing it.

Data contract: `changes(options, settings)` and `rewind(options, settings)` return (data, text)
like every lifecycle command (nagent_lifecycle_commands). Both work on the project around the
working directory (nagent_snapshots.project_scope; RefusedError in $HOME or /) and the selected
conversation; both first finish a rewind a killed process left.
- --changes [--turn N | --last] [--diff]: per turn (and per rewind) of the conversation, each
  action that changed files with a diffstat of its changes (a shell command's changes are that
  command's), the files someone else changed during the turn (no action of this conversation
  ran then: `outside`), and totals; --diff
  adds each action's unified diff; --json gives it all as data.
- --rewind [--turn N | --action SEQ | --last] [--dry-run] [--force] [--conversation]: back to
  the state before turn N, before the action whose result is record SEQ, or before the last
  turn or rewind of the conversation (the default: so a second --rewind undoes the first).
  The conversation is locked meanwhile (a run on it makes this exit 7), a `<system>` note tells
  the model; bare `--conversation` also branches it to the turns before N
  (nagent_conversation_lifecycle.branch; the current file is archived; before turn 1 it is
  archived and starts empty). Refusals change nothing (nagent_rewind.RewindConflict lists the
  files someone else changed).
Text shown on a terminal is made safe (paths and commands are the model's and the files').
"""
import os

import nagent_conversation_lifecycle as lifecycle
from nagent_cli import current_cwd, redact
from nagent_config import child_key_names
from nagent_conversation import ConversationWriter, read_records
from nagent_errors import InputError, RefusedError, UsageError
from nagent_rewind import finish_pending, note_text, run_rewind, summary_line
from nagent_secrets import redacted, secret_values
from nagent_snapshot_history import (action_span, file_changes, open_at, owned, owner_of, owns,
                                     patch, tree, units)
from nagent_snapshot_store import locked, open_store, read_journal
from nagent_snapshots import limits_of, project_scope
from nagent_terminal_text import escape, one_line

LOCK_TIMEOUT = lifecycle.LOCK_TIMEOUT
BAR = 40


def _project(settings):
    environ = dict(os.environ)
    keys = child_key_names(environ)
    scope = project_scope(current_cwd(), environ, keys)
    if scope.refused:
        raise RefusedError("no snapshots here", scope.refused,
                           "run nagent inside a project: a git repository or a directory of its own")
    store = open_store(scope.root, environ, keys, create=False)
    if store is None:
        raise InputError("no snapshots of this project yet", scope.root,
                         "nagent records them as it runs here")
    return scope, store, environ


def _conversation(options, environ):
    path = lifecycle.selected_conversation(options.selection, environ)[0]
    if not os.path.isfile(path):
        raise InputError("no conversation", path, "run a prompt first")
    return path


def _finished_note(finished, path, writer=None):
    """Tell the conversation a finished interrupted rewind happened, when it is this one."""
    if finished and finished["conversation"] == path and writer is not None:
        writer.append("system", note_text(finished))


# -- --changes --------------------------------------------------------------------------
def _merge(changes_lists):
    merged = {}
    for changes in changes_lists:
        for change in changes:
            old = merged.get(change.path)
            if old and old.added is not None and change.added is not None:
                change = change._replace(added=old.added + change.added,
                                         deleted=old.deleted + change.deleted)
            merged[change.path] = change
    return [merged[path] for path in sorted(merged)]


def _files(changes):
    return [{"path": c.path, "status": c.status, "added": c.added, "deleted": c.deleted,
             "binary": c.added is None} for c in changes]


def _unit_report(store, entries, opened, unit, owner, with_diff):
    actions, outside = [], []
    span = range(unit.first, unit.indexes[-1])
    for index in unit.indexes:
        entry = entries[index]
        if entry.get("phase") not in ("action", "rewind"):
            continue
        intervals = action_span(entries, index)
        changes = _merge(file_changes(store, tree(entries[k]), tree(entries[k + 1]))
                         for k in intervals)
        item = {"snapshot": entry["id"], "seq": entry.get("seq"), "kind": entry.get("kind"),
                "summary": entry.get("summary", ""), "files": _files(changes)}
        if with_diff:
            paths = {c.path for c in changes}
            item["diff"] = "".join(patch(store, tree(entries[k]), tree(entries[k + 1]), paths)
                                   for k in intervals)
        actions.append(item)
    for k in span:
        if not owned(opened, k, owner):
            outside.append(file_changes(store, tree(entries[k]), tree(entries[k + 1])))
    report = {"kind": unit.kind, "label": unit.label, "turn": unit.number if unit.kind == "turn"
              else None, "prompt": owner.prompts[unit.number - 1] if unit.kind == "turn" else None,
              "actions": actions, "outside": _files(_merge(outside))}
    every = {f["path"]: f for a in actions for f in a["files"]}
    report["files_changed"] = len(every)
    report["insertions"] = sum(f["added"] or 0 for a in actions for f in a["files"])
    report["deletions"] = sum(f["deleted"] or 0 for a in actions for f in a["files"])
    return report


def _stat_line(item, width):
    path = escape(item["path"])
    if item["binary"]:
        graph = "Bin"
    else:
        total = item["added"] + item["deleted"]
        scale = min(1.0, BAR / total) if total else 1.0
        graph = f"{total} " + "+" * round(item["added"] * scale) + "-" * round(item["deleted"] * scale)
    return f"    {item['status']} {path:<{width}} | {graph}"


def _unit_text(report, with_diff):
    head = report["label"]
    if report["prompt"]:
        head += ": " + one_line(report["prompt"], 70)
    lines = [head]
    paths = [f["path"] for a in report["actions"] for f in a["files"]] + \
            [f["path"] for f in report["outside"]]
    width = min(50, max([len(escape(p)) for p in paths] or [1]))
    for action in report["actions"]:
        if not action["files"]:
            continue
        where = f"  (record {action['seq']})" if action["seq"] is not None else ""
        lines.append(f"  {action['kind']}  {one_line(action['summary'], 80)}{where}")
        lines += [_stat_line(item, width) for item in action["files"]]
        if with_diff and action.get("diff"):
            lines += ["    " + escape(line, keep="\t") for line in action["diff"].splitlines()]
    if report["outside"]:
        lines.append("  changed meanwhile by someone else (you, another program or agent):")
        lines += [_stat_line(item, width) for item in report["outside"]]
    lines.append(f"  {_many(report['files_changed'], 'file')} changed by the agent, "
                 f"{_many(report['insertions'], 'insertion')}(+), "
                 f"{_many(report['deletions'], 'deletion')}(-)")
    return "\n".join(lines)


def _secrets(settings):
    """Every key nagent knows: none is shown, whatever a file or a diff holds."""
    return secret_values(settings.providers.values(), os.environ)


def _many(count, noun):
    return f"{count} {noun}{'' if count == 1 else 's'}"


def changes(options, settings):
    scope, store, environ = _project(settings)
    path = _conversation(options, environ)
    with locked(store, LOCK_TIMEOUT + 30):
        finished = finish_pending(store, scope, limits_of(settings))
        entries = read_journal(store)
    if finished and finished["conversation"] == path:
        with ConversationWriter(path, lock_timeout=LOCK_TIMEOUT) as writer:
            _finished_note(finished, path, writer)
    owner = owner_of(path, read_records(path))
    found = units(entries, owner)
    if options.turn is not None:
        found = [unit for unit in found if unit.kind == "turn" and unit.number == options.turn]
        if not found:
            raise _no_turn(options.turn, owner)
    elif options.last:
        found = found[-1:]
    opened = open_at(entries)
    reports = [_unit_report(store, entries, opened, unit, owner, bool(options.diff))
               for unit in found]
    data = {"conversation": path, "project": scope.root, "store": store.path, "units": reports}
    text = "\n\n".join(_unit_text(report, bool(options.diff)) for report in reports)
    if finished:
        text = "finished a rewind a killed nagent left: " + summary_line(finished) + "\n" + text
    secrets = _secrets(settings)
    return (redacted(data, secrets),
            redact(text, secrets) or "no changes recorded for this conversation's turns")


def _no_turn(turn, owner):
    if 1 <= turn <= len(owner.tokens):
        return InputError("no snapshots of that turn", turn,
                          "snapshots were off, or pruned, when it ran")
    return UsageError("no such turn", turn,
                      f"the conversation has {len(owner.tokens)} turns, one per user prompt")


# -- --rewind ---------------------------------------------------------------------------
def _target(entries, owner, options):
    """(index of the snapshot to go back to, label, turn number or None)."""
    if options.turn is not None:
        turn = options.turn
        for unit in units(entries, owner):
            if unit.kind == "turn" and unit.number == turn:
                return unit.first, unit.label, turn
        raise _no_turn(turn, owner)
    if options.action is not None:
        seq = options.action
        for index, entry in enumerate(entries):
            if entry.get("seq") == seq and entry.get("phase") == "action" and owns(owner, entry):
                turn = owner.tokens.index(entry["turn_id"]) + 1
                return index, f"action {seq} (turn {turn})", None
        raise UsageError("no such action", seq, "nagent --changes shows the record number of "
                         "each action that changed files")
    found = units(entries, owner)
    if not found:
        raise InputError("nothing to rewind", owner.path,
                         "no snapshots of this conversation's turns")
    unit = found[-1]
    if unit.kind == "rewind":
        return unit.first, "the " + unit.label, None
    return unit.first, unit.label, unit.number


def rewind(options, settings):
    scope, store, environ = _project(settings)
    path = _conversation(options, environ)
    dry, branch = bool(options.dry_run), bool(options.with_conversation)
    writer = None if dry else ConversationWriter(path, lock_timeout=LOCK_TIMEOUT)
    try:
        records = writer.records() if writer else read_records(path)
        owner = owner_of(path, records)
        with locked(store, LOCK_TIMEOUT + 30):
            finished = None if dry else finish_pending(store, scope, limits_of(settings))
            _finished_note(finished, path, writer)
            entries = read_journal(store)
            target, label, turn = _target(entries, owner, options)
            if branch and turn is None:
                raise UsageError("--rewind --conversation goes back by whole turns", label,
                                 "use --turn N, or rewind the last turn")
            keep_turns = (turn - 1) if branch else len(owner.tokens)
            base = owner.tokens[keep_turns - 1] if keep_turns > 0 else ""
            result = run_rewind(store, scope, limits_of(settings), owner, entries, target, label,
                                force=bool(options.force), dry_run=dry, base_turn_id=base)
        done = result["counts"] is not None
        if done and not branch:
            writer.append("system", note_text(result))
    finally:
        if writer is not None:
            writer.close()
    branched = _branch(path, turn - 1, result) if done and branch else None
    data, text = _rewind_output(result, dry, branched, finished, scope.root)
    secrets = _secrets(settings)
    return redacted(data, secrets), redact(text, secrets)


def _branch(path, keep, result):
    """Code and conversation go back together: the conversation keeps the turns before."""
    if keep < 1:
        archived = lifecycle.archive(path, reason="rewind")
        return {"archived": archived, "turns": 0}
    archived = lifecycle.branch(path, path, keep)
    with ConversationWriter(path, lock_timeout=LOCK_TIMEOUT) as writer:
        writer.append("system", note_text(result))
    return {"archived": archived, "turns": keep}


def _rewind_output(result, dry, branched, finished, root):
    ops = result["ops"]
    data = {"conversation": result["conversation"], "project": root, "label": result["label"],
            "dry_run": dry, "snapshot": result["target"], "archive": result["archive"],
            "ops": [{"op": op[0], "path": op[1]} for op in ops], "branched": branched}
    lines = []
    if finished:
        lines.append("finished a rewind a killed nagent left: " + summary_line(finished))
    if dry:
        lines.append(f"would rewind {result['label']} (dry run: nothing changed)")
        lines += [f"  {op[0]}  {escape(op[1])}" for op in ops] or ["  nothing to change"]
    elif result["counts"] is None:
        lines.append(f"nothing to rewind: {result['label']} left no changes of the agent's "
                     "standing")
    else:
        counts = result["counts"]
        data.update({key: counts["paths"][key] for key in counts["paths"]})
        lines.append(summary_line(result))
        for key in ("restored", "archived", "kept", "unrestorable", "blocked"):
            lines += [f"  {key}  {escape(item)}" for item in counts["paths"][key]]
        lines.append(f"  archive: {result['archive']}")
        if branched:
            lines.append(f"  conversation: back to its first {branched['turns']} turns; the "
                         f"previous one was archived at {branched['archived']}")
    return data, "\n".join(lines)
