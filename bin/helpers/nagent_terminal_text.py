"""Text that others control (a model, a file, a server), made safe to print on a terminal.

One rule, one place: every line nagent prints that carries such text goes through here.

Data contract (pure functions over str):
- A character is unsafe when `str.isprintable()` says no: C0 controls (ESC, CR, BEL ...), DEL,
  C1 controls (U+0080-U+009F: U+009B is a one-byte CSI), format characters (category Cf: bidi
  overrides and isolates U+202A-U+202E, U+2066-U+2069, U+200E/U+200F, zero-width characters,
  tag characters), line and paragraph separators, spaces other than " ", surrogates, private
  use and unassigned code points.
- `unsafe(ch)` -> True for such a character.
- `escape_char(ch)` -> its visible escape, readable one way only: `\\xNN` below U+0100, `\\uNNNN`
  up to U+FFFF, `\\UNNNNNNNN` above.
- `escape(text, keep="")` -> `text` with every unsafe character escaped, except those in `keep`
  (a site that legitimately keeps line structure passes "\\n\\t", one that keeps tabs "\\t").
  Safe text comes back unchanged.
- `one_line(text, limit=None, newline=" ")` -> `text` on one safe line: CRLF is a newline,
  the ends are stripped, each newline becomes `newline` (the live view passes " ⏎ "), tabs and
  other spaces (category Zs) become " ", runs of spaces collapse to one, every other unsafe
  character is escaped, and the result is cut to `limit` columns (None: no cap).
- `for_terminal(text)` -> `escape(text, keep="\n\r\t")`: a model's answer or a tool's output
  printed whole on a terminal keeps its lines and tabs, but cannot drive the terminal (OSC 52
  clipboard writes, screen clears, bidi reversal). `shown_on(text, terminal)` is that on a
  terminal and `text` as it is otherwise (a pipe gets the bytes the model or tool sent).
- `cut(line, limit)` -> `line` cut to `limit` columns with "…" (wide characters count two,
  combining ones zero); `width(ch)` is that column count.
- `spinner_allowed(environ)`: a live status line is allowed (NAGENT_NO_SPINNER unset, "" or
  "0"); `terminal_columns()`: $COLUMNS, else the terminal's width, else 80 (no shutil).
- `status_erase(drawn, columns)` -> what erases a status line `drawn` columns wide from its end:
  spaces (no escape sequence), reaching past it as far as the terminal's echo of a control key
  typed meanwhile ("^C"), within `columns`, and back to the line's start. Every live line
  (the run's status line, the batch's progress, the tools' spinner) is erased with it.
- `counted(n, noun, plural=None)` -> "1 call", "2 calls" ("1 reply", "3 replies" with the
  plural given): every count nagent prints in words.
"""
import os
import sys
import unicodedata  # no `re`: nagent_errors imports this module, so every tool does at start-up


def unsafe(ch):
    return not ch.isprintable()


def escape_char(ch):
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def escape(text, keep=""):
    """`text` with every unsafe character except those in `keep` written as an escape."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(escape_char(ch) if unsafe(ch) and ch not in keep else ch for ch in text)


def for_terminal(text):
    return escape(text, keep="\n\r\t")


def shown_on(text, terminal):
    return for_terminal(text) if terminal else text


def _line_char(ch, newline):
    if not unsafe(ch):
        return ch
    if ch == "\n":
        return newline
    if ch == "\t" or unicodedata.category(ch) == "Zs":
        return " "
    return escape_char(ch)


def one_line(text, limit=None, newline=" "):
    """`text` as one safe terminal line of at most `limit` columns (see the module docstring)."""
    text = str(text if text is not None else "").replace("\r\n", "\n").strip()
    if not text.isprintable():
        text = "".join(_line_char(ch, newline) for ch in text)
    while "  " in text:
        text = text.replace("  ", " ")
    return text if limit is None else cut(text, limit)


def width(ch):
    if ord(ch) < 0x1100:
        return 0 if ord(ch) >= 0x300 and unicodedata.combining(ch) else 1
    if unicodedata.east_asian_width(ch) in ("W", "F"):
        return 2
    return 0 if unicodedata.combining(ch) else 1


def cut(line, limit):
    """`line` cut to `limit` columns with "…" (wide characters count two)."""
    if len(line) <= limit // 2:
        return line
    widths = [width(ch) for ch in line]
    if sum(widths) <= limit:
        return line
    used = 0
    for index, columns in enumerate(widths):
        if used + columns > limit - 1:
            return line[:index].rstrip() + "…"
        used += columns
    return line


def counted(number, noun, plural=None):
    """`number` `noun`s in words: "1 call", "0 calls", "2 replies" (with plural="replies")."""
    return f"{number} {noun if number == 1 else plural or noun + 's'}"


ECHO_WIDTH = 2   # a typed control key, echoed by the terminal after the line: "^C", "^\\"


def status_erase(drawn, columns):
    return "\r" + " " * max(drawn, min(drawn + ECHO_WIDTH, columns - 1)) + "\r"


def spinner_allowed(environ):
    return environ.get("NAGENT_NO_SPINNER", "") in ("", "0")


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
