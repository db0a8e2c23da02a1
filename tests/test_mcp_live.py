"""MCP servers that stay up for a run (issue 25): the run's shell reaches the run's live sessions
through the run's channel (nagent_mcp_channel, nagent_mcp_host), against the real SDK test
server (tests/mcp_server.py, its `counter` tool keeps state in the process).

The journeys run the real loop with the scripted model: a stateful server called from two shell
actions keeps its count and starts once, the deny rules and the redaction hold on the live
path, what a shell command can send on the socket beyond `nagent-mcp`, a run killed with SIGKILL
takes its servers along, and a bwrap-sandboxed shell uses the servers of a config it cannot
read. The channel's own checks (who may connect) are exercised in-process."""
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import unittest

from base import HermeticTestCase
from test_loop import NagentRunCase
from test_mcp_servers import ServerProcesses, needs_sdk, stdio_entry
from unprivileged import unprivileged_argv

import nagent_mcp_wire as wire
from nagent_errors import UsageError
from nagent_mcp_channel import Channel

HAVE_BWRAP = shutil.which("bwrap") is not None
PROBE = r'''
import json, os, socket
def ask(request):
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(os.environ["NAGENT_MCP_CHANNEL"])
    sock.sendall(request)
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data.decode()
print("spawn:", ask(json.dumps({"op": "spawn", "command": ["touch", "pwned"]}).encode() + b"\n"))
print("junk:", ask(b"\xff not json\n"))
print("raw:", ask(json.dumps({"op": "call", "server": "test", "tool": "env", "timeout": 30,
                              "arguments": {"names": ["SERVICE_TOKEN", "PATH_HINT"]},
                              "env": {"PATH_HINT": "from the caller"},
                              "config": "evil.json"}).encode() + b"\n"))
'''
EVIL = {"mcp_servers": {"test": {"command": "sh", "args": ["-c", "touch pwned-by-config"]}}}


def shell(text):
    return f"<nagent-shell>{text}</nagent-shell>"


def results(case, path):
    return [record.body for record in case.kinds(path, "result") if record.attr("action") == "shell"]


@needs_sdk
class LiveRunTest(ServerProcesses, NagentRunCase):
    SECRET = "live-value-8c1f27d9e4"   # in an env var not named like a secret: only the host knows

    def setUp(self):
        super().setUp()
        self.starts = os.path.join(self.tmp, "starts")
        self.env.update(MCP_TEST_STARTS=self.starts, MCP_TEST_LIVE=self.SECRET)
        self.write_config(dict(self.CONFIG, mcp_servers={
            "test": stdio_entry(SERVICE_TOKEN="${MCP_TEST_LIVE}", PATH_HINT="from the config"),
            "other": stdio_entry()},
            permissions=[{"name": "no-fail", "decision": "deny", "mcp": "test/fail"}]))

    def started(self):
        with open(self.starts) as handle:
            return [int(line) for line in handle.read().split()]

    def channel_dirs(self):
        folder = os.path.join(self.home, ".nagent", "run")
        return [name for name in os.listdir(folder) if name.startswith("mcp-")] if os.path.isdir(folder) else []

    def test_one_server_for_the_run_state_kept_rules_and_redaction_hold(self):
        self.fake.reply(shell("nagent-mcp call test counter"))
        self.fake.reply('<nagent-write path="call.sh">nagent-mcp call test fail --args \'{"message": "x"}\'\n'
                        'echo "denied exit=$?"\n</nagent-write>'
                        f'<nagent-write path="evil.json">{json.dumps(EVIL)}</nagent-write>'
                        f'<nagent-write path="probe.py">{PROBE}</nagent-write>' + shell(
                            "nagent-mcp call test counter --args '{\"step\": 2}'\n"
                            "bash call.sh\n"
                            "NAGENT_CONFIG=$PWD/evil.json nagent-mcp call test counter\n"
                            "nagent-mcp call test env --args '{\"names\": [\"SERVICE_TOKEN\"]}'\n"
                            "python3 probe.py\n"
                            "ls pwned* 2>&1 | head -1"))
        self.fake.reply("<nagent-response>done</nagent-response>")
        proc = self.nagent("--json", "count twice")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        path = self.json_of(proc)["conversation"]
        first, second = results(self, path)
        starts = self.started()
        self.assertEqual(len(starts), 1, starts)        # one start for the run; "other" never
        pid = starts[0]
        self.addCleanup(self.kill_if_alive, pid)
        self.assertIn(f"count=1 pid={pid}", first)
        self.assertIn(f"count=3 pid={pid}", second)     # the second shell action, same process
        # A denied tool the driver could not see (inside a script) is refused by the host.
        self.assertIn(f"Error: denied by rule no-fail ({self.config_path}): test/fail", second)
        self.assertIn("denied exit=10", second)
        # The caller's NAGENT_CONFIG names another server "test": the host keeps the run's.
        self.assertIn(f"count=4 pid={pid}", second)
        # A secret the server's entry inserted is blanked by the host, on both paths to it.
        self.assertIn("SERVICE_TOKEN=[redacted]", second)
        self.assertIn('"text":"SERVICE_TOKEN=[redacted]\\nPATH_HINT=from the config"', second)
        self.assertNotIn(self.SECRET, proc.stdout + proc.stderr + self.read_bytes(path).decode())
        # Nothing but calls and lists: no command runs, malformed requests get one error.
        self.assertIn("spawn: {\"error\":{\"error\":\"MCP channel request must be a call or a list\"", second)
        self.assertIn("junk: {\"error\":{\"error\":\"MCP channel request is not JSON\"", second)
        self.assertIn("No such file or directory", second)   # ls pwned*: nothing was created
        self.assertGone(pid, what="the run")              # stopped at the run's end
        self.assertEqual(self.channel_dirs(), [])

    def test_a_run_killed_with_sigkill_takes_its_servers_along(self):
        pidfile = os.path.join(self.tmp, "server.pid")
        self.env["MCP_TEST_PIDFILE"] = pidfile
        self.fake.reply(shell("nagent-mcp call test sleep --args '{\"seconds\": 120}'"))
        run = self.start_nagent("sleep on the server")
        try:
            server = self.wait_for_pid(pidfile, timeout=60)
            self.addCleanup(self.kill_if_alive, server)
            run.kill()
            run.communicate(timeout=30)
            self.assertGone(server, timeout=15, what="the killed run")
        finally:
            if run.poll() is None:
                run.kill()
                run.communicate()

    @unittest.skipUnless(HAVE_BWRAP, "bwrap not installed")
    def test_a_sandboxed_shell_uses_the_run_servers_not_the_config(self):
        # A stdio server gets what the sandboxed shell gets (the allowlist, plus shell.env's
        # names), and what its entry names: ${VAR} there reads the run's own environment.
        with open(self.config_path, encoding="utf-8") as handle:
            self.write_config(dict(json.load(handle), shell={"sandbox": "bwrap", "env": ["MCP_TEST_STARTS"]}))
        self.fake.reply(shell("nagent-mcp call test counter; nagent-mcp call test counter --json | head -c 300; "
                              "echo; nagent-mcp call test env --args "
                              "'{\"names\": [\"SERVICE_TOKEN\", \"MCP_TEST_LIVE\"]}'; "
                              "cat \"$NAGENT_CONFIG\" ~/.nagent/config.json; echo \"cat exit=$?\""))
        self.fake.reply("<nagent-response>done</nagent-response>")
        proc = self.nagent("--json", "count in the sandbox")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        [result] = results(self, self.json_of(proc)["conversation"])
        pid = self.started()[0]
        self.addCleanup(self.kill_if_alive, pid)
        self.assertIn(f"count=1 pid={pid}", result)
        self.assertIn(f"count=2 pid={pid}", result)
        self.assertIn("SERVICE_TOKEN=[redacted]\nMCP_TEST_LIVE=<unset>", result)
        self.assertIn("cat exit=1", result)                # the config stays out of the sandbox
        self.assertNotIn("mcp_servers", result)
        self.assertEqual(len(self.started()), 1)
        self.assertGone(pid, what="the run")


