"""`nagent-file-edit`: run nagent in per-file edit mode on one project file.

Data contract: as every nagent_main_* module: `DESCRIPTION`, `build_parser()`, `main(argv) ->
exit code`, `run()` (main under nagent_cli.run_main) for the console script and the bin/ shim.
"""
import sys

from nagent_cli import early_exit, run_main

PROG = "nagent-file-edit"
DESCRIPTION = ('Edit one project file through its own durable nagent conversation: '
               'nagent-file-edit --file PATH "instruction" (--clear starts afresh).')


def build_parser():
    import argparse
    from nagent_cli import PROVIDER_FLAGS, add_setting_flags, argument_parser
    parser = argument_parser(prog=PROG, description=DESCRIPTION,
                             epilog="The instruction may also come on stdin, or as argv text "
                                    "followed by stdin when the last argument is '-'.")
    parser.add_argument("instruction", nargs="*", help="what to change in the file")
    parser.add_argument("--file", required=True, metavar="PATH", help="the file to edit")
    parser.add_argument("--clear", action="store_true", help="start this file's conversation afresh")
    parser.add_argument("--pid", help="per-shell index id; default: this shell's")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--description", action="store_true", help="print a one-line description")
    add_setting_flags(parser, ("max_calls", "shell.approval", "shell.sandbox", "mode", "max_cost",
                               "max_tokens", "max_time") + PROVIDER_FLAGS)
    # What is left of the parent run's budget (nagent_budget): only the driver passes it.
    parser.add_argument("--budget", help=argparse.SUPPRESS)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if early_exit(argv, PROG, DESCRIPTION):
        return 0
    args = build_parser().parse_args(argv)
    import nagent_commands
    options = dict(vars(args), file_edit=args.file, prompt=args.instruction)
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
