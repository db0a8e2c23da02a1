"""Conversation lifecycle commands of `bin/nagent`: one function per flag.

Data contract: each function takes the parsed command line (`options`, the frozen
nagent_invocation.Invocation) and the command's resolved Settings and returns `(data, text)`:
`data` is what --json prints, `text` the human output. They work on the conversation the
options select (--conversation / --pid / --file-edit / this shell's default) and never
destroy a file: --clear and --load archive the current one first. Queries (--status, --summarize,
--save-conversation) change nothing: a --file-edit target's conversation is only looked up.
"""
import os
import sys

import nagent_conversation_lifecycle as lifecycle
from nagent_conversation_layout import given_name, selected_pid
from nagent_errors import BusyError, InputError
from nagent_instance_commands import ps, running_status, send  # noqa: F401  (--ps, --send)
from nagent_terminal_text import counted


def selected_path(options, environ=None, read_only=False):
    """The selected conversation's path. A --file-edit target's conversation comes from the
    per-file index: a command that changes the conversation resolves it (a new target gets its
    record); a read-only one (`read_only`: status, summarize, save) only looks it up and gets
    None when the file has no per-file conversation yet, so a query changes nothing."""
    environ = dict(os.environ) if environ is None else environ
    if options.file_edit and read_only:
        import nagent_file_edit_lib as file_edit
        record = file_edit.lookup_file_edit(options.file_edit, selected_pid(options.pid, environ),
                                            environ)
        return None if record is None else lifecycle.conversation_path(record["conversation"],
                                                                       environ)
    if options.file_edit:
        from nagent_session import resolve_conversation  # finds it in the file-edit index
        return resolve_conversation(options.selection, environ)[0]
    # Without --file-edit, no need to load the run's session machinery (start-up time).
    return lifecycle.selected_conversation(options.selection, environ)[0]


def _existing(options, purpose):
    """The selected conversation, looked up read-only; InputError when it has none yet."""
    path = selected_path(options, read_only=True)
    if path is None or not os.path.exists(path):
        raise InputError(f"no conversation to {purpose}", path or options.file_edit,
                         "run a prompt first")
    return path


def _counts(stats):
    """A totals dict of a stats record as --status shows it: model calls as "calls"."""
    data = {key: value for key, value in (stats or {}).items() if key != "model_calls"}
    data["calls"] = (stats or {}).get("model_calls", 0)
    data["cache_read_share"] = (round(data.get("cache_read_tokens", 0) / data["input_tokens"], 4)
                                if data.get("input_tokens") else 0.0)
    return data


def _cost(value):
    return f"${value:.4f}" if value is not None else "unknown, no price for the model"


