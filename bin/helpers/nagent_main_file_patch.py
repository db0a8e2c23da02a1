"""`nagent-file-patch`: merge edited split segments back into their source file.

Data contract: as every nagent_main_* module: `DESCRIPTION`, `build_parser()`, `main(argv) ->
exit code`, `run()` (main under nagent_cli.run_main) for the console script and the bin/ shim.
"""
import sys

from nagent_cli import early_exit, run_main

PROG = "nagent-file-patch"
DESCRIPTION = ("Merge edited split segments back into the source after checking its hash; "
               "writes a unified-diff patch artifact and refreshes index.json.")
EXAMPLES = (("nagent-file-patch --index /tmp/big-split/index.json --dry-run", "the diff, nothing written"),
            "nagent-file-patch --index /tmp/big-split/index.json --json",
            "nagent-file-patch --index DIR/index.json --expect-source src/big.py --expect-sha256 HASH")
EXITS = ("ok", "failure", "usage", "input", "refused", "interrupted")


def build_parser():
    from nagent_cli import argument_parser
    parser = argument_parser(prog=PROG, description=DESCRIPTION, examples=EXAMPLES, exits=EXITS)
    parser.add_argument("--index", metavar="PATH", required=True,
                        help="index.json written by nagent-file-split, or its directory")
    parser.add_argument("--dry-run", action="store_true",
                        help="write only the patch artifact; leave the source and index alone")
    parser.add_argument("--force", action="store_true",
                        help="apply even if the source changed since the split")
    parser.add_argument("--expect-source", metavar="PATH",
                        help="refuse unless the index names this source file; goes with "
                             "--expect-sha256, and --force never overrides it")
    parser.add_argument("--expect-sha256", metavar="HEX",
                        help="refuse unless the index records this source sha256, the hash "
                             "the caller's own record of the split holds")
    parser.add_argument("--json", action="store_true",
                        help="print the result as JSON, and an error as a JSON error object")
    parser.add_argument("--description", action="store_true", help="print a one-line description")
    return parser


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if early_exit(argv, PROG, DESCRIPTION):
        return 0
    args = build_parser().parse_args(argv)
    from nagent_cli import emit_json
    from nagent_errors import UsageError
    from nagent_file_patch_lib import patch_from_index
    if (args.expect_source is None) != (args.expect_sha256 is None):
        raise UsageError("--expect-source and --expect-sha256 go together",
                         args.expect_source or args.expect_sha256, "pass both or neither")
    expect = (args.expect_source, args.expect_sha256) if args.expect_source else None
    result = patch_from_index(args.index, dry_run=args.dry_run, force=args.force, expect=expect)
    if args.json:
        emit_json(result)
        return 0
    for warning in result["warnings"]:
        sys.stderr.write(f"warning: {warning}\n")
    if result["status"] == "unchanged":
        print(f"no change: the segments match {result['source']}; nothing written")
        return 0
    verb = "applied to" if result["status"] == "applied" else "dry run, not applied to"
    forced = " [forced]" if result["forced"] else ""
    print(f"{verb} {result['source']}: {result['changed_lines']} changed lines "
          f"(+{result['added_lines']} -{result['removed_lines']}) in "
          f"{len(result['changed_segments'])} segment(s){forced}")
    print(f"patch: {result['patch_path']}")
    return 0


def run():
    return run_main(main, structured=True)


if __name__ == "__main__":
    sys.exit(run())
