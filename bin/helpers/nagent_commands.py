"""What `bin/nagent` does for a prompt or a lifecycle flag, as functions returning exit codes.

Data contract: `run_prompt(options)` and `run_lifecycle(chosen, options)` take the parsed
command line (`options`: a frozen nagent_invocation.Invocation), resolve the settings once
(every command reads the config, so a malformed one is reported whatever the command), print the human or JSON output, and return
the exit code. The prompt comes from nagent_cli.read_prompt. Flags that only make sense
together are checked first (`check_combinations`): --turn goes with --branch-conversation;
--new (-n) goes with a prompt, never with --retry, a lifecycle flag or --file-edit. With --new,
the selected conversation is archived (as --clear does) only after every check of the run has
passed, right before the prompt runs. --last, --action, --diff, --dry-run and a bare
--conversation go with --changes or --rewind (ONLY_WITH), --turn also with them. Inside a
nagent shell action a prompt run and the commands that call a model are refused at once
(nagent_cli.refuse_in_shell_action), naming the tags that do the same from the model's reply;
so are the commands that change conversations, the project's files, what is trusted or another
run's prompts (SHELL_REFUSED: the user's to run; --rewind --dry-run changes nothing and runs).
Read-only ones (--changes, --status, --ps, --help, listings) run.
A prompt run reports through the events sinks nagent_output chooses (live display, streamed
answer, --events lines); an error raised after the settings are resolved carries `context`
(provider, model, conversation) for the --json and --events error output of nagent_cli.run_main.
`select_conversation(options, environ)` returns the Invocation with -c/--continue and --resume
NAME turned into the --conversation they select (nagent_resume), before anything else reads it.
What runs below this layer gets typed fields of the Invocation (its Selection, origin,
overrides, single values), never the whole command line. A run that
starts a fresh conversation of this shell prints one `continuing? nagent -c` hint line when
another conversation of the same project was used recently (`continue_hint`).
"""
import os
import sys

from nagent_cli import (current_cwd, emit_json, load_settings, output_mode, read_prompt,
                        refuse_in_shell_action, report_error)
from nagent_errors import EXIT_CODES, NagentError, UsageError
from nagent_secrets import redacted


ONLY_WITH = {"last": ("changes", "rewind"), "action": ("rewind",), "diff": ("changes",),
             "dry_run": ("rewind",), "with_conversation": ("rewind",)}


def check_combinations(chosen, options):
    turn = options.turn
    if turn is not None and chosen not in (["branch_conversation"], ["changes"], ["rewind"]):
        raise UsageError("--turn only applies to --branch-conversation, --changes and --rewind",
                         f"--turn {turn}", "nagent --branch-conversation [NAME] --turn N")
    for name, commands in ONLY_WITH.items():
        if options.given(name) and chosen not in ([c] for c in commands):
            flag = "--conversation (without a NAME)" if name == "with_conversation" else \
                "--" + name.replace("_", "-")
            raise UsageError(f"{flag} only applies to " + " and ".join(
                "--" + c for c in commands), flag,
                "give --conversation a NAME" if name == "with_conversation" else "see nagent --help")
    picked = [name for name in ("turn", "action", "last") if options.given(name)]
    if chosen in (["changes"], ["rewind"]) and len(picked) > 1:
        raise UsageError("choose one of --turn, --action and --last", ", ".join(
            "--" + name for name in picked))
    if options.new:
        if chosen:
            raise UsageError("--new runs a prompt in a fresh conversation; it takes no lifecycle flag",
                             "--" + chosen[0].replace("_", "-"), "use --clear to start afresh without a prompt")
        if options.retry:
            raise UsageError("--new and --retry exclude each other", "--retry",
                             "--retry re-runs a failed prompt of the current conversation")
        if options.file_edit:
            raise UsageError("--new does not apply to a per-file edit session", options.file_edit,
                             "start one afresh with nagent-file-edit --file PATH --clear")


NESTED_TAGS = ('<nagent-agent>task</nagent-agent> for a sub-task, <nagent-file-edit path="PATH">'
               'instruction</nagent-file-edit> or <nagent-replace path="PATH"> for a file')
