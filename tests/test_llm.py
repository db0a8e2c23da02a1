"""Provider helper: settings precedence, request shapes, usage parsing, the retry policy and
error reporting, in-process against the fake vendor servers (real SDKs, real wire formats)."""
import os

from base import HermeticTestCase
from fakes import FakeVendorTestCase

from nagent_config import resolve_settings
from nagent_errors import ConfigError, ProviderError, SetupError


class SettingsPrecedenceTest(HermeticTestCase):
    def home_config(self, data):
        import json
        os.makedirs(os.path.join(self.home, ".nagent"), exist_ok=True)
        with open(os.path.join(self.home, ".nagent", "config.json"), "w") as handle:
            json.dump(data, handle)

    def test_table_defaults(self):
        settings = resolve_settings({}, self.env)
        self.assertEqual((settings.provider.name, settings.model), ("openai", "gpt-5.5"))

    def test_home_config_then_nagent_config_then_flags(self):
        self.home_config({"provider": "anthropic", "read_timeout": 7})
        settings = resolve_settings({}, self.env)
        self.assertEqual((settings.provider.name, settings.model), ("anthropic", "claude-sonnet-4-6"))
        self.assertEqual(settings.timeouts.read, 7.0)
        self.write_config({"provider": "google", "model": "gemini-2.5-pro"})
        settings = resolve_settings({}, self.env)
        self.assertEqual((settings.provider.name, settings.model), ("google", "gemini-2.5-pro"))
        self.assertEqual(settings.timeouts.read, 7.0)   # merged from the home config
        settings = resolve_settings({"model": "gemini-x", "read_timeout": 3}, self.env)
        self.assertEqual((settings.model, settings.timeouts.read), ("gemini-x", 3.0))

    def test_provider_flag_without_model_picks_its_default(self):
        self.write_config({"provider": "openai", "model": "gpt-4.1"})
        settings = resolve_settings({"provider": "gemini"}, self.env)
        self.assertEqual((settings.provider.name, settings.model), ("google", "gemini-2.5-flash"))
        self.assertEqual(resolve_settings({"provider": "openai"}, self.env).model, "gpt-4.1")

    def test_compatible_endpoint_is_one_config_entry(self):
        self.write_config({"provider": "ollama", "providers": {
            "ollama": {"base_url": "http://127.0.0.1:11434/v1", "model": "llama3.2"}}})
        settings = resolve_settings({}, self.env)
        self.assertEqual((settings.provider.api, settings.model), ("chat", "llama3.2"))
        from nagent_config import api_key_for
        self.assertEqual(api_key_for(settings), "not-needed")

    def test_malformed_config_names_file_and_problem(self):
        with open(self.config_path, "w") as handle:
            handle.write("{not json")
        with self.assertRaises(ConfigError) as caught:
            resolve_settings({}, self.env)
        self.assertIn(self.config_path, caught.exception.line())
        self.assertIn("line 1", caught.exception.line())

    def test_bad_values(self):
        for data in ({"provider": "nope"}, {"read_timeout": "soon"}, {"max_attempts": 0},
                     {"providers": {"x": {"model": "m"}}}, {"providers": []}, ["list"]):
            self.write_config(data)
            with self.assertRaises(ConfigError, msg=data):
                resolve_settings({}, self.env)

    def test_key_reference_and_missing_key(self):
        from nagent_config import api_key_for
        self.write_config({"providers": {"openai": {"api_key": "${MY_OPENAI}"}}})
        self.env["MY_OPENAI"] = "sk-from-reference"
        self.assertEqual(api_key_for(resolve_settings({}, self.env)), "sk-from-reference")
        del self.env["MY_OPENAI"]
        with self.assertRaises(SetupError) as caught:
            api_key_for(resolve_settings({}, self.env))
        self.assertIn("MY_OPENAI", caught.exception.line())
        self.write_config({})
        with self.assertRaises(SetupError) as caught:
            api_key_for(resolve_settings({"provider": "google"}, self.env))
        self.assertIn("GOOGLE_API_KEY or GEMINI_API_KEY", caught.exception.line())


class RetryPolicyUnitTest(HermeticTestCase):
    def test_backoff_and_retry_after(self):
        from nagent_llm import backoff_delay, parse_retry_after
        settings = resolve_settings({}, self.env)
        self.assertEqual(parse_retry_after({"retry-after-ms": "250"}), 0.25)
        self.assertEqual(parse_retry_after({"retry-after": "3"}), 3.0)
        self.assertIsNone(parse_retry_after({"retry-after": "soon"}))
        self.assertEqual(backoff_delay(1, settings, retry_after=9999), settings.retry.retry_after_cap)
        delays = [backoff_delay(n, settings, rand=lambda: 1.0) for n in range(1, 8)]
        self.assertEqual(delays, sorted(delays))
        self.assertLessEqual(delays[-1], settings.retry.max_delay)


