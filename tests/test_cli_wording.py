"""Issue 12 (cli) wording: error lines keep the one-line `Error: <what>: <value> (<fix>)` shape
with no parentheses inside the fix; a 401 names the variable the key came from; a connection
error shows the URL (without credentials); the call limit names --max-calls; a missing prompt
points at --list-conversations for listing, not at --status."""
import ast
import glob
import os
import pty
import re
import socket
import subprocess
import sys

from base import BIN, HELPERS
from test_loop import NagentRunCase


def literal(node):
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(literal(part) if not isinstance(part, ast.FormattedValue) else "{}"
                       for part in node.values)
    if isinstance(node, ast.BinOp):
        return literal(node.left) + literal(node.right)
    return "{}"


def error_lines():
    """(where, the error line as NagentError.line() would build it) for every *Error(...) call
    with literal parts in the helpers."""
    for path in sorted(glob.glob(os.path.join(HELPERS, "*.py"))):
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", getattr(node.func, "attr", ""))
            if not (name.endswith("Error") and name[:1].isupper()) or not node.args:
                continue
            parts = [literal(arg) for arg in node.args[:3]]
            parts += [literal(k.value) for k in node.keywords if k.arg in ("value", "fix")]
            what, value, fix = (parts + ["", ""])[:3]
            yield (f"{os.path.basename(path)}:{node.lineno}",
                   f"Error: {what}: {value}" + (f" ({fix})" if fix else ""))


def nested(line):
    depth = 0
    for char in line:
        depth += char == "("
        if depth > 1:
            return True
        depth -= char == ")"
    return False


class WordingTest(NagentRunCase):
    CONFIG = {"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0, "max_attempts": 1}}

    def test_no_nested_parentheses_in_error_messages(self):
        found = [(where, line) for where, line in error_lines() if nested(line)]
        self.assertEqual(found, [])
        self.assertGreater(len(list(error_lines())), 100)  # the scan sees the helpers' errors

    def test_401_names_the_key_variable(self):
        self.write_file("q.txt", "hi")
        self.fake.fault(401, times=1)
        proc = self.run_tool("nagent-llm-text", "--file", "q.txt")
        self.assertCleanError(proc, 5, "OPENAI_API_KEY rejected by openai with HTTP 401")
        self.assertIn("(set a valid openai key in OPENAI_API_KEY)", proc.stderr)
        self.assertFalse(nested(proc.stderr.strip()), proc.stderr)
        # A key the config reads from another variable is named by that variable.
        self.write_config(dict(self.CONFIG, provider="corp", providers={"corp": {
            "base_url": self.fake.url + "/v1", "api_key": "${CORP_KEY}", "model": "m"}}))
        self.fake.fault(401, times=1)
        proc = self.run_tool("nagent-llm-text", "--file", "q.txt", env=dict(self.env, CORP_KEY="corp-secret-1"))
        self.assertCleanError(proc, 5, "CORP_KEY rejected by corp with HTTP 401")
        self.assertNotIn("corp-secret-1", proc.stderr)

    def test_connection_error_shows_the_url_without_credentials(self):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1"
        self.write_config(dict(self.CONFIG, providers={"openai": {"model": "gpt-5.5", "base_url": url.replace(
            "http://", "http://someone:hunter22@")}}))
        self.write_file("q.txt", "hi")
        proc = self.run_tool("nagent-llm-text", "--file", "q.txt")
        self.assertCleanError(proc, 5, f"cannot reach openai at {url}")
        self.assertNotIn("hunter22", proc.stderr)
        # The SDK's own variable counts as the URL too.
        self.write_config(self.CONFIG)
        proc = self.run_tool("nagent-llm-text", "--file", "q.txt", env=dict(self.env, OPENAI_BASE_URL=url))
        self.assertCleanError(proc, 5, f"cannot reach openai at {url}")

    def test_call_limit_names_the_flag(self):
        self.fake.reply("<nagent-shell>echo one</nagent-shell>")
        self.fake.reply("<nagent-response>stopped</nagent-response>")  # the final summary
        proc = self.nagent("--max-calls", "1", "work")
        self.assertEqual(proc.returncode, 9, proc.stderr)
        line = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")][-1]
        self.assertIn("--max-calls", line)
        self.assertFalse(nested(line), line)

    def test_missing_prompt_points_at_listing_not_status(self):
        leader, follower = pty.openpty()  # a terminal on stdin: nothing piped, no words
        self.addCleanup(os.close, leader)
        with open(follower, "rb", closefd=True) as tty:
            proc = subprocess.run([sys.executable, os.path.join(BIN, "nagent")], stdin=tty,
                                  capture_output=True, text=True, env=self.env, cwd=self.cwd, timeout=60)
        self.assertCleanError(proc, 2, "no prompt")
        self.assertIn("--list-conversations", proc.stderr)
        self.assertNotIn("--status", proc.stderr)
        self.assertNotRegex(proc.stderr, re.escape("such as --status"))
