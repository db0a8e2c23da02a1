"""The fake vendor servers (tests/fakes.py), checked with raw HTTP and with the real SDKs.

Each SDK is imported once per process (lazily, ~1-2 s each); every client is built from
fake.env() inside patched_environ, with max_retries=0 and short explicit timeouts.
"""
import functools
import http.client
import importlib
import json
import urllib.error
import urllib.request

from base import HermeticTestCase
from fakes import AnthropicCache, BadRequest, Fault, FakeVendorTestCase, PrefixCache, ReplySpec, \
    anthropic_blocks, tokens

SHORT = 0.3  # seconds: the client read timeout in timeout tests
LONG_DELAY = 30.0  # never waited out: fake.stop() wakes delayed answers


@functools.lru_cache(maxsize=None)
def sdk(name):
    return importlib.import_module(name)


def cached_block(text):
    return {"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}


class RawHttpTests(FakeVendorTestCase):
    """Server behaviour visible without any SDK: keys, routing, the script queue."""

    def call(self, method, path, body=None, headers=None):
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.fake.url + path, data=data, method=method,
                                         headers={"Content-Type": "application/json", **(headers or {})})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(request, timeout=5) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers), exc.read()

    def chat(self):
        status, _, raw = self.call("POST", "/v1/chat/completions", {
            "model": "gpt-5.5", "messages": [{"role": "user", "content": "hi"}]}, {"Authorization": "Bearer k"})
        return status, raw

    def chat_text(self):
        return json.loads(self.chat()[1])["choices"][0]["message"]["content"]

    def anthropic(self, **extra):
        status, headers, raw = self.call("POST", "/v1/messages", {
            "model": "claude-sonnet-4-6", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
            **extra}, {"x-api-key": "k", "anthropic-version": "2023-06-01"})
        return status, headers, raw

    def test_missing_key_is_401_in_each_vendor_format(self):
        status, _, raw = self.call("POST", "/v1/chat/completions", {"model": "m", "messages": [{}]})
        self.assertEqual((status, json.loads(raw)["error"]["code"]), (401, "invalid_api_key"))
        status, _, raw = self.call("POST", "/v1/messages", {"model": "m"}, {"anthropic-version": "2023-06-01"})
        self.assertEqual((status, json.loads(raw)), (401, {"type": "error", "error": {
            "type": "authentication_error", "message": "Invalid or missing API key (fake)"}}))
        status, _, raw = self.call("POST", "/v1beta/models/gemini-2.5-flash:generateContent", {"contents": []})
        self.assertEqual((status, json.loads(raw)["error"]["status"]), (401, "UNAUTHENTICATED"))
        self.fake.require_key = False
        status, _, _ = self.call("POST", "/v1beta/models/gemini-2.5-flash:generateContent",
                                 {"contents": [{"role": "user", "parts": [{"text": "x"}]}]})
        self.assertEqual(status, 200)

    def test_keys_are_recorded_by_name_only(self):
        self.assertEqual(self.anthropic()[0], 200)
        status, _, _ = self.call("POST", "/v1/models/gemini-2.5-flash:generateContent?key=g-secret",
                                 {"contents": [{"role": "user", "parts": [{"text": "x"}]}]})
        self.assertEqual(status, 200)
        anthropic, google = self.fake.requests
        self.assertEqual((anthropic["vendor"], anthropic["key_headers"]), ("anthropic", ["x-api-key"]))
        self.assertEqual(anthropic["headers"]["x-api-key"], "<redacted>")
        self.assertEqual((google["vendor"], google["key_headers"], google["query"]["key"]),
                         ("google", ["?key"], "<redacted>"))
        self.assertNotIn("g-secret", repr(self.fake.requests))
        self.assertEqual(self.fake.seen_keys, ["k", "g-secret"])
        self.fake.valid_keys = {"other"}
        self.assertEqual(self.anthropic()[0], 401)

    def test_vendor_targeted_queue_and_default_reply(self):
        self.fake.reply("for anthropic", vendor="anthropic")
        self.fake.reply("for anyone")
        self.assertEqual(self.chat_text(), "for anyone")
        self.assertEqual(self.chat_text(), "fake reply")
        self.assertTrue(self.fake.requests[-1]["defaulted"])
        self.assertEqual(json.loads(self.anthropic()[2])["content"][0]["text"], "for anthropic")
        self.assertEqual(self.fake.pending(), [])
        with self.assertRaises(ValueError):
            self.fake.reply("x", finish="done")
        with self.assertRaises(ValueError):
            self.fake.reply("x", vendor="mistral")

    def test_reply_fn_can_return_text_spec_or_fault(self):
        self.fake.reply_fn(lambda record: "echo " + record["json"]["messages"][-1]["content"])
        self.fake.reply_fn(lambda record: Fault(418), vendor="anthropic")
        self.assertEqual(self.chat_text(), "echo hi")
        self.assertEqual(self.anthropic()[0], 418)
        self.fake.reply_fn(lambda record: ReplySpec("spec", finish="length"))
        self.assertEqual(json.loads(self.chat()[1])["choices"][0]["finish_reason"], "length")

    def test_path_targeted_repeated_and_custom_faults(self):
        self.fake.fault(500, path="/v1/models", times=2)
        self.fake.fault(429, body=b"plain", headers={"Content-Type": "text/plain"})
        self.assertEqual(self.chat(), (429, b"plain"))  # generation skips the path-targeted items
        self.assertEqual(self.call("GET", "/v1/models", headers={"Authorization": "Bearer k"})[0], 500)
        self.assertEqual(self.call("GET", "/v1/models", headers={"Authorization": "Bearer k"})[0], 500)
        status, _, raw = self.call("GET", "/v1/models", headers={"Authorization": "Bearer k"})
        self.assertEqual((status, json.loads(raw)["data"][0]["id"]), (200, "gpt-5.5"))
        self.fake.fault(529, vendor="anthropic")
        status, _, raw = self.anthropic()
        self.assertEqual((status, json.loads(raw)["error"]["type"]), (529, "overloaded_error"))

    def test_invalid_requests_and_unknown_routes(self):
        status, _, raw = self.anthropic(max_tokens=None)
        self.assertEqual((status, json.loads(raw)["error"]["message"]), (400, "max_tokens: Field required"))
        status, _, raw = self.call("GET", "/v2/nothing", headers={"Authorization": "Bearer k"})
        self.assertEqual((status, json.loads(raw)["error"]["type"]), (404, "invalid_request_error"))
        self.assertEqual(self.fake.errors, [])

    def test_anthropic_stream_events_carry_event_lines(self):
        self.fake.reply("streamed")
        status, headers, raw = self.anthropic(stream=True)
        self.assertEqual((status, headers["Content-Type"]), (200, "text/event-stream"))
        events = [line for line in raw.decode().splitlines() if line.startswith("event: ")]
        self.assertEqual(events[0], "event: message_start")
        self.assertEqual(events[-1], "event: message_stop")

    def test_stop_closes_idle_keep_alive_connections(self):
        host, port = self.fake.url[len("http://"):].split(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        self.addCleanup(conn.close)
        conn.request("GET", "/v1/models", headers={"Authorization": "Bearer k"})
        self.assertEqual(conn.getresponse().read()[:1], b"{")
        self.fake.stop()
        with self.assertRaises((OSError, http.client.HTTPException)):
            conn.request("GET", "/v1/models", headers={"Authorization": "Bearer k"})
            conn.getresponse()


class CacheSimulationTests(HermeticTestCase):
    """The pure cache models, block by block."""

    def request(self, count, breakpoints):
        text = [f"block {i} " + "x" * 40 for i in range(count)]
        content = [cached_block(t) if i in breakpoints else {"type": "text", "text": t}
                   for i, t in enumerate(text)]
        return {"system": [content[0]], "messages": [{"role": "user", "content": content[1:]}]}

    def test_lookback_reaches_twenty_blocks_back_and_no_further(self):
        for last, expect_hit in ((20, True), (21, False)):
            cache = AnthropicCache()
            cache.account("m", anthropic_blocks(self.request(1, {0})), min_tokens=1)
            usage = cache.account("m", anthropic_blocks(self.request(last + 1, {last})), min_tokens=1)
            first = tokens("block 0 " + "x" * 40)
            self.assertEqual(usage["cache_read"], first if expect_hit else 0, last)
            self.assertEqual(usage["input"], 0)

    def test_minimum_size_model_and_breakpoint_limit(self):
        cache = AnthropicCache()
        blocks = anthropic_blocks(self.request(3, {0, 2}))
        usage = cache.account("m", blocks, min_tokens=25)  # block 0 alone is too small to write
        total = sum(tokens(block[1]) for block in blocks)
        self.assertEqual(usage, {"input": 0, "cache_read": 0, "cache_write": total})
        self.assertEqual(cache.account("other-model", blocks, 25)["cache_read"], 0)
        self.assertEqual(cache.account("m", blocks, 25)["cache_read"], total)
        with self.assertRaises(BadRequest):
            anthropic_blocks(self.request(5, {0, 1, 2, 3, 4}))

    def test_prefix_cache_rounds_to_steps(self):
        cache = PrefixCache()
        self.assertEqual(cache.account("m", b"a" * 400, 10, 8), 0)
        self.assertEqual(cache.account("m", b"a" * 300 + b"b", 10, 8), 74)  # 75 shared tokens → 10 + 8k
        self.assertEqual(cache.account("m", b"z" * 400, 10, 8), 0)


class OpenAISdkTests(FakeVendorTestCase):
    def setUp(self):
        super().setUp()
        self.openai = sdk("openai")
        with self.patched_environ():
            self.client = self.openai.OpenAI(max_retries=0, timeout=5.0)
        self.addCleanup(self.client.close)

    def test_responses_text_usage_and_key(self):
        self.fake.reply("hello there", usage={"reasoning": 5})
        response = self.client.responses.create(model="gpt-5.5", input="Say hi", instructions="be brief")
        self.assertEqual((response.output_text, response.status), ("hello there", "completed"))
        usage = response.usage
        self.assertEqual(usage.output_tokens, tokens("hello there") + 5)
        self.assertEqual(usage.output_tokens_details.reasoning_tokens, 5)
        self.assertEqual(usage.input_tokens_details.cached_tokens, 0)
        self.assertEqual(usage.total_tokens, usage.input_tokens + usage.output_tokens)
        record = self.fake.requests_for("openai")[-1]
        self.assertEqual((record["path"], record["json"]["instructions"]), ("/v1/responses", "be brief"))
        self.assertEqual(record["key_headers"], ["authorization"])
        self.assertIn("test-openai-key", self.fake.seen_keys)
        self.assertNotIn("test-openai-key", repr(self.fake.requests))

    def test_finish_mapping_and_native_usage_override(self):
        self.fake.reply("cut", finish="length", usage={"prompt_tokens": 77})
        self.fake.reply("cut too", finish="length")
        chat = self.client.chat.completions.create(model="gpt-5.5", messages=[{"role": "user", "content": "q"}])
        self.assertEqual((chat.choices[0].message.content, chat.choices[0].finish_reason), ("cut", "length"))
        self.assertEqual((chat.usage.prompt_tokens, chat.usage.prompt_tokens_details.cached_tokens), (77, 0))
        response = self.client.responses.create(model="gpt-5.5", input="q")
        self.assertEqual((response.status, response.incomplete_details.reason), ("incomplete", "max_output_tokens"))

    def test_prefix_cache_counts_previously_seen_prompt(self):
        self.fake.cache_min_tokens, self.fake.openai_cache_step = 32, 8
        system = {"role": "system", "content": "rules " * 100}
        first = self.client.chat.completions.create(
            model="gpt-5.5", messages=[system, {"role": "user", "content": "one"}])
        second = self.client.chat.completions.create(
            model="gpt-5.5", messages=[system, {"role": "user", "content": "two"}])
        self.assertEqual(first.usage.prompt_tokens_details.cached_tokens, 0)
        cached = second.usage.prompt_tokens_details.cached_tokens
        self.assertGreater(cached, tokens("rules " * 100) - 8)
        self.assertLess(cached, second.usage.prompt_tokens)
        self.assertEqual((cached - 32) % 8, 0)

    def test_usage_scripted_as_none_is_omitted(self):
        self.fake.reply("no usage", usage={"output": None})
        self.fake.reply("none either", usage={"input": None})
        chat = self.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}])
        self.assertEqual((chat.choices[0].message.content, chat.usage), ("no usage", None))
        self.assertIsNone(self.client.responses.create(model="m", input="q").usage)
        self.assertEqual(self.fake.errors, [])

    def test_models_list_and_files(self):
        self.fake.models["openai"] = ["local-model"]
        self.assertEqual([model.id for model in self.client.models.list()], ["local-model"])
        uploaded = self.client.files.create(file=("doc.pdf", b"%PDF-1.4 tiny", "application/pdf"),
                                            purpose="user_data")
        self.assertTrue(uploaded.id.startswith("file-"))
        self.assertEqual((uploaded.bytes, uploaded.filename), (13, "doc.pdf"))
        form = self.fake.requests[-1]["form"]
        self.assertEqual((form["purpose"], form["file"]["data"]), ("user_data", b"%PDF-1.4 tiny"))
        self.assertEqual(self.client.files.retrieve(uploaded.id).filename, "doc.pdf")

    def test_streaming_chat_and_responses(self):
        self.fake.reply("streamed chat")
        self.fake.reply("streamed response")
        stream = self.client.chat.completions.create(
            model="gpt-5.5", messages=[{"role": "user", "content": "q"}], stream=True,
            stream_options={"include_usage": True})
        chunks = list(stream)
        self.assertEqual("".join(c.choices[0].delta.content or "" for c in chunks if c.choices), "streamed chat")
        self.assertEqual(chunks[-1].usage.completion_tokens, tokens("streamed chat"))
        with self.client.responses.stream(model="gpt-5.5", input="q") as events:
            self.assertEqual(events.get_final_response().output_text, "streamed response")

    def test_error_classes(self):
        openai = self.openai
        self.fake.fault(429, headers={"retry-after-ms": "1"})
        with self.assertRaises(openai.RateLimitError) as caught:
            self.client.responses.create(model="gpt-5.5", input="q")
        self.assertEqual(caught.exception.response.headers["retry-after-ms"], "1")
        self.assertEqual(caught.exception.code, "rate_limit_exceeded")
        self.fake.fault(503, drop=True)
        with self.assertRaises(openai.APIConnectionError) as caught:
            self.client.chat.completions.create(model="gpt-5.5", messages=[{"role": "user", "content": "q"}])
        self.assertNotIsInstance(caught.exception, openai.APITimeoutError)
        self.fake.fault(500, delay=LONG_DELAY)
        with self.assertRaises(openai.APITimeoutError):
            self.client.with_options(timeout=SHORT).responses.create(model="gpt-5.5", input="q")
        self.fake.valid_keys = {"another-key"}
        with self.assertRaises(openai.AuthenticationError):
            self.client.models.list()


