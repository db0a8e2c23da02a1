"""Issue 16 item 5: the confirm prompt cannot be answered ahead of time or misread.

- typeahead: through a real pseudo-terminal (the child's controlling terminal), "y" lines typed
  before a prompt appears never approve it: bin/nagent discards pending input, then asks; the
  commands answered "n" after their prompt do not run, the one answered "y" does;
- the prompt shows the line count first, the first and last lines of a long command next to the
  question, and control and bidi characters as escapes that read one way only (\\u202e).
"""
import os
import sys

from base import BIN, HermeticTestCase
from fakes import FakeVendorTestCase
from ptys import answer_on_pty

import nagent_approval
import nagent_conversation
import nagent_shell


class PromptText(HermeticTestCase):
    def test_escapes_are_unambiguous(self):
        lines, escaped = nagent_approval.shown_lines("echo \u202egnp.exe\x1b[2J\tx \U000e0001\u200b\n")
        self.assertEqual(lines, ["echo \\u202egnp.exe\\x1b[2J\tx \\U000e0001\\u200b"])
        self.assertEqual(escaped, 4)
        text = nagent_approval.prompt_text("echo \u202eabc")
        self.assertIn("(1 line):\n    echo \\u202eabc\n", text)
        self.assertIn("1 control or invisible character shown as", text)
        self.assertNotIn("\\x202e", text)
        self.assertNotIn("\u202e", text)

    def test_line_count_first_and_ends_of_a_long_command(self):
        command = "\n".join(f"step {n}" for n in range(1, 31)) + "\n"
        text = nagent_approval.prompt_text(command)
        self.assertTrue(text.startswith("nagent wants to run a shell command (30 lines):\n"), text)
        self.assertTrue(text.endswith("  first line: step 1\n  last line:  step 30\n"
                                      "Run all 30 lines? [y/N/e] "), text)
        short = nagent_approval.prompt_text("ls\npwd", asked_by="shell.approval: confirm",
                                            forms=("ls *",))
        self.assertTrue(short.startswith("nagent wants to run a shell command (2 lines):\n"))
        self.assertTrue(short.endswith("    pwd\nasked by: shell.approval: confirm\n"
                                       "  y yes · n no · a always allow `ls *` this session · e no, "
                                       "and tell the model why\nRun it? [y/N/a/e] "), short)


class TypeaheadThroughPty(FakeVendorTestCase):
    def setUp(self):
        super().setUp()
        self.write_config({"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0},
                           "shell": {"approval": "confirm"}})

    def run_on_pty(self, name, typeahead, answers):
        """Start bin/nagent on a new pty, type `typeahead` at once, then answer each prompt in
        turn, only after it is fully shown. Returns (exit code, transcript)."""
        argv = [sys.executable, os.path.join(BIN, "nagent"), "--conversation", name, "go"]
        # The typeahead goes long before any prompt: nagent is still starting.
        code, seen, _prompts = answer_on_pty(argv, self.env, self.cwd, answers, typeahead=typeahead,
                                             prompt=b"[y/N/a/e] ")
        return code, seen.decode("utf-8", "replace")

    def test_typeahead_never_approves(self):
        self.fake.reply("<nagent-shell>\ntouch typed-ahead-1\n</nagent-shell>\n"
                        "<nagent-shell>\ntouch typed-ahead-2\n</nagent-shell>\n"
                        "<nagent-shell>\ntouch answered-yes\n</nagent-shell>")
        self.fake.reply("<nagent-response>done</nagent-response>")
        code, transcript = self.run_on_pty("typeahead", b"y\ny\ny\n", [b"n\n", b"n\n", b"y\n"])
        self.assertEqual(code, 0, transcript)
        self.assertEqual(transcript.count("Run it? [y/N/a/e] "), 3, transcript)
        path = os.path.join(self.home, ".nagent", "conversations", "typeahead")
        bodies = [r.body for r in nagent_conversation.read_records(path) if r.kind == "result"]
        self.assertIn(f"refused: {nagent_shell.DECLINED}", bodies[0])
        self.assertIn(f"refused: {nagent_shell.DECLINED}", bodies[1])
        self.assertIn("exit_code: 0", bodies[2])
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "typed-ahead-1")))
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "typed-ahead-2")))
        self.assertTrue(os.path.exists(os.path.join(self.cwd, "answered-yes")))
