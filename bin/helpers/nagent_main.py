"""`nagent`: the conversation loop's command line (bin/nagent in a checkout, the `nagent` console
script when installed). Appends the prompt to the conversation file, calls the LLM, runs the
tagged actions it asks for, and prints its final response; or runs one lifecycle flag; or, with
no prompt where a person types (`opens_session`: stdin and stdout terminals), opens the
interactive session (nagent_interactive), each entry of which runs through the same functions.

Data contract: `DESCRIPTION` is the --description line, `build_parser()` the argparse parser
(every flag has a help text; the flags a parent passes to a sub-agent are accepted but hidden
from --help), `main(argv, started=None) -> exit code`, and `run()` is main under the shared error
convention (nagent_cli.run_main: with --json an error is one JSON object shaped like a run's,
with --events an "error" and a "run_end" line), for the console script and the bin/ shim.
"""
import sys
import time

from nagent_cli import ALL_EXITS, early_exit, run_main
from nagent_exit import exit_now

PROG = "nagent"
DESCRIPTION = "Main agent loop: run a prompt against the conversation file for this shell (nagent \"prompt\")."
EXAMPLES = (('nagent "what does calc.py do?"', "a prompt; this shell's conversation"),
            ("nagent -c", "an interactive session on this project's latest conversation"),
            ('nagent --json "run the tests" | jq .response', "one JSON object, for scripts"),
            ("nagent --rewind --dry-run", "what going back one turn would restore"))
EXITS = ALL_EXITS

LIFECYCLE = ("status", "clear", "save_conversation", "load_conversation", "branch_conversation",
             "list_conversations", "summarize", "edit_conversation", "list_models", "list_file_edits",
             "compact", "config", "trust", "list_skills", "ps", "send", "changes", "rewind",
             "resume")


