"""Tests for nagent_shell: running one shell action (exit codes, cwd, stdin, timeout and
process-group kill, scrubbed env, output cap + side file, approval, bubblewrap sandbox)."""
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import unittest

from base import HELPERS, HermeticTestCase
from unprivileged import outside_dir

import nagent_shell
from nagent_errors import ConfigError, InputError, SetupError
from nagent_shell import ShellOutcome, ShellPolicy, format_shell_result, run_shell, scrubbed_env

HAVE_BWRAP = shutil.which("bwrap") is not None


def slurp(path, mode="r"):
    with open(path, mode) as handle:
        return handle.read()


def process_gone(pid):
    """True when `pid` no longer exists or is only a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X")
    except (OSError, IndexError):
        return True


def wait_gone(pid, limit=10.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if process_gone(pid):
            return True
        time.sleep(0.05)
    return False


def sleepers(argument):
    """Live pids whose command line is `sleep ARGUMENT`."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and not process_gone(name):
            try:
                with open(f"/proc/{name}/cmdline", "rb") as handle:
                    if handle.read().split(b"\0")[:2] == [b"sleep", argument.encode()]:
                        found.append(int(name))
            except OSError:
                pass
    return found


class ShellTestCase(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.side = os.path.join(self.tmp, "conversation.d")

    def run_cmd(self, command, **policy):
        confirm = policy.pop("confirm", None)
        environ = policy.pop("environ", self.env)
        return run_shell(command, self.cwd, ShellPolicy(**policy), self.side, environ=environ,
                         confirm=confirm)

    def side_entries(self):
        return sorted(os.listdir(self.side)) if os.path.isdir(self.side) else []


class BasicsTest(ShellTestCase):
    def test_exit_code_stdout_stderr(self):
        outcome = self.run_cmd("echo out; echo err >&2; exit 3")
        self.assertEqual((outcome.exit_code, outcome.stdout, outcome.stderr), (3, "out\n", "err\n"))
        self.assertFalse(outcome.timed_out)
        self.assertIsNone(outcome.refused)
        self.assertEqual((outcome.stdout_bytes, outcome.stderr_bytes), (4, 4))
        self.assertIsNone(outcome.stdout_file)
        self.assertEqual(self.side_entries(), [], "script and temp files must be removed")
        self.assertEqual(format_shell_result(outcome), "exit_code: 3\nstdout:\nout\nstderr:\nerr\n")

    def test_runs_in_cwd(self):
        self.assertEqual(self.run_cmd("pwd").stdout, self.cwd + "\n")

    def test_stdin_is_closed(self):
        outcome = self.run_cmd("cat; echo done", timeout=30)
        self.assertEqual((outcome.exit_code, outcome.stdout, outcome.timed_out), (0, "done\n", False))

    def test_script_with_leading_dash_and_huge_body(self):
        outcome = self.run_cmd("-nope 2>/dev/null; echo ok")
        self.assertEqual((outcome.exit_code, outcome.stdout), (0, "ok\n"))
        body = "echo start\n: " + "x" * 200_000 + "\necho end"
        outcome = self.run_cmd(body)
        self.assertEqual((outcome.exit_code, outcome.stdout), (0, "start\nend\n"))

    def test_signal_exit_is_named(self):
        outcome = self.run_cmd("kill -KILL $$")
        self.assertEqual(outcome.exit_code, -9)
        self.assertIn("signal: SIGKILL", format_shell_result(outcome))

    def test_missing_cwd_is_input_error(self):
        with self.assertRaises(InputError):
            run_shell("true", os.path.join(self.tmp, "nope"), ShellPolicy(), self.side, self.env)

    def test_bad_policy_is_config_error(self):
        for policy in (ShellPolicy(approval="maybe"), ShellPolicy(sandbox="docker"),
                       ShellPolicy(timeout=0), ShellPolicy(output_cap=-1)):
            with self.assertRaises(ConfigError):
                run_shell("true", self.cwd, policy, self.side, self.env)


class TimeoutTest(ShellTestCase):
    def test_timeout_kills_whole_group(self):
        outcome = self.run_cmd("sleep 100 & echo $! > bg.pid; echo $$ > main.pid; sleep 100",
                               timeout=0.5)
        self.assertTrue(outcome.timed_out)
        bg = int(slurp(os.path.join(self.cwd, "bg.pid")))
        main = int(slurp(os.path.join(self.cwd, "main.pid")))
        self.assertTrue(wait_gone(bg), "background child survived the timeout")
        self.assertTrue(wait_gone(main))
        text = format_shell_result(outcome)
        self.assertIn("timed_out: true (killed after 0.5 s)", text)

    def test_sigterm_ignored_escalates_to_sigkill(self):
        outcome = self.run_cmd("trap '' TERM; echo $$ > main.pid; while :; do sleep 0.05; done",
                               timeout=0.3)
        self.assertTrue(outcome.timed_out)
        self.assertEqual(outcome.exit_code, -9)
        self.assertTrue(wait_gone(int(slurp(os.path.join(self.cwd, "main.pid")))))

    def test_background_child_holding_streams_does_not_hang(self):
        outcome = self.run_cmd("sleep 100 & echo $! > bg.pid; echo started", timeout=60)
        self.assertEqual((outcome.exit_code, outcome.stdout, outcome.timed_out),
                         (0, "started\n", False))
        self.assertTrue(wait_gone(int(slurp(os.path.join(self.cwd, "bg.pid")))))


class EnvTest(ShellTestCase):
    def test_scrubbed_env(self):
        environ = {"OPENAI_API_KEY": "a", "ANTHROPIC_API_KEY": "b", "GOOGLE_API_KEY": "c",
                   "GEMINI_API_KEY": "d", "CURSOR_API_KEY": "e", "MY_SERVICE_API_KEY": "f",
                   "lower_api_key": "g", "NAGENT_INTERNAL": "h", "NAGENT_CONFIG": "/c.json",
                   "SPECIAL_SECRET": "i", "PATH": "/bin", "GITHUB_TOKEN": "j"}
        env = scrubbed_env(environ, secret_names=("SPECIAL_SECRET",))
        self.assertEqual(env, {"NAGENT_CONFIG": "/c.json", "PATH": "/bin", "GITHUB_TOKEN": "j"})
        self.assertIn("OPENAI_API_KEY", environ, "input must not be modified")

    def test_key_vars_absent_in_command(self):
        environ = dict(self.env, OPENAI_API_KEY="sk-secret-1", ACME_API_KEY="sk-secret-2",
                       NAGENT_PARENT_ID="x", KEEP_ME="yes")
        environ["CORP_KEY"] = "sk-secret-3"
        outcome = run_shell("env", self.cwd, ShellPolicy(), self.side, environ=environ,
                            secret_names=("CORP_KEY",))
        self.assertNotIn("sk-secret", outcome.stdout)
        self.assertNotIn("NAGENT_PARENT_ID", outcome.stdout)
        self.assertIn("KEEP_ME=yes", outcome.stdout)
        self.assertIn("NAGENT_CONFIG=" + self.config_path, outcome.stdout)


class OutputCapTest(ShellTestCase):
    def test_big_output_goes_to_side_file(self):
        size = 5 * 1024 * 1024
        outcome = self.run_cmd(f"yes 0123456789abcdef | head -c {size}; echo small >&2",
                               output_cap=1024)
        self.assertEqual((outcome.exit_code, outcome.stdout_bytes), (0, size))
        self.assertTrue(outcome.stdout_file.startswith(self.side + os.sep))
        with open(outcome.stdout_file, "rb") as handle:
            data = handle.read()
        self.assertEqual(data, (b"0123456789abcdef\n" * (size // 17 + 1))[:size])
        self.assertEqual(os.stat(outcome.stdout_file).st_mode & 0o777, 0o600)
        self.assertTrue(outcome.stdout.startswith(data[:512].decode()))
        self.assertTrue(outcome.stdout.endswith(data[-512:].decode()))
        self.assertLess(len(outcome.stdout), 1200)
        self.assertEqual((outcome.stderr, outcome.stderr_file), ("small\n", None))
        text = format_shell_result(outcome)
        self.assertIn(f"[stdout: {size} bytes; showing first 512 and last 512; "
                      f"full output in {outcome.stdout_file}]", text)
        self.assertIn(f"[... {size - 1024} bytes omitted ...]", text)
        self.assertEqual(self.side_entries(), [os.path.basename(outcome.stdout_file)])

    def test_second_capped_run_gets_a_new_side_file(self):
        first = self.run_cmd("head -c 100 /dev/zero | tr '\\0' a", output_cap=10)
        second = self.run_cmd("head -c 100 /dev/zero | tr '\\0' b", output_cap=10)
        self.assertNotEqual(first.stdout_file, second.stdout_file)
        self.assertEqual(slurp(first.stdout_file), "a" * 100)

    def test_binary_output(self):
        outcome = self.run_cmd("printf 'a\\000b'")
        self.assertEqual(outcome.stdout, "(binary output: 3 bytes)")
        self.assertEqual(slurp(outcome.stdout_file, "rb"), b"a\0b")
        self.assertNotIn("\0", format_shell_result(outcome))

    def test_invalid_utf8_is_replaced(self):
        self.assertEqual(self.run_cmd("printf 'x\\377y'").stdout, "x\ufffdy")


class ApprovalTest(ShellTestCase):
    def test_deny_refuses_without_running(self):
        outcome = self.run_cmd("touch ran", approval="deny")
        self.assertIsNone(outcome.exit_code)
        self.assertIn("shell_approval: deny", outcome.refused)
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "ran")))
        self.assertIn("refused: ", format_shell_result(outcome))

    def test_confirm_yes_and_no(self):
        asked = []
        yes = self.run_cmd("touch ran", approval="confirm", confirm=lambda c: asked.append(c) or True)
        self.assertEqual((yes.exit_code, asked), (0, ["touch ran"]))
        os.unlink(os.path.join(self.cwd, "ran"))
        no = self.run_cmd("touch ran", approval="confirm", confirm=lambda c: False)
        self.assertEqual(no.refused, nagent_shell.DECLINED)
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "ran")))

    def test_auto_never_asks(self):
        outcome = self.run_cmd("true", confirm=lambda c: self.fail("asked"))
        self.assertEqual(outcome.exit_code, 0)

    def test_confirm_without_terminal_is_refused(self):
        code = ("import sys, nagent_shell as s\n"
                "o = s.run_shell('touch ran', sys.argv[1], s.ShellPolicy(approval='confirm'), sys.argv[2])\n"
                "print(o.refused)\n")
        env = dict(self.env, PYTHONPATH=HELPERS)
        proc = subprocess.run([sys.executable, "-c", code, self.cwd, self.side], env=env,
                              capture_output=True, text=True, timeout=60, start_new_session=True,
                              stdin=subprocess.DEVNULL)
        self.assertEqual(proc.stdout.strip(), nagent_shell.NO_TERMINAL, proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "ran")))

    def test_ask_on_tty(self):
        master, slave = os.openpty()
        self.addCleanup(os.close, master)
        self.addCleanup(os.close, slave)
        tty = os.ttyname(slave)
        for answer, expected in ((b"yes\n", True), (b"\n", False)):
            asked = {}
            thread = threading.Thread(target=lambda: asked.update(
                result=nagent_shell.ask_on_tty("echo \x1b[2J hi", tty)))
            thread.start()
            prompt = ""
            while "[y/N/e]" not in prompt and select.select([master], [], [], 10)[0]:
                prompt += os.read(master, 4096).decode()
            os.write(master, answer)   # typed after the prompt appeared
            thread.join(10)
            self.assertIs(asked.get("result").run, expected)
            self.assertIn("echo \\x1b[2J hi", prompt)
        self.assertIsNone(nagent_shell.ask_on_tty("true", os.path.join(self.tmp, "missing")))


