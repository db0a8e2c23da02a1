"""Driving a tool through a pseudo-terminal that is its controlling terminal.

Data contract: `answer_on_pty(argv, env, cwd, answers, typeahead=b"", prompt=b"[y/N",
timeout=60)` forks `argv` on a new pty (stdin, stdout and stderr all on it), writes `typeahead`
at once (before the tool can have asked anything), then writes each of `answers` in turn, each
only after one more `prompt` has been shown whole (`prompt`: bytes, or a tuple of bytes when
the questions end differently). Returns (exit code, transcript bytes, prompts answered).
`fresh_terminal()` -> (master, slave) of a new 120x40 pseudo-terminal; `TerminalReader(master)`
collects what it shows on a thread: `.screen()` (after `.join(timeout)`, which returns once every
writer closed the slave) is the text with CRLF as newlines; `.seen()` the bytes so far.
`PtySession(argv, env, cwd)` is a person at a 120x40 terminal: `type(data)` writes keys,
`expect(text, count=None)` waits until the screen shows `text` (str or bytes) `count` times in
all (default: once more than when `mark()` was last called) and returns what was shown since
the mark; `screen` is everything shown (bytes); `wait_reading()` waits until the program's main
thread sleeps in poll/select for input (a Ctrl-C typed earlier can be missed by a reader that
was busy with the previous key: Python's readline only looks for signals when its select is
interrupted); `finish()` waits for the exit and returns the exit code; `close()` (for a test's
cleanup) kills what is still running in the program's process group. A wait past its timeout
fails with what the screen shows.
"""
import fcntl
import os
import pty
import select
import struct
import termios
import threading
import time


def fresh_terminal():
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    return master, slave


class TerminalReader:
    def __init__(self, master):
        self.master, self.chunks = master, []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:   # EIO: every writer closed the terminal
                return
            if not data:
                return
            self.chunks.append(data)

    def seen(self):
        return b"".join(self.chunks)

    def join(self, timeout):
        self.thread.join(timeout)
        os.close(self.master)

    def screen(self):
        return self.seen().decode("utf-8", "replace").replace("\r\n", "\n")


def answer_on_pty(argv, env, cwd, answers, typeahead=b"", prompt=b"[y/N", timeout=60):
    pid, master = pty.fork()
    if pid == 0:  # the child: the pty is its controlling terminal
        try:
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    if typeahead:
        os.write(master, typeahead)
    seen, prompts, answers = b"", 0, list(answers)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if not select.select([master], [], [], 0.5)[0]:
                continue
            try:
                chunk = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            while _count(seen, prompt) > prompts and answers:
                os.write(master, answers.pop(0))
                prompts += 1
    finally:
        os.close(master)
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status), seen, prompts


def _count(seen, prompt):
    return sum(seen.count(mark) for mark in (prompt if isinstance(prompt, tuple) else (prompt,)))


class PtySession:
    """A program on a fresh pty as its controlling terminal (see the module docstring)."""

    def __init__(self, argv, env, cwd, timeout=60):
        self.timeout = timeout
        self.pid, self.master = pty.fork()
        if self.pid == 0:
            try:
                os.chdir(cwd)
                os.execve(argv[0], argv, env)
            finally:
                os._exit(127)
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        self.screen = b""
        self.marked = 0
        self.code = None

    def _read(self, wait):
        if select.select([self.master], [], [], wait)[0]:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:   # EIO: the program closed the terminal
                chunk = b""
            self.screen += chunk
            return bool(chunk)
        return True

    def mark(self):
        self.marked = len(self.screen)

    def type(self, data):
        os.write(self.master, data.encode() if isinstance(data, str) else data)

    def expect(self, text, count=None, timeout=None):
        text = text.encode() if isinstance(text, str) else text
        wanted = self.screen[:self.marked].count(text) + 1 if count is None else count
        deadline = time.monotonic() + (timeout or self.timeout)
        while self.screen.count(text) < wanted:
            if time.monotonic() > deadline or not self._read(0.2):
                raise AssertionError(f"the screen never showed {text!r}; it shows:\n"
                                     + self.screen[-3000:].decode("utf-8", "replace"))
        shown = self.screen[self.marked:]
        self.mark()
        return shown.decode("utf-8", "replace")

    def wait_reading(self, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        where = f"/proc/{self.pid}/task/{self.pid}/"
        while time.monotonic() < deadline:
            try:
                with open(where + "wchan", encoding="ascii") as handle:
                    wchan = handle.read()
                with open(where + "stat", encoding="ascii") as handle:
                    state = handle.read().rsplit(")", 1)[1].split()[0]
            except OSError:
                return
            if state == "S" and ("poll" in wchan or "select" in wchan):
                return
            self._read(0.01)
        raise AssertionError("the program never waited for input")

    def finish(self, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        while self.code is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.code = os.waitstatus_to_exitcode(status)
            elif time.monotonic() > deadline:
                os.kill(self.pid, 9)
                self.code = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            elif not self._read(0.2):
                time.sleep(0.02)
        while select.select([self.master], [], [], 0)[0] and self._read(0):
            pass
        os.close(self.master)
        return self.code

    def close(self):
        if self.code is None:
            try:
                os.killpg(self.pid, 9)
            except OSError:
                pass
            self.code = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            os.close(self.master)


def rendered(screen):
    """The lines a terminal shows at the end of `screen` (bytes), scrollback included: text,
    CR, LF, cursor up (ESC [ n A), erase line (ESC [ 2K, ESC [ K); other escape sequences are
    dropped. Enough to see whether one writer's redraw erased another's lines."""
    import re
    lines, row, col = [""], 0, 0
    for token in re.findall(r"\x1b\[[0-9;?]*[A-Za-z]|\r|\n|[^\x1b\r\n]+",
                            screen.decode("utf-8", "replace")):
        if token == "\r":
            col = 0
        elif token == "\n":
            row += 1
            lines += [""] * (row + 1 - len(lines))
        elif token.startswith("\x1b["):
            count = int(token[2:-1] or 1) if token[2:-1].isdigit() or not token[2:-1] else 1
            if token[-1] == "A":
                row = max(0, row - count)
            elif token[-1] == "K":
                lines[row] = "" if token[2:-1] == "2" else lines[row][:col]
        else:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + token + line[col + len(token):]
            col += len(token)
    return lines
