"""The interactive session: `nagent` with no prompt on a terminal (stdin and stdout TTYs).

Data contract
-------------
`start(options, lifecycle, parser, pick=False) -> exit code`. `options` is the
nagent_invocation.Invocation of the command line that opened the session (no prompt words; the conversation already selected by
-c, --resume NAME or --conversation); `lifecycle` the names of nagent's lifecycle flags and
`parser` nagent's argparse parser (both from nagent_main), so that every entry runs exactly what
its command line runs:
* a prompt: nagent_commands.run_prompt with the session's options and the text (prompt source
  "interactive"): the run `nagent "…"` makes, with its live view, streaming, approval questions
  and closing line; while it goes, what is typed is queued for its next turn boundary
  (nagent_typeahead, through nagent_inbox as `nagent --send` does);
* a slash command (nagent_slash): its command line, parsed by `parser` over the session's
  flags and dispatched by nagent_commands.run_lifecycle. /model and /mode add their flag to every
  later entry; /new adds --new to the next prompt; /cost shows the token and cost lines of
  --status.
Each entry fails as `nagent` fails (nagent_cli.run_main prints its error) and the session goes
on; a run ended by SIGTERM or SIGHUP ends the session with that code; Ctrl-D at an empty prompt
and /exit end it with 0. The prompt shows the conversation's name, the model (and "plan" in
plan mode) and the cost so far (`latest-box-4242 · gpt-5.5 · $0.0123 › `), made safe for the
terminal. Once the first prompt is on the screen, a thread imports what a run needs before its
first request (the provider SDK first); an entry waits for that thread to finish, so a run typed
at once pays for the rest of the import and no more, never for it twice. With `pick`, the session starts
by listing this directory's conversations and asking which one (nagent_resume.choose).
"""
import os
import sys
import termios
import time

import nagent_commands
import nagent_resume
import nagent_slash
from nagent_cli import load_settings, redact, run_main
from nagent_conversation_layout import is_state_name, selected_conversation, validate_name
from nagent_conversation_tail import read_tail_summary
from nagent_errors import NagentError, UsageError
from nagent_invocation import Invocation
from nagent_lifecycle_commands import selected_path, status
from nagent_line_editing import LineEditor, path_candidates
from nagent_paths import conversations_dir
from nagent_preload import preload
from nagent_terminal_text import one_line
from nagent_typeahead import Typeahead

SOURCE = "interactive"
MORE = "  … "
EXIT_SIGNALS = (129, 143)
# What a run imports before its first request, loaded by the preload thread once the prompt
# shows (and imported where used, not at the top: the prompt must appear within 3x `python3 -c
# pass`), the provider SDK first: it is the longest, and the last thing the first request needs.
# Nothing more: a one-shot run imports the rest (the reply parser ...) only after its request.
RUN_MODULES = ("nagent_session", "nagent_loop", "nagent_output", "nagent_display", "nagent_stream",
               "nagent_llm", "nagent_typeahead")
BANNER = ("nagent: Enter sends; Alt-Enter or a trailing \\ adds a line; /help lists commands; "
          "Ctrl-D leaves")


def conversation_names(environ=None):
    try:
        names = os.listdir(conversations_dir(environ))
    except OSError:
        return []
    found = []
    for name in names:
        try:
            if not is_state_name(name):
                found.append(validate_name(name))
        except UsageError:
            continue
    return sorted(found)


