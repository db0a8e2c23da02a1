"""The live view of a run on a real terminal: the real bin/nagent with stderr (and stdout) on a
pseudo-terminal, against the fake vendor. Action lines, retry line, format corrections, the
closing summary line, colour only on a terminal and never with NO_COLOR, nothing with -q, and
quiet off a terminal unless -v."""
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time

from base import BIN, TESTS
from ptys import PtySession, TerminalReader, fresh_terminal, rendered
from test_loop import NagentRunCase

ESC = "\x1b"
SCRIPT_REPLY = ('<nagent-shell>echo hi from shell</nagent-shell>\n<nagent-read path="notes.txt"/>\n'
                '<nagent-write path="/etc/nagent-test-refused">x</nagent-write>')
ANSWER = "<nagent-response>\nAll done.\nThe notes say hello.\n</nagent-response>"


def run_on_terminal(args, env, cwd, stdout_on_terminal=False, timeout=60, interrupt_after=None,
                    tool="nagent"):
    """(exit code, stdout text or None, what the terminal showed) of bin/TOOL with stderr
    (and stdout, if asked) on a fresh 120x40 pseudo-terminal; `interrupt_after` (text) sends
    SIGINT, as Ctrl-C does, once the terminal has shown that text and a moment more."""
    master, slave = fresh_terminal()
    proc = subprocess.Popen([sys.executable, os.path.join(BIN, tool), *args],
                            stdin=subprocess.DEVNULL, stderr=slave, env=env, cwd=cwd,
                            stdout=slave if stdout_on_terminal else subprocess.PIPE)
    os.close(slave)
    terminal = TerminalReader(master)
    if interrupt_after is not None:
        deadline = time.monotonic() + timeout
        while interrupt_after.encode() not in terminal.seen() and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.4)                                  # the status line has been drawn
        proc.send_signal(signal.SIGINT)
    stdout = None
    if not stdout_on_terminal:
        with proc.stdout:
            stdout = proc.stdout.read().decode()
    code = proc.wait(timeout=timeout)
    terminal.join(timeout)
    screen = terminal.screen()
    return code, stdout, screen


def final_lines(screen):
    """The permanent lines of a terminal capture: status-line redraws (\\r ...) removed."""
    lines = []
    for line in screen.split("\n"):
        lines.append(line.rsplit("\r", 1)[-1])
    return [line for line in lines if line.strip()]