def status(options, settings):
    """Path, size, prompts and model calls (apart: a turn is a user prompt), token and cost
    totals, the last run and call, the window chain, the checkpoint, the provider, model
    and config files in effect, and the size of this project's snapshot store. Reads only the file's tail (and one tail per earlier window)."""
    from nagent_conversation_tail import read_tail_summary, window_chain
    path = selected_path(options, read_only=True)
    summary = read_tail_summary(path) if path else {}
    stats = summary.get("stats") or {}
    recorded = stats.get("prompts") if stats else 0
    prompts = None if recorded is None else recorded + summary.get("prompts_after", 0)
    totals = _counts(stats.get("conversation")) if stats else {}
    windows = window_chain(stats)
    data = {"conversation": path, "exists": bool(path) and os.path.exists(path),
            "size": summary.get("size", 0),
            "records": summary.get("records", 0), "prompts": prompts,
            "model_calls": totals.get("calls", 0), "totals": totals,
            "last_run": _counts(stats.get("run")) if stats.get("run") else {},
            "last_call": stats.get("last_call"), "last_time": summary.get("last_time"),
            "window": len(windows) + 1, "windows": windows,
            "checkpoint": checkpoint_path_if_any(path) if path else None,
            "provider": settings.provider_name, "model": settings.model,
            "config_files": [{"layer": layer, "path": file} for layer, file in settings.files]}
    presence, running_lines = (running_status(path, dict(os.environ)) if path
                               else ({"running": None, "inbox_waiting": 0}, []))
    data.update(presence)
    shown = path or f"none yet for {options.file_edit} (no per-file edit session)"
    lines = [f"conversation: {shown}" + ("" if data["exists"] or not path else ", not started yet"),
             *running_lines,
             f"size: {data['size']} bytes, {data['records']} records",
             "prompts: " + (str(prompts) if prompts is not None
                            else "not recorded by the older nagent that wrote this file"),
             f"model calls: {data['model_calls']}"]
    if totals:
        lines.append(f"tokens: in {totals.get('input_tokens', 0)} out {totals.get('output_tokens', 0)} "
                     f"cache read {totals.get('cache_read_tokens', 0)} "
                     f"({totals['cache_read_share']:.0%}) write {totals.get('cache_write_tokens', 0)}")
        lines.append("cost: " + _cost(totals.get("cost_usd")))
    run = data["last_run"]
    caps = data["last_run_budget"] = stats.get("budget") if stats else None
    if run:
        used = run.get("input_tokens", 0) + run.get("output_tokens", 0)
        lines.append(f"last run: {counted(run['calls'], 'call')}, in {run.get('input_tokens', 0)} "
                     f"out {run.get('output_tokens', 0)}, cache read {run['cache_read_share']:.0%}, "
                     "cost " + _cost(run.get("cost_usd")) + _caps_text(caps, used))
    call = data["last_call"]
    if call:
        elapsed = call.get("elapsed")
        lines.append(f"last call: {call.get('provider')}/{call.get('model')}, in {call.get('input_tokens', 0)} "
                     f"out {call.get('output_tokens', 0)}, finish {call.get('finish_reason')}"
                     + (f", {elapsed:.2f} s" if isinstance(elapsed, (int, float)) else "")
                     + f", {counted(call.get('attempts', 1), 'attempt')}")
    if windows:
        lines.append(f"window: {data['window']}; earlier windows archived, oldest first:")
    for number, window in enumerate(windows, start=1):
        lines.append(f"previous window {number}: {window}")
    if data["checkpoint"]:
        lines.append(f"checkpoint: {data['checkpoint']}")
    lines.append(f"provider: {data['provider']}, model {data['model']}")
    files = ", ".join(f"{item['path']} from {item['layer']}" for item in data["config_files"])
    lines.append("config files: " + (files or "none, defaults only"))
    from nagent_snapshot_layout import status_of
    try:
        data["snapshots"] = status_of(os.getcwd(), dict(os.environ))
    except OSError:   # the working directory is gone: no project to speak of
        data["snapshots"] = None
    if data["snapshots"]:
        lines.append(f"snapshots: {human_size(data['snapshots']['bytes'])} for "
                     f"{data['snapshots']['project']} in {data['snapshots']['store']}")
    from nagent_project_commands import recorded_context_files, status_lines
    data["context_files"] = recorded_context_files(path) if path else None
    lines += status_lines(data["context_files"], data["exists"])
    return data, "\n".join(lines)


def checkpoint_path_if_any(path):
    candidate = lifecycle.checkpoint_path(path)
    return candidate if os.path.exists(candidate) else None


def clear(options, settings):
    if options.file_edit:
        return clear_file_edit(options, settings)
    path = selected_path(options)
    archived = lifecycle.archive(path, reason="clear") if os.path.exists(path) else None
    data = {"conversation": path, "archived": archived}
    return data, (f"cleared; previous conversation archived at {archived}" if archived
                  else "nothing to clear; the next prompt starts a new conversation")


def clear_file_edit(options, settings):
    """A per-file conversation starts afresh under a new name; the old file is archived. A busy
    old conversation is refused before the index changes."""
    import nagent_file_edit_lib as file_edit
    environ = dict(os.environ)
    pid = selected_pid(options.pid, environ)
    current = file_edit.list_file_edits(pid, environ)
    real = os.path.realpath(options.file_edit)
    for record in current:
        if record.get("path") == real:
            old_path = lifecycle.conversation_path(record["conversation"], environ)
            if lifecycle.is_busy(old_path):
                raise BusyError("conversation is busy", old_path, "wait for its run to finish")
    change = file_edit.clear_file_edit(options.file_edit, pid, environ)
    archived = None
    if change.get("old"):
        old_path = lifecycle.conversation_path(change["old"], environ)
        archived = lifecycle.archive(old_path, reason="clear") if os.path.exists(old_path) else None
    data = {"file": change["record"]["path"],
            "conversation": lifecycle.conversation_path(change["new"], environ),
            "previous": change.get("old"), "archived": archived}
    return data, (f"cleared; previous conversation archived at {archived}" if archived
                  else f"{data['file']} starts a fresh conversation")


def save_conversation(options, settings):
    name = given_name(options.save_conversation)  # a bad name is reported first
    path = _existing(options, "save")
    saved, archived = lifecycle.save_as(path, name, overwrite=bool(options.force))
    text = f"saved as {saved}" + (f"; the previous {name} was archived at {archived}" if archived else "")
    return {"conversation": path, "saved": saved, "archived": archived}, text


