"""Typed config: one schema, resolved once from flags > NAGENT_CONFIG > ~/.nagent/config.json >
defaults into frozen Settings that remember each value's source; flags checked like config values;
unknown keys warned about (key and file); `nagent --config`; errors in a useful order."""
import json
import os

from base import REPO, HermeticTestCase

from nagent_config import describe_settings, resolve_settings
from nagent_config_schema import SCHEMA
from nagent_errors import ConfigError, UsageError


class SettingsTest(HermeticTestCase):
    def home_config(self, data):
        os.makedirs(os.path.join(self.home, ".nagent"), exist_ok=True)
        path = os.path.join(self.home, ".nagent", "config.json")
        with open(path, "w") as handle:
            json.dump(data, handle)
        return path

    def test_every_value_remembers_its_layer(self):
        self.home_config({"max_calls": 5, "lock_timeout": 1, "shell": {"timeout": 9}})
        self.write_config({"max_calls": 6})
        settings = resolve_settings({"shell_timeout": "2"}, self.env)
        self.assertEqual((settings.loop.max_calls, settings.loop.lock_timeout, settings.shell.timeout,
                          settings.loop.repeat_limit), (6, 1.0, 2.0, 3))
        self.assertEqual(str(settings.source("max_calls")), "NAGENT_CONFIG " + self.config_path)
        self.assertEqual(str(settings.source("lock_timeout")), "~/.nagent/config.json")
        self.assertEqual(str(settings.source("shell.timeout")), "flag --shell-timeout")
        self.assertEqual(str(settings.source("repeat_limit")), "default")
        self.assertEqual([layer for layer, _ in settings.files], ["NAGENT_CONFIG", "~/.nagent/config.json"])

    def test_every_schema_row_is_a_typed_settings_field(self):
        settings = resolve_settings({}, self.env)
        for key in SCHEMA:
            value = settings.value(key.name)
            if key.kind in ("int", "float", "bool", "choice") and not callable(key.default):
                self.assertEqual(value, key.default, key.name)
        with self.assertRaises(Exception):
            settings.loop.max_calls = 3  # frozen

    def test_grouped_and_flat_spellings_are_one_setting(self):
        for data in ({"read_timeout": 7}, {"timeouts": {"read": 7}}, {"timeouts.read": 7},
                     {"shell_approval": "deny"}, {"shell": {"approval": "deny"}},
                     {"shell.approval": "deny"}):
            self.write_config(data)
            settings = resolve_settings({}, self.env)
            self.assertIn(7.0 if "approval" not in json.dumps(data) else "deny",
                          (settings.timeouts.read, settings.shell.approval))
            self.assertEqual(settings.warnings, ())
        self.write_config({"read_timeout": 7, "timeouts": {"read": 8}})
        with self.assertRaises(ConfigError) as caught:
            resolve_settings({}, self.env)
        self.assertIn("timeouts.read and read_timeout", caught.exception.line())

    def test_errors_name_the_key_as_written_with_its_range_and_file(self):
        cases = [({"shell_approval": "maybe"}, "shell_approval must be one of auto, confirm, deny"),
                 ({"shell": {"timeout": 0}}, "shell.timeout must be a number > 0"),
                 ({"retry": {"max_attempts": 0}}, "retry.max_attempts must be a whole number >= 1"),
                 ({"max_attempts": 1.5}, "max_attempts must be a whole number >= 1"),
                 ({"max_calls": True}, "max_calls must be a whole number >= 1"),
                 ({"max_calls": "40"}, "max_calls must be a whole number >= 1"),
                 ({"shell": {"network": "yes"}}, "shell.network must be true or false"),
                 ({"repeat_limit": 1}, "repeat_limit must be a whole number >= 2"),
                 ({"shell": "nope"}, "shell must be an object"),
                 ({"providers": {"x": {"base_url": 5}}}, "providers.x.base_url must be a non-empty string"),
                 ({"prices": {"m": {"input": 1}}}, "prices.m must be an object with input and output")]
        for data, message in cases:
            self.write_config(data)
            with self.assertRaises(ConfigError, msg=data) as caught:
                resolve_settings({}, self.env)
            self.assertIn(message, caught.exception.line())
            self.assertIn(self.config_path, caught.exception.line())

    def test_flags_are_checked_like_config_values(self):
        for flags, message in [({"max_calls": "0"}, "--max-calls must be a whole number >= 1"),
                               ({"max_calls": "-3"}, "--max-calls must be a whole number >= 1"),
                               ({"max_calls": "2.5"}, "--max-calls must be a whole number >= 1"),
                               ({"shell_timeout": "0"}, "--shell-timeout must be a number > 0"),
                               ({"read_timeout": "nan"}, "--read-timeout must be a number > 0")]:
            with self.assertRaises(UsageError, msg=flags) as caught:
                resolve_settings(flags, self.env)
            self.assertIn(message, caught.exception.line())
        self.assertEqual(resolve_settings({"max_calls": "1"}, self.env).loop.max_calls, 1)

    def test_unknown_keys_are_warnings_naming_key_and_file(self):
        self.write_config({"max_cals": 3, "shell": {"timout": 3}, "providers": {
            "ollama": {"base_url": "http://127.0.0.1:1/v1", "modle": "x", "model": "m"}}})
        settings = resolve_settings({}, self.env)
        for name in ("max_cals", "shell.timout", "providers.ollama.modle"):
            self.assertIn(f"unknown config key {name} in {self.config_path} (ignored)", settings.warnings)
        self.assertEqual(len(settings.warnings), 3)

    def test_missing_nagent_config_file_is_an_error(self):
        self.env["NAGENT_CONFIG"] = os.path.join(self.tmp, "typo.json")
        with self.assertRaises(ConfigError) as caught:
            resolve_settings({}, self.env)
        self.assertIn("NAGENT_CONFIG names a missing file", caught.exception.line())
        self.assertIn("typo.json", caught.exception.line())

    def test_example_config_follows_a_change_of_provider_alone(self):
        with open(os.path.join(REPO, "config.example.json")) as handle:
            example = json.load(handle)
        self.write_config(example)
        settings = resolve_settings({}, self.env)
        self.assertEqual(settings.warnings, ())
        self.assertEqual((settings.provider.name, settings.model), ("openai", "gpt-5.5"))
        for provider, model in (("anthropic", "claude-sonnet-4-6"), ("google", "gemini-2.5-flash"),
                                ("ollama", "llama3.2"), ("openrouter", "anthropic/claude-sonnet-4.6")):
            self.write_config(dict(example, provider=provider))
            self.assertEqual(resolve_settings({}, self.env).model, model, provider)

    def test_describe_redacts_keys(self):
        self.write_config({"providers": {"openai": {"api_key": "sk-literal-secret-123"},
                                         "corp": {"base_url": "http://x/v1", "model": "m",
                                                  "api_key": "${CORP_KEY}"}}})
        self.env["CORP_KEY"] = "corp-secret-value-789"
        text = json.dumps(describe_settings(resolve_settings({}, self.env)))
        self.assertNotIn("sk-literal-secret-123", text)
        self.assertNotIn("corp-secret-value-789", text)
        self.assertIn("${CORP_KEY} (set)", text)


