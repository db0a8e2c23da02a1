"""What a `nagent` run shows, and where: the sinks of its events, chosen once from the flags,
the terminal and the environment; and the --json documents.

Data contract
-------------
* `choose_output(mode, settings, stdout, stderr, environ, *, quiet=False, verbose=False,
  stream=None, started=None) -> Output` (plain data) for output mode `mode` ("text", "json" or
  "events": nagent_cli.output_mode), -q, -v, --stream/--no-stream (None: neither) and the
  origin of event times (None: the run's start): `events`
  (nagent_events.Events over the chosen sinks), `log` (ActionLog: provider, model, actions for
  --json), `display` and `printer` (or None), and `shown(text)`: the answer as stdout may print
  it (nagent_terminal_text.shown_on). The rules:
  - display (stderr): unless -q; when stderr is a terminal, or with -v. It animates a status
    line only on a terminal without NAGENT_NO_SPINNER, colours only on a terminal when
    NO_COLOR is unset or empty and TERM is not "dumb", and shows the diff of each file change
    only on a terminal;
  - printer (the final answer streamed to stdout): in text mode when streaming is on (--stream,
    or stdout is a terminal unless --no-stream) and nagent_stream.stream_allowed(settings);
  - JSON lines (stdout) in events mode, with reply deltas unless a response hook gates the
    answer; stdout carries nothing else then.
* `outcome_document(data, log)` is the --json object of a run: the outcome plus provider, model
  actions and changed_files. `error_document(error, context)` is the same shape for a run that ended with an
  error outside the loop (usage, config, setup, busy ...): response null, exit_code, error
  {error, value, fix, kind, exit_code}, and provider, model and conversation when known.
"""
from nagent_display import Display
from nagent_events import ActionLog, Events, JsonLines
from nagent_stream import AnswerPrinter, stream_allowed
from nagent_terminal_text import shown_on, spinner_allowed


class Output:
    """The chosen sinks of one run (plain data)."""

    def __init__(self, mode, events, log, display=None, printer=None, terminal=False):
        self.mode, self.events, self.log = mode, events, log
        self.display, self.printer, self.terminal = display, printer, terminal

    def shown(self, text):
        return shown_on(text, self.terminal)

    @property
    def answered(self):
        """True when the final answer was already printed (streamed) to stdout."""
        return bool(self.printer is not None and self.printer.done)


def _isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def choose_output(mode, settings, stdout, stderr, environ, *, quiet=False, verbose=False,
                  stream=None, started=None):
    sinks, display, printer = [], None, None
    on_terminal = _isatty(stderr)
    if not quiet and (on_terminal or verbose):
        color = on_terminal and not environ.get("NO_COLOR") and environ.get("TERM") != "dumb"
        animate = on_terminal and spinner_allowed(environ)
        display = Display(stderr, color=color, animate=animate,
                          pause_in_actions=settings.shell.approval == "confirm",
                          cursor=on_terminal and environ.get("TERM") != "dumb", diffs=on_terminal)
        sinks.append(display)
    wanted, terminal = stream, _isatty(stdout)
    if mode == "text" and (terminal if wanted is None else wanted):
        if stream_allowed(settings):
            def write(text):
                stdout.write(shown_on(text, terminal))
                stdout.flush()
            printer = AnswerPrinter(write, display.note if display else None, display)
            sinks.append(printer)
    if mode == "events":
        sinks.append(JsonLines(stdout, deltas=stream_allowed(settings)))
    log = ActionLog(settings.provider.name, settings.model)
    sinks.append(log)
    return Output(mode, Events(sinks, origin=started), log, display, printer, terminal)


def outcome_document(data, log):
    document = dict(data)
    document.update(log.as_dict())
    return document


def error_document(error, context=None):
    context = context or {}
    return {"response": None, "valid": True, "exit_code": error.exit_code,
            "conversation": context.get("conversation"), "model_calls": 0, "totals": None,
            "conversation_totals": None, "error": error.as_dict(),
            "provider": context.get("provider"), "model": context.get("model"), "actions": [],
            "changed_files": []}