def load_conversation(options, settings):
    name = given_name(options.load_conversation)
    path = selected_path(options)
    archived = lifecycle.load(name, path)
    text = f"loaded {name} into {path}" + (f"; the previous conversation was archived at {archived}"
                                           if archived else "")
    return {"conversation": path, "loaded": name, "path": path, "archived": archived}, text


def branch_conversation(options, settings):
    """A new current conversation from NAME (or the current one), cut after --turn N. Every
    check (the name, the source, the turn, a busy conversation) happens before anything moves."""
    name = options.branch_conversation or ""
    source = lifecycle.conversation_path(given_name(name)) if name else None
    path = selected_path(options)
    source = source or path
    if not os.path.isfile(source):
        raise InputError("no such conversation", name or path, "list them with nagent --list-conversations")
    archived = lifecycle.branch(source, path, options.turn)
    if source == path:
        source = archived
    data = {"conversation": path, "source": source, "turn": options.turn, "archived": archived}
    return data, f"branched from {source}" + (f" after turn {options.turn}" if options.turn
                                              else "") + f" into {path}"


def human_size(size):
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"


def table(header, rows):
    """Left-aligned columns under a header, two spaces apart; the last column is not padded."""
    widths = [max(len(str(row[i])) for row in [header] + rows) for i in range(len(header) - 1)]
    return "\n".join("  ".join([str(cell).ljust(width) for cell, width in zip(row, widths)]
                               + [str(row[-1])]).rstrip() for row in [header] + rows)


def list_conversations(options, settings):
    """One row per conversation (current, saved, archived), newest first within each kind."""
    items = lifecycle.list_conversations()
    mark_windows(items)
    rows = []
    for item in items:
        kind = item.get("kind", "")
        if item.get("window_of"):
            kind = f"window {item['window']} of {item['window_of']}"
        prompt = item.get("first_prompt", "")
        rows.append([item.get("name", ""), kind, human_size(item.get("size", 0)),
                     item.get("modified", "").replace("T", " ")[:16] + "Z",
                     prompt if len(prompt) <= 60 else prompt[:59] + "…"])
    if not rows:
        return {"conversations": items}, "no conversations yet"
    return {"conversations": items}, table(["NAME", "KIND", "SIZE", "MODIFIED", "FIRST PROMPT"], rows)


def mark_windows(items):
    """Archived windows of a conversation (its stats name them) get `window` and `window_of`."""
    from nagent_conversation_tail import read_tail_summary, window_chain
    by_path = {os.path.realpath(item["path"]): item for item in items if item.get("path")}
    for item in items:
        if item.get("kind") == "archived" and item.get("window_of"):
            continue
        try:
            windows = window_chain(read_tail_summary(item["path"]).get("stats"))
        except (OSError, ValueError, InputError):  # an unreadable file is listed as it is
            continue
        for number, window in enumerate(windows, start=1):
            archived = by_path.get(os.path.realpath(window)) if isinstance(window, str) else None
            if archived is not None and not archived.get("window_of"):
                archived.update(window=number, window_of=item["name"])


def list_file_edits(options, settings):
    import nagent_file_edit_lib as file_edit
    environ = dict(os.environ)
    pid = selected_pid(options.pid, environ)
    records = file_edit.list_file_edits(pid, environ)
    index_path = file_edit.file_index_path(pid, environ)
    warning = file_edit.load_file_index(index_path)[1]  # the next edit session rebuilds it
    lines = [f"{r['file_id']}  {r['path']}  {r['conversation']}  {r.get('last_used', '')}"
             + ("" if r.get("exists", True) else "  (moved or gone)") for r in records]
    text = "\n".join(lines) or "no per-file edit sessions for this shell"
    return {"pid": pid, "index": index_path, "files": records, "warning": warning}, \
        (f"warning: {warning}\n" if warning else "") + text