class LiveTerminalTest(NagentRunCase):
    CONFIG = {"provider": "anthropic", "retry": {"base_delay": 0, "max_delay": 0}}

    def setUp(self):
        super().setUp()
        self.write_file("notes.txt", "hello notes\n")
        self.env.pop("NAGENT_NO_SPINNER", None)
        self.env["TERM"] = "xterm"
        self.env.pop("NO_COLOR", None)

    def script(self):
        self.fake.reply(SCRIPT_REPLY)
        self.fake.fault(429, headers={"retry-after-ms": "30"})
        self.fake.reply("Sure, let me think about it.")          # outside the protocol
        self.fake.reply(ANSWER)

    def test_actions_retry_correction_and_summary_on_a_terminal(self):
        self.script()
        code, stdout, screen = run_on_terminal(["--conversation", "live", "look at the notes"],
                                               self.env, self.cwd)
        self.assertEqual(code, 0, screen)
        self.assertEqual(stdout, "All done.\nThe notes say hello.\n")  # stdout is a pipe: whole
        plain = re.sub(r"\x1b\[[0-9;]*m", "", screen)
        lines = final_lines(plain)
        self.assertIn("▸ shell  echo hi from shell", lines)
        self.assertIn("  ✓ exit 0 · 0.0 s · 1 line", [re.sub(r"\d+\.\d s", "0.0 s", l) for l in lines])
        self.assertIn("▸ read  notes.txt", lines)
        self.assertIn("  ✓ 12 B", lines)
        self.assertIn("▸ write  /etc/nagent-test-refused (1 B)", lines)
        refused = [line for line in lines if line.startswith("  ✗ ")]
        self.assertEqual(len(refused), 1, lines)
        self.assertRegex(plain, r"↻ retrying in \d+(\.\d)? s \(HTTP 429, attempt 2 of 4\)")
        self.assertIn("! the reply was not in the protocol: text outside tags at line 1: 'Sure, let "
                      "me think about it.'; asking again", lines)
        summary = [line for line in lines if line.startswith("● ")]
        self.assertEqual(len(summary), 1, lines)
        self.assertRegex(summary[0], r"^● 3 model calls · [\d.k]+ in \(\d+% cached\) · \d+ out · "
                                     r"\$\d+\.\d{4} · \d+\.\d s$")
        self.assertEqual(lines[-1], summary[0])          # the closing line stays, last
        self.assertIn("model call 2", plain)             # the status line says which call
        self.assertIn(ESC + "[32m", screen)              # colour on a terminal
        self.assertNotIn("turn 1", plain)

    def test_no_color_streams_the_answer_on_the_same_terminal_without_escapes(self):
        self.fake.reply("<nagent-shell>echo one</nagent-shell>")
        self.fake.reply(ANSWER, chunk=4, gap=0.01)
        self.env["NO_COLOR"] = "1"
        code, _, screen = run_on_terminal(["--conversation", "plain", "go"], self.env, self.cwd,
                                          stdout_on_terminal=True)
        self.assertEqual(code, 0, screen)
        self.assertNotIn(ESC, screen)
        lines = final_lines(screen)
        self.assertIn("All done.", lines)
        self.assertIn("The notes say hello.", lines)
        self.assertLess(lines.index("▸ shell  echo one"), lines.index("All done."))
        self.assertTrue(lines[-1].startswith("● 2 model calls · "), lines)
        replies = self.kinds(self.named_path("plain"), "reply")
        self.assertEqual(replies[-1].body, ANSWER)       # the record is the whole reply

    def test_an_answer_cannot_drive_the_terminal_but_a_pipe_gets_it_whole(self):
        # Text from a file can make a model echo escape sequences: OSC 52 writes the clipboard,
        # CSI 2J clears the screen, U+202E reverses what follows. On a terminal they are shown
        # as escapes, streamed or whole (a response hook holds the answer back until it passes);
        # a pipe gets the reply's bytes as they are.
        hostile = "copy \x1b]52;c;cm0gLXJmIH4=\x07 clear \x1b[2J csi \x9b2J rtl \u202egnp.exe tab\tend"
        shown = ("copy \\x1b]52;c;cm0gLXJmIH4=\\x07 clear \\x1b[2J csi \\x9b2J "
                 "rtl \\u202egnp.exe tab\tend")
        answer = f"<nagent-response>\n{hostile}\nline two\n</nagent-response>"
        for name, args in (("streamed", []), ("gated", ["--hook-per-response", "true"])):
            with self.subTest(name):
                self.fake.reply(answer, chunk=7, gap=0.005)
                code, _, screen = run_on_terminal(["-q", *args, "--conversation", name, "go"],
                                                  self.env, self.cwd, stdout_on_terminal=True)
                self.assertEqual(code, 0, screen)
                for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
                    self.assertNotIn(raw, screen)
                self.assertEqual(screen, shown + "\nline two\n")
                replies = self.kinds(self.named_path(name), "reply")
                self.assertEqual(replies[-1].body, answer)   # the record keeps the reply whole
        self.fake.reply(answer)
        proc = self.nagent("--conversation", "piped", "go")
        self.assertEqual(proc.stdout, hostile + "\nline two\n")

    def test_llm_text_and_mcp_output_cannot_drive_the_terminal(self):
        hostile = "a \x1b]52;c;cm0=\x07 b \x9b2J c \u202ed\tend"
        shown = "a \\x1b]52;c;cm0=\\x07 b \\x9b2J c \\u202ed\tend"
        self.write_file("q.txt", "say it\n")
        self.env["NAGENT_NO_SPINNER"] = "1"   # the terminal then shows the output alone
        for flags in ([], ["--no-stream"]):
            with self.subTest(flags=flags):
                self.fake.reply(hostile, chunk=5, gap=0.005)
                code, _, screen = run_on_terminal(["--file", "q.txt", *flags], self.env, self.cwd,
                                                  stdout_on_terminal=True, tool="nagent-llm-text")
                self.assertEqual((code, screen), (0, shown + "\n"))
        self.fake.reply(hostile)
        piped = self.run_tool("nagent-llm-text", "--file", "q.txt")
        self.assertEqual(piped.stdout, hostile + "\n")
        if importlib.util.find_spec("mcp") is None:
            return
        server = os.path.join(TESTS, "mcp_server.py")
        self.write_config(dict(self.CONFIG, mcp_servers={"t": {"command": sys.executable,
                                                               "args": [server]}}))
        args = ["call", "t", "echo", "--args", json.dumps({"text": hostile})]
        code, _, screen = run_on_terminal(args, self.env, self.cwd, stdout_on_terminal=True,
                                          tool="nagent-mcp")
        self.assertEqual((code, screen), (0, shown + "\n"))
        self.assertEqual(self.run_tool("nagent-mcp", *args).stdout, hostile + "\n")

    def test_quiet_shows_nothing_and_off_a_terminal_stays_quiet_unless_verbose(self):
        self.fake.reply("<nagent-shell>echo quiet</nagent-shell>")
        self.fake.reply(ANSWER)
        code, stdout, screen = run_on_terminal(["-q", "--conversation", "q", "go"], self.env, self.cwd)
        self.assertEqual((code, stdout, screen), (0, "All done.\nThe notes say hello.\n", ""))
        self.fake.reply("<nagent-shell>echo piped</nagent-shell>")
        self.fake.reply(ANSWER)
        proc = self.nagent("--conversation", "p", "go")
        self.assertEqual((proc.returncode, proc.stderr), (0, ""))
        self.fake.reply("<nagent-shell>echo verbose</nagent-shell>")
        self.fake.reply(ANSWER)
        proc = self.nagent("-v", "--conversation", "v", "go")
        lines = proc.stderr.splitlines()
        self.assertIn("▸ shell  echo verbose", lines)
        self.assertTrue(lines[-1].startswith("● 2 model calls · "), lines)
        self.assertNotIn(ESC, proc.stderr)               # not a terminal: no colour
        self.assertEqual(proc.stdout, "All done.\nThe notes say hello.\n")

    def test_ctrl_c_in_an_action_ends_its_line_then_the_error_then_the_summary(self):
        self.fake.reply("<nagent-shell>sleep 30</nagent-shell>")
        code, _, screen = run_on_terminal(["--conversation", "cc", "wait"], self.env, self.cwd,
                                          interrupt_after="▸ shell")
        self.assertEqual(code, 130, screen)
        lines = final_lines(re.sub(r"\x1b\[[0-9;]*m", "", screen))
        at = lines.index("▸ shell  sleep 30")
        self.assertEqual(lines[at + 1], "  ✗ interrupted", lines)   # the action's own outcome
        self.assertEqual(lines[at + 2], "Error: interrupted", lines)  # on a line of its own
        self.assertTrue(lines[-1].startswith("● 1 model call · "), lines)

    def test_ctrl_c_typed_at_the_terminal_leaves_no_echo_on_the_outcome_line(self):
        # The terminal echoes a typed Ctrl-C as "^C" after the status line; clearing only the
        # status line's own width left it after the outcome: "  ✗ interrupted^C".
        self.fake.reply("<nagent-shell>sleep 30</nagent-shell>")
        session = PtySession([sys.executable, os.path.join(BIN, "nagent"), "--conversation",
                              "cc", "wait"], self.env, self.cwd)
        self.addCleanup(session.close)
        session.expect("▸ shell")
        session.expect("shell · ")   # the status line is drawn (a loaded machine skips frames:
        session.expect("shell · ")   # "0.3 s" itself was once never shown), and drawn again
        session.type(b"\x03")
        self.assertEqual(session.finish(), 130)
        lines = [line.rstrip() for line in rendered(session.screen)]
        at = lines.index("▸ shell  sleep 30")
        self.assertEqual(lines[at + 1:at + 3], ["  ✗ interrupted", "Error: interrupted"], lines)
