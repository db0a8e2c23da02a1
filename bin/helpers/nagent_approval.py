"""Asking the user on the terminal whether a shell command may run (`shell.approval: confirm`).

Data contract:
- `shown_lines(command) -> (lines, escaped)`: the command's lines as displayed, with every
  control, format (bidi overrides such as U+202E, zero-width characters) and other
  non-printable character except tab written as an escape that reads one way only: `\\xNN` below
  U+0100, `\\uNNNN` up to U+FFFF, `\\UNNNNNNNN` above; `escaped` counts them.
- `prompt_text(command) -> str`: what the user sees: the line count first, the command indented,
  a note when characters were escaped, and for a command over LONG_LINES lines its first and
  last lines again right above the question, so the two ends are visible next to it.
- `ask_on_tty(command, tty_path="/dev/tty") -> True | False | None`: discards everything typed
  so far on the controlling terminal (tcflush), so typeahead never answers, then writes the
  prompt and reads one line; True only for "y"/"yes". None when there is no terminal. Never
  raises.
"""
import os
import termios

LONG_LINES = 10
QUESTION = "Run it? [y/N] "


def _escape(ch):
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def shown_lines(command):
    escaped = 0
    lines = []
    for line in command.split("\n"):
        out = []
        for ch in line:
            if ch == "\t" or ch.isprintable():
                out.append(ch)
            else:
                out.append(_escape(ch))
                escaped += 1
        lines.append("".join(out))
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
    try:
        fd = os.open(tty_path, os.O_RDWR | os.O_NOCTTY)
    except OSError:
        return None
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
        os.close(fd)
    return answer.decode("utf-8", "replace").strip().lower() in ("y", "yes")


def _discard_typeahead(fd):
    # Only what is typed once the prompt is on its way may answer it: a "y" typed earlier (for
    # something else, or by a program writing to the terminal) must not approve a command.
    try:
        termios.tcflush(fd, termios.TCIFLUSH)
    except (OSError, termios.error):
        pass
