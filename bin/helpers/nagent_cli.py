"""Shared CLI plumbing for every bin/ tool: --description, JSON emission, the wait
spinner, and the error/exit-code convention.

Data contract:
- `early_exit(argv, prog, text)` returns True after printing `text` (one line) when argv asks
  for --description, or the version line when it asks for --version (before any "--"); tools
  call it before building argparse so both stay cheap.
- `run_main(fn, argv, json_document=None, events=False, structured=False)` first re-executes a
  checkout tool under the run's interpreter when a shell action started it under another one
  (nagent_install.reexec_under_run_python), then makes the process non-dumpable (nagent_secrets.make_undumpable: its children cannot read its
  environment or memory), then calls `fn(argv) -> int`, turning NagentError into one stderr
  line and its exit code, KeyboardInterrupt into 130, an exit signal (SIGTERM 143, SIGHUP 129)
  into its code, and any other exception (a bug) into one "internal error" line and exit 1;
  NAGENT_DEBUG=1 shows the traceback instead. For a tool that asks (`structured`, or a
  `json_document`; tools that print their own JSON errors do not) and an argv that asks for
  JSON (`structured_mode`: --json or --output-format json, read before parsing, so argparse
  errors count too), the error is also one JSON object on stdout, `json_document(error)`
  (default: error.as_dict()); for a tool with `events`, --events (or --output-format
  stream-json) makes it an "error" and a "run_end" JSON line.
- `output_mode(args)` -> "text" | "json" | "events" from a parsed command line (both:
  UsageError). These helpers take a command line as argparse's namespace or dict, or as an
  nagent_invocation.Invocation (`parsed_flags`): they are the command layer's own.
- `add_output_flags(parser)`: --json, --events, --output-format, -q/--quiet, -v/--verbose,
  --stream/--no-stream (see nagent_output for what they choose).
- `emit_json(data)` writes one JSON document to stdout (nothing else goes to stdout in
  --json mode). `redact(text, secrets=None)` blanks out secret values in any text; without a
  list, every secret nagent knows (nagent_config.known_secrets) is blanked; `redacted(value,
  secrets, keep=())` blanks a list of them in every string of JSON-shaped data (but the values
  of the keys in `keep`).
- `argument_parser(**kwargs)` is argparse whose usage errors raise UsageError (one line in the
  `Error: <what>: <value> (<fix>)` shape); every parser has --version and takes no abbreviated
  flag (allow_abbrev is off for every parser it makes): an unknown flag is an error whose fix
  is "did you mean --FLAG?" when one is close (`suggestion`). With `examples` (pairs of a
  command line and a comment, or a bare line) and `exits` (kinds of nagent_errors.EXIT_TABLE),
  --help ends with them (`help_epilog`): prose paragraphs wrap to the terminal, indented lines
  keep their layout.
- `report_incomplete(result)`: nagent-llm-text's and nagent-llm-upload's warning for an
  incomplete reply, and their exit code.
- `read_prompt(words, stdin)` returns (prompt text, source) for argv, piped stdin, or argv
  text followed by stdin when the last word is "-"; no prompt → UsageError. `current_cwd()` is
  the working directory, or InputError when it was deleted.
- Settings flags: `add_setting_flags(parser, names)` adds one flag per config schema row,
  `provider_overrides(args)` collects the given ones, `load_settings(args)` resolves the
  settings and prints their warnings (unknown config keys) once.
- `refuse_in_shell_action(tool, use, environ=None, fix=USE_THE_TAG)`: UsageError (exit 2) when
  this process runs inside a nagent shell action (nagent_secrets.SHELL_ACTION_VAR), the one rule
  for what nagent's own tools refuse there: `tool` (a tool, or a command such as
  "nagent --rewind") cannot work there (no key) or is the user's to run, and the line names
  `use` (the tag the model should reply with instead, or what the command would change) and
  `fix`. The variable is in the model's command's environment, so this stops a model that
  follows the protocol, not one that unsets it: the boundaries are the driver's conversation
  lock, the missing key and the bwrap sandbox (which hides ~/.nagent).
- `spinner_allowed(environ)`: the one reader of NAGENT_NO_SPINNER (unset, "" or "0": animation
  allowed). `Spinner` draws on stderr only when stderr is a TTY and that allows it; it writes
  no escape sequence (the line is cleared with spaces), so NO_COLOR output stays plain.
"""
import os
import sys
import time

