"""Asking the user on the terminal whether a shell command may run (`shell.approval: confirm`).

Data contract:
- `shown_lines(command) -> (lines, escaped)`: the command's lines as displayed, each through
  nagent_terminal_text.escape keeping tabs (every control, format such as the bidi override
  U+202E, zero-width and other non-printable character as `\\xNN` / `\\uNNNN` / `\\UNNNNNNNN`);
  `escaped` counts the characters escaped.
- `prompt_text(command) -> str`: what the user sees: the line count first, the command indented,
  a note when characters were escaped, and for a command over LONG_LINES lines its first and
  last lines again right above the question, so the two ends are visible next to it.
- `ask_on_tty(command, tty_path="/dev/tty") -> True | False | None`: discards everything typed
  so far on the controlling terminal (tcflush), so typeahead never answers, then writes the
  prompt and reads one line, in line mode with echo whatever mode the terminal was in (restored
  after); True only for "y"/"yes". None when there is no terminal. Never raises.
  The question holds the terminal (nagent_terminal_lock.terminal_held) from start to answer, so
  no other reader (a session's reader of text typed during a run, another nagent's question on
  the same terminal) takes its answer.
"""
import os
import termios

from nagent_terminal_lock import terminal_held
from nagent_terminal_text import escape, unsafe

LONG_LINES = 10
QUESTION = "Run it? [y/N] "


def shown_lines(command):
    lines = [escape(line, keep="\t") for line in command.split("\n")]
    escaped = sum(1 for ch in command if ch not in "\t\n" and unsafe(ch))
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()   # a trailing newline is not a line of its own
    return lines, escaped


def prompt_text(command):
    lines, escaped = shown_lines(command)
    count = f"{len(lines)} line{'s' if len(lines) != 1 else ''}"
    text = f"nagent wants to run a shell command ({count}):\n"
    text += "".join(f"    {line}\n" for line in lines)
    if escaped:
        text += (f"({escaped} control or invisible character{'s' if escaped != 1 else ''} shown "
                 "as \\x.., \\u.. or \\U.. escapes)\n")
    if len(lines) > LONG_LINES:
        text += f"  first line: {lines[0]}\n  last line:  {lines[-1]}\n"
        return text + f"Run all {len(lines)} lines? [y/N] "
    return text + QUESTION


def ask_on_tty(command, tty_path="/dev/tty"):
    with terminal_held():
        return _ask(command, tty_path)


def _ask(command, tty_path):
    try:
        fd = os.open(tty_path, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return None
    saved = _line_mode(fd)
    try:
        _discard_typeahead(fd)
        os.write(fd, prompt_text(command).encode("utf-8", "replace"))
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = os.read(fd, 256)
            if not chunk:
                break
            answer += chunk
    except OSError:
        return None
    finally:
        if saved is not None:
            _set_mode(fd, saved)
        os.close(fd)
    return answer.decode("utf-8", "replace").strip().lower() in ("y", "yes")


def _set_mode(fd, attrs):
    try:
        termios.tcsetattr(fd, termios.TCSANOW, attrs)
    except (OSError, termios.error):
        pass


def _line_mode(fd):
    """Line mode with echo for the answer (a session may have the terminal in character mode);
    the mode it was in, to restore, or None when it already was."""
    try:
        saved = termios.tcgetattr(fd)
    except (OSError, termios.error):
        return None
    wanted = termios.ICANON | termios.ECHO
    if saved[3] & wanted == wanted:
        return None
    line = list(saved)
    line[3] = saved[3] | wanted
    _set_mode(fd, line)
    return saved


def _discard_typeahead(fd):
    # Only what is typed once the prompt is on its way may answer it: a "y" typed earlier (for
    # something else, or by a program writing to the terminal) must not approve a command.
    try:
        termios.tcflush(fd, termios.TCIFLUSH)
    except (OSError, termios.error):
        pass
