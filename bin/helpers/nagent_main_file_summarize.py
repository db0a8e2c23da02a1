"""`nagent-file-summarize`: summarise a file in one model call, or split-and-combine if large.

Data contract: as every nagent_main_* module: `DESCRIPTION`, `build_parser()`, `main(argv) ->
exit code`, `run()` (main under nagent_cli.run_main) for the console script and the bin/ shim.
"""
import os
import sys

from nagent_cli import early_exit, run_main

PROG = "nagent-file-summarize"
DESCRIPTION = ("Summarize a text file with the configured model: one call up to 64 KB, "
               "else split, summarize each segment and combine.")
EXAMPLES = ("nagent-file-summarize --file src/big_file.py",
            "nagent-file-summarize --file notes.md --json --provider anthropic")
EXITS = ("ok", "failure", "usage", "config", "setup", "provider", "input", "incomplete",
         "interrupted")


def build_parser():
    from nagent_cli import add_provider_flags, argument_parser
    parser = argument_parser(prog=PROG, description=DESCRIPTION, examples=EXAMPLES, exits=EXITS)
    parser.add_argument("--file", metavar="PATH", required=True, help="text file to summarize")
    parser.add_argument("--json", action="store_true", help="print summary and usage as JSON")
    parser.add_argument("--description", action="store_true", help="print a one-line description")
    add_provider_flags(parser)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if early_exit(argv, PROG, DESCRIPTION):
        return 0
    args = build_parser().parse_args(argv)
    from nagent_cli import Spinner, emit_json, load_settings
    from nagent_errors import EXIT_CODES
    from nagent_file_split_lib import decode_text, read_source
    import nagent_file_summarize_lib as lib
    decode_text(read_source(args.file)[1], args.file)  # a bad file fails before provider setup
    call, usage = lib.provider_text_callable(load_settings(args))
    with Spinner(f"summarizing {os.path.basename(args.file)}"):
        result = lib.summarize_file(args.file, call)
    warning = lib.truncation_warning(usage)
    if warning:
        sys.stderr.write(warning + "\n")
    if args.json:
        emit_json(dict(result, usage=usage, truncated=bool(warning)))
    else:
        summary = result["summary"]
        sys.stdout.write(summary if summary.endswith("\n") else summary + "\n")
    return EXIT_CODES["incomplete"] if warning else 0


def run():
    return run_main(main, structured=True)


if __name__ == "__main__":
    sys.exit(run())
