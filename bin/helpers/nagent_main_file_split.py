"""`nagent-file-split`: split a large text file into structure-aware segment files + index.json.

Data contract: as every nagent_main_* module: `DESCRIPTION`, `build_parser()`, `main(argv) ->
exit code`, `run()` (main under nagent_cli.run_main) for the console script and the bin/ shim.
--help does not load the splitters (their tables cost more than the rest of start-up): it
names the default segment size (TARGET_BYTES_HELP, checked against the library by a test), and
an unknown --type is the error that lists every type.
"""
import os
import sys

from nagent_cli import early_exit, run_main

PROG = "nagent-file-split"
TARGET_BYTES_HELP = "target segment size in bytes; default 16384"
DESCRIPTION = ("Split a large text file into structure-aware segment files of at most 64 KiB "
               "and an index.json (source hash, line numbers, per-segment hashes); --refresh "
               "re-splits.")
EXAMPLES = ("nagent-file-split --file src/big.py --output /tmp/big-split --json",
            ("nagent-file-split --output /tmp/big-split --refresh",
             "re-split after the source changed; refuses over unmerged edits"),
            ("nagent-file-split --file notes.md --output /tmp/notes-split --summarize",
             "a summary per segment (calls the model)"))
EXITS = ("ok", "failure", "usage", "config", "setup", "provider", "input", "refused",
         "interrupted")


def build_parser():
    from nagent_cli import add_provider_flags, argument_parser
    parser = argument_parser(prog=PROG, description=DESCRIPTION, examples=EXAMPLES, exits=EXITS)
    parser.add_argument("--file", metavar="PATH", help="source file to split")
    parser.add_argument("--output", metavar="DIR", required=True,
                        help="directory for the segment files and index.json")
    parser.add_argument("--target-bytes", type=int, metavar="N", help=TARGET_BYTES_HELP)
    parser.add_argument("--type", metavar="T",
                        help="split type, by default from the file's extension, else text: python, "
                             "markdown, json ...; an unknown one is an error listing them all")
    parser.add_argument("--refresh", action="store_true",
                        help="re-split the source of DIR/index.json with its settings")
    parser.add_argument("--force", action="store_true",
                        help="re-split over unmerged segment edits or another file's split, "
                             "keeping a copy of each edited file under DIR/kept/ first")
    parser.add_argument("--summarize", action="store_true",
                        help="store a model-written summary per segment in the index")
    parser.add_argument("--json", action="store_true", help="print the index as JSON")
    parser.add_argument("--description", action="store_true", help="print a one-line description")
    add_provider_flags(parser)
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if early_exit(argv, PROG, DESCRIPTION):
        return 0
    args = build_parser().parse_args(argv)
    import nagent_file_split_lib as lib
    return split(args, lib)


def split(args, lib):
    import contextlib
    from nagent_cli import Spinner, emit_json, load_settings
    from nagent_errors import UsageError
    from nagent_terminal_text import counted
    if args.target_bytes is not None and args.target_bytes < 1:
        raise UsageError("--target-bytes must be a positive integer", args.target_bytes)
    if args.type:
        lib.detect_split_type(args.file or "", args.type)
    index_path = os.path.join(os.path.abspath(args.output), lib.INDEX_NAME)
    if args.refresh:
        previous = lib.load_index(index_path)
        if args.file and os.path.realpath(args.file) != os.path.realpath(previous["source"]):
            raise UsageError("--file is not the source of the index", args.file,
                             f"the index splits {previous['source']}")
    elif not args.file:
        raise UsageError("no input file", "", "pass --file PATH, or --refresh")
    summarize, usage = None, None
    if args.summarize:
        if args.file:
            lib.check_utf8(lib.read_source(args.file)[1], args.file)  # fail before provider setup
        from nagent_file_summarize_lib import provider_text_callable, segment_summarizer
        call, usage = provider_text_callable(load_settings(args))
        name = os.path.basename(args.file or previous["source"])
        summarize = segment_summarizer(call, name)
    with Spinner("summarizing segments") if summarize else contextlib.nullcontext():
        if args.refresh:
            index = lib.refresh_split(index_path, summarize=summarize,
                                      target_bytes=args.target_bytes, split_type=args.type,
                                      force=args.force)
        else:
            index = lib.split_file(args.file, args.output,
                                   args.target_bytes or lib.DEFAULT_TARGET_BYTES,
                                   args.type, summarize=summarize, force=args.force)
    if args.json:
        emit_json(dict(index, index_path=index_path, directory=os.path.dirname(index_path),
                       **({"usage": usage} if usage else {})))
    else:
        count = len(index["segments"])
        print(f"split {index['source']} into {counted(count, 'segment')} "
              f"({index['split_type']}, target {index['target_bytes']} bytes)")
        print(f"index: {index_path}")
        kept = index.get("kept_edits", [])
        if kept:
            print(f"kept a copy of {counted(len(kept), 'edited file')} "
                  f"first: {os.path.dirname(kept[0])}/")
    return 0


def run():
    return run_main(main, structured=True)


if __name__ == "__main__":
    sys.exit(run())
