"""Shared CLI plumbing for every bin/ tool: --description, JSON emission, the wait
spinner, and the error/exit-code convention.

Data contract:
- `early_exit(argv, prog, text)` returns True after printing `text` (one line) when argv asks
  for --description, or the version line when it asks for --version (before any "--"); tools
  call it before building argparse so both stay cheap.
- `run_main(fn, argv)` first makes the process non-dumpable (nagent_secrets.make_undumpable:
  its children cannot read its environment or memory), then calls `fn(argv) -> int`, turning
  NagentError into one stderr line and its exit code, KeyboardInterrupt into 130, an exit
  signal (SIGTERM 143, SIGHUP 129) into its code, and any other exception (a bug) into one
  "internal error" line and exit 1; NAGENT_DEBUG=1 shows the traceback instead.
- `emit_json(data)` writes one JSON document to stdout (nothing else goes to stdout in
  --json mode). `redact(text, secrets=None)` blanks out secret values in any text; without a
  list, every secret nagent knows (nagent_secrets.known_secrets) is blanked.
- `argument_parser(**kwargs)` is argparse whose usage errors raise UsageError (one line in the
  `Error: <what>: <value> (<fix>)` shape); every parser has --version.
- `read_prompt(words, stdin)` returns (prompt text, source) for argv, piped stdin, or argv
  text followed by stdin when the last word is "-"; no prompt → UsageError. `current_cwd()` is
  the working directory, or InputError when it was deleted.
- Settings flags: `add_setting_flags(parser, names)` adds one flag per config schema row,
  `provider_overrides(args)` collects the given ones, `load_settings(args)` resolves the
  settings and prints their warnings (unknown config keys) once.
- `Spinner` draws on stderr only when stderr is a TTY and NAGENT_NO_SPINNER is unset.
"""
import os
import sys
import time

from nagent_errors import EXIT_CODES, ExitSignal, InputError, NagentError, UsageError
from nagent_secrets import known_secrets, make_undumpable
from nagent_secrets import redact as redact_values


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
    return redact_values(text, known_secrets() if secrets is None else secrets)


def report_error(error):
    sys.stderr.write(redact(error.line()) + "\n")
    sys.stderr.flush()


def run_main(fn, argv=None):
    """Run a tool's main body with the shared error convention. Returns the exit code."""
    argv = sys.argv[1:] if argv is None else list(argv)
    make_undumpable()
    try:
        return fn(argv)
    except NagentError as error:
        report_error(error)
        return error.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("Error: interrupted\n")
        return EXIT_CODES["interrupted"]
    except ExitSignal as stop:
        sys.stderr.write(f"Error: ended by {stop.name}\n")
        return stop.exit_code
    except BrokenPipeError:
        return EXIT_CODES["failure"]
    except Exception as error:  # a bug: still one line, unless NAGENT_DEBUG asks for the trace
        if os.environ.get("NAGENT_DEBUG"):
            raise
        report_error(NagentError("internal error", f"{type(error).__name__}: {error}",
                                 "rerun with NAGENT_DEBUG=1 for the traceback and report it"))
        return EXIT_CODES["failure"]


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


def current_cwd():
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise InputError("the current directory no longer exists", os.environ.get("PWD", "?"),
                         "cd to an existing directory")


def spinner_enabled(stream=None):
    stream = sys.stderr if stream is None else stream
    if os.environ.get("NAGENT_NO_SPINNER", "") not in ("", "0"):
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

    def set_label(self, label):
        self.label = label

    def _draw(self):
        start = time.monotonic()
        frame = 0
        while not self._stop.wait(0.1):
            elapsed = time.monotonic() - start
            self.stream.write(f"\r{self.FRAMES[frame % 4]} {self.label} {elapsed:4.1f}s\x1b[K")
            self.stream.flush()
            frame += 1
        self.stream.write("\r\x1b[K")
        self.stream.flush()

    def __enter__(self):
        if self.enabled:
            self._thread = self._threading.Thread(target=self._draw, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread:
            self._stop.set()
            self._thread.join()
        return False


def terminal_columns():
    """shutil.get_terminal_size().columns without importing shutil: $COLUMNS, the terminal, 80."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def argument_parser(**kwargs):
    """argparse, but a bad command line is a UsageError: one `Error:` line and exit 2."""
    import argparse
    from nagent_install import version_line

    class Formatter(kwargs.pop("formatter_class", argparse.HelpFormatter)):
        # argparse asks shutil for the width, and shutil imports bz2, lzma and fnmatch: every
        # command builds a formatter, only --help prints with it.
        def __init__(self, prog, **kwargs):
            kwargs.setdefault("width", terminal_columns() - 2)
            super().__init__(prog, **kwargs)

    class Parser(argparse.ArgumentParser):
        def error(self, message):
            # "invalid choice: 'x' (choose from ...)" would nest in the line's own parentheses.
            message = message.replace(" (choose from ", "; choose from ")
            if "; choose from " in message and message.endswith(")"):
                message = message[:-1]
            raise UsageError(message, "", f"see {self.prog} --help")

    parser = Parser(formatter_class=Formatter, **kwargs)
    parser.add_argument("--version", action="version", version=version_line(parser.prog),
                        help="print the version and exit")
    return parser


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
        metavar = {"int": "N", "float": "SECONDS" if "timeout" in name else "N"}.get(
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


def add_provider_flags(parser):
    """The provider/model/timeouts flags every model-calling tool shares."""
    add_setting_flags(parser, PROVIDER_FLAGS)


def provider_overrides(args):
    """The setting flags given on the command line (an argparse namespace or a dict of them),
    keyed by dest, for resolve_settings: only the ones given."""
    from nagent_config_schema import SCHEMA
    values = args if isinstance(args, dict) else vars(args)
    return {key.dest: values[key.dest] for key in SCHEMA
            if key.dest and values.get(key.dest) is not None}


def load_settings(args, environ=None, warn=True):
    """resolve_settings for a command's flags; its warnings (unknown config keys) go to stderr
    once, here, where the command resolves them."""
    from nagent_config import resolve_settings
    settings = resolve_settings(provider_overrides(args), environ)
    if warn:
        for line in settings.warnings:
            sys.stderr.write(f"warning: {line}\n")
        sys.stderr.flush()
    return settings
