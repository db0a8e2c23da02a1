"""Provider keys never land anywhere nagent writes or prints.

Every key variable is set to a unique marker value; the config names its endpoint's key only as
"${CORP_KEY}" (a second endpoint holds a literal key: only the config file may contain that one).
A scripted session runs `env`, cats the config files, reads nagent's own
environment through /proc (what a hostile model would try), pushes that past the inline cap into
a side file, then meets a provider error whose text echoes the key; uploads go through
nagent-llm-upload, once fine and once failing the same way. Afterwards no file under the test's
temp dir (HOME, TMPDIR, cwd, config), no stdout or stderr, and no request the fake model
received contains any marker.
"""
import base64
import json
import os
import subprocess
import sys
import uuid

from base import BIN, HermeticTestCase
from fakes import FakeVendorTestCase
from unprivileged import give_to_nobody, unprivileged_argv

import nagent_conversation
import nagent_shell


def marker(name):
    return f"sk-MARKER-{name}-{uuid.uuid4().hex}"


class SecretsTest(FakeVendorTestCase):
    FRESH_RUNS = True  # the shell reads nagent's /proc/$PPID/environ

    def setUp(self):
        super().setUp()
        self.markers = {
            "OPENAI_API_KEY": marker("openai"), "ANTHROPIC_API_KEY": marker("anthropic"),
            "GOOGLE_API_KEY": marker("google"), "GEMINI_API_KEY": marker("gemini"),
            "CURSOR_API_KEY": marker("cursor"), "CORP_KEY": marker("corp"),
        }
        self.env.update(self.markers)
        self.env.pop("GEMINI_API_KEY")   # both set makes the google SDK print a warning
        self.markers.pop("GEMINI_API_KEY")
        # corp names its key as "${CORP_KEY}"; corp2 holds one literally (only that file may).
        self.markers["literal"] = marker("literal")
        self.write_config({
            "provider": "corp", "retry": {"base_delay": 0, "max_delay": 0, "max_attempts": 1},
            "providers": {"corp": {"base_url": self.fake.url + "/v1", "api_key": "${CORP_KEY}",
                                   "model": "corp-model"},
                          "corp2": {"base_url": self.fake.url + "/v1", "api_key": self.markers["literal"],
                                    "model": "corp-model"}}})
        self.write_file(os.path.join(self.home, ".nagent", "config.json"),
                        json.dumps({"providers": {"openai": {"api_key": "${OPENAI_API_KEY}"}}}))
        self.outputs = []

    def tool(self, name, *args, **kwargs):
        proc = self.run_tool(name, *args, **kwargs)
        self.assertNotIn("Traceback", proc.stderr)
        self.outputs.append((f"{name} stdout", proc.stdout))
        self.outputs.append((f"{name} stderr", proc.stderr))
        return proc

    def leaked_echo(self, vendor, value):
        body = {"error": {"message": f"Incorrect API key provided: {value}. You can find your API "
                                     f"key at https://example.invalid (key={value})",
                          "type": "invalid_request_error", "param": None, "code": "invalid_api_key"}}
        if vendor == "google":
            body = {"error": {"code": 401, "message": f"API key not valid: {value}",
                              "status": "UNAUTHENTICATED"}}
        return body

    def assertNoMarkers(self, exclude=()):
        found = []
        for root, _dirs, files in os.walk(self.tmp):
            for name in files:
                path = os.path.join(root, name)
                if path in exclude or os.path.islink(path) or not os.path.isfile(path):
                    continue
                with open(path, "rb") as handle:
                    data = handle.read()
                found += [(path, var) for var, value in self.markers.items() if value.encode() in data]
        for label, text in self.outputs:
            found += [(label, var) for var, value in self.markers.items() if value in text]
        for record in self.fake.requests:
            raw = json.dumps({k: record.get(k) for k in ("path", "query", "json", "form")}, default=str)
            raw += (record.get("body") or b"").decode("utf-8", "replace") if isinstance(
                record.get("body"), bytes) else str(record.get("body") or "")
            found += [(f"request {record['path']}", var) for var, value in self.markers.items()
                      if value in raw]
        self.assertEqual(found, [])

    def test_markers_appear_nowhere(self):
        self.fake.reply("\n".join([
            "<nagent-shell>\nenv\n</nagent-shell>",
            '<nagent-shell>\ncat "$NAGENT_CONFIG" ~/.nagent/config.json\n</nagent-shell>',
            f'<nagent-read path="{self.home}/.nagent/config.json"/>',
            "<nagent-shell>\ntr '\\0' '\\n' < /proc/$PPID/environ\n</nagent-shell>",
            # Over the inline cap: the whole stream goes to a side file.
            "<nagent-shell>\nfor i in $(seq 100); do tr '\\0' '\\n' < /proc/$PPID/environ; done\n"
            "</nagent-shell>",
            "<nagent-shell>\nfor i in $(seq 100); do tr '\\0' '\\n' < /proc/$PPID/environ; done >&2\n"
            "</nagent-shell>",
        ]))
        self.fake.fault(401, body=self.leaked_echo("openai", self.markers["CORP_KEY"]))
        proc = self.tool("nagent", "--json", "--conversation", "secrets", "look around")
        self.assertEqual(proc.returncode, 5, proc.stderr)
        data = json.loads(proc.stdout)
        self.assertIn("401", json.dumps(data["error"]))
        # The session really did see the environment (redacted) and wrote side files.
        path = os.path.join(self.home, ".nagent", "conversations", "secrets")
        results = [r.body for r in nagent_conversation.read_records(path) if r.kind == "result"]
        self.assertEqual(len(results), 6)
        self.assertIn("[redacted]", results[3])
        self.assertTrue(any("full output in" in body for body in results))
        self.assertIn(self.markers["CORP_KEY"], self.fake.seen_keys)

        # A failing call without --json (the error line goes to stderr), with the literal key.
        self.fake.fault(401, body=self.leaked_echo("openai", self.markers["literal"]))
        proc = self.tool("nagent", "--conversation", "secrets", "--provider", "corp2", "again")
        self.assertCleanError(proc, code=5)
        self.assertIn(self.markers["literal"], self.fake.seen_keys)

        # Uploads: one fine (JSON on stdout), one whose 401 echoes the key.
        upload = self.write_file("notes.txt", "plain notes\n")
        self.fake.reply("summary of the notes", vendor="google")
        proc = self.tool("nagent-llm-upload", "--provider", "google", "--file", upload,
                         "--prompt", "summarise", "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.fake.fault(401, vendor="google", body=self.leaked_echo("google", self.markers["GOOGLE_API_KEY"]))
        proc = self.tool("nagent-llm-upload", "--provider", "google", "--file", upload,
                         "--prompt", "summarise")
        self.assertNotEqual(proc.returncode, 0)
        self.assertNoMarkers(exclude={self.config_path})


class StreamRedactionTest(HermeticTestCase):
    """The side-file redaction streams in chunks: a key split across two chunks is still caught."""

    def test_secret_across_chunk_boundaries(self):
        secret = marker("chunked")
        for offset in range(0, 40, 3):
            with self.subTest(offset=offset):
                path = os.path.join(self.tmp, f"stream-{offset}")
                data = b"x" * offset + secret.encode() + b"\n" + b"y" * 50 + secret.encode()
                with open(path, "wb") as handle:
                    handle.write(data)
                nagent_shell._redact_file(path, (secret, "unused-secret"), chunk_size=16)
                with open(path, "rb") as handle:
                    self.assertEqual(handle.read(), data.replace(secret.encode(), b"[redacted]"))
        clean = os.path.join(self.tmp, "clean")
        with open(clean, "wb") as handle:
            handle.write(b"nothing to hide\n")
        before = os.stat(clean).st_ino
        nagent_shell._redact_file(clean, (secret,), chunk_size=4)
        self.assertEqual(os.stat(clean).st_ino, before)   # untouched when nothing matched
        self.assertEqual(sorted(os.listdir(self.tmp)).count("clean.redacted"), 0)


class KeyEnvRedactionTest(FakeVendorTestCase):
    """Issue 10 item 2: a key held in a variable that only `providers.NAME.api_key_env` names
    (no *_API_KEY suffix) is redacted everywhere, like every other key nagent knows."""
    FRESH_RUNS = True  # the shell reads nagent's /proc/$PPID/environ

    def setUp(self):
        super().setUp()
        self.key = marker("keyenv")
        self.env["CORPKEYVALUE"] = self.key
        self.write_config({
            "provider": "corp", "retry": {"base_delay": 0, "max_delay": 0, "max_attempts": 1},
            "providers": {"corp": {"base_url": self.fake.url + "/v1", "api_key_env": "CORPKEYVALUE",
                                   "model": "corp-model"}}})
        self.write_file("notes.txt", f"the key is {self.key}\n")

    def leaks(self, texts):
        found = [label for label, text in texts if self.key in text]
        for root, _dirs, files in os.walk(self.tmp):
            for name in files:
                path = os.path.join(root, name)
                if path == os.path.join(self.cwd, "notes.txt") or os.path.islink(path):
                    continue
                with open(path, "rb") as handle:
                    if self.key.encode() in handle.read():
                        found.append(path)
        for record in self.fake.requests:
            if self.key in json.dumps(record.get("json"), default=str):
                found.append(f"request {record['path']}")
        return found

    def test_api_key_env_value_appears_nowhere(self):
        self.fake.reply("\n".join([
            "<nagent-shell>\ncat notes.txt\n</nagent-shell>",
            '<nagent-read path="notes.txt"/>',
            "<nagent-shell>\ntr '\\0' '\\n' < /proc/$PPID/environ | grep CORPKEY || true\n</nagent-shell>",
        ]))
        self.fake.fault(401, body={"error": {"message": f"bad key {self.key}", "type": "x",
                                             "param": None, "code": "invalid_api_key"}})
        proc = self.run_tool("nagent", "--conversation", "keyenv", "look")
        self.assertEqual(proc.returncode, 5, proc.stderr)
        self.assertIn(self.key, self.fake.seen_keys)   # the key was really used
        path = os.path.join(self.home, ".nagent", "conversations", "keyenv")
        results = [r.body for r in nagent_conversation.read_records(path) if r.kind == "result"]
        self.assertIn("the key is [redacted]", results[0])
        # Another tool's error line (not the loop's) is redacted the same way.
        self.fake.fault(401, body={"error": {"message": f"bad key {self.key}", "type": "x",
                                             "param": None, "code": "invalid_api_key"}})
        question = self.write_file(os.path.join(self.tmp, "question.txt"), "hello\n")
        text = self.run_tool("nagent-llm-text", "--file", question)
        self.assertNotEqual(text.returncode, 0)
        self.assertEqual(self.leaks([("nagent stdout", proc.stdout), ("nagent stderr", proc.stderr),
                                     ("llm-text stdout", text.stdout), ("llm-text stderr", text.stderr)]),
                         [])


class UndumpableTest(FakeVendorTestCase):
    """Issue 10 item 2: nagent, run as an unprivileged user, is not dumpable, so its own shell
    commands (same user) cannot read its environment through /proc/$PPID/environ, not even
    encoded past the redaction (root still can: the README says so)."""

    def test_shell_cannot_read_nagent_environ(self):
        key = marker("environ")
        self.env["OPENAI_API_KEY"] = key
        self.write_config({"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}})
        os.chmod(self.tmp, 0o755)
        give_to_nobody(self.tmp)
        argv = unprivileged_argv([sys.executable, os.path.join(BIN, "nagent"), "--conversation",
                                  "dump", "look"], self.tmp)
        self.fake.reply("<nagent-shell>\nid -u\nbase64 -w0 /proc/$PPID/environ; echo\n"
                        "base64 -w0 /proc/$PPID/cmdline >/dev/null && echo cmdline-ok\n"
                        "cat /proc/$PPID/environ >/dev/null 2>&1 && echo READABLE || echo DENIED\n"
                        "</nagent-shell>")
        self.fake.reply("<nagent-response>done</nagent-response>")
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, cwd=self.cwd,
                              timeout=120, stdin=subprocess.DEVNULL)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        path = os.path.join(self.home, ".nagent", "conversations", "dump")
        [body] = [r.body for r in nagent_conversation.read_records(path) if r.kind == "result"]
        stdout = body.split("stdout:\n", 1)[1].split("stderr:\n", 1)[0].splitlines()
        self.assertEqual(stdout[0], "65534", body)          # really unprivileged
        self.assertIn("cmdline-ok", stdout)                  # /proc works: only environ is closed
        self.assertIn("DENIED", stdout, body)
        decoded = base64.b64decode(stdout[1] + "=" * (-len(stdout[1]) % 4)) if stdout[1] else b""
        self.assertNotIn(key.encode(), decoded)
