"""MCP servers that stay up for a run (issue 25): the run's shell reaches the run's live sessions
through the run's channel (nagent_mcp_channel, nagent_main_mcp_host), against the real SDK test
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
import time
import unittest
import unittest.mock

from base import HermeticTestCase
from test_loop import NagentRunCase
from test_mcp_servers import ServerProcesses, needs_sdk, stdio_entry
from unprivileged import unprivileged_argv

import nagent_mcp_channel
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
                            "nagent-mcp call test env --args '{\"names\": [\"SERVICE_TOKEN\", \"GOOGLE_API_KEY\"]}'\n"
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
        self.assertIn("SERVICE_TOKEN=[redacted]\nGOOGLE_API_KEY=<unset>", second)  # no provider key
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

    def test_servers_start_in_parallel_once_each_and_not_at_all_outside_the_run(self):
        # --meet: a server serves only once the given number of starts happened, so two calls
        # whose servers were started one after the other would time out.
        self.write_config(dict(self.CONFIG, mcp_servers={
            "a": stdio_entry("--meet", "2"), "b": stdio_entry("--meet", "2"),
            "c": stdio_entry("--meet", "3"), "unused": stdio_entry()}))
        self.fake.reply(shell(
            "nagent-mcp call a counter --timeout 25 > a.out & nagent-mcp call b counter --timeout 25 > b.out & wait\n"
            "nagent-mcp call c counter > c1.out & nagent-mcp call c counter > c2.out & wait\n"
            "cat a.out b.out c1.out c2.out; nagent-mcp --list a; echo \"channel=$NAGENT_MCP_CHANNEL\""))
        self.fake.reply("<nagent-response>done</nagent-response>")
        proc = self.nagent("--json", "call three servers")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        [result] = results(self, self.json_of(proc)["conversation"])
        starts = self.started()
        for pid in starts:
            self.addCleanup(self.kill_if_alive, pid)
        self.assertEqual(len(starts), 3, result)          # a and b side by side, c once for two calls
        self.assertRegex(result, r"count=1 pid=\d+\ncount=1 pid=\d+\ncount=[12] pid=(\d+)\ncount=[12] pid=\1")
        self.assertIn("counter", result)                 # the list answered from the live server
        self.assertEqual(len(self.started()), 3)
        self.assertIn(f"channel={self.home}/.nagent/run/mcp-", result)
        for pid in starts:
            self.assertGone(pid, what="the run")
        # Outside a run the same command starts the server for the call alone, as it always did.
        cold = [self.run_tool("nagent-mcp", "call", "c", "counter") for _ in range(2)]
        self.assertEqual([c.returncode for c in cold], [0, 0], cold[0].stderr)
        self.assertEqual([c.stdout.split()[0] for c in cold], ["count=1", "count=1"])
        self.assertNotEqual(cold[0].stdout, cold[1].stdout)   # two processes

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


# probe.py PATH OUT [--daemon] [--after FILE] [--child] [--pid PID]: ask the channel at PATH for
# its list and write the answer to OUT (atomically). --daemon: first leave the caller (a new
# process group, forked twice: init adopts it, the session stays); --after: wait for FILE first;
# --child: the asking is done by a child forked then; --pid: put a forged pid in the request.
CHANNEL_PROBE = r'''
import json, os, socket, sys, time
path, out, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
if "--daemon" in flags:
    if os.fork():
        os._exit(0)
    os.setpgid(0, 0)
    if os.fork():
        os._exit(0)
if "--after" in flags:
    go, deadline = flags[flags.index("--after") + 1], time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.01)
if "--child" in flags and os.fork():
    os._exit(0)
request = {"op": "list", "server": None, "timeout": 20}
if "--pid" in flags:
    forged = int(flags[flags.index("--pid") + 1])
    request.update(pid=forged, peer={"pid": forged, "uid": 0})
sock = socket.socket(socket.AF_UNIX)
sock.connect(path)
sock.sendall(json.dumps(request).encode() + b"\n")
data = b""
while chunk := sock.recv(65536):
    data += chunk
with open(out + ".part", "wb") as handle:
    handle.write(data)
os.rename(out + ".part", out)
'''
REFUSED = "serves only its own shell commands"


class ChannelTest(HermeticTestCase):
    """The driver's side alone: only the run's shell commands get in; the wire's checks.
    A "shell action" here is what nagent_shell makes of one: a bash in a session of its own,
    tracked while it runs, untracked once it ended."""

    def setUp(self):
        super().setUp()
        self.probe_script = os.path.join(self.tmp, "probe.py")
        with open(self.probe_script, "w") as handle:
            handle.write(CHANNEL_PROBE)

    def channel(self):
        channel = Channel(lambda: (self.env, self.cwd, {"servers": [], "deny": []}))
        self.addCleanup(channel.close)
        return channel

    def probe(self, path, out, *flags):
        return [sys.executable, self.probe_script, path, os.path.join(self.tmp, out), *map(str, flags)]

    def answer(self, out):
        target = os.path.join(self.tmp, out)
        deadline = time.monotonic() + 60
        while not os.path.exists(target):
            self.assertLess(time.monotonic(), deadline, f"no answer in {out}")
            time.sleep(0.02)
        with open(target) as handle:
            return handle.read()

    def shell_action(self, channel, script):
        proc = subprocess.Popen(["bash", "-c", script], start_new_session=True, env=self.env, cwd=self.cwd)
        channel.track(proc.pid)
        return proc

    def test_only_processes_of_a_running_shell_action_of_this_run_get_in(self):
        ours, theirs = self.channel(), self.channel()
        path, other = ours.variables(self.env)[wire.CHANNEL_VAR], theirs.variables(self.env)[wire.CHANNEL_VAR]
        go = os.path.join(self.tmp, "go")
        self.addCleanup(self.write_file, go, "")        # the daemons end even when a check fails
        q = subprocess.list2cmdline
        action = self.shell_action(ours, "; ".join([
            q(self.probe(path, "inside")),                           # a child of the action
            q(self.probe(other, "other-run")),                       # another run's channel
            q(self.probe(path, "daemon", "--daemon")),               # adopted by init, same session
            q(self.probe(path, "outlived", "--daemon", "--after", go)),
            q(self.probe(path, "started-after", "--daemon", "--after", go, "--child")),
            f"while [ ! -e {self.tmp}/daemon ]; do sleep 0.01; done"]))
        self.assertEqual(action.wait(timeout=120), 0)
        ours.untrack(action.pid)                                 # the action ended
        self.assertIn('"servers":[]', self.answer("inside"))
        self.assertIn('"servers":[]', self.answer("daemon"))    # while its action still ran
        self.assertIn(REFUSED, self.answer("other-run"))
        self.write_file(go, "")
        self.assertIn(REFUSED, self.answer("outlived"))         # a daemon left running after it
        self.assertIn(REFUSED, self.answer("started-after"))    # a process born after it ended
        # The pid the client names in its request counts for nothing: the kernel's word does.
        subprocess.run(self.probe(path, "forged", "--pid", action.pid), check=True, timeout=60)
        self.assertIn(REFUSED, self.answer("forged"))

    def test_another_user_is_refused_even_where_the_socket_is_open_to_it(self):
        channel = self.channel()
        path = channel.variables(self.env)[wire.CHANNEL_VAR]
        channel.track(os.getpid())         # the other user's process descends from a tracked one
        folder = os.path.dirname(path)
        while folder != os.path.dirname(self.tmp):     # every directory down to it opened up
            os.chmod(folder, 0o755)
            folder = os.path.dirname(folder)
        os.chmod(path, 0o777)
        os.chmod(self.probe_script, 0o644)
        out = os.path.join(self.tmp, "out")
        os.mkdir(out)
        os.chmod(out, 0o777)
        other = subprocess.run(unprivileged_argv(self.probe(path, "out/answer"), self.tmp),
                               capture_output=True, text=True, timeout=60)
        self.assertEqual(other.returncode, 0, other.stderr)
        self.assertIn(REFUSED, self.answer("out/answer"))

    def test_links_planted_at_the_run_dir_or_the_channel_dir_are_not_followed(self):
        elsewhere = os.path.join(self.tmp, "elsewhere")
        os.mkdir(elsewhere)
        os.chmod(elsewhere, 0o777)                       # a place others could swap things in
        run = os.path.join(self.home, ".nagent", "run")
        os.makedirs(os.path.dirname(run), exist_ok=True)
        os.symlink(elsewhere, run)
        channel = self.channel()
        self.assertEqual(channel.variables(self.env), {})      # the shell then starts servers per call
        self.assertIn("is not a private directory of this user", channel.problem)
        self.assertEqual(os.listdir(elsewhere), [])
        os.unlink(run)
        # A name taken at the channel directory's path (a link to a place of another's), or a
        # link named like a dead run's directory, is passed over, not used or swept through.
        os.mkdir(run, 0o700)
        victim = os.path.join(self.tmp, "victim")
        os.mkdir(victim)
        self.write_file(os.path.join(victim, "keep"), "x")
        os.symlink(elsewhere, os.path.join(run, f"mcp-{os.getpid()}-aaaaaaaa"))
        os.symlink(victim, os.path.join(run, "mcp-999999999-bbbbbbbb"))
        with unittest.mock.patch.object(nagent_mcp_channel.token, "token_hex",
                                        side_effect=["aaaaaaaa", "cccccccc"]):
            path = self.channel().variables(self.env)[wire.CHANNEL_VAR]
        self.assertEqual(path, os.path.join(run, f"mcp-{os.getpid()}-cccccccc", "s"))
        self.assertEqual(os.listdir(elsewhere), [])
        self.assertEqual(os.listdir(victim), ["keep"])


    def test_a_stranger_is_refused_and_the_channel_is_private(self):
        channel = Channel(lambda: (self.env, self.cwd, {"servers": [], "deny": []}))
        try:
            path = channel.variables(self.env)[wire.CHANNEL_VAR]
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
