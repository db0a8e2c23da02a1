"""One rule for secrets: which names are secret, and the environment nagent gives a child.

Issue 10 ("trust"): a key variable only the config names (`providers.NAME.api_key_env`, here
CORPKEY, no *_API_KEY suffix) reaches no child nagent starts: not the project's git, not a
discovered tool's `--description` run, not a shell command. And a variable named like a
password, cookie or credential is a secret everywhere (redaction, the sandbox, MCP), not only in
MCP's own list. Children that dump their environment to files are the witnesses.
"""
import glob
import json
import os
import shutil
import stat
import subprocess
import uuid

from base import HermeticTestCase
from fakes import FakeVendorTestCase

import nagent_conversation
import nagent_mcp_config
import nagent_sandbox
import nagent_secrets
from nagent_shell import ShellPolicy

SECRET = ("DB_PASSWORD", "PGPASSWORD", "DB_PASSWD", "MYSQL_PWD", "SESSION_COOKIE", "COOKIE",
          "APP_CREDENTIALS", "GCP_CREDENTIAL", "NPM_AUTH", "Authorization", "Proxy-Authorization",
          "X-Api-Key", "APIKEY", "STRIPE_KEY", "GITHUB_TOKEN", "TOKEN", "AWS_SECRET_ACCESS_KEY",
          "client_secret", "OPENAI_API_KEY")
NOT_SECRET = ("PATH", "HOME", "PWD", "OLDPWD", "XAUTHORITY", "SSH_AUTH_SOCK", "KEYBOARD",
              "TOKENIZERS_PARALLELISM", "MONKEY", "AUTHOR", "LANG", "SECRETS_DIR_MODE_X")


def marker(name):
    return f"sk-MARKER-{name}-{uuid.uuid4().hex}"


