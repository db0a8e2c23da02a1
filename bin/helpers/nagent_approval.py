"""Asking the user on the terminal whether an action may run (`shell.approval: confirm`, a
confirm rule, the destructive-command guard, a command nagent cannot read with confidence).

Data contract:
- `shown_lines(command) -> (lines, escaped)`: the command's lines as displayed, each through
  nagent_terminal_text.escape keeping tabs (every control, format such as the bidi override
  U+202E, zero-width and other non-printable character as `\\xNN` / `\\uNNNN` / `\\UNNNNNNNN`);
  `escaped` counts the characters escaped.
- `prompt_text(command, asked_by="", forms=(), what="run a shell command") -> str`: what the
  user sees: the line count first, the whole command indented, a note when characters were
  escaped, what asked (`asked by: rule NAME (FILE)`, the guard's finding ...), what each answer
  does, and for a command over LONG_LINES lines its first and last lines again right above
  the question, so the two ends are visible next to it. The question offers y/N/e, and `a`
  when `forms` (the rule patterns "always" would allow) is not empty.
- `ask_on_tty(command, tty_path="/dev/tty", asked_by="", forms=(), save_to="", what=...)` ->
  `Answer(run, allow, save, reason)` or None when there is no terminal. Before every question
  (the first, the second confirmation, the reason) it discards everything typed so far on the
  controlling terminal (tcflush), so typeahead never answers. y/yes: run. a/always: run, and
  allow `forms` for the rest of the session (`allow`); then, when `save_to` is given, a second
  question saves them to that config file too (`save`). e/explain: do not run, and read one
  line: the reason the model gets (`reason`). Anything else: do not run. Never raises.
  Every question is read in line mode with echo, whatever mode the terminal was in (restored
  after), and the whole exchange holds the terminal (nagent_terminal_lock.terminal_held, as one
  that shows something), so no other reader (a session's reader of text typed during a run,
  another nagent's question on the same terminal) takes its answers and no live view (a
  parent's table of sub-agents) draws over it. The question starts at the line's start, over
  a live view's status line (erased first, unless TERM is dumb).
- `tell_on_tty(text)`: a line for the user on the terminal (e.g. that a rule was saved).
"""
import os
import termios
from collections import namedtuple

from nagent_terminal_lock import terminal_held
from nagent_terminal_text import counted, escape, unsafe

LONG_LINES = 10
Answer = namedtuple("Answer", "run allow save reason")
NO = Answer(False, (), False, "")


def shown_lines(command):
    lines = [escape(line, keep="\t") for line in command.split("\n")]
    escaped = sum(1 for ch in command if ch not in "\t\n" and unsafe(ch))
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()   # a trailing newline is not a line of its own
    return lines, escaped


def question(forms):
    return "[y/N/a/e] " if forms else "[y/N/e] "


def prompt_text(command, asked_by="", forms=(), what="run a shell command"):
    lines, escaped = shown_lines(command)
    count = counted(len(lines), "line")
    text = f"nagent wants to {what} ({count}):\n"
    text += "".join(f"    {line}\n" for line in lines)
    if escaped:
        text += (f"({counted(escaped, 'control or invisible character')} shown "
                 "as \\x.., \\u.. or \\U.. escapes)\n")
    for n, reason in enumerate(asked_by.split("\n") if asked_by else ()):
        text += f"{'asked by: ' if n == 0 else '     and: '}{escape(reason)}\n"
    always = ", ".join(f"`{escape(form)}`" for form in forms)
    text += "  y yes · n no" + (f" · a always allow {always} this session" if forms else "") + \
        " · e no, and tell the model why\n"
    if len(lines) > LONG_LINES:
        text += f"  first line: {lines[0]}\n  last line:  {lines[-1]}\n"
        return text + f"Run all {len(lines)} lines? " + question(forms)
    return text + ("Run it? " if what.startswith("run") else "Allow it? ") + question(forms)


def ask_on_tty(command, tty_path="/dev/tty", asked_by="", forms=(), save_to="",
               what="run a shell command"):
    # showing: a live view sharing the terminal (a parent's table of sub-agents) then draws
    # below the question, never over it (nagent_terminal_lock.terminal_free).
    with terminal_held(showing=True):
        return _exchange(command, tty_path, asked_by, forms, save_to, what)


def _exchange(command, tty_path, asked_by, forms, save_to, what):
    try:
        fd = os.open(tty_path, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return None
    saved = _line_mode(fd)
    try:
        # A live view's status line may be on the cursor's line: the question starts afresh.
        fresh = "" if os.environ.get("TERM", "dumb") == "dumb" else "\r\x1b[2K"
        reply = _ask(fd, fresh + prompt_text(command, asked_by, forms, what))
        if reply is None:
            return None
        if reply in ("y", "yes"):
            return Answer(True, (), False, "")
        if reply in ("a", "always") and forms:
            save = False
            if save_to:
                shown = ", ".join(f"`{escape(form)}`" for form in forms)
                save = _ask(fd, f"Also save {shown} to {escape(save_to)} for every session? "
                                "[y/N] ") in ("y", "yes")
            return Answer(True, tuple(forms), save, "")
        if reply in ("e", "explain"):
            reason = _ask(fd, "Why not? (the model reads this): ", lower=False)
            return Answer(False, (), False, reason or "")
        return NO
    finally:
        if saved is not None:
            _set_mode(fd, saved)
        os.close(fd)


def tell_on_tty(text, tty_path="/dev/tty"):
    """One line for the user on the terminal (what an answer did); nothing without one."""
    try:
        fd = os.open(tty_path, os.O_WRONLY | os.O_NOCTTY)
    except OSError:
        return
    try:
        os.write(fd, escape(text, keep="\n").encode("utf-8", "replace"))
    except OSError:
        pass
    finally:
        os.close(fd)


def _ask(fd, text, lower=True):
    """Discard typeahead, show `text`, read one line; None when the terminal fails."""
    try:
        _discard_typeahead(fd)
        os.write(fd, text.encode("utf-8", "replace"))
        answer = b""
        while not answer.endswith(b"\n"):
            chunk = os.read(fd, 256)
            if not chunk:
                break
            answer += chunk
    except OSError:
        return None
    line = answer.decode("utf-8", "replace").strip()
    return line.lower() if lower else line


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
