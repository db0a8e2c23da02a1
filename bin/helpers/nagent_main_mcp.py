"""`nagent-mcp`: list the tools of configured MCP servers and call them (official `mcp` SDK).

Data contract: as every nagent_main_* module: `DESCRIPTION`, `build_parser()`, `main(argv) ->
exit code`, `run()` (main under nagent_cli.run_main) for the console script and the bin/ shim;
`run_command(args)` does what the parsed command line asks. Inside a run's shell action the
run's live MCP sessions answer (nagent_mcp: the run's host checks the deny rules there).
"""
import os
import sys

from nagent_cli import early_exit, run_main

DEFAULT_TIMEOUT = 60.0   # seconds a server may take to answer (--timeout)

PROG = "nagent-mcp"
DESCRIPTION = ("Use MCP server tools: `nagent-mcp --list [SERVER]` shows tools and their arguments, "
               "`nagent-mcp call SERVER TOOL --args JSON` runs one; --json for scripts.")
EXAMPLES = (("nagent-mcp --list", "every configured server and its tools"),
            "nagent-mcp --list time --json",
            "nagent-mcp call time get_current_time --args '{\"timezone\": \"Europe/Paris\"}'",
            "echo '{\"timezone\": \"UTC\"}' | nagent-mcp call time get_current_time")
EXITS = ("ok", "failure", "usage", "config", "setup", "provider", "refused")
EPILOG = ("Servers come from \"mcp_servers\" in ~/.nagent/config.json (the mcpServers shape of Claude "
          "Code and Cursor). A deny rule for SERVER/TOOL in the permissions refuses the call (exit "
          "10); a tool's own error is exit 1, a server that fails (start-up, exit, timeout) exit 5.")


def build_parser():
    from nagent_cli import argument_parser
    parser = argument_parser(prog=PROG, description=DESCRIPTION, epilog=EPILOG, examples=EXAMPLES,
                             exits=EXITS)
    parser.add_argument("words", nargs="*", metavar="call SERVER TOOL",
                        help="call TOOL of SERVER; arguments from --args or JSON on stdin")
    parser.add_argument("--list", nargs="?", const="", metavar="SERVER",
                        help="list the configured servers' tools (or one server's)")
    parser.add_argument("--args", metavar="JSON", help="the tool's arguments as a JSON object")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, metavar="SECONDS",
                        help=f"stop a server that has not answered after this long (default {DEFAULT_TIMEOUT:g})")
    parser.add_argument("--json", action="store_true", help="print one JSON object (errors too)")
    parser.add_argument("--description", action="store_true", help="print a one-line description")
    return parser


def warn(lines):
    from nagent_cli import redact
    for line in lines:
        if line:
            sys.stderr.write(redact("Warning: " + line) + "\n")


def run_command(args):
    from nagent_mcp_wire import CHANNEL_VAR
    in_run = bool(os.environ.get(CHANNEL_VAR))
    if in_run:   # the run's host answers: neither the config checks nor the MCP client load here
        import nagent_mcp_live as mcp
    else:
        import nagent_mcp as mcp
    from nagent_cli import emit_json, report_error
    from nagent_errors import UsageError
    if args.list is not None:
        if args.words:
            raise UsageError("--list takes no other arguments", " ".join(args.words), "nagent-mcp --list [SERVER]")
        servers, error = mcp.list_servers(args.list or None, dict(os.environ), args.timeout)
        warn(server["warning"] for server in servers)
        if args.json:
            emit_json({"servers": servers, **({"error": error.as_dict()} if error else {})})
        elif not servers:
            print("no MCP servers configured (add mcp_servers to ~/.nagent/config.json; see docs/mcp.md)")
        else:
            from nagent_mcp_render import list_text
            sys.stdout.write(list_text(servers))
        if error:             # the listing is printed; the first failure sets the exit code
            report_error(error)
            return error.exit_code
        return 0
    if len(args.words) != 3 or args.words[0] != "call":
        raise UsageError("expected --list [SERVER] or call SERVER TOOL", " ".join(args.words),
                         "see nagent-mcp --help")
    _, server, tool = args.words
    if not in_run:   # inside a run the run's host checks the rules it read
        refuse_denied(server, tool)
    if args.args is not None:
        arguments = mcp.parse_arguments(args.args)
    elif not sys.stdin.isatty():
        arguments = mcp.parse_arguments(sys.stdin.read(), "JSON on stdin")
    else:
        arguments = {}
    outcome = mcp.call(server, tool, arguments, dict(os.environ), args.timeout)
    warn([outcome["warning"]])
    if args.json:
        emit_json(outcome)
    else:
        from nagent_terminal_text import shown_on
        sys.stdout.write(shown_on(outcome["text"], sys.stdout.isatty()))
    if outcome["is_error"]:
        import nagent_mcp   # the failure's error class is the MCP client's
        failure = nagent_mcp.tool_failure(outcome)
        report_error(failure)
        return failure.exit_code
    return 0


def refuse_denied(server, tool):
    """A deny rule for this tool refuses the call here too (exit 10), wherever it came from."""
    from nagent_cli import current_cwd, load_settings
    from nagent_errors import RefusedError
    from nagent_policy import mcp_refusal
    line = mcp_refusal(load_settings({}, warn=False), current_cwd(), dict(os.environ), server, tool)
    if line:
        raise RefusedError(line[2:], f"{server}/{tool}", "the permission rules deny this MCP tool")


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if early_exit(argv, PROG, DESCRIPTION):
        return 0
    return run_command(build_parser().parse_args(argv))


def run():
    return run_main(main, structured=True)


if __name__ == "__main__":
    sys.exit(run())