MODEL_COMMANDS = ("summarize", "edit_conversation", "compact")
SHELL_REFUSED = {"clear": "it archives a conversation",
                 "save_conversation": "it writes a conversation",
                 "load_conversation": "it replaces a conversation",
                 "branch_conversation": "it starts a conversation",
                 "rewind": "it changes the project's files and a conversation",
                 "trust": "it trusts the project's tools",
                 "send": "it puts a prompt into a conversation"}
USER_RUNS_IT = ("the user runs it from a terminal; --changes, --status and --ps run here, "
                "--rewind --dry-run too")


def refuse_in_shell(chosen, options):
    """The lifecycle commands nagent_cli.refuse_in_shell_action refuses inside a shell action."""
    for name in chosen:
        if name in MODEL_COMMANDS:
            refuse_in_shell_action("nagent", NESTED_TAGS)
        elif name in SHELL_REFUSED and not (name == "rewind" and options.dry_run):
            refuse_in_shell_action("nagent --" + name.replace("_", "-"), SHELL_REFUSED[name],
                                   fix=USER_RUNS_IT)


def select_conversation(options, environ):
    """-c/--continue and --resume NAME select a conversation as --conversation NAME does: the
    Invocation returned has that conversation (-c with nothing to continue: this shell's, with
    a warning)."""
    name, follow = options.resume, options.continue_latest
    if not name and not follow:
        return options
    flag = "--continue" if follow else "--resume"
    if follow and options.resume is not None:
        raise UsageError("choose one of --continue and --resume", "--resume",
                         "-c continues this directory's latest conversation, --resume picks one")
    for key in ("conversation", "pid", "file_edit", "new"):
        if options.given(key):
            raise UsageError(f"{flag} selects the conversation itself", "--" + key.replace("_", "-"),
                             f"use {flag} or --{key.replace('_', '-')}, not both")
    import nagent_resume
    if name:
        return options.but(conversation=nagent_resume.resume_name(name, environ), resume=None)
    target = nagent_resume.continue_target(environ, current_cwd())
    if target is None:
        sys.stderr.write("warning: nothing to continue: no conversation was started in this "
                         "directory's project yet; using this shell's conversation\n")
        return options.but(continue_latest=False)
    return options.but(continue_latest=False, conversation=target.name)


def continue_hint(options, session, mode):
    """One line when this shell starts a fresh conversation while a recent one of the same
    project exists (only where the live view shows: a terminal, or -v)."""
    if (mode != "text" or options.quiet or options.conversation or options.new
            or session.file_edit or options.delegated or os.path.exists(session.path)):
        return
    if not (options.verbose or sys.stderr.isatty()):
        return
    import time
    import nagent_resume
    line = nagent_resume.hint_line(session.path, session.environ or dict(os.environ),
                                   current_cwd(), time.time())
    if line:
        sys.stderr.write(line + "\n")


def run_prompt(options, typed=None, during=None, warn=True):
    """A prompt run. `typed` (text, source) is a prompt given by the caller (the interactive
    session) instead of argv or stdin; `during(session, out)` returns a context manager held
    around the loop (the session's reader of text typed meanwhile); `warn` False keeps config
    warnings already shown."""
    from nagent_session import build_session, check_conversation
    refuse_in_shell_action("nagent", NESTED_TAGS)
    check_combinations([], options)
    mode = output_mode(options)
    if options.force:
        raise UsageError("--force only applies to --save-conversation and --rewind", "",
                         "see nagent --help")
    check_conversation(options.selection, os.environ)  # a bad name or a missing file comes first
    if options.retry:  # the loop finds the prompt, under the conversation's lock
        if options.prompt or typed:
            raise UsageError("--retry takes no prompt", " ".join(options.prompt))
        prompt, source = None, "retry"
    elif typed is not None:
        prompt, source = typed
    else:
        prompt, source = read_prompt(list(options.prompt), sys.stdin)
    delegated = options.delegated
    if delegated:
        source = "delegated"
    # A delegated child reads the parent's config: the parent already warned about it.
    settings = load_settings(options, warn=warn and not delegated)
    context = {"provider": settings.provider.name, "model": settings.model}
    try:
        session = build_session(options.selection, dict(os.environ), current_cwd(), settings,
                                **options.origin())
        context["conversation"] = session.path
        if session.file_edit and session.file_edit.get("warning"):
            sys.stderr.write(f"warning: {session.file_edit['warning']}\n")
        continue_hint(options, session, mode)
        if options.new and os.path.exists(session.path):
            import nagent_conversation_lifecycle as lifecycle
            lifecycle.archive(session.path, reason="new")
        for warning in session.warnings:
            sys.stderr.write(f"warning: {warning}\n")
        return run_session(session, prompt, source, options, mode, during)
    except NagentError as error:
        error.context = context  # provider, model and conversation for --json and --events
        raise