class AnthropicSdkTests(FakeVendorTestCase):
    def setUp(self):
        super().setUp()
        self.anthropic = sdk("anthropic")
        with self.patched_environ():
            self.client = self.anthropic.Anthropic(max_retries=0, timeout=5.0)
        self.addCleanup(self.client.close)

    def create(self, messages, system=None, **extra):
        return self.client.messages.create(model="claude-sonnet-4-6", max_tokens=256, messages=messages,
                                           **({"system": system} if system else {}), **extra)

    def test_text_finish_mapping_and_key(self):
        self.fake.reply("done", finish="stop_sequence")
        self.fake.reply("long", finish="length")
        message = self.create([{"role": "user", "content": "q"}], stop_sequences=["###", "END"])
        self.assertEqual((message.content[0].text, message.stop_reason, message.stop_sequence),
                         ("done", "stop_sequence", "###"))
        self.assertEqual(self.create([{"role": "user", "content": "q"}]).stop_reason, "max_tokens")
        record = self.fake.requests_for("anthropic")[0]
        self.assertIn("anthropic-version", record["headers"])
        self.assertTrue({"authorization", "x-api-key"} & set(record["key_headers"]))
        self.assertIn("test-anthropic-key", self.fake.seen_keys)

    def test_prompt_cache_write_read_and_lookback(self):
        self.fake.cache_min_tokens = 50
        system = [{"type": "text", "text": "short preamble"}, cached_block("S" * 400)]
        system_tokens = tokens("short preamble") + 100
        turn = [{"role": "user", "content": "question one"}]
        first = self.create(turn, system).usage
        self.assertEqual((first.cache_creation_input_tokens, first.cache_read_input_tokens, first.input_tokens),
                         (system_tokens, 0, tokens("question one")))
        second = self.create(turn, system).usage
        self.assertEqual((second.cache_creation_input_tokens, second.cache_read_input_tokens),
                         (0, system_tokens))
        grown = turn + [{"role": "assistant", "content": "answer one"},
                        {"role": "user", "content": [cached_block("question two " * 20)]}]
        third = self.create(grown, system).usage
        new_part = tokens("question one") + tokens("answer one") + tokens("question two " * 20)
        self.assertEqual((third.cache_read_input_tokens, third.cache_creation_input_tokens, third.input_tokens),
                         (system_tokens, new_part, 0))
        fourth = self.create(grown + [{"role": "assistant", "content": "a2"},
                                      {"role": "user", "content": [cached_block("q3")]}], system).usage
        self.assertEqual(fourth.cache_read_input_tokens, system_tokens + new_part)
        self.assertEqual(fourth.cache_creation_input_tokens, tokens("a2") + tokens("q3"))

    def test_errors(self):
        anthropic = self.anthropic
        with self.assertRaises(anthropic.BadRequestError) as caught:
            self.create([{"role": "user", "content": [cached_block(str(i)) for i in range(5)]}])
        self.assertEqual(caught.exception.body["error"]["type"], "invalid_request_error")
        self.fake.fault(529)
        with self.assertRaises(anthropic.InternalServerError) as caught:
            self.create([{"role": "user", "content": "q"}])
        self.assertEqual(caught.exception.status_code, 529)
        self.fake.fault(429, headers={"retry-after": "1"})
        with self.assertRaises(anthropic.RateLimitError) as caught:
            self.create([{"role": "user", "content": "q"}])
        self.assertEqual(caught.exception.response.headers["retry-after"], "1")
        self.fake.fault(500, drop=True)
        with self.assertRaises(anthropic.APIConnectionError):
            self.create([{"role": "user", "content": "q"}])
        self.fake.fault(500, delay=LONG_DELAY)
        with self.assertRaises(anthropic.APITimeoutError):
            self.client.with_options(timeout=SHORT).messages.create(
                model="claude-sonnet-4-6", max_tokens=5, messages=[{"role": "user", "content": "q"}])

    def test_models_list_and_stream(self):
        self.assertEqual([model.id for model in self.client.models.list()], self.fake.models["anthropic"])
        self.fake.reply("streamed text")
        with self.client.messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                                         messages=[{"role": "user", "content": "q"}]) as stream:
            final = stream.get_final_message()
        self.assertEqual((final.content[0].text, final.usage.output_tokens),
                         ("streamed text", tokens("streamed text")))


