"""Text typed while a run goes, in the interactive session: each line becomes a message for the
run's next turn boundary, exactly as `nagent --send` makes one (nagent_inbox.send).

Data contract
-------------
* `LineBuffer()` decodes keys, pure: `feed(data: bytes) -> [str]` returns the lines Enter
  completed (stripped; blank ones dropped), and `draft` is the text typed since. Text is added as
  typed; Backspace (DEL, ^H) removes a character, ^U the whole draft, ^W the word before the
  cursor; a bracketed paste (ESC [200~ ... ESC [201~) is added whole, its CR and CRLF as
  newlines, so a multi-line paste is one message; other escape sequences (arrows, function keys)
  and control characters are dropped. Bytes that are not UTF-8 become U+FFFD.
* `Typeahead(fd, path, display, environ, stderr, control=None)` is a context manager around one
  run of the session (nagent_commands.run_session's `during`): on entry the terminal `fd` goes to
  character mode without echo (signals stay on: Ctrl-C still interrupts the run) with bracketed
  paste on (written to the terminal stream `control`; None: left as it is), and a thread reads
  it; each completed line goes to conversation `path`'s inbox and the live
  view says `✉ message queued` (`display.message`; without a display, one line on `stderr`); a
  refused message (too large, not text) is one `✗` line. The draft is shown on the status line
  (`display.set_draft`). The thread reads waiting keys only while it holds the terminal
  (nagent_terminal_lock.terminal_held), so an approval question asked meanwhile, by the run or
  by one of its nested nagents, gets its own answer. On exit the thread stops and the
  terminal mode is restored; `draft` is what was typed and not sent (the session puts it back
  into the next prompt). Nothing is sent when nothing was typed.
"""
import codecs
import os
import select
import termios
import threading

import nagent_inbox
from nagent_action_view import one_line
from nagent_errors import NagentError
from nagent_terminal_lock import terminal_held

PASTE_START, PASTE_END = "\x1b[200~", "\x1b[201~"
ERASE = ("\x7f", "\x08")


class LineBuffer:
    """Keys typed during a run, decoded (see the module docstring)."""

    def __init__(self):
        self.draft = ""
        self._pending = ""     # an escape sequence or a paste not complete yet
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, data):
        text = self._pending + self._decoder.decode(data)
        self._pending = ""
        done = []
        index = 0
        while index < len(text):
            char = text[index]
            if char == "\x1b":
                end = self._escape(text, index)
                if end is None:      # incomplete: wait for the rest
                    self._pending = text[index:]
                    break
                index = end
                continue
            index += 1
            if char in "\r\n":
                line = self.draft.strip()
                self.draft = ""
                if line:
                    done.append(line)
            elif char in ERASE:
                self.draft = self.draft[:-1]
            elif char == "\x15":
                self.draft = ""
            elif char == "\x17":
                self.draft = self.draft.rstrip()
                self.draft = self.draft[:max(self.draft.rfind(" "), self.draft.rfind("\n")) + 1]
            elif char == "\t" or char.isprintable():
                self.draft += char
        return done

    def _escape(self, text, index):
        """Where the escape sequence at `index` ends (a paste is added to the draft); None when
        it is not complete yet."""
        if text.startswith(PASTE_START, index):
            end = text.find(PASTE_END, index)
            if end < 0:
                return None
            pasted = text[index + len(PASTE_START):end]
            self.draft += pasted.replace("\r\n", "\n").replace("\r", "\n")
            return end + len(PASTE_END)
        if index + 1 >= len(text):
            return None
        if text[index + 1] not in "[O":
            return index + 2                    # Alt+key: dropped
        end = index + 2
        while end < len(text) and not ("@" <= text[end] <= "~"):
            end += 1
        if end >= len(text):
            return None
        return end + 1                          # CSI / SS3: arrows, function keys: dropped


def _character_mode(fd):
    """Character mode without echo, signals on; the old mode, or None (not a terminal)."""
    try:
        saved = termios.tcgetattr(fd)
    except (OSError, termios.error):
        return None
    raw = list(saved)
    raw[3] = saved[3] & ~(termios.ICANON | termios.ECHO)
    raw[6] = list(saved[6])
    raw[6][termios.VMIN], raw[6][termios.VTIME] = 1, 0
    termios.tcsetattr(fd, termios.TCSANOW, raw)
    return saved


class Typeahead:
    """See the module docstring."""

    def __init__(self, fd, path, display, environ, stderr, control=None):
        self.fd, self.path, self.display = fd, path, display
        self.environ, self.stderr, self.control = environ, stderr, control
        self.buffer = LineBuffer()
        self.saved = None
        self._stop = threading.Event()
        self._wake = None
        self._thread = None

    @property
    def draft(self):
        return self.buffer.draft

    def __enter__(self):
        self.saved = _character_mode(self.fd)
        if self.saved is None:
            return self
        self._terminal_write("\x1b[?2004h")
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        if self._thread is not None:
            self._stop.set()
            os.write(self._wake[1], b"x")
            self._thread.join()
            self._thread = None
            for end in self._wake:
                os.close(end)
        if self.saved is not None:
            try:
                termios.tcsetattr(self.fd, termios.TCSANOW, self.saved)
            except (OSError, termios.error):
                pass
            self._terminal_write("\x1b[?2004l")
            self.saved = None
        return False

    def _terminal_write(self, text):
        if self.control is not None:
            self.control.write(text)
            self.control.flush()

    def _read(self):
        while not self._stop.is_set():
            if self.fd not in select.select([self.fd, self._wake[0]], [], [])[0]:   # or woken
                continue
            # Keys are waiting: read them only while no question holds the terminal (it may
            # have taken them as its answer meanwhile, or discarded them before asking).
            with terminal_held(self.environ):
                if not select.select([self.fd], [], [], 0)[0]:
                    continue
                try:
                    data = os.read(self.fd, 4096)
                except OSError:
                    return
            if not data:
                return
            self._typed(data)

    def _typed(self, data):
        before = self.buffer.draft
        for line in self.buffer.feed(data):
            self._queue(line)
        if self.display is not None and self.buffer.draft != before:
            self.display.set_draft(self.buffer.draft)

    def _queue(self, text):
        try:
            nagent_inbox.send(self.path, text, self.environ)
        except NagentError as error:
            self._show(f"✗ message not queued: {error.line()[len('Error: '):]}")
            return
        if self.display is not None:
            self.display.message("queued", text)
        else:
            self._show(f"✉ message queued: {one_line(text, 60)}")

    def _show(self, line):
        if self.display is not None:
            self.display.line(line)
        else:
            self.stderr.write(line + "\n")
            self.stderr.flush()