def run_session(session, prompt, source, options, mode, during=None):
    """Run the loop with the sinks the flags and the terminal choose; print the outcome."""
    import contextlib
    import nagent_output
    from nagent_loop import run_agent_loop
    out = nagent_output.choose_output(mode, session.settings, sys.stdout, sys.stderr, os.environ,
                                      quiet=options.quiet, verbose=options.verbose,
                                      stream=options.stream, started=options.started)
    try:
        with during(session, out) if during else contextlib.nullcontext():
            outcome = run_agent_loop(session, prompt, source, out.events)
        # Keys the config names (e.g. "${CORP_KEY}") are not in the environment's *_API_KEY set
        # that report_error knows: blank the session's own list in everything printed.
        data = redacted(outcome.as_dict(), session.secrets)
        if mode == "json":
            emit_json(nagent_output.outcome_document(data, out.log))
        elif mode == "text" and data["response"] is not None and not out.answered:
            text = out.shown(data["response"])
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
            sys.stdout.flush()
        if data.get("valid") is False and data["response"] is not None:
            sys.stderr.write("warning: the model's last reply is not in the nagent protocol; "
                             "it is printed as is\n")
        if data.get("accepted") is False and data["response"] is not None:
            sys.stderr.write("warning: the response hook did not accept this response; it is "
                             "printed as not accepted\n")
        if data["error"]:  # on stderr in --json mode too: stdout stays one JSON document
            out.events.emit("error", **error_event(data["error"], outcome.exit_code))
            report_error(NagentError(data["error"].get("error", "run failed"),
                                     data["error"].get("value", ""), data["error"].get("fix", "")))
        out.events.emit("run_end", exit_code=outcome.exit_code, calls=outcome.run_stats.model_calls,
                        totals=data["totals"], conversation=session.path,
                        budget=data.get("budget"))
        return outcome.exit_code
    finally:
        out.events.close()


def error_event(error, code):
    """The fields of an "error" event for a run's error dict (an interruption's has only
    "error")."""
    kind = error.get("kind") or next((name for name, value in EXIT_CODES.items() if value == code),
                                     "failure")
    return dict({"value": "", "fix": "", "kind": kind, "exit_code": code}, **error)


def run_lifecycle(chosen, options):
    import nagent_lifecycle_commands as commands
    refuse_in_shell(chosen, options)
    check_combinations(chosen, options)
    if len(chosen) > 1:
        raise UsageError("choose one lifecycle flag at a time", ", ".join("--" + c.replace("_", "-")
                                                                        for c in chosen))
    if options.prompt and chosen[0] not in ("edit_conversation", "send"):
        raise UsageError("a lifecycle flag takes no prompt", " ".join(options.prompt))
    if options.force and chosen[0] not in ("save_conversation", "rewind"):
        raise UsageError("--force only applies to --save-conversation and --rewind",
                         "--" + chosen[0].replace("_", "-"))
    if output_mode(options) == "events":
        raise UsageError("--events applies to a prompt run", "--" + chosen[0].replace("_", "-"),
                         "use --json for a lifecycle command")
    handler = getattr(commands, chosen[0])
    # Every command reads the config, so a malformed one is reported whatever the command.
    settings = load_settings(options)
    data, text = handler(options, settings)
    if output_mode(options) == "json":
        emit_json(data)
    elif text:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return 0 if not isinstance(data, dict) else int(data.get("exit_code", 0))
