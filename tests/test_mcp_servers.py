"""nagent-mcp against real MCP servers built with the official SDK (tests/mcp_server.py): over
stdio (list, call, tool error, timeout, crash, stdout pollution, binary content, ${VAR} in env,
the scrubbed environment) and over streamable HTTP (one server process for the class), plus an
end-to-end loop where the scripted model calls nagent-mcp through <nagent-shell>.

Every nagent-mcp run starts its stdio server afresh (about a second of SDK imports on each
side), so each test asks several things at once where it can."""
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import unittest
from concurrent.futures import ThreadPoolExecutor

from base import BIN, HermeticTestCase
from nagent_pids import start_ticks
from test_loop import NagentRunCase

SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_server.py")
HAVE_SDK = importlib.util.find_spec("mcp") is not None
# CI installs the SDK (.ci/run): there a missing SDK must fail these tests, not skip them.
needs_sdk = unittest.skipUnless(HAVE_SDK or os.environ.get("CI"), "the mcp SDK is not installed")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def stdio_entry(*flags, **env):
    entry = {"command": sys.executable, "args": [SERVER, *flags]}
    if env:
        entry["env"] = env
    return entry


def servers_config():
    return {"mcp_servers": {
        "test": stdio_entry(GREETING="hello ${MCP_TEST_NAME:-nobody}", FALLBACK="${MCP_TEST_UNSET:-fallback}",
                            SERVICE_TOKEN="${MCP_TEST_TOKEN:-none}"),
        "noisy": stdio_entry("--pollute"),
        "junk": stdio_entry("--junk"),
        "dead": stdio_entry("--exit-at-start"),
        "missing": {"command": "nagent-no-such-mcp-server"},
    }, "providers": {"corp": {"base_url": "http://127.0.0.1:9/v1", "api_key": "${CORP_LLM_KEY}"}}}


class McpCase(HermeticTestCase):
    def mcp(self, *args, input="", env=None):
        return self.run_tool("nagent-mcp", *args, input=input, env=env)

    def mcp_parallel(self, *calls, env=None):
        """Several runs at once; a call is a tuple of arguments, or (arguments, stdin text)."""
        def one(call):
            args, stdin = (call[0], call[1]) if call and isinstance(call[0], tuple) else (call, "")
            return self.mcp(*args, input=stdin, env=env)
        with ThreadPoolExecutor(max_workers=3) as pool:
            return list(pool.map(one, calls))


