"""nagent-mcp without a running server: the mcp_servers config, ${VAR} expansion, argument
signatures, result rendering, the initial-context lines, a missing SDK, and the usage errors."""
import base64
import json
import os
import subprocess
import sys
import time

from base import BIN, HermeticTestCase

import nagent_mcp_config as mcp_config
import nagent_mcp_render as render
from nagent_context import build_initial_context
from nagent_conversation_layout import Selection
from nagent_errors import ConfigError, UsageError

TOOLS = [{"name": "nagent-a", "description": "first tool"}]
SERVER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "mcp_server.py")


class ConfigTest(HermeticTestCase):
    def test_claude_code_shape_parses_sorted(self):
        config = {"mcp_servers": {
            "web": {"type": "http", "url": "https://example.invalid/mcp", "headers": {"A": "b"}},
            "git": {"command": "uvx", "args": ["mcp-server-git"], "env": {"X": "${HOME}"},
                    "autoApprove": ["ignored"]}}}
        specs = mcp_config.parse_servers(config["mcp_servers"])
        self.assertEqual([spec.name for spec in specs], ["git", "web"])
        self.assertEqual((specs[0].transport, specs[0].command, specs[0].args, specs[0].env),
                         ("stdio", "uvx", ("mcp-server-git",), (("X", "${HOME}"),)))
        self.assertEqual((specs[1].transport, specs[1].url), ("http", "https://example.invalid/mcp"))
        self.assertEqual(mcp_config.parse_servers({}), ())

    def test_malformed_entries_are_config_errors_naming_the_entry(self):
        bad = {
            "both": {"command": "x", "url": "http://a"},
            "neither": {"args": []},
            "sse": {"type": "sse", "url": "http://a/sse"},
            "mismatch": {"type": "stdio", "url": "http://a"},
            "args": {"command": "x", "args": "--flag"},
            "env": {"command": "x", "env": {"A": 1}},
            "url": {"url": "ftp://a"},
            "empty": {"command": " "},
            "bad name!": {"command": "x"},
        }
        for name, entry in bad.items():
            with self.subTest(name=name):
                with self.assertRaises(ConfigError) as caught:
                    mcp_config.parse_servers({name: entry})
                self.assertIn(name if name != "bad name!" else "server name", caught.exception.line())
        with self.assertRaises(ConfigError):
            mcp_config.parse_servers(["not", "an", "object"])
        with self.assertRaises(UsageError) as caught:
            mcp_config.find_server(mcp_config.parse_servers({"a": {"command": "x"}}), "b")
        self.assertIn("configured: a", caught.exception.line())

    def test_var_expansion_defaults_errors_and_secrets(self):
        env = {"HOME": "/home/me", "GH_TOKEN": "ghp-secret-value", "EMPTY": ""}
        self.assertEqual(mcp_config.expand("${HOME}/x:${HOME}", env)[0], "/home/me/x:/home/me")
        self.assertEqual(mcp_config.expand("${NOPE:-fallback}", env)[0], "fallback")
        self.assertEqual(mcp_config.expand("${EMPTY:-fallback}", env)[0], "fallback")
        self.assertEqual(mcp_config.expand("${EMPTY}", env)[0], "")
        self.assertEqual(mcp_config.expand("$HOME and ${", env)[0], "$HOME and ${")
        with self.assertRaises(ConfigError) as caught:
            mcp_config.expand("${NOPE}", env, "mcp_servers.x.env.A")
        self.assertIn("mcp_servers.x.env.A uses ${NOPE}", caught.exception.line())
        spec = mcp_config.parse_server("gh", {"command": "${HOME}/bin/gh-mcp", "args": ["--root", "${HOME}"],
                                              "env": {"GITHUB_TOKEN": "${GH_TOKEN}", "DATA": "${HOME}/data"}})
        resolved = mcp_config.resolve(spec, env)
        self.assertEqual(resolved.command, "/home/me/bin/gh-mcp")
        self.assertEqual(resolved.args, ("--root", "/home/me"))
        self.assertEqual(resolved.env, {"GITHUB_TOKEN": "ghp-secret-value", "DATA": "/home/me/data"})
        # Only secret-looking values are redacted later: a path from ${HOME} stays readable.
        self.assertEqual(resolved.secrets, ("ghp-secret-value",))
        self.assertEqual(mcp_config.display_url("https://me:pw@host.example:8443/mcp?token=abc#x"),
                         "https://host.example:8443/mcp")
        self.assertEqual(mcp_config.process_env(resolved, {"PATH": "/bin", "DATA": "old"}),
                         {"PATH": "/bin", "DATA": "/home/me/data", "GITHUB_TOKEN": "ghp-secret-value"})

    def test_a_value_under_a_secret_name_is_a_secret_wherever_it_came_from(self):
        # Issue 21's adversarial pass: a literal in the config, or a ${VAR:-default}'s default,
        # under a secret-named env or header key was sent to the server and never redacted.
        spec = mcp_config.parse_server("svc", {
            "command": "svc-mcp", "env": {"SERVICE_TOKEN": "literal-token-abcdef", "DATA": "/srv/d"},
            "args": ["--from", "${SERVICE_HOST:-svc.example}"]})
        http = mcp_config.parse_server("web", {"url": "https://${HOST:-api.example}/mcp", "headers": {
            "Authorization": "Bearer ${WEB_PASS:-default-token-xyz}"}})
        self.assertEqual(mcp_config.resolve(spec, {}).secrets, ("literal-token-abcdef",))
        self.assertEqual(mcp_config.resolve(http, {}).secrets, ("default-token-xyz",))


