"""Shell approval and sandbox end to end: bin/nagent flags and config against a scripted model.

- approval: `--shell-approval deny` beats the config; `shell_approval: confirm` (top-level key)
  with no terminal refuses; `shell.approval: confirm` on a real terminal (a pty made the child's
  controlling terminal) runs the command answered "y" and refuses the one answered "n".
- sandbox: `--shell-sandbox bwrap` lets commands write the project and temp dirs but not HOME or
  ~/.nagent, with the network off; `shell_sandbox: bwrap` + `shell.network: true` turns it on.
- missing bwrap: decided up front. A run whose sandbox is bwrap and that finds no `bwrap` on PATH
  stops before any model call with one `Error:` line and exit 4, leaving no conversation. (Should
  bwrap vanish in the middle of a run, that shell action gets an error result saying
  "bwrap not found"; tests/test_shell.py covers that at the library level.)
"""
import json
import os
import re
import shutil
import subprocess
import sys
import unittest

from base import BIN, HELPERS
from fakes import FakeVendorTestCase
from ptys import answer_on_pty
from unprivileged import outside_dir

import nagent_conversation
import nagent_shell

HAVE_BWRAP = shutil.which("bwrap") is not None
RETRY = {"base_delay": 0, "max_delay": 0}


class ShellModeCase(FakeVendorTestCase):
    def setUp(self):
        super().setUp()
        self.configure()

    def configure(self, **extra):
        self.write_config({"provider": "openai", "retry": RETRY, **extra})

    def conversation(self, name):
        return os.path.join(self.env["HOME"], ".nagent", "conversations", name)

    def shell_results(self, name):
        return [r.body for r in nagent_conversation.read_records(self.conversation(name))
                if r.kind == "result" and r.attr("action") == "shell"]

    def script(self, *commands):
        self.fake.reply("\n".join(f"<nagent-shell>\n{c}\n</nagent-shell>" for c in commands))
        self.fake.reply("<nagent-response>done</nagent-response>")

    def nagent(self, name, *flags, detach=False):
        """bin/nagent --json; `detach` runs it in a new session, so it has no controlling terminal."""
        proc = subprocess.run([sys.executable, os.path.join(BIN, "nagent"), "--json", "--conversation",
                               name, *flags, "run the commands"], capture_output=True, text=True,
                              env=self.env, cwd=self.cwd, timeout=120, stdin=subprocess.DEVNULL,
                              start_new_session=detach)
        self.assertNotIn("Traceback", proc.stderr)
        return proc

    def ok(self, proc):
        self.assertEqual(proc.returncode, 0, proc.stderr + proc.stdout)
        return json.loads(proc.stdout)

    def exists(self, name):
        return os.path.exists(os.path.join(self.cwd, name))


class ApprovalModes(ShellModeCase):
    def test_deny_flag_beats_config_and_runs_nothing(self):
        self.configure(shell={"approval": "auto"})
        self.script("touch denied-1", "touch denied-2")
        self.ok(self.nagent("deny", "--shell-approval", "deny"))
        results = self.shell_results("deny")
        self.assertEqual(len(results), 2)
        for body in results:
            self.assertIn("exit_code: none", body)
            self.assertIn(f"refused: {nagent_shell.DENIED}", body)
        self.assertFalse(self.exists("denied-1") or self.exists("denied-2"))

    def test_confirm_without_a_terminal_refuses(self):
        self.configure(shell_approval="confirm")
        self.script("touch unconfirmed")
        self.ok(self.nagent("confirm-notty", detach=True))
        [body] = self.shell_results("confirm-notty")
        self.assertIn(f"refused: {nagent_shell.NO_TERMINAL}", body)
        self.assertFalse(self.exists("unconfirmed"))

    def test_confirm_on_a_terminal_runs_yes_and_refuses_no(self):
        self.configure(shell={"approval": "confirm"})
        self.script("touch answered-yes", "touch answered-no")
        argv = [sys.executable, os.path.join(BIN, "nagent"), "--conversation", "confirm-tty",
                "run the commands"]
        code, seen, prompts = answer_on_pty(argv, self.env, self.cwd, [b"y\n", b"n\n"])
        self.assertEqual(code, 0, seen.decode("utf-8", "replace"))
        self.assertEqual(prompts, 2, seen.decode("utf-8", "replace"))
        self.assertIn(b"nagent wants to run a shell command (1 line):", seen)
        yes, no = self.shell_results("confirm-tty")
        self.assertIn("exit_code: 0", yes)
        self.assertIn(f"refused: {nagent_shell.DECLINED}", no)
        self.assertTrue(self.exists("answered-yes"))
        self.assertFalse(self.exists("answered-no"))