def config(options, settings):
    """`nagent --config`: every setting in effect with its source (flag, NAGENT_CONFIG,
    ~/.nagent/config.json, default), every permission rule with its file (the project's too),
    the guard; keys are never shown."""
    import json
    from nagent_config import describe_settings, permission_rows
    rules = settings.permissions + project_rules(settings)
    rows = describe_settings(settings) + permission_rows(rules[len(settings.permissions):])
    rows.append(("destructive-command guard", "on (asks on a terminal, refuses headless; an exact "
                 "allow rule lets one form through)", "always"))
    data = {"settings": [{"key": name, "value": value, "source": source}
                         for name, value, source in rows],
            "permissions": [{"decision": r.decision, "target": r.target, "pattern": r.pattern,
                             "name": r.name or None, "read_only": r.read_only, "source": r.source}
                            for r in rules],
            "files": [{"layer": layer, "path": path} for layer, path in settings.files],
            "warnings": list(settings.warnings)}
    shown = [(name, value if isinstance(value, str) else json.dumps(value), source)
             for name, value, source in rows]
    width = max(len(name) for name, _, _ in shown)
    value_width = min(40, max(len(value) for _, value, _ in shown))
    lines = [f"{'key':{width}}  {'value':{value_width}}  source"]
    lines += [f"{name:{width}}  {value:{value_width}}  {source}" for name, value, source in shown]
    files = ", ".join(f"{path} ({layer})" for layer, path in settings.files) or "none"
    lines.append(f"config files, highest first: {files}")
    from nagent_project_commands import config_context
    data["context"], context_lines = config_context(settings)
    lines += context_lines
    return data, "\n".join(lines)


def project_rules(settings):
    """The rules of the project's .nagent/permissions (the working directory's project); the
    rule parser is imported only when such a file is there."""
    from nagent_cli import current_cwd
    from nagent_project import find_project, has_permissions_file
    if not has_permissions_file(current_cwd()):
        return ()
    from nagent_permissions import load_project_rules
    environ = dict(settings.environ) if settings.environ else dict(os.environ)
    project = find_project(current_cwd(), environ)
    return load_project_rules(project.root if project else None)


def _caps_text(caps, tokens):
    """" of $1 (max_cost), 4.2k of 10k tokens (max_tokens)": the last run's caps beside it."""
    if not caps:
        return ""
    parts = []
    if caps.get("max_cost") is not None:
        parts.append(f" of ${caps['max_cost']:g} (max_cost)")
    if caps.get("max_tokens") is not None:
        parts.append(f", {tokens} of {caps['max_tokens']:g} tokens (max_tokens)")
    if caps.get("max_time") is not None:
        parts.append(f", max_time {caps['max_time']:g} s")
    return "".join(parts)


def list_models(options, settings):
    import nagent_llm
    listing = nagent_llm.list_models(settings)
    return listing, "\n".join(listing["models"])


def conversation_text(path):
    from nagent_conversation import read_records
    from nagent_requests import record_messages
    records = read_records(path)
    chunks = []
    for role, parts in record_messages([r for r in records if r.kind != "context"]):
        chunks.append(f"## {role}\n" + "\n\n".join(parts))
    return "\n\n".join(chunks)


def summarize(options, settings):
    import nagent_llm
    from nagent_cli import Spinner
    path = _existing(options, "summarize")
    text = conversation_text(path)
    if not text.strip():
        raise InputError("the conversation has no turns yet", path)
    prompt = ("Summarize this agent conversation for the user who ran it: the goal, what was done, "
              "decisions, the current state and open questions. Plain text, concise.\n\n" + text)
    with Spinner("summarizing"):
        result = nagent_llm.generate_text(prompt, settings)
    return {"conversation": path, "summary": result.text, "usage": result.as_dict()}, result.text


def edit_conversation(options, settings):
    from nagent_cli import read_prompt
    from nagent_config_checks import resolve_checked
    from nagent_conversation_edit import PASSED_OPTIONS, instruction_text
    from nagent_conversation_edit import edit_conversation as run_edit
    path = selected_path(options)
    extra = read_prompt(list(options.prompt), sys.stdin)[0] if options.prompt else ""
    instruction = instruction_text(options.edit_conversation, extra)
    # The edit session gets the provider, model, timeout, call and shell flags, no others.
    flags = {name: value for name, value in options.overrides.items() if name in PASSED_OPTIONS}
    return run_edit(path, instruction, resolve_checked(flags, dict(os.environ)))


def compact(options, settings):
    from nagent_compact import compact_now
    return compact_now(selected_path(options), options.selection, settings)


def trust(options, settings):
    from nagent_project_commands import trust as trust_here
    return trust_here(options, settings)


def list_skills(options, settings):
    from nagent_project_commands import list_skills as list_here
    return list_here(options, settings)


def changes(options, settings):
    from nagent_snapshot_commands import changes as changes_here
    return changes_here(options, settings)


def rewind(options, settings):
    from nagent_snapshot_commands import rewind as rewind_here
    return rewind_here(options, settings)


def resume(options, settings):
    from nagent_resume import listing
    return listing(settings)
