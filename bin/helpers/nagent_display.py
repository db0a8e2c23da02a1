"""The live view of a run on stderr: one line per action start and end, retries, notes, a
status line saying what is happening, and a closing summary line that stays.

Data contract: `Display(stream, color, animate, pause_in_actions=False)` is an events sink
(nagent_events). Lines (every model-controlled string already made safe by
nagent_action_view.one_line, and cut to the terminal width):
  ▸ shell  pytest -q tests/test_split.py        action_start
    ✓ exit 0 · 1.2 s · 34 lines                 action_end (✗ on failure or refusal)
    ✎ src/foo.py +3 −1                          file_change (then, with `diffs`, its diff)
  ↻ retrying in 4 s (HTTP 429, attempt 2 of 4)  retry
  ! <note>                                      format corrections, notes, not-final answers
  ✉ message queued: <text>                      `message("queued", text)`: typed during a run
  ✉ message delivered: <text>                   prompt (source "inbox"): taken at a turn boundary
  ● 3 model calls · 12k in (80% cached) · 1.2k out · $0.0123 · 2 files changed, +4 −1 · 14.2 s
                                                run_end (calls and tokens of nested nagents
                                                are in the run's totals)
A note's later lines (a response hook's output) follow it indented, at most NOTE_LINES.
With `diffs` (stderr is a terminal) each file change is followed by its unified diff, at most
DIFF_HEIGHT lines (then "… N more lines"), coloured by line (+ green, − red, @@ cyan) with
`color`; the file's text is made safe (nagent_terminal_text.escape).
With `animate` (stderr is a terminal and NAGENT_NO_SPINNER is unset) a status line below the
log is redrawn every 0.1 s from a thread: "model call N · provider/model · 3.4 s · 12k in ·
1.2k out" while waiting for the model, "shell · 2.1 s" while an action runs (not while a shell
command may ask for approval on the terminal: `pause_in_actions`); without it, each model call
ends with one line instead. `pause()`/`resume()` clear the status line while the answer is
written to stdout on the same terminal, and `before_line` (set by the answer printer) ends an
open stdout line before a stderr line is written. `set_draft(text)` shows text being typed during
the run (the interactive session) at the end of the status line, its last DRAFT_WIDTH columns.
Colour (ANSI SGR) only with `color`; without it no
escape sequence is written at all (the status line is cleared with spaces), except for the table
below.
While a batch of sub-agents runs (`agents` events), an animated display on a terminal that can
move its cursor (`cursor`: not TERM=dumb) draws a small table above the status line, one line per
running child, redrawn with the status line (cursor up, erase line):
    #2  agent-3f2a1c0b  shell: pytest -q tests/test_a.py                  12.3 s
    #3  agent-9c1d77e2  model call 2                                       8.1 s
  ⠋ agents · 2 of 3 running · 14.0 s
(the action index, the child's conversation up to its first 8 hex digits, what its run file says
it does now, made safe by one_line, and its elapsed time); at most TABLE_ROWS lines, then "… and
N more". Without the cursor the status line alone says how many run.
An animated display shares the terminal with approval questions (a sub-agent's, a nested edit
session's, the run's own): it writes only while it holds the terminal
(nagent_terminal_lock.terminal_free). While a question is open the redraw thread draws nothing
and a line waits for the answer; after a question it forgets what it had drawn (the question
now lies below it) and draws below the question, so the question is never drawn over.
"""
import contextlib
import os
import threading
import time

from nagent_action_view import human_count, one_line
from nagent_terminal_lock import terminal_free
from nagent_terminal_text import counted, cut, escape, status_erase

MINUS = "\u2212"
DIFF_HEIGHT = 24
NOTE_LINES = 5

FRAMES = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
TABLE_ROWS = 8
TABLE_ACTION = 60          # columns of a child's current action in the table
DRAFT_WIDTH = 40           # columns of typed text shown on the status line
MESSAGE_WIDTH = 60         # columns of a message's text on its ✉ line
COLORS = {"start": "36", "ok": "32", "fail": "31", "warn": "33", "dim": "2", "bold": "1",
          "hunk": "36"}


def terminal_width(stream, default=100):
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        return default
    return max(20, columns) if columns > 0 else default  # a new pty may say 0


