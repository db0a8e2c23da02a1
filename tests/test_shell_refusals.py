"""Inside a `<nagent-shell>` action, nagent commands that change conversations, the project's
files or what is trusted are refused (the one rule nagent_cli.refuse_in_shell_action, which
already refused the commands that call a model); read-only ones run. The model controls its
command's environment: with NAGENT_SHELL_ACTION unset, the driver's own conversation lock is
what still refuses a rewind of the running conversation (exit 7).
"""
import json
import os
import re

from test_rewind import DONE, RewindRunCase, shell

SCRIPT = "; ".join(f'{command}; echo "{name}=$?"' for name, command in (
    ("rewind", "nagent --conversation work --rewind"),
    ("clear", "nagent --conversation other --clear"),
    ("branch", "nagent --conversation work --branch-conversation"),
    ("save", "nagent --conversation work --save-conversation copy"),
    ("trust", "nagent --trust"),
    ("send", "nagent --send work hello"),
    ("changes", "nagent --conversation work --changes >/dev/null"),
    ("dry", "nagent --conversation work --rewind --dry-run >/dev/null"),
    ("status", "nagent --conversation work --status >/dev/null"),
    ("ps", "nagent --ps >/dev/null"),
    ("help", "nagent --help >/dev/null"),
    ("unset", "env -u NAGENT_SHELL_ACTION nagent --conversation work --rewind")))


class ShellActionLifecycleTest(RewindRunCase):
    def test_mutating_commands_are_refused_read_only_ones_run(self):
        self.project({"a.py": "a = 1\n"})
        self.turn("edit", '<nagent-replace path="a.py"><old>a = 1</old><new>a = 2</new>'
                          '</nagent-replace>')
        self.fake.reply(shell(SCRIPT))
        self.fake.reply(DONE)
        proc = self.nagent("--conversation", self.CONVERSATION, "--json", "try them")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        result = json.loads(json.dumps(self.fake.requests[-1]["json"]))
        result = json.dumps(result, ensure_ascii=False).replace("\\n", "\n")
        codes = dict(re.findall(r"^(\w+)=(\d+)$", result, re.M))
        self.assertEqual(codes, {"rewind": "2", "clear": "2", "branch": "2", "save": "2",
                                 "trust": "2", "send": "2", "changes": "0", "dry": "0",
                                 "status": "0", "ps": "0", "help": "0", "unset": "7"}, result)
        for flag in ("--rewind", "--clear", "--trust", "--send"):
            self.assertIn(f"Error: nagent {flag} does not run inside a nagent shell action", result)
        self.assertEqual(self.read("a.py"), "a = 2\n")
        self.assertFalse(os.path.exists(self.named_path("copy")))
