"""Streaming the final answer to stdout while it arrives, printing exactly what the whole
reply prints.

Data contract
-------------
* `stream_allowed(settings)`: streaming answers (and reply deltas) only when no response hook
  gates the final answer (nagent_hooks.response_gated, the one predicate): nothing of a
  <nagent-response> may be shown before the gate passed.
* `AnswerStream` reads one reply incrementally: `feed(delta) -> text` returns the text that is
  now certain to be printed if the reply turns out to be one final <nagent-response> (the
  non-streamed path prints `clean_user_output` of its body plus a final newline). It streams
  only a reply that opens, after whitespace, optional leading thinking and one optional fence
  line, with `<nagent-response>`; it drops the body's leading newline, holds back a tail that a
  later delta could still change (a trailing newline or CR, the start of `</nagent-response>`,
  and a line start that may still become a driver block the parser cuts at), and holds the
  whole body when it starts with a markdown fence (clean_user_output may strip it). A driver
  block in the body (`cut`) stops it. `state` is wait | body | hold | after | no | cut.
* `Printer(write, note)` prints streamed text with retry handling: `restart()` (a retry after
  partial output) makes later text print only where it extends what is already printed; if the
  retried text diverges, a note says the answer restarts and it is printed again from its
  start. `finish(final)` prints whatever of `final` is not printed yet plus the final newline
  (if the printed text is not a prefix of `final`, a note says so and `final` is printed whole);
  `abandon(reason)` ends a streamed reply that was not the final answer with a newline and a note.
* `AnswerPrinter(write, note, display)` is the events sink behind `nagent` on a terminal: a new
  AnswerStream per reply (model_call_start with purpose reply or summary), kept across its
  continuations, restarted from the call's start on a retry; `response` finishes, a `reply`
  that is not final abandons. `done` says it printed the final answer (the caller prints it
  otherwise); it pauses the display's status line while it writes.
"""
import re
from nagent_hooks import response_gated

OPEN, CLOSE = "<nagent-response>", "</nagent-response>"
_WS = re.compile(r"[\s\ufeff]*")
_FENCE = re.compile(r"(`{3,})([A-Za-z0-9_.+#-]*)[ \t\r]*\n")
_CUT = re.compile(r"\n[ \t]*<(?:nagent-[A-Za-z0-9_-]*-result|system)(?=[\s>/])")
_MAYBE_CUT = re.compile(r"\n[ \t]*(?:<[A-Za-z0-9_-]*)?\Z")
_THINKING = ("<think>", "<thinking>")


def stream_allowed(settings):
    return not response_gated(settings)


def _drop_leading_newline(text):
    return text[2:] if text.startswith("\r\n") else text[1:] if text.startswith("\n") else text


def _drop_trailing_newline(text):
    return text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text


def held_from(region):
    """Where the held-back tail of an unclosed body region starts (see the module docstring)."""
    n = len(region)
    hold = n
    for size in range(min(len(CLOSE) - 1, n), 0, -1):
        if CLOSE.startswith(region[n - size:]):
            hold = n - size
            break
    newline = region.rfind("\n", 0, hold)
    if newline >= 0 and _MAYBE_CUT.match(region, newline):
        hold = newline
    if region.endswith("\r\n", 0, hold):
        hold -= 2
    elif region.endswith(("\n", "\r"), 0, hold):
        hold -= 1
    return hold


class AnswerStream:
    """One reply, read incrementally (see the module docstring)."""

    def __init__(self):
        self.state = "wait"
        self.head = ""        # the reply up to the body while state is "wait"
        self.pending = ""     # the body's text not printed yet
        self.at_start = True  # nothing of the body printed yet

    def copy(self):
        other = AnswerStream()
        other.__dict__.update(self.__dict__)
        return other

    def feed(self, delta):
        if self.state == "wait":
            self.head += delta
            self._find_body()
            return self._advance() if self.state == "body" else ""
        if self.state == "body":
            self.pending += delta
            return self._advance()
        return ""

    def _find_body(self):
        text, pos, thought, fenced = self.head, 0, False, False
        while True:
            pos = _WS.match(text, pos).end()
            rest = text[pos:pos + 20]
            if not rest:
                return
            if not thought and not fenced and rest.startswith(_THINKING):
                close = "</" + rest[1:rest.index(">") + 1]
                end = text.find(close, pos)
                if end < 0:
                    return
                pos, thought = end + len(close), True
                continue
            if not fenced and rest.startswith("```"):
                match = _FENCE.match(text, pos)
                if match is None:
                    self.state = "wait" if "\n" not in text[pos:] else "no"
                    return
                pos, fenced = match.end(), True
                continue
            if rest.startswith(OPEN):
                self.state, self.pending = "body", text[pos + len(OPEN):]
                return
            maybe_thinking = not thought and not fenced and any(tag.startswith(rest)
                                                                for tag in _THINKING)
            if not (OPEN.startswith(rest) or maybe_thinking or
                    (not fenced and "```".startswith(rest))):
                self.state = "no"
            return

    def _advance(self):
        pending = self.pending
        close = pending.find(CLOSE)
        region = pending if close < 0 else pending[:close]
        if _CUT.search(region):
            self.state = "cut"
            return ""
        if self.at_start:
            stripped = _drop_leading_newline(region).lstrip()
            if stripped.startswith("```"):
                self.state = "hold"
                return ""
            if close < 0 and (not stripped or stripped == "`" * len(stripped)):
                return ""
        if close >= 0:
            out, self.state, self.pending = _drop_trailing_newline(region), "after", ""
        else:
            hold = held_from(region)
            out, self.pending = region[:hold], region[hold:]
        if self.at_start and out:
            out = _drop_leading_newline(out)
            self.at_start = False
        return out