def files_text(files, added, removed):
    """"2 files changed, +4 −1" (empty when nothing changed)."""
    if not files:
        return ""
    return f"{counted(files, 'file')} changed, +{added} {MINUS}{removed}"


def summary_line(totals, seconds, files="", budget=None):
    """The closing line: model calls (nested nagents' included), input with cached share, output,
    cost, the files changed, wall time; with a budget, each capped figure beside its cap."""
    budget = budget or {}
    calls = int(totals.get("model_calls") or 0)
    inputs = int(totals.get("input_tokens") or 0)
    cached = int(totals.get("cache_read_tokens") or 0)
    share = f" ({cached / inputs:.0%} cached)" if inputs else ""
    cost = totals.get("cost_usd")
    money = "cost unknown" if cost is None else f"${cost:.4f}"
    if budget.get("max_cost") is not None:
        money += f" of ${budget['max_cost']:g}"
    estimated = " (estimated)" if totals.get("estimated") else ""
    tokens = ""
    if budget.get("max_tokens") is not None:
        tokens = f" · {human_count(int(budget.get('tokens') or 0))} of " \
                 f"{human_count(int(budget['max_tokens']))} tokens"
    wall = f"{seconds:.1f} s" + (f" of {budget['max_time']:g} s" if budget.get("max_time")
                                 is not None else "")
    return (f"{counted(calls, 'model call')} · {human_count(inputs)} in{share} · "
            f"{human_count(int(totals.get('output_tokens') or 0))} out{estimated} · {money}"
            f"{tokens} · " + (f"{files} · " if files else "") + wall)


def retry_line(event):
    delay = event["delay"]
    wait = f"{delay:.0f} s" if delay >= 1 else f"{delay:.1f} s"
    return f"retrying in {wait} ({event['reason']}, attempt {event['attempt']} of {event['max_attempts']})"