class ConfigCommandTest(HermeticTestCase):
    def test_bad_flags_are_usage_errors_before_anything_is_written(self):
        for args, message in ((["--max-calls", "0"], "--max-calls must be a whole number >= 1: 0"),
                              (["--max-calls", "-3"], "--max-calls must be a whole number >= 1: -3"),
                              (["--shell-timeout", "0"], "--shell-timeout must be a number > 0: 0")):
            # Were the flag accepted, the run would fail fast against a closed local port.
            self.env.update(OPENAI_API_KEY="sk-test-123456", OPENAI_BASE_URL="http://127.0.0.1:9/v1")
            self.write_config({"retry": {"max_attempts": 1}})
            proc = self.run_tool("nagent", *args, "hello")
            self.assertCleanError(proc, 2, message)
            self.assertFalse(os.path.exists(os.path.join(self.home, ".nagent", "conversations")))

    def test_missing_nagent_config_stops_every_command(self):
        self.env["NAGENT_CONFIG"] = os.path.join(self.tmp, "typo.json")
        for args in (["--status"], ["--config"], ["hello"]):
            proc = self.run_tool("nagent", *args)
            self.assertCleanError(proc, 3, "NAGENT_CONFIG names a missing file")

    def test_malformed_config_is_reported_by_every_command(self):
        with open(self.config_path, "w") as handle:
            handle.write("{not json")
        for args in (["--status"], ["--list-conversations"], ["--clear"], ["--list-file-edits"],
                     ["--config"], ["--save-conversation", "x"]):
            proc = self.run_tool("nagent", *args)
            self.assertCleanError(proc, 3, self.config_path)

    def test_unknown_key_warning_is_printed_once(self):
        self.write_config({"shell": {"timout": 3}})
        proc = self.run_tool("nagent", "--status")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        warning = f"warning: unknown config key shell.timout in {self.config_path} (ignored)"
        self.assertEqual(proc.stderr.count(warning), 1, proc.stderr)

    def test_config_command_shows_each_source_and_no_key(self):
        os.makedirs(os.path.join(self.home, ".nagent"))
        with open(os.path.join(self.home, ".nagent", "config.json"), "w") as handle:
            json.dump({"max_calls": 5, "providers": {"openai": {"api_key": "sk-literal-secret-123"}}},
                      handle)
        self.write_config({"shell": {"timeout": 9}})
        self.env["OPENAI_API_KEY"] = "sk-env-secret-456"
        proc = self.run_tool("nagent", "--config", "--json", "--max-attempts", "2")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        rows = {row["key"]: row for row in json.loads(proc.stdout)["settings"]}
        self.assertEqual((rows["max_calls"]["value"], rows["max_calls"]["source"]),
                         (5, "~/.nagent/config.json"))
        self.assertEqual((rows["shell.timeout"]["value"], rows["shell.timeout"]["source"]),
                         (9.0, "NAGENT_CONFIG " + self.config_path))
        self.assertEqual((rows["retry.max_attempts"]["value"], rows["retry.max_attempts"]["source"]),
                         (2, "flag --max-attempts"))
        self.assertEqual(rows["repeat_limit"]["source"], "default")
        text = self.run_tool("nagent", "--config")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertRegex(text.stdout.splitlines()[0], r"^key +value +source$")
        self.assertRegex(text.stdout, r"\nmax_calls +5 +~/\.nagent/config\.json\n")
        for output in (proc.stdout, proc.stderr, text.stdout, text.stderr):
            self.assertNotIn("sk-literal-secret-123", output)
            self.assertNotIn("sk-env-secret-456", output)

    def test_checks_come_in_a_useful_order(self):
        # No API key anywhere: a bad name or a missing file is still what gets reported.
        proc = self.run_tool("nagent", "--conversation", "../escape", "hello")
        self.assertCleanError(proc, 2, "invalid conversation name")
        proc = self.run_tool("nagent", "--pid", "a/b", "hello")
        self.assertCleanError(proc, 2, "invalid pid")
        proc = self.run_tool("nagent", "--file-edit", "missing.py", "hello")
        self.assertCleanError(proc, 6, "missing.py")
        target = self.write_file("present.py", "x = 1\n")
        proc = self.run_tool("nagent", "--file-edit", target, "hello")
        self.assertCleanError(proc, 4, "OPENAI_API_KEY")
        # Nothing was written before the checks passed: no conversation, no file-edit index.
        self.assertFalse(os.path.exists(os.path.join(self.home, ".nagent")),
                         list(os.walk(os.path.join(self.home, ".nagent"))))

    def test_missing_sdk_is_reported_before_anything_is_written(self):
        # The cursor SDK is not installed here (test_llm checks the same for nagent-llm-text).
        self.env["CURSOR_API_KEY"] = "c-123456"
        proc = self.run_tool("nagent", "--provider", "cursor", "--conversation", "c", "hello")
        self.assertCleanError(proc, 4, "cursor SDK is not installed")
        self.assertFalse(os.path.exists(os.path.join(self.home, ".nagent", "conversations", "c")))