class ProviderCallsTest(FakeVendorTestCase):
    def settings(self, provider, **config):
        data = {"retry": {"base_delay": 0, "max_delay": 0}, "read_timeout": 2, "connect_timeout": 2}
        data.update(config)
        self.write_config(data)
        return resolve_settings({"provider": provider}, self.env)

    def generate(self, provider, request=None, sleeps=None, **config):
        import nagent_llm
        request = request or nagent_llm.text_request("What is 2+2?")
        return nagent_llm.generate(request, self.settings(provider, **config),
                                   sleep=(sleeps.append if sleeps is not None else lambda s: None))

    def test_openai_responses_shape_and_usage(self):
        self.fake.reply("4", usage={"input": 10, "cache_read": 6, "output": 2, "reasoning": 1})
        result = self.generate("openai")
        self.assertEqual((result.text, result.provider, result.finish_reason), ("4", "openai", "stop"))
        # OpenAI counts reasoning inside output tokens.
        self.assertEqual((result.input_tokens, result.cache_read_tokens, result.output_tokens),
                         (16, 6, 3))
        self.assertEqual(result.reasoning_tokens, 1)
        self.assertFalse(result.estimated)
        request = self.fake.requests_for("openai")[-1]
        self.assertEqual(request["path"], "/v1/responses")
        self.assertEqual(request["json"]["model"], "gpt-5.5")
        self.assertEqual(request["json"]["input"], [{"role": "user", "content": "What is 2+2?"}])

    def test_openai_cut_off_reply_is_recognisable(self):
        self.fake.reply("partial", finish="length")
        self.assertEqual(self.generate("openai").finish_reason, "length")

    def test_anthropic_blocks_breakpoints_stop_and_cache_usage(self):
        import nagent_llm
        self.fake.reply("ok", usage={"input": 5, "cache_read": 100, "cache_write": 20, "output": 1},
                        finish="stop_sequence")
        request = nagent_llm.Request(
            messages=(nagent_llm.Message("user", ("static context", "prompt")),
                      nagent_llm.Message("assistant", ("<nagent-shell>ls</nagent-shell>",)),
                      nagent_llm.Message("user", ("result",))),
            stop=("\n<system>",), cache_breakpoints=((0, 0), (2, 0)))
        result = self.generate("anthropic", request)
        self.assertEqual((result.input_tokens, result.cache_read_tokens, result.cache_write_tokens),
                         (125, 100, 20))
        self.assertEqual(result.finish_reason, "stop_sequence")
        body = self.fake.requests_for("anthropic")[-1]["json"]
        self.assertEqual(body["stop_sequences"], ["\n<system>"])
        first = body["messages"][0]["content"]
        self.assertEqual([b["text"] for b in first], ["static context", "prompt"])
        self.assertEqual(first[0]["cache_control"], {"type": "ephemeral"})
        self.assertNotIn("cache_control", first[1])
        self.assertIn("cache_control", body["messages"][2]["content"][0])

    def test_google_shape_usage_and_length(self):
        self.fake.reply("fine", finish="length",
                        usage={"input": 30, "cache_read": 10, "output": 3, "reasoning": 4})
        result = self.generate("gemini")
        self.assertEqual((result.provider, result.finish_reason), ("google", "length"))
        self.assertEqual((result.input_tokens, result.cache_read_tokens, result.reasoning_tokens),
                         (40, 10, 4))
        request = self.fake.requests_for("google")[-1]
        self.assertIn("gemini-2.5-flash:streamGenerateContent", request["path"])  # always a stream
        self.assertEqual(request["json"]["contents"][0]["parts"][0]["text"], "What is 2+2?")

    def test_openai_compatible_chat_endpoint(self):
        self.fake.reply("hi", usage={"input": 4, "output": 1})
        result = self.generate("local", providers={"local": {"base_url": self.fake.url + "/v1",
                                                             "model": "qwen3"}})
        self.assertEqual((result.provider, result.model, result.text), ("local", "qwen3", "hi"))
        request = self.fake.requests[-1]
        self.assertEqual(request["path"], "/v1/chat/completions")

    def test_retry_policy_recovers_through_every_retryable_fault(self):
        self.fake.fault(429, headers={"retry-after": "1"})
        self.fake.fault(500)
        self.fake.fault(529, vendor="anthropic")
        self.fake.fault(503)
        self.fake.fault(200, drop=True)
        self.fake.reply("made it")
        sleeps = []
        result = self.generate("anthropic", sleeps=sleeps, max_attempts=6)
        self.assertEqual((result.text, result.attempts), ("made it", 6))
        self.assertEqual(sleeps[0], 1.0)            # retry-after honoured
        self.assertEqual(len(sleeps), 5)

    def test_retry_after_is_capped(self):
        self.fake.fault(429, headers={"retry-after": "86400"})
        self.fake.reply("ok")
        sleeps = []
        self.generate("openai", sleeps=sleeps, retry_after_cap=0.5)
        self.assertEqual(sleeps, [0.5])

    def test_timeout_is_retried_then_reported(self):
        self.fake.fault(200, delay=3, times=2)
        with self.assertRaises(ProviderError) as caught:
            self.generate("google", read_timeout=0.3, max_attempts=2)
        self.assertTrue(caught.exception.retryable)
        self.assertIn("timed out", caught.exception.line())
        self.assertIn("after 2 attempts", caught.exception.line())

    def test_refused_connection_is_retried_and_reported(self):
        self.env["OPENAI_BASE_URL"] = "http://127.0.0.1:9/v1"
        sleeps = []
        with self.assertRaises(ProviderError) as caught:
            self.generate("openai", sleeps=sleeps, max_attempts=3)
        self.assertEqual(len(sleeps), 2)
        self.assertEqual(caught.exception.error_type, "connection")

    def test_client_errors_are_never_retried(self):
        for status in (400, 401, 403, 404):
            for provider in ("openai", "anthropic", "google"):
                self.fake.fault(status)
                sleeps = []
                with self.assertRaises(ProviderError) as caught:
                    self.generate(provider, sleeps=sleeps)
                self.assertEqual((caught.exception.status, sleeps), (status, []), provider)
                self.assertFalse(caught.exception.retryable)
        self.assertIn("check the API key", caught.exception.line() if status == 401 else
                      ProviderError("x", fix="check the API key").line())

    def test_401_message_says_check_key_and_hides_it(self):
        self.fake.valid_keys = {"another-key"}
        with self.assertRaises(ProviderError) as caught:
            self.generate("anthropic")
        line = caught.exception.line()
        self.assertIn("401", line)
        self.assertIn("ANTHROPIC_API_KEY rejected", line)
        self.assertNotIn("test-anthropic-key", line)

    def test_estimates_when_no_usage_reported(self):
        self.fake.reply("x" * 40, usage={"input": None, "output": None})
        self.write_config({"provider": "local", "providers": {"local": {
            "base_url": self.fake.url + "/v1", "model": "m"}}})
        import nagent_llm
        from nagent_config import resolve_settings as resolve
        result = nagent_llm.generate(nagent_llm.text_request("y" * 80), resolve({}, self.env))
        self.assertTrue(result.estimated)
        self.assertEqual((result.input_tokens, result.output_tokens), (20, 10))

    def test_list_models_from_api_and_table(self):
        import nagent_llm
        listing = nagent_llm.list_models(self.settings("anthropic"))
        self.assertEqual((listing["source"], listing["models"]),
                         ("api", ["claude-haiku-4-5", "claude-sonnet-4-6"]))
        listing = nagent_llm.list_models(self.settings("gemini"))
        self.assertIn("gemini-2.5-pro", listing["models"])


class MissingPackageTest(HermeticTestCase):
    def test_missing_sdk_gives_pip_line(self):
        blocker = os.path.join(self.tmp, "block")
        os.makedirs(os.path.join(blocker, "anthropic"))
        with open(os.path.join(blocker, "anthropic", "__init__.py"), "w") as handle:
            handle.write("raise ImportError('blocked for the test')\n")
        self.env["PYTHONPATH"] = blocker
        self.env["ANTHROPIC_API_KEY"] = "k-123456"
        self.write_file("q.txt", "hello")
        proc = self.run_tool("nagent-llm-text", "--file", "q.txt", "--provider", "anthropic")
        self.assertCleanError(proc, 4, "the anthropic SDK is not installed")
        self.assertIn("pip install", proc.stderr)

    def test_cursor_without_sdk(self):
        self.env["CURSOR_API_KEY"] = "c-123456"
        self.write_file("q.txt", "hello")
        proc = self.run_tool("nagent-llm-text", "--file", "q.txt", "--provider", "cursor")
        self.assertCleanError(proc, 4, "cursor SDK is not installed")
        self.assertIn("pip install cursor-agent-sdk", proc.stderr)
        self.assertNotIn("c-123456", proc.stderr)