from nagent_errors import (EXIT_CODES, EXIT_MEANINGS, ExitSignal, InputError, NagentError,
                           UsageError)
from nagent_install import reexec_under_run_python
from nagent_secrets import SHELL_ACTION_VAR, make_undumpable
from nagent_secrets import redact as redact_values
from nagent_paths import current_cwd  # noqa: F401  (the commands' working directory)
from nagent_terminal_text import spinner_allowed, status_erase, terminal_columns  # noqa: F401


def early_exit(argv, prog, text):
    flags = argv[:argv.index("--")] if "--" in argv else argv
    if "--description" in flags:
        sys.stdout.write(text.strip().splitlines()[0] + "\n")
        return True
    if "--version" in flags:
        from nagent_install import version_line
        sys.stdout.write(version_line(prog) + "\n")
        return True
    return False


def emit_json(data):
    import json  # not at the top: --version and --description never need it
    sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


def redact(text, secrets=None):
    if not text:
        return text
    if secrets is None:
        # Imported here: only a report without a session's secrets needs the config.
        from nagent_config import known_secrets
        secrets = known_secrets()
    return redact_values(text, secrets)


def report_error(error):
    sys.stderr.write(redact(error.line()) + "\n")
    sys.stderr.flush()


class Interrupted(NagentError):
    kind = "interrupted"


def structured_mode(argv, events=False):
    """"json", "events" (only for a tool that has --events) or None: what a command line asks
    stdout to be, read before parsing (so usage errors are structured too). Only options before
    a "--" count."""
    words = list(argv[:argv.index("--")] if "--" in argv else argv)
    forms = [words[i + 1] for i, word in enumerate(words[:-1]) if word == "--output-format"]
    forms += [word.split("=", 1)[1] for word in words if word.startswith("--output-format=")]
    if "--json" in words or "json" in forms:
        return "json"
    if events and ("--events" in words or "stream-json" in forms):
        return "events"
    return None


def emit_structured_error(mode, error, json_document=None, seconds=0.0):
    if mode == "json":
        emit_json(json_document(error) if json_document else error.as_dict())
    elif mode == "events":
        from nagent_events import event_line
        t = round(seconds, 3)
        context = getattr(error, "context", None) or {}
        sys.stdout.write(event_line(dict({"type": "error", "t": t}, **error.as_dict())) + "\n")
        sys.stdout.write(event_line({"type": "run_end", "t": t, "exit_code": error.exit_code,
                                     "calls": 0, "totals": None,
                                     "conversation": context.get("conversation"),
                                     "budget": None}) + "\n")
        sys.stdout.flush()