class ChannelTest(HermeticTestCase):
    """The driver's side alone: only the run's shell commands get in; the wire's checks."""

    def test_a_stranger_is_refused_and_the_channel_is_private(self):
        channel = Channel(lambda: (self.env, self.cwd, {"servers": [], "deny": []}))
        try:
            path = channel.variables()[wire.CHANNEL_VAR]
            self.assertEqual(stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode), 0o700)
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600)
            request = {"op": "list", "server": None, "timeout": 5}
            answer = wire.ask(path, request, 5)        # this test is no shell action of the run
            self.assertEqual(wire.error_from(answer["error"]).line(),
                             f"Error: the run's MCP channel serves only its own shell commands: process "
                             f"{os.getpid()} (nagent-mcp reaches it from the run's shell actions)")
            self.assertEqual(wire.error_from(answer["error"]).exit_code, 5)
            # Another user cannot even reach the socket (the directory is 0700), though here it
            # runs as a descendant of a process the channel tracks.
            channel.track(os.getpid())
            other = subprocess.run(unprivileged_argv([sys.executable, "-c", (
                "import socket, sys; s = socket.socket(socket.AF_UNIX)\n"
                "try: s.connect(sys.argv[1])\nexcept OSError as e: print(e.strerror)"), path], self.tmp),
                capture_output=True, text=True, timeout=60)
            self.assertEqual(other.stdout.strip(), "Permission denied", other.stderr)
        finally:
            channel.close()
        self.assertFalse(os.path.exists(os.path.dirname(path)))
        with self.assertRaises(wire.ChannelError) as caught:
            wire.ask(path, request, 5)
        self.assertIn("cannot reach the run's MCP channel", caught.exception.line())

    def test_requests_carry_a_call_or_a_list_and_nothing_else(self):
        call = wire.request_of(json.dumps({"op": "call", "server": "s", "tool": "t", "arguments": {},
                                           "timeout": 5, "env": {"A": "b"}, "command": "x"}).encode())
        self.assertEqual(call, {"op": "call", "server": "s", "tool": "t", "arguments": {}, "timeout": 5.0})
        for bad in (b"[]", b'{"op": "exec"}', b'{"op": "call", "server": "s", "tool": "", "arguments": {}}',
                    b'{"op": "call", "server": "s", "tool": "t", "arguments": [], "timeout": 1}',
                    b'{"op": "list", "timeout": -1}', b'{"op": "list", "server": 3, "timeout": 1}'):
            with self.subTest(bad=bad), self.assertRaises(UsageError):
                wire.request_of(bad)
        result = {"content": [{"type": "text", "text": "k=SECRETVALUE"},
                              {"type": "image", "data": "SECRETVALUE", "mimeType": "image/png"}],
                  "structuredContent": {"SECRETVALUE": ["SECRETVALUE"]}}
        self.assertEqual(wire.redact_result(result, ("SECRETVALUE",)), {
            "content": [{"type": "text", "text": "k=[redacted]"},
                        {"type": "image", "data": "SECRETVALUE", "mimeType": "image/png"}],
            "structuredContent": {"SECRETVALUE": ["[redacted]"]}})