class RenderTest(HermeticTestCase):
    def test_signature_from_input_schema(self):
        schema = {"type": "object", "properties": {
            "path": {"type": "string"}, "depth": {"type": "integer", "default": 1},
            "mode": {"enum": ["fast", "slow"]}, "tags": {"type": "array", "items": {"type": "string"}},
            "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]}, "opts": {"type": "object"},
            "loose": {}}, "required": ["path", "mode"]}
        self.assertEqual(render.signature(schema),
                         'path: string, depth?: integer, mode: "fast"|"slow", tags?: string[], '
                         "limit?: integer|null, opts?: object, loose?: any")
        self.assertEqual(render.signature({"type": "object"}), "")
        self.assertEqual(render.signature(None), "")

    def test_tool_entry_is_one_line_and_list_text(self):
        entry = render.tool_entry({"name": "read\x1b[31m", "description": "Read a file.\nFrom disk.\n\nDetails.",
                                   "inputSchema": {"type": "object", "properties": {"p": {"type": "string"}},
                                                   "required": ["p"]}})
        self.assertEqual(entry["summary"], "Read a file. From disk.")
        self.assertNotIn("\x1b", entry["name"])
        text = render.list_text([{"name": "fs", "tools": [entry], "error": None},
                                 {"name": "down", "tools": [], "error": "server exited"}])
        self.assertIn("fs (1 tool)\n  read\\x1b[31m(p: string) — Read a file. From disk.\n", text)
        self.assertIn("nagent-mcp call fs TOOL", text)
        self.assertIn("down: error: server exited", text)
        long = render.summary("word " * 200)
        self.assertLessEqual(len(long), render.SUMMARY_LIMIT)

    def test_result_text_binary_files_and_json_blocks(self):
        png = b"\x89PNG\r\n\x1a\nxyz"
        result = {"content": [
            {"type": "text", "text": "hello"},
            {"type": "image", "data": base64.b64encode(png).decode(), "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "mimeType": "text/plain", "text": "inner"}},
            {"type": "resource", "resource": {"uri": "x://b", "blob": base64.b64encode(b"\x00\x01").decode()}},
            {"type": "audio", "data": "!!not base64!!", "mimeType": "audio/wav"},
            {"type": "resource_link", "uri": "x://c", "name": "c"},
            {"type": "mystery"}]}
        text, blocks = render.render_result(result, "srv-../../tool", self.tmpdir)
        self.assertTrue(text.startswith("hello\n[image, image/png, 11 bytes saved to "))
        image = blocks[1]["file"]
        self.assertEqual(os.path.dirname(image), self.tmpdir)       # sanitised label: no traversal
        self.assertTrue(image.endswith(".png"))
        with open(image, "rb") as handle:
            self.assertEqual(handle.read(), png)
        self.assertEqual(os.stat(image).st_mode & 0o777, 0o600)
        self.assertIn("[resource file:///a.txt (text/plain)]\ninner", text)
        with open(blocks[3]["file"], "rb") as handle:
            self.assertEqual(handle.read(), b"\x00\x01")
        self.assertIn("invalid base64 data, not saved", text)
        self.assertIn("[resource link x://c — c]", text)
        self.assertIn("[mystery content not shown]", text)
        self.assertNotIn("data", blocks[1])
        self.assertEqual(render.render_result({"content": [], "structuredContent": {"a": 1}}, "x")[0],
                         '{\n  "a": 1\n}\n')
        self.assertEqual(render.error_message({"content": [{"type": "text", "text": "bad path"}]}), "bad path")


class ContextLinesTest(HermeticTestCase):
    def test_one_sorted_line_per_server_in_the_stable_part(self):
        plain = build_initial_context(environ=self.env, cwd=self.cwd, tools=TOOLS)
        self.assertNotIn("nagent-mcp", plain.static)
        ctx = build_initial_context(environ=self.env, cwd=self.cwd, tools=TOOLS, mcp_servers=("web", "git"))
        self.assertIn("- git: run `nagent-mcp --list git` for its tools\n"
                      "- web: run `nagent-mcp --list web` for its tools\n", ctx.static)
        self.assertTrue(ctx.static.startswith(plain.static.rstrip("\n")))
        again = build_initial_context(environ=self.env, cwd="/else", now=2e9, tools=TOOLS,
                                      mcp_servers=("git", "web"))
        self.assertEqual(ctx.static, again.static)

    def test_session_passes_configured_names_without_starting_servers(self):
        marker = os.path.join(self.tmp, "started")
        self.write_config({"mcp_servers": {
            "zeta": {"command": "sh", "args": ["-c", f"touch {marker}"]},
            "alpha": {"url": "http://127.0.0.1:9/mcp"}}})
        import nagent_session
        with self.patched_environ():
            self.env["OPENAI_API_KEY"] = "test-key-123456"
            session = nagent_session.build_session(Selection(), self.env, self.cwd)
            text = session.initial_context().static
        self.assertLess(text.index("- alpha: run `nagent-mcp --list alpha`"),
                        text.index("- zeta: run `nagent-mcp --list zeta`"))
        self.assertFalse(os.path.exists(marker))


class CliWithoutServerTest(HermeticTestCase):
    def shadowed_sdk_env(self):
        shadow = os.path.join(self.tmp, "shadow", "mcp")
        os.makedirs(shadow)
        with open(os.path.join(shadow, "__init__.py"), "w") as handle:
            handle.write("raise ImportError('No module named mcp (shadowed for the test)')\n")
        return dict(self.env, PYTHONPATH=os.path.dirname(shadow))

    def test_missing_sdk_is_exit_4_with_the_pip_line(self):
        self.write_config({"mcp_servers": {"test": {"command": sys.executable, "args": [SERVER]}}})
        env = self.shadowed_sdk_env()
        for args in (("call", "test", "echo", "--args", '{"text": "x"}'), ("--list",)):
            proc = self.run_tool("nagent-mcp", *args, env=env, input="")
            self.assertCleanError(proc, 4, "the MCP SDK is not installed")
            self.assertIn("pip install 'mcp>=2'", proc.stderr)
        proc = self.run_tool("nagent-mcp", "--list", "--json", env=env, input="")
        self.assertEqual(json.loads(proc.stdout)["kind"], "setup")
        # --help and --description need no SDK at all.
        self.assertEqual(self.run_tool("nagent-mcp", "--help", env=env).returncode, 0)

    def test_help_and_description_start_fast_without_the_sdk(self):
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-X", "importtime", os.path.join(BIN, "nagent-mcp"), "--help"],
                              capture_output=True, text=True, env=self.env, timeout=60)
        elapsed = time.monotonic() - started
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for flag in ("--list", "--args", "--timeout", "--json", "--description", "call SERVER TOOL"):
            self.assertIn(flag, proc.stdout)
        imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()}
        for module in ("mcp", "mcp_types", "anyio", "pydantic", "httpx2"):
            self.assertNotIn(module, imported)
        self.assertLess(elapsed, 10)  # a sanity bound only; the figure is in benchmarks
        proc = self.run_tool("nagent-mcp", "--description")
        self.assertEqual(len(proc.stdout.strip().splitlines()), 1)
        self.assertIn("nagent-mcp --list", proc.stdout)

    def test_usage_and_config_errors(self):
        proc = self.run_tool("nagent-mcp", "--list", input="")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("no MCP servers configured", proc.stdout)
        proc = self.run_tool("nagent-mcp", "--list", "--json", input="")
        self.assertEqual(json.loads(proc.stdout), {"servers": []})
        self.write_config({"mcp_servers": {"test": {"command": sys.executable, "args": [SERVER],
                                                    "env": {"T": "${NAGENT_TEST_UNSET_VAR}"}}}})
        cases = [
            (("call", "nope", "echo"), 2, "unknown MCP server: nope (configured: test)"),
            (("call", "test"), 2, "expected --list [SERVER] or call SERVER TOOL"),
            (("frobnicate",), 2, "expected --list"),
            (("--list", "test", "extra"), 2, "--list takes no other arguments"),
            (("call", "test", "echo", "--args", "{bad"), 2, "--args is not valid JSON"),
            (("call", "test", "echo", "--args", "[1]"), 2, "--args must be a JSON object"),
            (("call", "test", "echo", "--timeout", "0"), 2, "--timeout must be a positive number"),
            (("call", "test", "echo", "--args", "{}"), 3, "uses ${NAGENT_TEST_UNSET_VAR}, which is not set"),
        ]
        for args, code, message in cases:
            with self.subTest(args=args):
                self.assertCleanError(self.run_tool("nagent-mcp", *args, input=""), code, message)
        proc = self.run_tool("nagent-mcp", "call", "test", "echo", input="[1, 2]")
        self.assertCleanError(proc, 2, "JSON on stdin must be a JSON object")
        proc = self.run_tool("nagent-mcp", "call", "nope", "echo", "--json", input="")
        self.assertEqual(json.loads(proc.stdout)["exit_code"], 2)
        with open(self.config_path, "w") as handle:
            json.dump({"mcp_servers": {"x": {"command": "a", "url": "http://b"}}}, handle)
        self.assertCleanError(self.run_tool("nagent-mcp", "--list", input=""), 3, "mcp_servers.x needs either")