def run_main(fn, argv=None, json_document=None, events=False, structured=False):
    """Run a tool's main body with the shared error convention. Returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    reexec_under_run_python()   # a checkout tool a shell action ran under another python3
    make_undumpable()
    mode = structured_mode(argv, events) if structured or json_document else None
    started = time.monotonic()
    try:
        return fn(argv)
    except NagentError as error:
        problem = error
    except KeyboardInterrupt:
        problem = Interrupted("interrupted")
    except ExitSignal as stop:
        problem = NagentError(f"ended by {stop.name}")
        problem.kind = {129: "hangup", 143: "terminated"}.get(stop.exit_code, "failure")
    except BrokenPipeError:
        return EXIT_CODES["failure"]
    except Exception as error:  # a bug: still one line, unless NAGENT_DEBUG asks for the trace
        if os.environ.get("NAGENT_DEBUG"):
            raise
        problem = NagentError("internal error", f"{type(error).__name__}: {error}",
                              "rerun with NAGENT_DEBUG=1 for the traceback and report it")
    report_error(problem)
    try:
        emit_structured_error(mode, problem, json_document, time.monotonic() - started)
    except BrokenPipeError:
        pass
    return problem.exit_code


def report_incomplete(result):
    """After a one-reply tool printed `result` (a nagent_llm.Result): its warning when it is
    incomplete, and the exit code (11 for a reply the connection cut, else 0)."""
    import nagent_llm  # the tools that call it have imported it already
    warning = nagent_llm.incomplete_warning(result)
    if warning:
        sys.stdout.flush()
        sys.stderr.write(warning + "\n")
    return nagent_llm.incomplete_exit_code(result)


def read_stdin(stdin):
    data = stdin.buffer.read() if hasattr(stdin, "buffer") else stdin.read().encode()
    return data.decode("utf-8", errors="replace")


def read_prompt(words, stdin):
    if words and words[-1] == "-":
        head = " ".join(words[:-1]).strip()
        tail = read_stdin(stdin)
        text, source = (head + "\n\n" + tail if head else tail), "argv+stdin"
    elif words:
        text, source = " ".join(words), "argv"
    elif stdin is not None and not stdin.isatty():
        text, source = read_stdin(stdin), "stdin"
    else:
        raise UsageError("no prompt", "", 'run nagent "your prompt" or pipe one on stdin; '
                         "nagent --list-conversations lists conversations, nagent --help every flag")
    if not text.strip():
        raise UsageError("empty prompt", repr(text[:20]), "give the model something to do")
    return text, source


USE_THE_TAG = "reply with that tag instead: nagent runs it with the session's key"


def refuse_in_shell_action(tool, use, environ=None, fix=USE_THE_TAG):
    environ = os.environ if environ is None else environ
    if environ.get(SHELL_ACTION_VAR):
        raise UsageError(f"{tool} does not run inside a nagent shell action", use, fix)


def spinner_enabled(stream=None):
    stream = sys.stderr if stream is None else stream
    if not spinner_allowed(os.environ):
        return False
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


class Spinner:
    """A stderr status line redrawn on a thread; a no-op when not on a TTY."""
    FRAMES = "|/-\\"

    def __init__(self, label="waiting for model", stream=None):
        self.stream = sys.stderr if stream is None else stream
        self.label = label
        self.enabled = spinner_enabled(self.stream)
        import threading  # only a command that waits for a model draws a spinner
        self._stop = threading.Event()
        self._threading = threading
        self._thread = None
        self._drawn = 0

    def set_label(self, label):
        self.label = label

    def _draw(self):
        start = time.monotonic()
        frame = 0
        while not self._stop.wait(0.1):
            elapsed = time.monotonic() - start
            text = f"{self.FRAMES[frame % 4]} {self.label} {elapsed:4.1f}s"
            self.stream.write("\r" + text + " " * max(0, self._drawn - len(text)))
            self._drawn = len(text)
            self.stream.flush()
            frame += 1
        if self._drawn:
            self.stream.write(status_erase(self._drawn, terminal_columns()))
            self.stream.flush()

    def __enter__(self):
        if self.enabled:
            self._thread = self._threading.Thread(target=self._draw, daemon=True)
            self._thread.start()
        return self

    def stop(self):
        """Clear the line now (before printing to the same terminal)."""
        if self._thread:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def __exit__(self, *exc):
        self.stop()
        return False


ALL_EXITS = tuple(EXIT_CODES)


def help_epilog(text="", examples=(), exits=()):
    """The end of a --help: `text` (prose), then "examples:" (each a command line, or a
    (command line, comment) pair), then "exit codes:" with each kind's code and meaning from the
    one table (nagent_errors.EXIT_TABLE), in code order."""
    parts = [text] if text else []
    if examples:
        rows = [row if isinstance(row, tuple) else (row, "") for row in examples]
        wide = max(len(line) for line, comment in rows if comment) if any(c for _, c in rows) else 0
        parts.append("examples:\n" + "\n".join(
            f"  {line.ljust(wide)}   # {comment}" if comment else f"  {line}" for line, comment in rows))
    if exits:
        codes = sorted((EXIT_CODES[kind], kind) for kind in exits)
        parts.append("exit codes:\n" + "\n".join(f"  {code:>3}  {EXIT_MEANINGS[kind]}"
                                                   for code, kind in codes))
    return "\n\n".join(parts)


def argument_parser(examples=(), exits=(), **kwargs):
    """argparse, but a bad command line is a UsageError: one `Error:` line and exit 2; --help
    ends with `examples` and the exit codes `exits` (help_epilog)."""
    import argparse
    from nagent_install import version_line

    if examples or exits:
        kwargs["epilog"] = help_epilog(kwargs.get("epilog") or "", examples, exits)

    class Formatter(kwargs.pop("formatter_class", argparse.HelpFormatter)):
        # argparse asks shutil for the width, and shutil imports bz2, lzma and fnmatch: every
        # command builds a formatter, only --help prints with it.
        def __init__(self, prog, **kwargs):
            kwargs.setdefault("width", terminal_columns() - 2)
            super().__init__(prog, **kwargs)

        def _fill_text(self, text, width, indent):
            # Prose wraps to the terminal; a paragraph with indented lines (examples, the exit
            # codes) keeps its layout, as RawDescriptionHelpFormatter would keep it.
            blocks = text.split("\n\n")
            return "\n\n".join(
                "\n".join(indent + line for line in block.splitlines())
                if any(line.startswith("  ") for line in block.splitlines())
                else super(Formatter, self)._fill_text(block, width, indent) for block in blocks)

    class Parser(argparse.ArgumentParser):
        def __init__(self, **options):
            # A prefix of a flag is never that flag: `--mode plan` must not run with model "plan".
            # Here, not at the call site, so every parser (a subparser too) refuses them.
            options["allow_abbrev"] = False
            super().__init__(**options)

        def error(self, message):
            # "invalid choice: 'x' (choose from ...)" would nest in the line's own parentheses.
            message = message.replace(" (choose from ", "; choose from ")
            if "; choose from " in message and message.endswith(")"):
                message = message[:-1]
            flag = unknown_flag(message)
            if flag:
                raise UsageError("unknown flag", flag, suggestion(self, flag))
            raise UsageError(message, "", f"see {self.prog} --help")

    # No abbreviations: `--mode` must never be read as `--model` by a tool without --mode.
    parser = Parser(formatter_class=Formatter, allow_abbrev=False, **kwargs)
    parser.add_argument("--version", action="version", version=version_line(parser.prog),
                        help="print the version and exit")
    return parser


def unknown_flag(message):
    """The first unknown --flag of argparse's "unrecognized arguments" message, or None."""
    if not message.startswith("unrecognized arguments: "):
        return None
    words = [word for word in message.split(": ", 1)[1].split() if word.startswith("--")]
    return words[0].split("=", 1)[0] if words else None