class Printer:
    """Writes streamed text once, across retries (see the module docstring)."""

    def __init__(self, write, note=None):
        self.raw_write = write
        self.note = note or (lambda text: None)
        self.open_line = False  # the last text written did not end with a newline
        self.wrote = False      # anything written for this reply
        self.printed = []       # what this reply printed, in order
        self.suppress = None    # after a retry: printed text the new attempt has to catch up
        self.replayed = ""      # the part of `suppress` the new attempt already matched
        self.base = 0           # length of the printed text when the current attempt started

    @property
    def text(self):
        return "".join(self.printed)

    def mark(self):
        """The current attempt starts here (a call of the reply, or its continuation)."""
        self.base = len(self.text)

    def restart(self):
        """A retry: the attempt's text so far is superseded by the retried call's."""
        text = self.text
        self.suppress, self.replayed = text[self.base:], ""
        self.printed = [text[:self.base]] if self.base else []
        if not self.suppress:
            self.suppress = None

    def emit(self, out):
        if not out:
            return
        if self.suppress is not None:
            if self.suppress.startswith(out):
                self.suppress, self.replayed = self.suppress[len(out):], self.replayed + out
                self.printed.append(out)
                if not self.suppress:
                    self.suppress = None
                return
            if out.startswith(self.suppress):
                self.printed.append(out[:len(self.suppress)])
                out, self.suppress = out[len(self.suppress):], None
            else:
                self.end_line()
                self.note("the stream was interrupted and the retried answer differs; "
                          "it is printed again from its start")
                out = "".join(self.printed) + out
                self.printed, self.suppress = [], None
        self.printed.append(out)
        self.write(out)

    def write(self, text):
        if text:
            self.raw_write(text)
            self.open_line, self.wrote = not text.endswith("\n"), True

    def end_line(self):
        if self.open_line:
            self.write("\n")

    def finish(self, final):
        """Print what is left of `final`, then the final newline."""
        printed = self.text
        if self.suppress is not None:
            printed += self.suppress  # on screen already
        if final.startswith(printed):
            rest = final[len(printed):]
        else:
            self.end_line()
            if printed:
                self.note("the streamed text above was not the final answer; the answer follows")
            rest = final
        self.write(rest)
        if not final.endswith("\n") and (self.open_line or not self.wrote):
            self.raw_write("\n")
        self.open_line = False
        self.reset()

    def abandon(self, reason):
        if self.text or self.suppress:
            self.end_line()
            self.note(f"the streamed text above was not the final answer: {reason}")
        self.reset()

    def reset(self):
        self.printed, self.suppress, self.replayed, self.base = [], None, "", 0
        self.wrote = False


class AnswerPrinter:
    """The events sink that streams the final answer to stdout (see the module docstring)."""
    wants_deltas = True

    def __init__(self, write, note=None, display=None):
        self.printer = Printer(self._write, note)
        self.raw_write = write
        self.display = display
        self.stream = None
        self.saved = None       # the AnswerStream as the current call started
        self.active = False     # the current model call is (part of) a reply we may print
        self.done = False
        self.paused = False
        if display is not None:
            display.before_line = self.end_line

    def _write(self, text):
        if not self.paused and self.display is not None:
            self.display.pause()
            self.paused = True
        self.raw_write(text)

    def end_line(self):
        """Before a stderr line on the same terminal: end a partly written stdout line."""
        self.printer.end_line()

    def _resume(self):
        if self.paused and self.display is not None:
            self.display.resume()
        self.paused = False

    def handle(self, event):
        kind = event["type"]
        if kind == "model_call_start":
            purpose = event.get("purpose")
            self.active = purpose in ("reply", "summary", "continuation")
            if purpose in ("reply", "summary") or self.stream is None:
                self.stream = AnswerStream()
                self.printer.reset()
            if self.active:
                self.saved = self.stream.copy()
                self.printer.mark()
        elif kind == "response":
            self.printer.finish(event["text"] or "")
            self.done, self.active = True, False
            self._resume()
        elif not self.active:
            return
        elif kind == "reply_delta":
            self.printer.emit(self.stream.feed(event["text"]))
        elif kind == "retry":
            self.stream = self.saved.copy()
            self.printer.restart()
        elif kind == "reply" and not event.get("final"):
            reason = ("the reply also asked for actions" if event.get("valid")
                      else "the reply was not valid")
            self.printer.abandon(reason)
            self.active = False
            self._resume()

    def close(self):
        self.printer.end_line()
        self.printer.reset()
        self._resume()


class TextPrinter:
    """nagent-llm-text's streaming: every delta printed, once across retries."""

    def __init__(self, write, note=None):
        self.printer = Printer(write, note)

    def delta(self, text):
        self.printer.emit(text)

    def retry(self, *_):
        self.printer.restart()

    def finish(self, final):
        self.printer.finish(final)