class FormatTest(HermeticTestCase):
    def outcome(self, **fields):
        base = dict(exit_code=0, stdout="", stderr="", timed_out=False, refused=None,
                    stdout_bytes=0, stderr_bytes=0, stdout_file=None, stderr_file=None,
                    seconds=0.1, timeout=120.0)
        base.update(fields)
        return ShellOutcome(**base)

    def test_formats(self):
        self.assertEqual(format_shell_result(self.outcome(stdout="no newline", stdout_bytes=10)),
                         "exit_code: 0\nstdout:\nno newline\nstderr:\n")
        text = format_shell_result(self.outcome(exit_code=-15, timed_out=True))
        self.assertTrue(text.startswith("exit_code: -15\nsignal: SIGTERM\n"
                                        "timed_out: true (killed after 120 s)\n"), text)
        self.assertEqual(format_shell_result(self.outcome(exit_code=None, refused="nope")),
                         "exit_code: none\nrefused: nope\n")


@unittest.skipUnless(HAVE_BWRAP, "bwrap not installed")
class SandboxTest(ShellTestCase):
    def setUp(self):
        super().setUp()
        # A read-only target outside every writable root (cwd, /tmp, /var/tmp, TMPDIR).
        self.outside = outside_dir(self)
        # nagent's state dir and config exist (a run creates them): the sandbox hides both.
        os.makedirs(os.path.join(self.home, ".nagent"))
        self.write_config({})

    def test_writable_and_read_only_paths(self):
        extra = os.path.join(outside_dir(self), "extra")
        os.mkdir(extra)
        state = os.path.join(self.home, ".nagent")
        script = (f"echo a > in-cwd && echo b > \"$TMPDIR/in-tmpdir\" && echo c > {extra}/in-extra"
                  " && echo v > /var/tmp/.nagent-sbx-$$ && rm /var/tmp/.nagent-sbx-$$"
                  f" && echo ok; echo d > {self.outside}/x || echo outside-refused;"
                  f" echo e > {state}/x || echo state-refused")
        outcome = self.run_cmd(script, sandbox="bwrap", writable=(extra,))
        self.assertEqual(outcome.stdout, "ok\noutside-refused\nstate-refused\n", outcome.stderr)
        self.assertTrue(os.path.exists(os.path.join(self.cwd, "in-cwd")))
        self.assertTrue(os.path.exists(os.path.join(self.tmpdir, "in-tmpdir")))
        self.assertTrue(os.path.exists(os.path.join(extra, "in-extra")))
        self.assertFalse(os.path.exists(os.path.join(self.outside, "x")))
        self.assertFalse(os.path.exists(os.path.join(state, "x")))

    def test_network_off_unless_allowed(self):
        listener = socket.socket()
        self.addCleanup(listener.close)
        listener.bind(("127.0.0.1", 0))
        listener.listen(4)
        port = listener.getsockname()[1]
        probe = (f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5)\""
                 " && echo connected || echo blocked")
        self.assertEqual(self.run_cmd(probe, sandbox="bwrap").stdout, "blocked\n")
        allowed = self.run_cmd(probe, sandbox="bwrap", sandbox_network=True)
        self.assertEqual(allowed.stdout, "connected\n", allowed.stderr)

    def test_sandbox_timeout_kills_everything(self):
        outcome = self.run_cmd("sleep 97.25 & sleep 100", sandbox="bwrap", timeout=0.3)
        self.assertTrue(outcome.timed_out)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sleepers("97.25"):
            time.sleep(0.05)
        self.assertEqual(sleepers("97.25"), [])

    def test_missing_bwrap_is_setup_error(self):
        environ = dict(self.env, PATH=os.path.join(self.tmp, "empty-bin"))
        with self.assertRaises(SetupError) as caught:
            self.run_cmd("true", sandbox="bwrap", environ=environ)
        self.assertIn("apt-get install bubblewrap", caught.exception.line())
        self.assertEqual(self.side_entries(), [])


if __name__ == "__main__":
    unittest.main()