def build_parser():
    import argparse

    class ConversationFlag(argparse.Action):
        """--conversation NAME selects a conversation; a bare --conversation (with --rewind)
        asks for the conversation to go back too. Both may be given."""
        def __call__(self, parser, namespace, values, option_string=None):
            if values is None:
                namespace.with_conversation = True
            else:
                namespace.conversation = values

    from nagent_cli import PROVIDER_FLAGS, add_output_flags, add_setting_flags, argument_parser
    parser = argument_parser(prog=PROG, description=DESCRIPTION, examples=EXAMPLES, exits=EXITS,
                             epilog="The prompt comes from argv, piped stdin, or argv text then stdin "
                                    "when the last argument is '-'. With no prompt on a terminal, "
                                    "nagent opens an interactive session (/help inside). By default "
                                    "a prompt continues this shell's conversation; -n starts a fresh "
                                    "one, -c continues this directory's latest. A turn is one user "
                                    "prompt and everything it led to, up to the next prompt.")
    parser.add_argument("prompt", nargs="*", help="the prompt (a trailing '-' appends stdin)")
    parser.add_argument("-n", "--new", action="store_true",
                        help="start a fresh conversation for this shell, archiving the current one "
                             "as --clear does, then run the prompt")
    add_output_flags(parser)
    parser.add_argument("--description", action="store_true", help="print a one-line description")
    where = parser.add_argument_group("conversation")
    where.add_argument("--conversation", metavar="NAME", nargs="?", action=ConversationFlag,
                       help="use the named conversation; bare, with --rewind: rewind the "
                            "conversation too (back to the turns before)")
    parser.set_defaults(with_conversation=False)
    where.add_argument("--pid", help="conversation id instead of this shell's, see docs/conversations.md")
    where.add_argument("--file-edit", metavar="PATH", help="per-file edit session on PATH")
    where.add_argument("-c", "--continue", action="store_true",
                       help="continue the conversation last used among those started in this "
                            "project (or directory), from any terminal")
    where.add_argument("--resume", metavar="NAME", nargs="?", const="",
                       help="use conversation NAME; without NAME, list this directory's recent "
                            "conversations (on a terminal: pick one and open a session on it)")
    life = parser.add_argument_group("lifecycle")
    life.add_argument("--status", action="store_true",
                      help="this conversation: path, size, prompts, model calls, totals, provider, "
                           "model and config files")
    life.add_argument("--clear", action="store_true", help="start afresh; the old file is archived")
    life.add_argument("--save-conversation", metavar="NAME", help="save a copy under NAME")
    life.add_argument("--force", action="store_true",
                      help="with --save-conversation: replace an existing NAME, archiving it "
                           "first; with --rewind: also files someone else changed, keeping a "
                           "copy of each")
    life.add_argument("--load-conversation", metavar="NAME", help="archive current, load NAME")
    life.add_argument("--branch-conversation", metavar="NAME", nargs="?", const="",
                      help="new current conversation from NAME, or from the current one")
    life.add_argument("--turn", type=int, metavar="N",
                      help="with --branch-conversation: keep the first N turns, a turn being one "
                           "user prompt and what followed it; with --changes or --rewind: turn N")
    life.add_argument("--list-conversations", action="store_true",
                      help="every conversation: current, saved and archived, one row each")
    life.add_argument("--summarize", action="store_true", help="LLM summary of the conversation")
    life.add_argument("--edit-conversation", metavar="INSTRUCTION",
                      help="rewrite the conversation with a per-file edit session")
    life.add_argument("--compact", action="store_true",
                      help="start a new window now: checkpoint, then rebuild")
    life.add_argument("--list-models", action="store_true", help="models of the provider")
    life.add_argument("--list-file-edits", action="store_true", help="this shell's per-file edit index")
    life.add_argument("--config", action="store_true",
                      help="print the settings in effect and where each comes from, keys redacted")
    rewind = parser.add_argument_group("the project's files (snapshots)")
    rewind.add_argument("--changes", action="store_true",
                        help="what the agent changed in the project, per turn and per action "
                             "(diffstat; --diff for the diff, --turn N or --last for one turn)")
    rewind.add_argument("--rewind", action="store_true",
                        help="put the project's files back as they were before the last turn "
                             "(--turn N, --action SEQ); created files are archived, never "
                             "deleted; a second --rewind undoes it")
    rewind.add_argument("--last", action="store_true", help="with --changes: the last turn only")
    rewind.add_argument("--action", type=int, metavar="SEQ",
                        help="with --rewind: back to before the action whose result is record SEQ")
    rewind.add_argument("--diff", action="store_true", help="with --changes: the full diff")
    rewind.add_argument("--dry-run", action="store_true",
                        help="with --rewind: show what would change, change nothing")
    running = parser.add_argument_group("running instances")
    running.add_argument("--ps", action="store_true",
                         help="running nagent instances (sub-agents under their parent), with what "
                              "each does now")
    running.add_argument("--send", metavar="TARGET",
                         help="send the prompt words (or stdin) as a message to TARGET, a running "
                              "nagent's pid or a conversation name: read at its next turn, or at "
                              "the start of its next run")
    project = parser.add_argument_group("project")
    project.add_argument("--trust", action="store_true",
                         help="trust this project's .nagent/bin tools; asked again when they change")
    project.add_argument("--list-skills", action="store_true",
                         help="skills in ~/.nagent/skills and <project>/.nagent/skills")
    run = parser.add_argument_group("run")
    add_setting_flags(run, PROVIDER_FLAGS + ("max_calls", "shell.approval", "shell.sandbox",
                                             "shell.timeout", "hooks.response",
                                             "max_parallel_agents", "mode", "max_cost",
                                             "max_tokens", "max_time"))
    run.add_argument("--retry", action="store_true", help="re-run the last prompt, when its run failed")
    # Set by a parent nagent for its sub-agents: accepted, never shown.
    parser.add_argument("--invocation", choices=("user", "delegated"), default="user",
                        help=argparse.SUPPRESS)
    parser.add_argument("--parent-conversation", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--depth", type=int, default=0, help=argparse.SUPPRESS)
    # What is left of the parent run's budget (nagent_budget): only the driver passes it.
    parser.add_argument("--budget", help=argparse.SUPPRESS)
    return parser


def opens_session(options):
    """`nagent` with no prompt where a person types: stdin and stdout are terminals, the output
    is text for them, and nothing else was asked for (--retry, a sub-agent's run). `options`:
    the nagent_invocation.Invocation."""
    from nagent_cli import output_mode
    if options.prompt or options.retry or options.invocation != "user":
        return False
    if output_mode(options) != "text":
        return False
    return all(stream is not None and stream.isatty() for stream in (sys.stdin, sys.stdout))


def main(argv=None, started=None):
    argv = sys.argv[1:] if argv is None else argv
    if early_exit(argv, PROG, DESCRIPTION):
        return 0
    parser = build_parser()
    parsed = vars(parser.parse_args(argv))   # --help and usage errors end here
    from nagent_invocation import Invocation
    # `started`: the origin of the run's event times ("t"); None: the run's start.
    options = Invocation.from_options(parsed, started)
    import os
    import nagent_commands
    options = nagent_commands.select_conversation(options, os.environ)   # -c, --resume NAME
    chosen = [name for name in LIFECYCLE if options.given(name)]
    if chosen == ["resume"] and opens_session(options):   # list, pick one, open a session on it
        import nagent_interactive
        return nagent_interactive.start(options, LIFECYCLE, parser, pick=True)
    if chosen:
        return nagent_commands.run_lifecycle(chosen, options)
    if opens_session(options):
        import nagent_interactive
        return nagent_interactive.start(options, LIFECYCLE, parser)
    return nagent_commands.run_prompt(options)


def json_document(error):
    """--json output of a run that ended with an error outside the loop (usage, config, setup)."""
    from nagent_output import error_document
    return error_document(error, getattr(error, "context", None))


def run():
    """main under the shared error convention; the process ends as soon as the answer is out
    (nagent_exit.exit_now), without waiting for the interpreter's teardown."""
    started = time.monotonic()
    return exit_now(run_main(lambda argv: main(argv, started), json_document=json_document,
                             events=True))


if __name__ == "__main__":
    sys.exit(run())
