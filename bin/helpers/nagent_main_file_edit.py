"""`nagent-file-edit`: run nagent in per-file edit mode on one project file, or make an exact
replacement in it with no model call (--old/--new, --replace-file: nagent_edit_commands).

Data contract: as every nagent_main_* module: `DESCRIPTION`, `build_parser()`, `main(argv) ->
exit code`, `run()` (main under nagent_cli.run_main) for the console script and the bin/ shim.
The flags a parent nagent passes to the sessions it starts (--invocation, --parent-conversation,
--depth) are accepted and hidden; a delegated session refuses a --file that no longer is its own
real path (the driver checked that path). Inside a nagent shell action it refuses at once
(nagent_cli.refuse_in_shell_action), naming the tags to use.
"""
import os
import sys

from nagent_cli import early_exit, run_main

PROG = "nagent-file-edit"
DESCRIPTION = ('Edit one file through its own durable nagent conversation, for people and '
               'scripts: nagent-file-edit --file PATH "instruction", or --old TEXT --new TEXT '
               '(an exact replacement, no model call); in a nagent reply use <nagent-file-edit> '
               'and <nagent-replace> instead.')
EXAMPLES = ('nagent-file-edit --file src/foo.py "add error handling"',
            ('nagent-file-edit --file src/foo.py --old "return a - b" --new "return a + b"', "no model call"),
            ("nagent-file-edit --file src/foo.py --replace-file fix.pairs --json", "pairs of a <nagent-replace>"),
            ("nagent-file-edit --file src/foo.py --clear", "start the file's conversation afresh"))
EXITS = ("ok", "failure", "usage", "config", "setup", "provider", "input", "busy", "protocol",
         "limit", "refused", "incomplete", "gate", "budget", "hangup", "interrupted", "terminated")
USE_TAGS = ('<nagent-file-edit path="PATH">instruction</nagent-file-edit>, or <nagent-replace '
            'path="PATH"><old>exact text</old><new>replacement</new></nagent-replace>')


def build_parser():
    import argparse
    from nagent_cli import PROVIDER_FLAGS, add_setting_flags, argument_parser
    parser = argument_parser(prog=PROG, description=DESCRIPTION, examples=EXAMPLES, exits=EXITS,
                             epilog="The instruction may also come on stdin, or as argv text "
                                    "followed by stdin when the last argument is '-'. A "
                                    "replacement calls no model: each --old must occur exactly "
                                    "once in the file, and all pairs apply or none does.")
    parser.add_argument("instruction", nargs="*", help="what to change in the file")
    parser.add_argument("--file", required=True, metavar="PATH", help="the file to edit")
    parser.add_argument("--clear", action="store_true", help="start this file's conversation afresh")
    edit = parser.add_argument_group("exact replacement (no model call)")
    edit.add_argument("--old", action="append", metavar="TEXT",
                      help="exact text to replace; must occur once (repeat with --new for more pairs)")
    edit.add_argument("--new", action="append", metavar="TEXT", help="its replacement")
    edit.add_argument("--replace-file", metavar="FILE",
                      help="<old>TEXT</old><new>TEXT</new> pairs from FILE ('-': stdin)")
    edit.add_argument("--expect-sha256", metavar="HASH",
                      help="refuse unless the file's sha256 is HASH (nothing written)")
    parser.add_argument("--pid", help="per-shell index id; default: this shell's")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--description", action="store_true", help="print a one-line description")
    add_setting_flags(parser, ("max_calls", "shell.approval", "shell.sandbox", "mode", "max_cost",
                               "max_tokens", "max_time") + PROVIDER_FLAGS)
    # Set by a parent nagent for the sessions it starts: accepted, never shown.
    parser.add_argument("--invocation", choices=("user", "delegated"), default="user",
                        help=argparse.SUPPRESS)
    parser.add_argument("--parent-conversation", metavar="PATH", help=argparse.SUPPRESS)
    parser.add_argument("--depth", type=int, default=0, help=argparse.SUPPRESS)
    # What is left of the parent run's budget (nagent_budget): only the driver passes it.
    parser.add_argument("--budget", help=argparse.SUPPRESS)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if early_exit(argv, PROG, DESCRIPTION):
        return 0
    args = build_parser().parse_args(argv)
    from nagent_cli import refuse_in_shell_action
    refuse_in_shell_action(PROG, USE_TAGS)
    if args.invocation == "delegated" and os.path.realpath(args.file) != args.file:
        # The driver checked this resolved path: a link swapped in since would redirect the edit.
        from nagent_errors import RefusedError
        raise RefusedError("the edit target changed on its way to its session", args.file,
                           "a component of its path is now a link; nothing was changed")
    if args.old or args.new or args.replace_file:
        if args.clear:
            from nagent_errors import UsageError
            raise UsageError("--clear takes no replacement", "--old/--new/--replace-file")
        import nagent_edit_commands
        return nagent_edit_commands.run_replace(vars(args))
    if args.expect_sha256:
        from nagent_errors import UsageError
        raise UsageError("--expect-sha256 goes with a replacement", args.expect_sha256,
                         "add --old/--new or --replace-file")
    import nagent_commands
    from nagent_invocation import Invocation
    options = Invocation.from_options(dict(vars(args), file_edit=args.file, prompt=args.instruction))
    if args.clear:
        if args.instruction:
            from nagent_errors import UsageError
            raise UsageError("--clear takes no instruction", " ".join(args.instruction))
        return nagent_commands.run_lifecycle(["clear"], options)
    return nagent_commands.run_prompt(options)


def run():
    return run_main(main, structured=True)


if __name__ == "__main__":
    sys.exit(run())
