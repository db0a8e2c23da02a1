"""`nagent-llm-text`: send a text file to the configured LLM and print the reply (streamed as it
arrives when stdout is a terminal, or with --stream; --no-stream waits for the whole reply).
A reply the connection cut after it had started is printed as far as it came, with a warning,
and exits 11; one cut by the output limit is printed with a warning and exits 0.

Data contract: as every nagent_main_* module: `DESCRIPTION`, `build_parser()`, `main(argv) ->
exit code`, `run()` (main under nagent_cli.run_main) for the console script and the bin/ shim.
"""
import sys

from nagent_cli import early_exit, run_main

PROG = "nagent-llm-text"
DESCRIPTION = "Send a text file (or stdin) to the configured LLM and print the reply; --json adds usage."
EXAMPLES = ("nagent-llm-text --file question.txt",
            ("echo 'What is 2+2?' | nagent-llm-text --file - --provider anthropic --json", "usage too"),
            "nagent-llm-text --list-models --provider gemini")
EXITS = ("ok", "failure", "usage", "config", "setup", "provider", "input", "incomplete",
         "hangup", "interrupted", "terminated")


def build_parser():
    from nagent_cli import add_output_flags, add_provider_flags, argument_parser
    parser = argument_parser(prog=PROG, description=DESCRIPTION, examples=EXAMPLES, exits=EXITS)
    parser.add_argument("--file", metavar="PATH", help="text file to send; '-' reads stdin")
    add_output_flags(parser, events=False)
    parser.add_argument("--list-models", action="store_true", help="list the provider's models")
    parser.add_argument("--description", action="store_true", help="print a one-line description")
    add_provider_flags(parser)
    return parser


def read_input(path):
    from nagent_errors import InputError
    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise InputError("file not found", path)
    except IsADirectoryError:
        raise InputError("is a directory, not a file", path)
    except UnicodeDecodeError:
        raise InputError("file is not UTF-8 text", path, "use nagent-llm-upload for binary files")
    except OSError as error:
        raise InputError("cannot read file", f"{path}: {error.strerror}")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if early_exit(argv, PROG, DESCRIPTION):
        return 0
    args = build_parser().parse_args(argv)
    from nagent_cli import Spinner, emit_json, load_settings, report_incomplete
    from nagent_errors import InputError, UsageError
    from nagent_terminal_text import shown_on
    settings = load_settings(args)
    import nagent_llm
    if args.list_models:
        listing = nagent_llm.list_models(settings)
        if args.json:
            emit_json(listing)
        else:
            print("\n".join(listing["models"]))
        return 0
    if not args.file:
        raise UsageError("no input file", "", "pass --file PATH or --file - for stdin")
    text = read_input(args.file)
    if not text.strip():
        raise InputError("input is empty", args.file)
    terminal = sys.stdout.isatty()
    stream = args.stream if args.stream is not None else terminal
    with Spinner(f"{settings.provider.name}/{settings.model}") as spinner:
        if stream and not args.json:
            from nagent_stream import TextPrinter

            def write(piece):
                spinner.stop()  # the answer and the spinner share the terminal
                sys.stdout.write(shown_on(piece, terminal))
                sys.stdout.flush()
            printer = TextPrinter(write, lambda note: sys.stderr.write(f"note: {note}\n"))
            result = nagent_llm.generate_text(text, settings, on_text=printer.delta,
                                              on_retry=printer.retry)
        else:
            printer = None
            result = nagent_llm.generate_text(text, settings)
    if args.json:
        emit_json(dict(result.as_dict(), truncated=result.truncated))
    elif printer is not None:
        printer.finish(result.text)
    else:
        text = shown_on(result.text, terminal)
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
    return report_incomplete(result)


def run():
    return run_main(main, structured=True)


if __name__ == "__main__":
    sys.exit(run())