class GoogleSdkTests(FakeVendorTestCase):
    def setUp(self):
        super().setUp()
        self.genai = sdk("google.genai")
        self.types = sdk("google.genai.types")
        # No base_url here: the SDK must pick GOOGLE_GEMINI_BASE_URL up from the environment.
        with self.patched_environ():
            self.client = self.genai.Client(http_options=self.types.HttpOptions(timeout=5000))
            self.short = self.genai.Client(http_options=self.types.HttpOptions(timeout=int(SHORT * 1000)))

    def test_text_usage_finish_and_key(self):
        self.fake.reply("gemini says", usage={"reasoning": 4})
        self.fake.reply("truncated", finish="length")
        config = self.types.GenerateContentConfig(system_instruction="be terse")
        response = self.client.models.generate_content(model="gemini-2.5-flash", contents="q", config=config)
        self.assertEqual(response.text, "gemini says")
        usage = response.usage_metadata
        self.assertEqual((usage.candidates_token_count, usage.thoughts_token_count,
                          usage.cached_content_token_count),
                         (tokens("gemini says"), 4, 0))
        self.assertEqual(response.candidates[0].finish_reason, self.types.FinishReason.STOP)
        record = self.fake.requests_for("google")[-1]
        self.assertEqual(record["path"], "/v1/models/gemini-2.5-flash:generateContent")
        self.assertIn("systemInstruction", record["json"])
        self.assertEqual(record["key_headers"], ["x-goog-api-key"])
        truncated = self.client.models.generate_content(model="gemini-2.5-flash", contents="q")
        self.assertEqual(truncated.candidates[0].finish_reason, self.types.FinishReason.MAX_TOKENS)

    def test_implicit_cache_and_stream(self):
        self.fake.cache_min_tokens = 16
        long_prompt = "context " * 50
        first = self.client.models.generate_content(model="gemini-2.5-flash", contents=long_prompt + "one")
        second = self.client.models.generate_content(model="gemini-2.5-flash", contents=long_prompt + "two")
        self.assertEqual(first.usage_metadata.cached_content_token_count, 0)
        self.assertGreaterEqual(second.usage_metadata.cached_content_token_count, tokens(long_prompt) - 8)
        self.fake.reply("in two chunks")
        chunks = list(self.client.models.generate_content_stream(model="gemini-2.5-flash", contents="q"))
        self.assertEqual("".join(chunk.text for chunk in chunks), "in two chunks")
        self.assertEqual(chunks[-1].usage_metadata.candidates_token_count, tokens("in two chunks"))

    def test_file_upload_get_and_models(self):
        self.fake.google_processing_polls = 1
        path = self.write_file("report.pdf", b"%PDF-1.4 tiny", mode="wb")
        uploaded = self.client.files.upload(file=path)
        self.assertEqual((uploaded.mime_type, uploaded.size_bytes, uploaded.state.name),
                         ("application/pdf", 13, "PROCESSING"))
        fetched = self.client.files.get(name=uploaded.name)
        self.assertEqual((fetched.state.name, fetched.uri), ("ACTIVE", uploaded.uri))
        self.assertEqual(self.fake.files[uploaded.name]["data"], b"%PDF-1.4 tiny")
        names = [model.name for model in self.client.models.list()]
        self.assertEqual(names, ["models/gemini-2.5-flash", "models/gemini-2.5-pro"])

    def test_errors(self):
        errors, httpx2 = sdk("google.genai.errors"), sdk("httpx2")
        self.fake.fault(429)
        with self.assertRaises(errors.ClientError) as caught:
            self.client.models.generate_content(model="gemini-2.5-flash", contents="q")
        self.assertEqual((caught.exception.code, caught.exception.status), (429, "RESOURCE_EXHAUSTED"))
        self.fake.fault(503)
        with self.assertRaises(errors.ServerError):
            self.client.models.generate_content(model="gemini-2.5-flash", contents="q")
        self.fake.fault(500, drop=True)
        with self.assertRaises(httpx2.TransportError):
            self.client.models.generate_content(model="gemini-2.5-flash", contents="q")
        self.fake.fault(500, delay=LONG_DELAY)
        with self.assertRaises(httpx2.ReadTimeout):
            self.short.models.generate_content(model="gemini-2.5-flash", contents="q")
