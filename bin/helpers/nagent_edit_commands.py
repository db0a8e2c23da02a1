"""`nagent-file-edit --old/--new` and `--replace-file`: an exact replacement made in a file's
per-file edit session, with no model call.

Data contract: `run_replace(options) -> exit code`. `options` is the parsed command line: file,
old and new (lists, paired in order), replace_file (a file, or "-" for stdin, holding
`<old>...</old><new>...</new>` pairs), expect_sha256, pid, json, invocation,
parent_conversation, depth and the setting flags. The pairs follow nagent_replace (the one
rule). The file's per-file conversation (nagent_file_edit_lib's resolution rule; a new one gets
its initial context first) receives, under its lock, a prompt record (source "replace") holding
the <nagent-replace> tag (its pairs through nagent_protocol_blocks.frame_data: the old text is
the file's, data a later model of the file's sessions reads) and who sent it, then the result
record; the replace runs with that session's write authority (nagent_edit_actions.replace_in_place): its target, nothing else.
No key and no SDK are needed. Output: a line "replaced N pair(s) in PATH (+a −r)", the
conversation and the diff; with --json {status "replaced", path, conversation, pairs, added,
removed, sha256_before, sha256_after, diff}. A refusal (no match, two matches, a race with
another writer, the write boundary, a hash other than --expect-sha256) is recorded as the
result too, writes nothing and exits 10 (an unreadable or oversized file 6, bad pairs 2).
"""
import hashlib
import os
import sys

from nagent_action_base import error_block, error_text
from nagent_cli import current_cwd, emit_json, load_settings, read_stdin
from nagent_conversation import ConversationWriter
from nagent_conversation_layout import Selection
from nagent_edit_actions import replace_block, replace_in_place
from nagent_errors import InputError, NagentError, UsageError
from nagent_file_change import MINUS, unified_diff
from nagent_loop import start_conversation
from nagent_procs import exit_signals
from nagent_protocol_blocks import escape_attr, frame_data
from nagent_replace import Pair, format_pairs, parse_pairs
from nagent_run import Run
from nagent_session import build_session
from nagent_terminal_text import counted


def pairs_from(options, stdin):
    """The pairs the command line gives: --old/--new in order, or a replace file."""
    olds, news = options.get("old") or [], options.get("new") or []
    source = options.get("replace_file")
    if source and (olds or news):
        raise UsageError("give either --old/--new or --replace-file", source)
    if options.get("instruction"):
        raise UsageError("a replace takes no instruction", " ".join(options["instruction"]),
                         "drop --old/--new to give the session an instruction")
    if source:
        if source == "-":
            text = read_stdin(stdin)
        else:
            try:
                with open(source, encoding="utf-8", errors="surrogateescape") as handle:
                    text = handle.read()
            except OSError as error:
                raise InputError("cannot read the replace file", source, error.strerror) from None
        try:
            return parse_pairs(text)
        except ValueError as problem:
            raise UsageError("bad replace file", str(problem),
                             "write <old>exact text</old><new>replacement</new> pairs") from None
    if len(olds) != len(news):
        raise UsageError("each --old needs a --new", f"{len(olds)} --old, {len(news)} --new")
    try:
        return parse_pairs(format_pairs([Pair(old, new) for old, new in zip(olds, news)]))
    except ValueError as problem:
        raise UsageError("bad --old/--new", str(problem)) from None


def replace_prompt(target, pairs, options):
    sender = (f"the main conversation {options['parent_conversation']}"
              if options.get("parent_conversation") else "the command line")
    return (f"Exact replacement sent by {sender}, applied by nagent without a model call:\n"
            f'<nagent-replace path="{escape_attr(target)}">\n{frame_data(format_pairs(pairs))}\n'
            "</nagent-replace>")


def run_replace(options):
    pairs = pairs_from(options, sys.stdin)
    delegated = options.get("invocation") == "delegated"
    settings = load_settings(options, warn=not delegated)
    session = build_session(Selection(pid=options.get("pid"), file_edit=options["file"]),
                            dict(os.environ), current_cwd(), settings, needs_model=False,
                            invocation=options.get("invocation") or "user",
                            parent_conversation=options.get("parent_conversation"),
                            depth=options.get("depth") or 0, budget=options.get("budget"))
    target = session.write_mode.target
    ctx = session.action_context
    with ConversationWriter(session.path, lock_timeout=session.limits.lock_timeout) as writer, \
            exit_signals():
        run = Run(session, writer)
        start_conversation(run)
        run.append("prompt", replace_prompt(target, pairs, options), {"source": "replace"})
        try:
            done = replace_in_place(target, pairs, ctx, options.get("expect_sha256"))
        except NagentError as error:
            run.append("result", error_block("nagent-replace-result", error_text(error),
                                             {"path": target}).block, {"action": "replace"})
            raise
        run.append("result", replace_block(target, done, ctx.cwd), {"action": "replace"})
    diff, added, removed = unified_diff(done.before, done.after, target)
    name = os.path.basename(session.path)
    if options.get("json"):
        emit_json({"status": "replaced", "path": target, "conversation": session.path,
                   "pairs": len(pairs), "added": added, "removed": removed,
                   "sha256_before": hashlib.sha256(done.before).hexdigest(),
                   "sha256_after": hashlib.sha256(done.after).hexdigest(), "diff": diff})
    else:
        sys.stdout.write(f"replaced {counted(len(pairs), 'pair')} in "
                         f"{target} (+{added} {MINUS}{removed}); conversation {name}\n{diff}")
    return 0
