"""What a shell action changed in the project is shown like an edit tag's change.

The run's snapshots (nagent_run_snapshots) already record the tree before and after each
changing action: a `<nagent-shell>` that changed project files gets the same `✎ path +a −b`
lines, file_change events and --json changed_files as <nagent-replace>, from the shadow
store's two trees (no second scan). Without snapshots nothing is said.
"""
import hashlib
import json
import os
import sys

from base import BIN
from ptys import answer_on_pty
from test_rewind import DONE, RewindRunCase, shell


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


class ShellChangesTest(RewindRunCase):
    def events(self, *replies, args=()):
        for reply in replies + (DONE,):
            self.fake.reply(reply)
        proc = self.nagent("--conversation", self.CONVERSATION, "--events", *args, "go")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return [json.loads(line) for line in proc.stdout.splitlines()]

    def test_a_shell_edit_shows_its_files_as_an_edit_tag_does(self):
        self.project({"b.py": "x = 1\ny = 1\n", "d.py": "gone\n"})
        events = self.events(shell("sed -i 's/x = 1/x = 2/' b.py && printf 'new\\n' > c.py && rm d.py"
                                   " && printf 'a\\000b' > e.bin"))
        starts = [e for e in events if e["type"] == "action_start"]
        changes = [e for e in events if e["type"] == "file_change"]
        self.assertEqual([(c["path"], c["added"], c["removed"]) for c in changes],
                         [("b.py", 1, 1), ("c.py", 1, 0), ("d.py", 0, 1), ("e.bin", 0, 0)])
        self.assertEqual(changes[3]["diff"], "(no diff: e.bin is binary)\n")
        self.assertEqual({c["index"] for c in changes}, {starts[0]["index"]})
        b = changes[0]
        self.assertIn("-x = 1\n+x = 2\n", b["diff"])
        self.assertEqual((b["sha256_before"], b["sha256_after"]),
                         (sha("x = 1\ny = 1\n"), sha("x = 2\ny = 1\n")))
        self.assertEqual((changes[1]["sha256_before"], changes[2]["sha256_after"]), (None, None))
        kinds = [e["type"] for e in events]   # after the action's end, before the next call
        self.assertLess(kinds.index("action_end"), kinds.index("file_change"))
        self.assertLess(kinds.index("file_change"), len(kinds) - kinds[::-1].index("model_call_start"))

        self.fake.reply(shell("sed -i 's/y = 1/y = 2/' b.py"))
        self.fake.reply(shell("true"))        # a shell that changes nothing says nothing
        self.fake.reply(DONE)
        proc = self.nagent("--conversation", self.CONVERSATION, "--json", "again")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["changed_files"],
                         [{"path": "b.py", "added": 1, "removed": 1, "changes": 1}])

        self.fake.reply(shell("sed -i 's/x = 2/x = 3/' b.py"))
        self.fake.reply(DONE)
        env = dict(self.env, NO_COLOR="1", TERM="xterm")   # on a terminal: the ✎ line and diff
        code, screen, _ = answer_on_pty([sys.executable, os.path.join(BIN, "nagent"),
                                         "--conversation", self.CONVERSATION, "plain"],
                                        env, self.cwd, [])
        screen = screen.decode("utf-8", "replace")
        self.assertEqual(code, 0, screen)
        self.assertIn("✎ b.py +1 \u22121", screen)
        self.assertIn("+x = 3", screen)

    def test_without_snapshots_nothing_is_said(self):
        self.project({"b.py": "x = 1\n"})
        self.write_config({"snapshots": {"enabled": False}})
        events = self.events(shell("sed -i 's/1/2/' b.py"))
        self.assertEqual([e for e in events if e["type"] == "file_change"], [])
        self.assertEqual(self.read("b.py"), "x = 2\n")