class Chat:
    """One interactive session (see the module docstring)."""

    def __init__(self, options, lifecycle, parser):
        self.parser = parser
        self.defaults = vars(self.parser.parse_args([]))
        self.base = options.but(prompt=(), new=False, resume=None, continue_latest=False).options()
        self.lifecycle = lifecycle
        self.held = {}                       # flag -> value set by /model, /mode
        self.pending_new = bool(options.new)
        self.environ = dict(os.environ)
        self.editor = LineEditor(self.environ, self.complete)
        self.loader = None
        self.typeahead = None
        try:
            self.terminal = termios.tcgetattr(sys.stdin.fileno())
        except (OSError, termios.error):
            self.terminal = None

    # -- the options an entry runs with ---------------------------------------------------
    def options(self, argv=()):
        """The session's Invocation with `argv` (a command line's flags) parsed over it."""
        held = [word for flag, value in self.held.items() for word in (flag, value)]
        given = vars(self.parser.parse_args([*held, *argv]))
        merged = dict(self.base)
        merged.update({key: value for key, value in given.items() if value != self.defaults.get(key)})
        return Invocation.from_options(merged)

    # -- the prompt line -------------------------------------------------------------------
    def path(self, options):
        if options.file_edit:
            return selected_path(options, read_only=True)
        return selected_conversation(options.selection, self.environ)[0]

    def prompt_line(self, settings=None):
        options = self.options()
        try:
            settings = settings or load_settings(options, warn=False)
            model = settings.model
            if getattr(settings, "mode", "build") == "plan":   # plan mode changes nothing
                model += " · plan"
        except NagentError:
            model = "?"
        try:
            path = self.path(options)
            stats = (read_tail_summary(path).get("stats") or {}) if path else {}
        except NagentError:
            path, stats = None, {}
        cost = (stats.get("conversation") or {}).get("cost_usd") if stats else 0.0
        name = os.path.basename(path) if path else os.path.basename(options.file_edit or "?")
        money = "$?" if cost is None else f"${cost:.4f}"
        return f"{one_line(name, 40)} · {one_line(model, 40)} · {money} › "

    # -- completion ------------------------------------------------------------------------
    def complete(self, line, begidx, text):
        head = line[:begidx].split()
        if not head and text.startswith("/"):
            return ["/" + name for name in nagent_slash.COMMANDS if ("/" + name).startswith(text)]
        if line.startswith("/") and len(head) == 1:
            command = head[0][1:]
            if command in ("load", "save"):
                return [name for name in conversation_names(self.environ) if name.startswith(text)]
            if command == "mode":
                return [mode for mode in ("plan", "build") if mode.startswith(text)]
        return path_candidates(text)

    # -- entries ---------------------------------------------------------------------------
    def preload(self, modules):
        self.loader = preload(modules)

    def guarded(self, body):
        """`body()` under nagent's error convention: an error is its one line, never the end.
        It waits for the preload thread first: a run beside it would share the interpreter lock
        (on a loaded machine a run typed at once came 50% later than a one-shot's), and a fork
        (nagent_fork) must not copy a module lock that thread holds."""
        if self.loader is not None:
            self.loader.join()
            self.loader = None
        return run_main(lambda _argv: body(), [])

    def during(self, session, out):
        dumb = self.environ.get("TERM", "dumb") in ("", "dumb")   # no bracketed paste there
        self.typeahead = Typeahead(sys.stdin.fileno(), session.path, out.display,
                                   session.environ or self.environ, sys.stderr,
                                   control=None if dumb else sys.stdout)
        return self.typeahead

    def run_prompt(self, text, new=False):
        options = self.options(["--new"] if new or self.pending_new else []).but(
            started=time.monotonic())
        self.pending_new = False
        self.typeahead = None
        code = self.guarded(lambda: nagent_commands.run_prompt(
            options, typed=(text, SOURCE), during=self.during, warn=False))
        if self.typeahead is not None and self.typeahead.draft:
            self.editor.prefill(self.typeahead.draft)   # typed, never sent: not lost
        return code

    def run_command(self, argv, cost=False):
        options = self.options(argv)
        if cost:
            text = status(options, load_settings(options, warn=False))[1]
            wanted = ("tokens:", "cost:", "last run:")
            lines = [line for line in text.splitlines() if line.startswith(wanted)]
            sys.stdout.write("\n".join(lines or ["cost: $0.0000 (no model call yet)"]) + "\n")
            return 0
        chosen = [name for name in self.lifecycle if options.given(name)]
        return nagent_commands.run_lifecycle(chosen, options)

    def slash(self, entry, name, words):
        plan = nagent_slash.plan(name, words)
        if plan.action == "help":
            sys.stdout.write(nagent_slash.help_text() + "\n")
        elif plan.action == "new":
            if words:
                return self.run_prompt(entry.split(None, 1)[1], new=True)
            self.pending_new = True
            sys.stdout.write("the next prompt starts a fresh conversation "
                             "(this one is archived then)\n")
        elif plan.action in ("run", "cost"):
            return self.run_command(plan.argv, cost=plan.action == "cost")
        elif plan.action == "show":
            return self.show(plan.argv[0])
        elif plan.action == "set":
            return self.hold(plan.argv)
        return 0

    def show(self, flag):
        value = getattr(load_settings(self.options(), warn=False), flag[2:].replace("-", "_"))
        sys.stdout.write(f"{flag[2:]}: {one_line(str(value))}\n")
        return 0

    def hold(self, argv):
        flag, value = argv
        before = dict(self.held)
        self.held[flag] = value
        try:
            load_settings(self.options(), warn=False)   # a bad value is refused now, not later
        except NagentError:
            self.held = before
            raise
        sys.stdout.write(f"{flag[2:]}: {one_line(value)} from the next prompt on\n")
        return 0

    def entry(self, text):
        """Run one entry; its exit code, or None to leave the session."""
        parsed = nagent_slash.parse(text)
        if parsed is None:
            return self.run_prompt(nagent_slash.prompt_text(text))
        if parsed[0] == "exit" and not parsed[1]:
            return None
        return self.guarded(lambda: self.slash(text, *parsed))

    def restore_terminal(self):
        if self.terminal is not None:
            try:
                termios.tcsetattr(sys.stdin.fileno(), termios.TCSANOW, self.terminal)
            except (OSError, termios.error):
                pass

    def loop(self, settings=None):
        """Entries until Ctrl-D or /exit; `settings` are the session's, already resolved."""
        while True:
            self.restore_terminal()
            text = self.editor.read(self.prompt_line(settings), MORE)
            settings = None   # re-read from now on: an entry may have changed them
            if text is None:   # Ctrl-D at an empty prompt (readline ends the line itself)
                return 0
            if not text.strip():
                continue
            self.editor.remember(redact(text))
            code = self.entry(text)
            if code is None:
                return 0
            if code in EXIT_SIGNALS:
                return code


def start(options, lifecycle, parser, pick=False):
    if pick:
        settings = load_settings(options)
        name = nagent_resume.choose(settings, input, sys.stdout)
        if name is None:
            return 0
        options = options.but(conversation=name, resume=None)
    chat = Chat(options, lifecycle, parser)
    settings = load_settings(chat.options(), warn=not pick)   # a bad config stops it here
    modules = (settings.provider.package, settings.provider.adapter) + RUN_MODULES
    # Started once the first prompt is on the screen: it must not delay the prompt.
    chat.editor.when_shown(lambda: chat.preload(modules))
    sys.stderr.write(BANNER + "\n")
    return chat.loop(settings)
