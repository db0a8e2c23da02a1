"""Issue 24 and 14 together: while sub-agents run, the live view's table of children is
redrawn in place (cursor up, erase line); an approval question a child asks on the same
terminal must stay whole and readable. The view takes the terminal lock the question holds
(nagent_terminal_lock) for each redraw and each line, so it draws nothing while a question is
open and, after it, draws below it instead of over it. A real parent and two child nagent
processes on a pseudo-terminal (tests/ptys.py), both children asking.
"""
import os
import re
import sys
import time

from base import BIN
from fakes import ReplySpec
from ptys import PtySession, rendered
from test_parallel_agents import PARENT, USAGE, ParallelCase, agents


class QuestionUnderTheTable(ParallelCase):
    CONFIG = {"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}}

    def setUp(self):
        super().setUp()
        self.env.pop("NAGENT_NO_SPINNER", None)
        self.env.update(TERM="xterm", NO_COLOR="1")

    def settle(self, session, seconds=0.8):
        """Read what the terminal shows for a while: the table would be redrawn meanwhile."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            session._read(0.05)

    def test_an_approval_question_stays_whole_while_the_table_runs(self):
        seen = []

        def child(task, _record):
            if task in seen:
                return ReplySpec(f"<nagent-response>answer {task}</nagent-response>", usage=USAGE)
            seen.append(task)
            return ReplySpec(f"<nagent-shell>\necho ran-{task}\n</nagent-shell>", usage=USAGE)

        self.route([ReplySpec(agents("task-A", "task-B"), usage=USAGE),
                    ReplySpec("<nagent-response>parent done</nagent-response>", usage=USAGE)],
                   child)
        session = PtySession([sys.executable, os.path.join(BIN, "nagent"), "--shell-approval",
                              "confirm", "--conversation", "asked", PARENT], self.env, self.cwd,
                             timeout=120)
        self.addCleanup(session.close)
        for number in (1, 2):
            session.expect("Run it? [y/N", count=number)
            self.settle(session)
            session.type("y\n")
        self.assertEqual(session.finish(), 0, session.screen.decode("utf-8", "replace"))
        screen = rendered(session.screen)
        text = "\n".join(screen)
        for task in ("task-A", "task-B"):   # each question whole, in order, with its answer
            where = [n for n, line in enumerate(screen) if line == f"    echo ran-{task}"]
            self.assertEqual(len(where), 1, text)
            self.assertEqual(screen[where[0] - 1], "nagent wants to run a shell command (1 line):",
                             text)
            rest = screen[where[0] + 1:where[0] + 6]
            self.assertTrue(any(line.startswith("  y yes · n no") for line in rest), text)
            self.assertTrue(any(re.fullmatch(r"Run it\? \[y/N(/a)?/e\] y", line)
                                for line in rest), text)
        self.assertIn("parent done", text)