class SandboxModes(ShellModeCase):
    def setUp(self):
        super().setUp()
        # HOME outside every writable root of the sandbox (cwd, /tmp, /var/tmp, $TMPDIR).
        self.env["HOME"] = outside_dir(self)
        os.makedirs(os.path.join(self.env["HOME"], ".nagent"))

    def probe(self):
        port = self.fake.url.rsplit(":", 1)[1]
        return [
            "echo a > in-cwd.txt && echo cwd-ok",
            'echo b > "$TMPDIR/in-tmp.txt" && echo tmp-ok',
            'echo c > "$HOME/in-home.txt" 2>/dev/null || echo home-refused',
            'echo d > "$HOME/.nagent/planted" 2>/dev/null || echo state-refused',
            f"{sys.executable} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\""
            " 2>/dev/null && echo net-on || echo net-off",
        ]

    def stdout_lines(self, name):
        return [re.search(r"stdout:\n(.*?)\n?stderr:", body, re.S).group(1).strip()
                for body in self.shell_results(name)]

    @unittest.skipUnless(HAVE_BWRAP, "bwrap not installed")
    def test_flag_sandbox_writes_project_and_temp_only_network_off(self):
        self.configure(shell_sandbox="none")
        self.script(*self.probe())
        self.ok(self.nagent("sandbox", "--shell-sandbox", "bwrap"))
        self.assertEqual(self.stdout_lines("sandbox"),
                         ["cwd-ok", "tmp-ok", "home-refused", "state-refused", "net-off"])
        self.assertTrue(self.exists("in-cwd.txt"))
        self.assertTrue(os.path.exists(os.path.join(self.tmpdir, "in-tmp.txt")))
        self.assertFalse(os.path.exists(os.path.join(self.env["HOME"], "in-home.txt")))
        self.assertFalse(os.path.exists(os.path.join(self.env["HOME"], ".nagent", "planted")))

    @unittest.skipUnless(HAVE_BWRAP, "bwrap not installed")
    def test_config_sandbox_with_network_allowed(self):
        self.configure(shell_sandbox="bwrap", shell={"network": True})
        self.script(*self.probe())
        self.ok(self.nagent("sandbox-net"))
        self.assertEqual(self.stdout_lines("sandbox-net"),
                         ["cwd-ok", "tmp-ok", "home-refused", "state-refused", "net-on"])

    def test_missing_bwrap_stops_before_any_model_call(self):
        empty = os.path.join(self.tmp, "empty-bin")
        os.mkdir(empty)
        self.env["PATH"] = empty
        for flags, config in ((["--shell-sandbox", "bwrap"], {}), ([], {"shell": {"sandbox": "bwrap"}})):
            with self.subTest(flags=flags, config=config):
                self.configure(**config)
                proc = self.nagent("no-bwrap", *flags)
                self.assertCleanError(proc, code=4, contains="bwrap not found")
                self.assertIn("apt-get install bubblewrap", proc.stderr)
                error = json.loads(proc.stdout)["error"]  # --json: one object, errors too
                self.assertEqual((error["kind"], error["exit_code"]), ("setup", 4))
                self.assertFalse(os.path.exists(self.conversation("no-bwrap")))
        self.assertEqual(self.fake.requests, [])