class EnvReferenceTest(HermeticTestCase):
    """One `${VAR}` rule (nagent_env_refs) for MCP entries and provider keys; a provider's
    api_key reads a variable only as one whole reference, which may carry a default."""

    def test_api_key_reference_with_a_default(self):
        from nagent_config import api_key_for, key_source
        from nagent_secrets import key_names, secret_values
        self.write_config({"provider": "openai",
                           "providers": {"openai": {"api_key": "${LOCAL_KEY:-local-fallback-key}"}}})
        settings = resolve_settings({}, self.env)
        self.assertEqual(api_key_for(settings), "local-fallback-key")
        self.assertEqual(key_source(settings), "providers.openai.api_key in the config")
        rows = settings.providers.values()
        self.assertIn("LOCAL_KEY", key_names(rows))
        self.assertIn("local-fallback-key", secret_values(rows, self.env))
        shown = json.dumps(describe_settings(settings), ensure_ascii=False)
        self.assertIn("${LOCAL_KEY:-…} (not set, default used)", shown)
        self.assertNotIn("local-fallback-key", shown)
        self.env["LOCAL_KEY"] = "sk-from-the-variable"
        settings = resolve_settings({}, self.env)
        self.assertEqual((api_key_for(settings), key_source(settings)),
                         ("sk-from-the-variable", "LOCAL_KEY"))

    def test_only_a_whole_reference_reads_a_variable(self):
        from nagent_config import api_key_for
        from nagent_secrets import key_names
        self.env["X"] = "from-x"
        for literal in ("sk-${X}", "${X}-suffix", "${1X}", "$X", "${X"):
            self.write_config({"provider": "openai", "providers": {"openai": {"api_key": literal}}})
            settings = resolve_settings({}, self.env)
            with self.subTest(literal=literal):
                self.assertEqual(api_key_for(settings), literal)
                self.assertNotIn("X", key_names(settings.providers.values()))

    def test_mcp_and_provider_keys_read_references_alike(self):
        import nagent_mcp_config
        from nagent_config import configured_key
        from nagent_env_refs import expand
        self.assertIs(nagent_mcp_config.expand, expand)
        env = {"SET": "value-1", "EMPTY": ""}
        for text in ("${SET}", "${SET:-d}", "${EMPTY:-d}", "${UNSET:-d}", "${EMPTY}", "${UNSET:-}"):
            self.write_config({"providers": {"openai": {"api_key": text}}})
            row = resolve_settings({}, self.env).providers["openai"]
            with self.subTest(text=text):
                self.assertEqual(configured_key(row, env)[0], expand(text, env)[0])