class Display:
    """The stderr view of a run (see the module docstring)."""
    wants_deltas = False

    def __init__(self, stream, color=False, animate=False, pause_in_actions=False,
                 clock=time.monotonic, cursor=False, diffs=False):
        self.stream, self.color, self.animate, self.cursor = stream, color, animate, cursor
        self.agents = []           # [(index, conversation, action, started)] of running children
        self.table_drawn = 0       # table lines on screen above the status line
        self.pause_in_actions = pause_in_actions
        self.clock = clock
        self.lock = threading.RLock()  # before_line may write through pause()
        self.status = None         # (label, started) of what is happening now
        self.drawn = 0             # columns of the status line on screen
        self.paused = False
        self.frame = 0
        self.model = ""
        self.totals = {"input_tokens": 0, "output_tokens": 0}
        self.open_actions = 0      # actions started and not yet ended
        self.diffs = diffs         # show each file change's diff (stderr is a terminal)
        self.changed = {}          # path -> (added, removed) of the files this run changed
        self.started = clock()
        self.before_line = None    # called before a line is written (ends an open stdout line)
        self.draft = ""            # text typed during the run, not sent yet
        self._stop = threading.Event()
        self._thread = None
        self.holding = 0           # nested writes holding the terminal (terminal_free)
        self.shown = None          # questions shown on the terminal when it last drew

    # -- drawing -----------------------------------------------------------------------
    @contextlib.contextmanager
    def _writing(self, wait=True):
        """The display's lock and, when animated, the terminal's: yields False (draw nothing)
        when a question holds the terminal and `wait` is False."""
        with self.lock:
            if not self.animate or self.holding:
                self.holding += 1
                try:
                    yield True
                finally:
                    self.holding -= 1
                return
            with terminal_free(wait=wait) as shown:
                if shown is None:
                    yield False
                    return
                if self.shown is not None and shown != self.shown:
                    self.drawn = self.table_drawn = 0   # a question lies below: keep it
                self.shown = shown
                self.holding += 1
                try:
                    yield True
                finally:
                    self.holding -= 1

    def _paint(self, role, text):
        return f"\x1b[{COLORS[role]}m{text}\x1b[0m" if self.color else text

    def _clear(self):
        if self.drawn:
            self.stream.write(status_erase(self.drawn, terminal_width(self.stream)))
            self.drawn = 0
        if self.table_drawn:
            self.stream.write("\x1b[1A\x1b[2K" * self.table_drawn)
            self.table_drawn = 0

    def _table_lines(self):
        width = terminal_width(self.stream) - 1
        now = self.clock()
        lines = []
        for index, conversation, action, started in self.agents[:TABLE_ROWS]:
            head = f"  #{index:<3} {conversation[:14]:<14}  "
            tail = f"  {now - started:6.1f} s"
            room = max(8, min(TABLE_ACTION, width - len(head) - len(tail)))
            text = one_line(action or "starting", room)
            lines.append(cut(head + text + " " * max(0, room - len(text)) + tail, width))
        if len(self.agents) > TABLE_ROWS:
            lines.append(f"  … and {len(self.agents) - TABLE_ROWS} more")
        return lines

    def _status_text(self):
        label, since = self.status
        text = f"{FRAMES[self.frame % len(FRAMES)]} {label} · {self.clock() - since:.1f} s"
        if label.startswith("model call") and self.totals["input_tokens"]:
            text += (f" · {human_count(self.totals['input_tokens'])} in · "
                     f"{human_count(self.totals['output_tokens'])} out")
        width = terminal_width(self.stream) - 1
        if self.draft:
            typed = one_line(self.draft[-DRAFT_WIDTH:], 4 * DRAFT_WIDTH)[-DRAFT_WIDTH:]
            return cut(text, max(0, width - len(typed) - 5)) + " │ ⌨ " + typed
        return cut(text, width)

    def _draw(self):
        if not self.animate or self.paused or self.status is None:
            return
        if self.agents and self.cursor and not self.drawn and not self.table_drawn:
            lines = self._table_lines()
            self.stream.write("".join(line + "\n" for line in lines))
            self.table_drawn = len(lines)
        text = self._status_text()
        self.stream.write("\r" + text + " " * max(0, self.drawn - len(text)))
        self.drawn = len(text)
        self.stream.flush()

    def _loop(self):
        while not self._stop.wait(0.1):
            with self._writing(wait=False) as free:
                if not free:
                    continue
                self.frame += 1
                if self.table_drawn:   # the elapsed times move: redraw the table too
                    self._clear()
                self._draw()

    def line(self, text, role=None, indent="", span=None):
        """One permanent line above the status line; `role` colours `span` characters after
        the indent (all of them by default)."""
        text = cut(indent + text, terminal_width(self.stream) - 1)
        with self._writing():
            if self.before_line is not None:
                self.before_line()
            self._clear()
            if role and self.color:
                head = len(indent)
                end = len(text) if span is None else head + span
                text = text[:head] + self._paint(role, text[head:end]) + text[end:]
            self.stream.write(text + "\n")
            self._draw()
            self.stream.flush()

    def note(self, text):
        first, *rest = text.split("\n")
        self.line("! " + one_line(first, 400), "warn")
        for line in [line for line in rest if line.strip()][:NOTE_LINES]:
            self.line(one_line(line, 400), indent="    ")

    def pause(self):
        with self._writing():
            self.paused = True
            self._clear()
            self.stream.flush()

    def resume(self):
        with self._writing():
            self.paused = False
            self._draw()

    def message(self, state, text):
        """A message for the run's next turn: "queued" (typed) or "delivered" (taken)."""
        self.line(f"✉ message {state}: {one_line(text, MESSAGE_WIDTH)}", "dim")

    def set_draft(self, text):
        with self._writing():
            self.draft = text
            if self.drawn:
                self._clear()
                self._draw()

    def _set_status(self, label):
        with self._writing():
            self.status = (label, self.clock()) if label else None
            if label is None:
                self._clear()
                self.stream.flush()
            else:
                self._draw()
        if label and self.animate and self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    # -- events --------------------------------------------------------------------------
    def handle(self, event):
        handler = getattr(self, "on_" + event["type"], None)
        if handler:
            handler(event)

    def on_run_start(self, event):
        self.model = f"{event.get('provider')}/{event.get('model')}"

    def on_model_call_start(self, event):
        what = {"checkpoint": "checkpoint call", "summary": "summary call"}.get(event.get("purpose"),
                                                                                 "model call")
        self._set_status(f"{what} {event['call']} · {self.model}")

    def on_model_call_end(self, event):
        usage = event.get("usage") or {}
        for key in self.totals:
            self.totals[key] += int(usage.get(key) or 0)
        if not self.animate:
            self.line(f"· model call {event['call']} · {human_count(int(usage.get('input_tokens') or 0))} "
                      f"in · {human_count(int(usage.get('output_tokens') or 0))} out · "
                      f"{event.get('elapsed', 0):.1f} s · {event.get('finish')}", "dim")
        self._set_status(None)

    def on_prompt(self, event):
        if event.get("source") == "inbox":
            self.message("delivered", event.get("text") or "")

    def on_retry(self, event):
        self.line("↻ " + retry_line(event), "warn")

    def on_reply(self, event):
        if not event.get("valid"):
            error = (event.get("error") or "invalid").rstrip(".")
            # The last one (exit 8 follows, or a final summary's) is not asked again.
            again = "; asking again" if event.get("asking_again") else ""
            self.note(f"the reply was not in the protocol: {error}{again}")

    def on_note(self, event):
        self.note(event["text"])

    def on_action_start(self, event):
        kind = event["kind"]
        self.open_actions += 1
        self.line(f"▸ {kind}  {event['summary']}", "start", span=len(kind) + 2)
        if not (self.pause_in_actions and kind == "shell"):
            self._set_status(kind)

    def on_action_end(self, event):
        self.open_actions = max(0, self.open_actions - 1)
        mark, role = ("✓", "ok") if event["ok"] else ("✗", "fail")
        if not self.agents:   # in a batch the status line stays while its children run
            self._set_status(None)
        self.line(f"{mark} {event['outcome']}", role, indent="  ")

    def on_file_change(self, event):
        added, removed = int(event.get("added") or 0), int(event.get("removed") or 0)
        before = self.changed.get(event["path"], (0, 0))
        self.changed[event["path"]] = (before[0] + added, before[1] + removed)
        self.line(f"✎ {one_line(str(event['path']), 200)} +{added} {MINUS}{removed}", "bold",
                  indent="  ")
        if not self.diffs:
            return
        lines = [line for line in str(event.get("diff") or "").split("\n")
                 if line and not line.startswith(("--- ", "+++ "))]
        for line in lines[:DIFF_HEIGHT]:
            role = {"+": "ok", "-": "fail", "@": "hunk", "[": "dim"}.get(line[:1])
            self.line(escape(line.replace("\t", "    ")), role, indent="    ")
        if len(lines) > DIFF_HEIGHT:
            self.line(f"… {len(lines) - DIFF_HEIGHT} more lines", "dim", indent="    ")

    def on_agents(self, event):
        rows = event.get("running") or []
        now = self.clock()
        before = {row[0]: row[3] for row in self.agents}
        with self._writing():
            self._clear()
            self.agents = [(row.get("index"), str(row.get("conversation") or "?"), row.get("action"),
                            before.get(row.get("index"), now - float(row.get("elapsed") or 0)))
                           for row in rows]
            if rows:
                since = min(row[3] for row in self.agents)   # the oldest running child
                self.status = (f"agents · {len(rows)} of {event.get('total', len(rows))} running",
                               since)
            else:
                self.status = None
            self._draw()
            self.stream.flush()
        if rows and self.animate and self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True)
            self._thread.start()

    def on_error(self, event):
        """A run that stops inside an action (Ctrl-C, a signal) ends that action's line first,
        and leaves a clean line for the error that follows on stderr."""
        with self.lock:
            self.agents = []
            self._set_status(None)
            for _ in range(self.open_actions):
                self.line(f"✗ {one_line(str(event.get('error') or 'stopped'), 200)}", "fail",
                          indent="  ")
            self.open_actions = 0

    def on_run_end(self, event):
        self._set_status(None)
        totals = event.get("totals") or {}
        if totals.get("model_calls") or event.get("calls") or self.changed:
            files = files_text(len(self.changed), sum(a for a, _ in self.changed.values()),
                               sum(r for _, r in self.changed.values()))
            self.line("● " + summary_line(totals, self.clock() - self.started, files,
                                          event.get("budget")), "bold")

    def close(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
        with self._writing():
            self._clear()
            self.stream.flush()