class ShellFactsTest(ShellModeCase):
    """The session facts of the initial context say how shell commands run (sandbox, network,
    writable trees, approval), as the model receives them, and never in the static prefix."""

    def first_request(self, name, *flags):
        self.fake.reply("<nagent-response>done</nagent-response>")
        self.ok(self.nagent(name, *flags))
        text = json.dumps(self.fake.requests[-1]["json"], ensure_ascii=False)
        facts = text[text.index("Session facts:"):]
        return text, facts[:facts.index("\\n\\n")]

    def fact(self, facts, key):
        found = re.findall(r"\\n- " + re.escape(key) + r": ([^\n]*?)(?=\\n|$)", facts)
        return found[0] if found else None

    @unittest.skipUnless(HAVE_BWRAP, "bwrap not installed")
    def test_bwrap_names_network_and_writable_trees(self):
        extra = os.path.join(self.tmp, "extra-writable")
        os.mkdir(extra)
        self.configure(shell={"sandbox": "bwrap", "writable": [extra]})
        text, facts = self.first_request("facts-bwrap")
        sandbox = self.fact(facts, "shell sandbox")
        self.assertIsNotNone(sandbox, facts)
        self.assertTrue(sandbox.startswith("bwrap, network off; writable: "), sandbox)
        writable = sandbox.split("writable: ", 1)[1].split(";", 1)[0].split(", ")
        self.assertEqual(writable[0], "the working directory")
        self.assertIn(os.path.realpath(extra), writable)
        self.assertIn(os.path.realpath(self.tmpdir), writable)  # TMPDIR, a temp root
        self.assertNotIn(os.path.realpath(self.env["HOME"]), writable)
        self.assertIn("~/.nagent hidden", sandbox)
        self.assertIsNone(self.fact(facts, "shell approval"))
        self.assertEqual(text.count("shell sandbox"), 1)  # only in the session part
        self.configure(shell={"sandbox": "bwrap", "network": True})
        _, facts = self.first_request("facts-net")
        self.assertTrue(self.fact(facts, "shell sandbox").startswith("bwrap, network on; "))

    def test_approval_other_than_auto_is_stated_and_defaults_add_nothing(self):
        _, facts = self.first_request("facts-default")
        self.assertIsNone(self.fact(facts, "shell sandbox"), facts)
        self.assertIsNone(self.fact(facts, "shell approval"), facts)
        _, facts = self.first_request("facts-deny", "--shell-approval", "deny")
        self.assertTrue(self.fact(facts, "shell approval").startswith("deny: every command is refused"))
        self.configure(shell={"approval": "confirm"})
        _, facts = self.first_request("facts-confirm")
        self.assertTrue(self.fact(facts, "shell approval").startswith(
            "confirm: the user approves each command"))


# Runs bin/nagent until it hands its first request to the provider SDK (as
# benchmarks/first_answer.py does) and prints which of the modules that handle a reply (the
# shell, its sandbox and approval, its parser, the permission rules built on it, the protocol
# parser, the actions, the MCP channel) were imported by then.
FIRST_REQUEST_IMPORTS = """
import os, runpy, sys
sys.path.insert(0, sys.argv[1])
import nagent_run
def handed_off(self):
    print(sorted(m for m in ("nagent_shell", "nagent_sandbox", "nagent_approval",
                             "nagent_command_words", "nagent_permissions", "nagent_protocol",
                             "nagent_loop_actions", "nagent_actions", "nagent_mcp_channel")
                 if m in sys.modules))
    sys.stdout.flush()
    os._exit(0)
nagent_run.Run.provider_client = handed_off
sys.argv = [os.path.join(os.path.dirname(sys.argv[1]), "nagent")] + sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


class FirstRequestImportsTest(ShellModeCase):
    """The shell's modules are the first shell action's cost, not the first request's: the
    config schema has checked the shell settings, so a session imports them only to sandbox."""

    def modules_at_first_request(self, *flags):
        proc = subprocess.run([sys.executable, "-c", FIRST_REQUEST_IMPORTS, HELPERS, "-q",
                               "--no-stream", *flags, "hello"], capture_output=True, text=True,
                              env=self.env, cwd=self.cwd, timeout=60, stdin=subprocess.DEVNULL)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc.stdout.strip()

    def test_an_unsandboxed_run_imports_no_shell_module_before_its_first_request(self):
        self.assertEqual(self.modules_at_first_request("--shell-approval", "confirm"), "[]")

    def test_permission_rules_are_parsed_only_when_a_config_gives_them(self):
        # The rules' check needs the shell parser; a run whose config has none must not pay for
        # it (it did: 10-20 ms of CPU before every first request).
        self.configure(permissions=[{"decision": "allow", "shell": "git status"}])
        self.assertEqual(self.modules_at_first_request(),
                         "['nagent_command_words', 'nagent_permissions']")

    @unittest.skipUnless(HAVE_BWRAP, "bwrap not installed")
    def test_a_sandboxed_run_prepares_the_sandbox_before_its_first_request(self):
        self.assertEqual(self.modules_at_first_request("--shell-sandbox", "bwrap"),
                         "['nagent_approval', 'nagent_sandbox', 'nagent_shell']")
