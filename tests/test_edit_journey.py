"""Issue 20, the user's journey end to end: a git project with failing tests, the key only in
OPENAI_API_KEY (no config file), `nagent "fix the failing tests"` on a real pseudo-terminal, once
plainly and once with --shell-sandbox bwrap. The scripted model fixes one bug with
<nagent-replace> (applied through nagent-file-edit, no model call) and the other with
<nagent-file-edit> (a nested session with its own model calls). Afterwards the project's tests
pass, the diffs are on the terminal, and the run's totals equal what the fake vendor saw.

`edit_project(case)` and `JourneyModel` are shared with test_edit_route.
"""
import json
import os
import shutil
import subprocess
import sys
import unittest

import zygote
from base import BIN, zygote_can_run
from fakes import FakeVendorTestCase, ReplySpec
from project_fixture import ProjectFixture
from ptys import TerminalReader, fresh_terminal
from unprivileged import outside_dir

USAGE = {"input": 100, "cache_read": 0, "cache_write": 0, "output": 10, "reasoning": 0}
CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a + b\n"
TESTS = ("import unittest\n\nfrom calc import add, mul\n\n\nclass CalcTest(unittest.TestCase):\n"
         "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
         "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n")
RUN_TESTS = "<nagent-shell>python3 -m unittest -q test_calc</nagent-shell>"


def edit_project(case):
    """A git project outside every temp root (as a user's is), committed, with failing tests
    (and a .gitignore for bytecode: a shell action's changes are shown, nagent_run_snapshots)."""
    project = outside_dir(case)
    case.cwd = project
    os.chdir(project)
    case.init_git()
    case.write_file("calc.py", CALC)
    case.write_file("test_calc.py", TESTS)
    case.write_file(".gitignore", "__pycache__/\n")   # as a real project has: the tests' bytecode
    case.git("add", "-A")
    case.git("commit", "-q", "-m", "calc with two bugs")
    return project


def on_terminal(args, env, cwd, timeout=120):
    """(exit code, screen) of bin/nagent ARGS with stdin, stdout and stderr on a fresh 120x40
    pseudo-terminal; a child of the suite's zygote when the environment allows (the SDK import
    is the zygote's: the journey's own work is what the test waits for)."""
    master, slave = fresh_terminal()
    terminal, script = os.ttyname(slave), os.path.join(BIN, "nagent")
    if zygote_can_run(env):
        child = zygote.shared().spawn(script, args, env, cwd, terminal, terminal, terminal)
    else:
        child = subprocess.Popen([sys.executable, script, *args], stdin=slave, stdout=slave,
                                 stderr=slave, env=env, cwd=cwd)
    reader = TerminalReader(master)
    code = child.wait(timeout)
    os.close(slave)   # held until the child is done: a pty without any slave open reads EIO
    reader.join(timeout)
    return code, reader.screen()


class JourneyModel:
    """The fake model: the main conversation's replies in order, and the nested session's."""

    MAIN = (RUN_TESTS,
            '<nagent-replace path="calc.py">\n<old>    return a - b</old>\n'
            '<new>    return a + b</new>\n</nagent-replace>',
            '<nagent-file-edit path="calc.py">\nMake mul multiply its arguments.\n'
            '</nagent-file-edit>',
            RUN_TESTS,
            "<nagent-response>\nBoth tests pass now.\n</nagent-response>")
    NESTED = ('<nagent-replace path="calc.py">\n<old>def mul(a, b):\n    return a + b</old>\n'
              '<new>def mul(a, b):\n    return a * b</new>\n</nagent-replace>',
              "<nagent-response>mul multiplies now.</nagent-response>")

    def __init__(self):
        self.main, self.nested, self.failures = list(self.MAIN), list(self.NESTED), []

    def __call__(self, record):
        text = json.dumps(record.get("json"))
        steps = self.nested if "Write rules (per-file edit session)" in text else self.main
        if not steps:
            self.failures.append("unscripted call")
            return ReplySpec("<nagent-response>unscripted</nagent-response>", usage=USAGE)
        return ReplySpec(steps.pop(0), usage=USAGE)


class EditJourneyTest(ProjectFixture, FakeVendorTestCase):
    def setUp(self):
        super().setUp()
        edit_project(self)
        # As a user sets it up: the key only in OPENAI_API_KEY, no config file anywhere.
        for name in ("ANTHROPIC_API_KEY", "GOOGLE_API_KEY", "NAGENT_CONFIG"):
            self.env.pop(name, None)
        self.env.pop("NAGENT_NO_SPINNER", None)
        self.env.update(NO_COLOR="1", TERM="xterm", COLUMNS="120")

    def journey(self, *flags):
        model, seen = JourneyModel(), len(self.fake.requests)
        self.fake.reply_fn(model)
        code, screen = on_terminal(["--pid", "4242", *flags, "fix the failing tests"], self.env,
                                   self.cwd)
        self.assertEqual(code, 0, screen)
        self.assertEqual(model.failures, [], screen)
        self.assertEqual((model.main, model.nested), ([], []), screen)
        self.assertNotIn("Traceback", screen)
        # The project's own tests pass now, run the way the user runs them.
        # A fresh bytecode cache: the edits keep calc.py's size and may land within the second
        # the run's own test command compiled it, so a cached .pyc would still look current.
        fresh = os.path.join(self.tmp, "check-pycache")
        check = subprocess.run([sys.executable, "-m", "unittest", "-q", "test_calc"], cwd=self.cwd,
                               capture_output=True, text=True, timeout=60,
                               env=dict(self.env, PYTHONPYCACHEPREFIX=fresh))
        self.assertEqual(check.returncode, 0, check.stderr)
        # Both changes are on the screen: the file, the counts, the diff; and the run's sum.
        self.assertEqual(screen.count("✎ calc.py +1 −1"), 2, screen)
        for line in ("-    return a - b", "+    return a + b", "-    return a + b",
                     "+    return a * b", "1 file changed, +2 −2"):
            self.assertIn(line, screen)
        # Totals: every request the fake vendor saw, the nested session's included.
        requests = [r for r in self.fake.requests[seen:] if r["path"] == "/v1/responses"]
        self.assertEqual(len(requests), 7)
        self.assertIn("● 7 model calls · 700 in", screen)
        self.assertIn("70 out", screen)
        data = json.loads(self.run_tool("nagent", "--status", "--json", "--pid", "4242").stdout)
        self.assertEqual((data["model_calls"], data["totals"]["input_tokens"],
                          data["totals"]["output_tokens"]), (7, 700, 70))
        return screen

    def test_fix_with_replace_and_file_edit(self):
        self.journey()
        self.git("checkout", "-q", "--", "calc.py")   # the same journey again, sandboxed
        if shutil.which("bwrap") is None:
            self.skipTest("bwrap not installed")
        self.journey("-n", "--shell-sandbox", "bwrap")


if __name__ == "__main__":
    unittest.main()