def executable(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


class SecretNamesTest(HermeticTestCase):
    """One predicate decides which names are secret, and every site asks it."""

    def test_the_one_predicate(self):
        for name in SECRET:
            with self.subTest(name=name):
                self.assertTrue(nagent_secrets.is_secret_name(name))
        for name in NOT_SECRET:
            with self.subTest(name=name):
                self.assertFalse(nagent_secrets.is_secret_name(name))

    def test_sandbox_never_passes_a_password_cookie_or_credential(self):
        names = ("DB_PASSWD", "SESSION_COOKIE", "APP_CREDENTIALS", "MYSQL_PWD", "PLAIN_SETTING")
        environ = dict(self.env, **{name: marker(name) for name in names})
        env = nagent_sandbox.sandbox_env(environ, ShellPolicy(sandbox="bwrap", env=names))
        self.assertEqual(sorted(set(env) & set(names)), ["PLAIN_SETTING"])

    def test_mcp_asks_the_same_predicate_with_the_same_minimum(self):
        environ = dict(self.env, MYSQL_PWD="hunter22", SESSION_COOKIE="abcdefgh",
                       SHORT_TOKEN="abcde", SOME_DIR="/srv/data/x", AUTHOR="someone")
        spec = nagent_mcp_config.parse_server("db", {
            "command": "server", "args": ["--author=${AUTHOR}", "${SOME_DIR}"],
            "env": {"DB": "${MYSQL_PWD}", "C": "${SESSION_COOKIE}", "S": "${SHORT_TOKEN}",
                    "SESSION_COOKIE": "${SOME_DIR}"}})
        resolved = nagent_mcp_config.resolve(spec, environ)
        # A value is secret when its variable's or its env key's name is: SOME_DIR is, here,
        # because it is stored under the key SESSION_COOKIE.
        self.assertEqual(set(resolved.secrets), {"hunter22", "abcdefgh", "/srv/data/x"})
        self.assertNotIn("abcde", resolved.secrets)    # under MIN_SECRET_LEN, as everywhere


class RedactedByNameTest(FakeVendorTestCase):
    """A value held in a password-, cookie- or credential-named variable is blanked from what the
    model and the conversation file see, like a *_TOKEN's."""

    def test_password_cookie_and_credential_values_are_redacted(self):
        values = {name: marker(name) for name in ("DB_PASSWD", "SESSION_COOKIE", "APP_CREDENTIALS",
                                                  "MYSQL_PWD")}
        self.env.update(values)
        self.env["OPENAI_API_KEY"] = "sk-test-key"
        self.write_config({"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}})
        self.fake.reply("<nagent-shell>\necho $DB_PASSWD $SESSION_COOKIE $APP_CREDENTIALS "
                        "$MYSQL_PWD\n</nagent-shell>")
        self.fake.reply("<nagent-response>done</nagent-response>")
        proc = self.run_tool("nagent", "--conversation", "names", "look")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        path = os.path.join(self.home, ".nagent", "conversations", "names")
        results = [r.body for r in nagent_conversation.read_records(path) if r.kind == "result"]
        self.assertIn("[redacted] [redacted] [redacted] [redacted]", results[0])
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        sent = json.dumps([record.get("json") for record in self.fake.requests], default=str)
        for name, value in values.items():
            with self.subTest(name=name):
                self.assertNotIn(value, text)
                self.assertNotIn(value, sent)
                self.assertNotIn(value, proc.stdout + proc.stderr)


class ChildEnvironmentTest(FakeVendorTestCase):
    """git, a tool's --description run and a shell command see no key only the config names."""

    def setUp(self):
        super().setUp()
        real_git = shutil.which("git", path=self.env.get("PATH"))
        if not real_git:
            self.skipTest("needs git")
        subprocess.run([real_git, "init", "-q", self.cwd], check=True, env=self.env,
                       capture_output=True)
        self.dumps = os.path.join(self.tmp, "dumps")
        os.makedirs(self.dumps)
        fakebin = os.path.join(self.tmp, "fakebin")
        executable(os.path.join(fakebin, "git"),
                   f'#!/bin/sh\nenv > "{self.dumps}/git-$$.env"\nexec {real_git} "$@"\n')
        executable(os.path.join(self.home, ".nagent", "bin", "dumpenv"),
                   f'#!/bin/sh\nenv > "{self.dumps}/tool-$$.env"\necho "dumps its environment"\n')
        self.key = marker("corpkey")
        self.env.update(CORPKEY=self.key, PATH=fakebin + os.pathsep + self.env["PATH"])
        self.write_config({
            "provider": "corp", "retry": {"base_delay": 0, "max_delay": 0, "max_attempts": 1},
            "providers": {"corp": {"base_url": self.fake.url + "/v1", "api_key_env": "CORPKEY",
                                   "model": "corp-model"}}})

    def dumped(self, prefix):
        found = {}
        for path in sorted(glob.glob(os.path.join(self.dumps, prefix + "*.env"))):
            with open(path, encoding="utf-8", errors="replace") as handle:
                found[os.path.basename(path)] = handle.read()
        return found

    def test_no_child_sees_a_key_only_the_config_names(self):
        self.fake.reply(f'<nagent-shell>\nenv > "{self.dumps}/shell.env"\n</nagent-shell>')
        self.fake.reply("<nagent-response>done</nagent-response>")
        proc = self.run_tool("nagent", "--conversation", "childenv", "look")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(self.key, self.fake.seen_keys)     # nagent itself did use the key
        for prefix in ("git-", "tool-", "shell"):
            with self.subTest(child=prefix):
                dumps = self.dumped(prefix)
                self.assertTrue(dumps, f"no {prefix} child ran")
                for name, text in dumps.items():
                    self.assertNotIn(self.key, text, name)
                    self.assertNotIn("CORPKEY=", text, name)
                    self.assertIn("HOME=", text, name)    # the rest of the environment is there

    def test_a_description_run_gets_no_secret_named_variable_at_all(self):
        # A tool's --description runs at context build, before the model asks for anything: it
        # needs no credentials, so every secret-named variable stays out, not only the keys.
        token = marker("ghtoken")
        from nagent_discovery import discover_tools
        env = dict(self.env, GITHUB_TOKEN=token, PGPASSWORD=token + "pw")
        with self.patched_environ():
            discover_tools([os.path.join(self.home, ".nagent", "bin")], None, environ=env)
        dumps = self.dumped("tool-")
        self.assertTrue(dumps)
        for name, text in dumps.items():
            self.assertNotIn(token, text, name)
            self.assertIn("HOME=", text, name)

    def test_callers_without_settings_read_the_key_names_from_the_config(self):
        from nagent_discovery import discover_tools
        from nagent_project import find_project
        with self.patched_environ():
            self.assertIsNotNone(find_project(self.cwd, self.env))
            tools = discover_tools([os.path.join(self.home, ".nagent", "bin")], None,
                                   environ=self.env)
        self.assertEqual(tools, [{"name": "dumpenv", "description": "dumps its environment"}])
        for prefix in ("git-", "tool-"):
            dumps = self.dumped(prefix)
            self.assertTrue(dumps, prefix)
            for name, text in dumps.items():
                self.assertNotIn(self.key, text, name)
