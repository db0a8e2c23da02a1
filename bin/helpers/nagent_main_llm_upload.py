"""`nagent-llm-upload`: send a file (image, PDF, office document, text) plus a prompt to the LLM.

Data contract: as every nagent_main_* module: `DESCRIPTION`, `build_parser()`, `main(argv) ->
exit code`, `run()` (main under nagent_cli.run_main) for the console script and the bin/ shim.
"""
import os
import sys

from nagent_cli import early_exit, run_main

PROG = "nagent-llm-upload"
DESCRIPTION = ("Upload an image, PDF, office document or text file with a prompt to the LLM "
               "(50 MB cap, no archives); --json adds usage.")
EXAMPLES = ('nagent-llm-upload --file diagram.png --prompt "Explain the diagram."',
            'nagent-llm-upload --file report.pdf --prompt "Summarize the decision points." --json')
EXITS = ("ok", "failure", "usage", "config", "setup", "provider", "input", "incomplete",
         "hangup", "interrupted", "terminated")


def build_parser():
    from nagent_cli import add_provider_flags, argument_parser
    parser = argument_parser(prog=PROG, description=DESCRIPTION, examples=EXAMPLES, exits=EXITS)
    parser.add_argument("--file", metavar="PATH", help="file to upload")
    parser.add_argument("--prompt", metavar="TEXT", help="what to ask about the file")
    parser.add_argument("--json", action="store_true", help="print text and usage as JSON")
    parser.add_argument("--description", action="store_true", help="print a one-line description")
    add_provider_flags(parser)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if early_exit(argv, PROG, DESCRIPTION):
        return 0
    args = build_parser().parse_args(argv)
    from nagent_cli import Spinner, emit_json, load_settings, report_incomplete
    from nagent_errors import UsageError
    if not args.file:
        raise UsageError("no file given", "", "pass --file PATH")
    if not args.prompt or not args.prompt.strip():
        raise UsageError("no prompt given", "", "pass --prompt TEXT")
    from nagent_upload import classify_upload
    attachment = classify_upload(args.file)      # all local checks before any network call
    import nagent_llm
    settings = load_settings(args)
    request = nagent_llm.text_request(args.prompt, attachments=(attachment,))
    with Spinner(f"{settings.provider.name}/{settings.model}"):
        result = nagent_llm.generate(request, settings)
    if args.json:
        data = dict(result.as_dict(), truncated=result.truncated)
        data["file"] = {"path": os.path.abspath(args.file), "mime": attachment.mime,
                        "category": attachment.category, "bytes": attachment.size}
        emit_json(data)
    else:
        sys.stdout.write(result.text if result.text.endswith("\n") else result.text + "\n")
    return report_incomplete(result)


def run():
    return run_main(main, structured=True)


if __name__ == "__main__":
    sys.exit(run())