def suggestion(parser, given):
    """The fix for unknown flag `given`: "did you mean --model?" when flags --help shows are
    close (those it is a prefix of, else the closest spellings), else a pointer at --help."""
    flags = [flag for action in parser._actions if action.help != "==SUPPRESS=="
             for flag in action.option_strings if flag.startswith("--")]
    matches = [flag for flag in flags if flag.startswith(given)]
    if not matches:
        from difflib import get_close_matches  # only a mistyped command line pays for it
        matches = get_close_matches(given, flags, n=3, cutoff=0.75)
    if not matches:
        return f"see {parser.prog} --help"
    return f"did you mean {' or '.join(matches[:3])}? see {parser.prog} --help"


PROVIDER_FLAGS = ("provider", "model", "timeouts.connect", "timeouts.read", "retry.max_attempts")


def add_setting_flags(parser, names):
    """One flag per schema row in `names` (see nagent_config.SCHEMA): its help shows the default
    and the allowed range. Values stay strings here; resolve_settings checks them like config
    values, so a bad flag is one clear error naming the flag and its range."""
    from nagent_config_schema import KEYS
    for name in names:
        key = KEYS[name]
        default = "" if key.default is None or callable(key.default) else f"; default {key.default}"
        rule = "" if key.kind in ("choice", "str") else "; " + key.requirement()[len("must be "):]
        metavar = {"int": "N", "float": "SECONDS" if "timeout" in name or "time" in name
                   else "USD" if "cost" in name else "N"}.get(
            key.kind, "CMD" if name.startswith("hooks.") else "NAME")
        text = provider_choices() if name == "provider" else key.help
        parser.add_argument(key.flag, choices=key.choices or None,
                            metavar=None if key.choices else metavar,
                            help=f"{text} (config {name}{default}{rule})")