class ServerProcesses:
    """Waiting for a test server's pid, and checking that it is gone (pids are reused: a
    server is named by its command line)."""

    def wait_for_pid(self, pidfile, timeout=30.0):
        deadline = time.monotonic() + timeout
        while not (os.path.exists(pidfile) and os.path.getsize(pidfile)):
            if time.monotonic() > deadline:
                self.fail("the test server never wrote its pid")
            time.sleep(0.05)
        with open(pidfile) as handle:
            return int(handle.read())

    @staticmethod
    def kill_if_alive(pid):
        """SIGKILL the test server if it still runs (checked by its command line: pids get reused)."""
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as handle:
                if SERVER.encode() in handle.read():
                    os.kill(pid, signal.SIGKILL)
        except (FileNotFoundError, ProcessLookupError):
            pass

    def assertGone(self, pid, timeout=8.0, what="nagent-mcp"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if start_ticks(pid) is None:   # gone, or a zombie nobody has reaped yet
                return
            time.sleep(0.05)
        self.kill_if_alive(pid)
        self.fail(f"the MCP server {pid} outlived {what}")


@needs_sdk
class StdioServerTest(ServerProcesses, McpCase):
    def setUp(self):
        super().setUp()
        self.write_config(servers_config())

    def test_list_text_and_json(self):
        text, data = self.mcp_parallel(("--list", "test"), ("--list", "test", "--json"))
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("test (11 tools)\n", text.stdout)
        self.assertIn("  describe_path(path: string, depth?: integer) — Describe a path to some depth.\n",
                      text.stdout)
        self.assertIn("  echo(text: string) — Return the text unchanged.\n", text.stdout)
        self.assertIn("  env(names: string[]) — ", text.stdout)
        self.assertNotIn("second paragraph", text.stdout)
        self.assertIn("  image() — A one-pixel PNG.\n", text.stdout)
        self.assertEqual(text.stderr, "")
        listing = json.loads(data.stdout)["servers"]
        self.assertEqual([(s["name"], s["transport"], s["error"]) for s in listing], [("test", "stdio", None)])
        tools = {tool["name"]: tool for tool in listing[0]["tools"]}
        self.assertEqual(tools["add"]["signature"], "a: integer, b: integer")
        self.assertEqual(tools["add"]["input_schema"]["required"], ["a", "b"])
        self.assertIn("second paragraph", tools["echo"]["description"])

    def test_call_text_stdin_json_and_tool_error(self):
        plain, stdin, as_json, failed = self.mcp_parallel(
            ("call", "test", "describe_path", "--args", '{"path": "/srv", "depth": 3}'),
            (("call", "test", "add"), '{"a": 2, "b": 40}'),
            ("call", "test", "echo", "--args", '{"text": "line one\\nline two"}', "--json"),
            ("call", "test", "fail", "--args", '{"message": "disk is on fire\\nsecond line"}', "--json"))
        self.assertEqual((plain.returncode, plain.stdout, plain.stderr), (0, "/srv at depth 3\n", ""))
        self.assertEqual((stdin.returncode, stdin.stdout), (0, "42\n"), stdin.stderr)
        data = json.loads(as_json.stdout)
        self.assertEqual((data["text"], data["is_error"]), ("line one\nline two\n", False))
        self.assertEqual(data["content"], [{"type": "text", "text": "line one\nline two"}])
        self.assertEqual(data["structured_content"], {"result": "line one\nline two"})
        self.assertCleanError(failed, 1, "MCP tool failed: test/fail: Error executing tool fail: disk is on fire")
        outcome = json.loads(failed.stdout)
        self.assertTrue(outcome["is_error"])
        self.assertIn("disk is on fire\nsecond line", outcome["text"])

    def test_binary_content_goes_to_files_in_the_temp_dir(self):
        proc = self.mcp("call", "test", "blob", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        data = json.loads(proc.stdout)
        text, image, blob = data["content"]
        self.assertEqual(text, {"type": "text", "text": "here is the blob"})
        self.assertEqual((image["type"], image["mime_type"], os.path.dirname(image["file"])),
                         ("image", "image/png", self.tmpdir))
        self.assertTrue(image["file"].endswith(".png"))
        with open(image["file"], "rb") as handle:
            self.assertTrue(handle.read().startswith(PNG_MAGIC))
        self.assertEqual((blob["uri"], blob["bytes"]), ("test://blob.bin", 256))
        with open(blob["file"], "rb") as handle:
            self.assertEqual(handle.read(), bytes(range(256)))
        self.assertIn(f"[image, image/png, {image['bytes']} bytes saved to {image['file']}]\n", data["text"])
        self.assertIn(f"256 bytes saved to {blob['file']}]\n", data["text"])
        self.assertNotIn("AAECAw", proc.stdout)   # no base64 payload in the output

    def test_env_expansion_and_scrubbed_environment(self):
        env = dict(self.env, MCP_TEST_NAME="world", MCP_TEST_TOKEN="tok-0123456789",
                   OPENAI_API_KEY="sk-openai-secret", CORP_LLM_KEY="corp-secret-value",
                   SOME_PLAIN_SETTING="kept")
        names = ["GREETING", "FALLBACK", "SERVICE_TOKEN", "OPENAI_API_KEY", "CORP_LLM_KEY", "SOME_PLAIN_SETTING"]
        proc = self.mcp("call", "test", "env", "--args", json.dumps({"names": names}), env=env)
        self.assertEqual(proc.stdout.splitlines(), [
            "GREETING=hello world",            # ${VAR} expanded from nagent-mcp's environment
            "FALLBACK=fallback",               # ${VAR:-default} of an unset variable
            "SERVICE_TOKEN=[redacted]",        # reached the server, kept out of the output
            "OPENAI_API_KEY=<unset>",          # provider keys are scrubbed
            "CORP_LLM_KEY=<unset>",            # so are the variables a config's api_key names
            "SOME_PLAIN_SETTING=kept"], proc.stderr)
        self.assertNotIn("tok-0123456789", proc.stdout + proc.stderr)

    def test_timeout_kills_the_server_and_reports_it(self):
        # The timeout covers the server's start-up too: it must outlast one measured start-up
        # (SDK imports on both sides; seconds on a loaded 2-core machine), with a margin.
        started = time.monotonic()
        first = self.mcp("call", "test", "echo", "--args", '{"text": "up"}')
        self.assertEqual(first.returncode, 0, first.stderr)
        timeout = round(max(1.5, 2 * (time.monotonic() - started) + 1), 1)
        pidfile = os.path.join(self.tmp, "server.pid")
        started = time.monotonic()
        proc = self.mcp("call", "test", "sleep", "--args", '{"seconds": 60}', "--timeout", str(timeout),
                        env=dict(self.env, MCP_TEST_PIDFILE=pidfile))
        elapsed = time.monotonic() - started
        self.assertCleanError(proc, 5, f"MCP server did not answer in time: test: no answer within "
                                       f"{timeout:g} s during tools/call sleep; it was stopped")
        self.assertLess(elapsed, timeout + 30)
        server = self.wait_for_pid(pidfile)
        self.addCleanup(self.kill_if_alive, server)
        self.assertGone(server)

    def test_sigterm_stops_a_server_that_ignores_its_stdin(self):
        # nagent's shell timeout SIGTERMs nagent-mcp's process group; the server has its own, and
        # this one does not exit when its stdin closes: nagent-mcp must stop it on the way out.
        pidfile = os.path.join(self.tmp, "junk.pid")
        client = subprocess.Popen([sys.executable, os.path.join(BIN, "nagent-mcp"), "call", "junk", "echo"],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                  text=True, env=dict(self.env, MCP_TEST_PIDFILE=pidfile), cwd=self.cwd)
        try:
            server = self.wait_for_pid(pidfile)
            self.addCleanup(self.kill_if_alive, server)   # a failed assertion must not leak it
            time.sleep(0.5)   # let the client reach its handshake wait
            client.send_signal(signal.SIGTERM)
            out, err = client.communicate(timeout=30)
        finally:
            if client.poll() is None:
                client.kill()
                client.communicate()
        self.assertGone(server)
        self.assertEqual(client.returncode, 130, err)
        self.assertIn("Error: interrupted", err)

    def test_crash_start_failure_missing_command_and_stdout_pollution(self):
        crash, dead, missing, noisy, junk = self.mcp_parallel(
            ("call", "test", "crash"),
            ("call", "dead", "echo", "--args", '{"text": "x"}'),
            ("call", "missing", "echo"),
            ("call", "noisy", "echo", "--args", '{"text": "still works"}'),
            ("call", "junk", "echo", "--timeout", "3"))  # time to start and print
        self.assertCleanError(crash, 5, "MCP server exited: test: during tools/call crash")
        self.assertIn("crashing on purpose", crash.stderr)
        self.assertCleanError(dead, 5, "MCP server exited: dead: during start-up")
        self.assertIn("missing configuration file /nonexistent/settings.toml", dead.stderr)
        self.assertCleanError(missing, 4, "MCP server command not found: missing: nagent-no-such-mcp-server")
        self.assertEqual((noisy.returncode, noisy.stdout), (0, "still works\n"), noisy.stderr)
        self.assertIn("Warning: MCP server noisy printed 1 line to stdout that is not JSON-RPC, first: "
                      "'INFO starting nagent-test-server v1.0 on stdio': it logs to stdout", noisy.stderr)
        self.assertCleanError(junk, 5, "MCP server did not answer in time: junk")
        self.assertIn("'Hello! This program prints a greeting and waits.'", junk.stderr)
        self.assertIn("make it log to stderr", junk.stderr)

    def test_list_all_keeps_going_past_failing_servers(self):
        config = servers_config()
        del config["mcp_servers"]["junk"]
        config["mcp_servers"]["unset"] = stdio_entry(TOKEN="${MCP_TEST_NEVER_SET}")
        self.write_config(config)
        proc = self.mcp("--list")
        self.assertCleanError(proc, 5, "MCP server exited: dead")    # the first failure, by name
        lines = proc.stdout.splitlines()
        self.assertTrue(lines[0].startswith("dead: error: MCP server exited"), lines)
        self.assertTrue(lines[1].startswith("missing: error: MCP server command not found"), lines)
        self.assertIn("unset: error: mcp_servers.unset.env.TOKEN uses ${MCP_TEST_NEVER_SET}, which is not set: "
                      "MCP_TEST_NEVER_SET (export MCP_TEST_NEVER_SET=... or write ${MCP_TEST_NEVER_SET:-default})",
                      lines)
        self.assertIn("noisy (11 tools)", lines)
        self.assertIn("test (11 tools)", lines)
        self.assertIn("Warning: MCP server noisy printed", proc.stderr)


@needs_sdk
class HttpServerTest(McpCase):
    """One streamable-HTTP server process for the whole class."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.server = subprocess.Popen([sys.executable, SERVER, "--http"], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = cls.server.stdout.readline()
        if not line.startswith("PORT "):
            cls.server.kill()
            raise RuntimeError(f"the HTTP test server did not start: {line!r}")
        cls.port = int(line.split()[1])

    @classmethod
    def tearDownClass(cls):
        cls.server.terminate()
        try:
            cls.server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            cls.server.kill()
            cls.server.wait()
        cls.server.stdout.close()
        super().tearDownClass()

    def setUp(self):
        super().setUp()
        base = f"http://127.0.0.1:{self.port}"
        self.write_config({"mcp_servers": {
            "web": {"type": "http", "url": base + "/mcp",
                    "headers": {"Authorization": "Bearer ${MCP_TEST_HTTP_TOKEN}", "X-Plain": "${MCP_TEST_PLAIN}"}},
            "wrongpath": {"url": base + "/nothing-here"},
            "closed": {"url": "http://127.0.0.1:9/mcp"}}})
        self.env.update(MCP_TEST_HTTP_TOKEN="http-secret-123", MCP_TEST_PLAIN="plain-value")

    def test_list_call_and_headers_over_http(self):
        listing, call, headers = self.mcp_parallel(
            ("--list", "web"), ("call", "web", "describe_path", "--args", '{"path": "/web"}'),
            ("call", "web", "headers", "--args", '{"names": ["authorization", "x-plain"]}'))
        self.assertEqual(listing.returncode, 0, listing.stderr)
        self.assertIn("web (11 tools)", listing.stdout)
        self.assertIn("describe_path(path: string, depth?: integer)", listing.stdout)
        self.assertEqual((call.returncode, call.stdout), (0, "/web at depth 1\n"), call.stderr)
        # The secret header reached the server and was kept out of the output; the plain one shows.
        self.assertEqual(headers.stdout, "authorization=Bearer [redacted]\nx-plain=plain-value\n", headers.stderr)

    def test_http_errors(self):
        wrong, closed = self.mcp_parallel(
            ("call", "wrongpath", "echo", "--args", '{"text": "x"}'),
            ("call", "closed", "echo", "--args", '{"text": "x"}'))
        self.assertCleanError(wrong, 5, "MCP server refused the request: wrongpath")
        self.assertIn("check the url", wrong.stderr)
        self.assertCleanError(closed, 5, "cannot reach MCP server: closed: http://127.0.0.1:9/mcp")


@needs_sdk
class LoopUsesMcpTest(NagentRunCase):
    """The scripted model calls nagent-mcp through <nagent-shell> and answers from its output,
    also when the shell's python3 is not the run's interpreter (issue 21: the checkout's
    nagent-mcp re-executes under the run's, which has the SDK)."""

    def bare_python_first(self):
        """PATH with a python3 first that is not the run's: a venv of the same interpreter
        without any package (a checkout run from its venv, the shell finding the system one)."""
        venv = os.path.join(self.tmp, "bare-venv")
        os.makedirs(os.path.join(venv, "bin"))
        real = os.path.realpath(sys.executable)
        with open(os.path.join(venv, "pyvenv.cfg"), "w", encoding="utf-8") as handle:
            handle.write(f"home = {os.path.dirname(real)}\ninclude-system-site-packages = false\n")
        os.symlink(real, os.path.join(venv, "bin", "python3"))
        return os.pathsep.join([os.path.join(venv, "bin"), self.env["PATH"]])

    def test_model_calls_a_tool_through_the_shell_and_uses_the_result(self):
        config = dict(self.CONFIG, **servers_config())
        self.write_config(config)
        self.env["PATH"] = self.bare_python_first()   # the shim's python3 lacks the SDK
        self.fake.reply("<nagent-shell>"
                        "nagent-mcp call test describe_path --args '{\"path\": \"/srv/data\", \"depth\": 4}'"
                        "</nagent-shell>")
        self.fake.reply("<nagent-response>The server says: /srv/data at depth 4</nagent-response>")
        proc = self.nagent("--json", "describe /srv/data with the test MCP server")
        data = self.json_of(proc)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(data["response"], "The server says: /srv/data at depth 4")
        path = data["conversation"]
        context = self.kinds(path, "context")[0].body
        for name in ("dead", "junk", "missing", "noisy", "test"):
            self.assertIn(f"- {name}: run `nagent-mcp --list {name}` for its tools", context)
        results = [record.body for record in self.kinds(path, "result") if record.attr("action") == "shell"]
        self.assertEqual(len(results), 1)
        self.assertIn("exit_code: 0", results[0])
        self.assertIn("/srv/data at depth 4", results[0])
        second = self.request_text(self.generation_requests()[1])
        self.assertIn("/srv/data at depth 4", second)
