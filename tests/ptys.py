"""Driving a tool through a pseudo-terminal that is its controlling terminal.

Data contract: `answer_on_pty(argv, env, cwd, answers, typeahead=b"", prompt=b"[y/N",
timeout=60)` forks `argv` on a new pty (stdin, stdout and stderr all on it), writes `typeahead`
at once (before the tool can have asked anything), then writes each of `answers` in turn, each
only after one more `prompt` has been shown whole (`prompt`: bytes, or a tuple of bytes when
the questions end differently). Returns (exit code, transcript bytes, prompts answered).
`fresh_terminal()` -> (master, slave) of a new 120x40 pseudo-terminal; `TerminalReader(master)`
collects what it shows on a thread: `.screen()` (after `.join(timeout)`, which returns once every
writer closed the slave) is the text with CRLF as newlines; `.seen()` the bytes so far.
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