def provider_choices():
    """The --provider help: every provider of the table with its aliases."""
    from nagent_providers import BUILTIN_PROVIDERS
    names = ", ".join("/".join((row.name,) + tuple(row.aliases)) for row in BUILTIN_PROVIDERS)
    return f"provider: {names}, or a providers.NAME entry of the config with a base_url"


def add_output_flags(parser, events=True):
    """What a run prints and where (nagent, nagent-llm-text)."""
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object on stdout, for every outcome (errors too)")
    if events:
        parser.add_argument("--events", action="store_true",
                            help="write JSON Lines events on stdout as the run goes (docs/scripting.md)")
        parser.add_argument("--output-format", choices=("text", "json", "stream-json"),
                            help="text (default), json (= --json) or stream-json (= --events)")
        parser.add_argument("-q", "--quiet", action="store_true",
                            help="no live display on stderr (errors and warnings still print)")
        parser.add_argument("-v", "--verbose", action="store_true",
                            help="show the live display on stderr even when it is not a terminal")
    stream = parser.add_mutually_exclusive_group()
    stream.add_argument("--stream", dest="stream", action="store_true", default=None,
                        help="stream the answer to stdout as it arrives (default on a terminal)")
    stream.add_argument("--no-stream", dest="stream", action="store_false",
                        help="print the answer only once it is complete")


def parsed_flags(args):
    """The parsed command line as argparse's dict: from a dict, an argparse namespace or an
    nagent_invocation.Invocation (its `options()`)."""
    if isinstance(args, dict):
        return args
    return args.options() if hasattr(args, "options") else vars(args)


def output_mode(args):
    """"text", "json" (--json, --output-format json) or "events" (--events, --output-format
    stream-json) for a parsed command line (parsed_flags); asking for both is a UsageError."""
    options = parsed_flags(args)
    form = options.get("output_format") or "text"
    json_mode = bool(options.get("json")) or form == "json"
    events = bool(options.get("events")) or form == "stream-json"
    if json_mode and events:
        raise UsageError("choose one of --json and --events", "", "--json prints one object at "
                         "the end, --events a JSON line per event as the run goes")
    return "json" if json_mode else "events" if events else "text"


def add_provider_flags(parser):
    """The provider/model/timeouts flags every model-calling tool shares."""
    add_setting_flags(parser, PROVIDER_FLAGS)


def provider_overrides(args):
    """The setting flags given on the command line (parsed_flags), keyed by dest, for
    resolve_settings: only the ones given."""
    from nagent_config_schema import SCHEMA
    values = parsed_flags(args)
    return {key.dest: values[key.dest] for key in SCHEMA
            if key.dest and values.get(key.dest) is not None}


def load_settings(args, environ=None, warn=True):
    """resolve_settings for a command's flags; its warnings (unknown config keys) go to stderr
    once, here, where the command resolves them."""
    from nagent_config_checks import resolve_checked
    settings = resolve_checked(provider_overrides(args), environ)
    if warn:
        for line in settings.warnings:
            sys.stderr.write(f"warning: {line}\n")
        sys.stderr.flush()
    return settings
