"""Line editing of the interactive session, over the standard library's readline (GNU readline).

Why readline and not prompt_toolkit: on the standard machine `import readline` takes 0.6 ms and
`import prompt_toolkit` 80-250 ms, while the session prompt must appear within 3x `python3 -c
pass` (about 25 ms); readline needs nothing from the terminal but its line discipline and
terminfo, so it behaves the same over ssh, inside tmux and screen and with TERM=dumb, where
prompt_toolkit asks the terminal for cursor positions (CPR) and redraws whole screens. GNU
readline 8.1+ has bracketed paste on by default, so a paste arrives whole.

Data contract
-------------
* The history file, `history_path(environ)` = ~/.nagent/history (0600): one entry per line, with
  backslash, newline and CR written as \\\\, \\n and \\r (`encode_entry` / `decode_entry`), so a
  multi-line entry comes back whole. Its last HISTORY_LIMIT entries are loaded; each entry is
  appended as it is entered (sessions running at once share the file); the file is rewritten
  to its last HISTORY_LIMIT entries once it holds twice as many.
* `LineEditor(environ, complete)` sets readline up: Tab completes through `complete(line,
  begidx, text) -> [candidates]` (words end at spaces, tabs and newlines only, so a path stays
  one word); Alt-Enter (ESC CR, ESC LF) inserts a newline; bracketed paste on (shown without
  reverse video when NO_COLOR is set). Methods:
  `read(prompt, more) -> str | None` reads one entry: a line ending in a single backslash
  continues on the next (prompt `more`), joined with a newline; Ctrl-C clears the entry and
  asks again; Ctrl-D at an empty prompt gives None. `remember(text)` adds an entry to the
  history (the caller blanks secrets first); `prefill(text)` puts text in the next read's line;
  `when_shown(callback)` calls `callback` once, as soon as the next prompt is on the screen.
* `path_candidates(text)` -> file and directory names starting with `text` (~ expanded as
  typed, directories with a trailing "/"), sorted.
"""
import os
import readline
import sys

from nagent_fs import atomic_write
from nagent_paths import nagent_home

HISTORY_LIMIT = 1000
KEYS = (r'"\e\r": "\C-v\C-j"', r'"\e\n": "\C-v\C-j"', "set enable-bracketed-paste on",
        "tab: complete")


def history_path(environ=None):
    return os.path.join(nagent_home(environ), "history")


def encode_entry(text):
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


def decode_entry(line):
    out, index = [], 0
    while index < len(line):
        char = line[index]
        if char == "\\" and index + 1 < len(line):
            out.append({"n": "\n", "r": "\r"}.get(line[index + 1], line[index + 1]))
            index += 2
        else:
            out.append(char)
            index += 1
    return "".join(out)


def path_candidates(text):
    import glob   # only a Tab press needs it (it imports re and fnmatch)
    expanded = os.path.expanduser(text)
    found = []
    for path in glob.glob(glob.escape(expanded) + "*"):
        shown = text + path[len(expanded):] if expanded != text and path.startswith(expanded) else path
        found.append(shown + ("/" if os.path.isdir(path) else ""))
    return sorted(found)


def _read_history(path):
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return []
    return [decode_entry(line) for line in data.decode("utf-8", "replace").split("\n") if line]


class LineEditor:
    """readline, set up for the session (see the module docstring)."""

    def __init__(self, environ, complete):
        self.path = history_path(environ)
        self.complete = complete
        self._matches = []
        self._prefill = ""
        entries = _read_history(self.path)
        self._count = len(entries)
        for entry in entries[-HISTORY_LIMIT:]:
            readline.add_history(entry)
        readline.set_auto_history(False)   # whole entries only, added by remember()
        readline.set_completer_delims(" \t\n")
        readline.set_completer(self._complete)
        for binding in KEYS:
            readline.parse_and_bind(binding)
        if environ.get("NO_COLOR"):   # readline shows a paste in reverse video otherwise
            readline.parse_and_bind("set enable-active-region off")
        readline.set_startup_hook(self._startup)
        self._shown = None

    def when_shown(self, callback):
        """Call `callback` once, right after the next prompt is on the screen."""
        self._shown = callback
        readline.set_pre_input_hook(self._pre_input)

    def _pre_input(self):
        callback, self._shown = self._shown, None
        readline.set_pre_input_hook(None)
        if callback is not None:
            callback()

    def _startup(self):
        if self._prefill:
            readline.insert_text(self._prefill)
            self._prefill = ""

    def _complete(self, text, state):
        if state == 0:
            try:
                self._matches = self.complete(readline.get_line_buffer(), readline.get_begidx(),
                                              text)
            except Exception:   # a completer bug must not end the session
                self._matches = []
        return self._matches[state] if state < len(self._matches) else None

    def prefill(self, text):
        self._prefill = text

    def read(self, prompt, more):
        lines = []
        while True:
            try:
                line = input(more if lines else prompt)
            except KeyboardInterrupt:   # clears the entry: a fresh prompt on a new line
                sys.stdout.write("\n")
                lines = []
                continue
            except EOFError:
                if lines:               # Ctrl-D in a continuation drops the entry
                    sys.stdout.write("\n")
                    lines = []
                    continue
                return None
            if line.endswith("\\") and not line.endswith("\\\\"):
                lines.append(line[:-1])
                continue
            lines.append(line)
            return "\n".join(lines)

    def remember(self, text):
        length = readline.get_current_history_length()
        if length and readline.get_history_item(length) == text:
            return
        readline.add_history(text)
        try:
            folder = os.path.dirname(self.path)
            os.makedirs(folder, mode=0o700, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, (encode_entry(text) + "\n").encode("utf-8", "surrogateescape"))
            finally:
                os.close(fd)
            self._count += 1
            if self._count > 2 * HISTORY_LIMIT:
                self._trim()
        except OSError:
            pass   # history is a convenience: the conversation file keeps every prompt

    def _trim(self):
        entries = _read_history(self.path)[-HISTORY_LIMIT:]
        data = "".join(encode_entry(entry) + "\n" for entry in entries)
        atomic_write(self.path, data.encode("utf-8", "surrogateescape"), 0o600, sync=False)
        self._count = len(entries)
