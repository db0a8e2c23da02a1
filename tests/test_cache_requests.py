"""Cache-aware requests: the block layout and breakpoints each provider gets, and what the
simulated caches of the fake servers report when the real loop runs (in-process, so the SDK
import is paid once): reads from the second call on, each Anthropic request reading back
everything the previous one wrote, OpenAI's per-conversation prompt_cache_key, Gemini's
implicit prefix cache, and the cache/cost totals in --json and --status.

`InProcessCase` is the harness test_window.py reuses: config per provider, `run_prompt()`
through nagent_loop.run_agent_loop, and `calls(path)` — every model call's usage as the
conversation's stats records hold it."""
import json
import os

from base import HermeticTestCase
from fakes import LOOKBACK, MAX_BREAKPOINTS, FakeVendorTestCase

from nagent_config import resolve_settings
from nagent_conversation import Record, read_records
from nagent_conversation_layout import Selection
from nagent_requests import build_request
from nagent_stats_format import decode_stats

STATIC = "<initial_context>\n" + "Static rules of the nagent protocol. " * 40
SESSION = "cwd: /work\n</initial_context>"


def rec(seq, kind, body, **attrs):
    return Record(seq, kind, body, tuple(sorted(attrs.items())))


def growing_conversation(turns=12, results_per_turn=2):
    """(records, ends): records of a long run; a model call happens after each records[:end]."""
    records, ends = [], []

    def add(kind, body, **attrs):
        records.append(rec(len(records) + 1, kind, body, **attrs))

    add("context", STATIC, part="static")
    add("context", SESSION, part="session")
    add("prompt", "Audit the logs.", source="argv")
    ends.append(len(records))
    for turn in range(turns):
        if turn == 4:  # an invalid reply is not sent; its correction joins the user turn
            add("reply", "prose", valid="false")
            add("system", "<system>Invalid nagent response format (record kept).</system>")
            ends.append(len(records))
        shells = "".join(f"<nagent-shell>cat log-{turn}-{n}</nagent-shell>" for n in range(results_per_turn))
        add("reply", shells, valid="true")
        for n in range(results_per_turn):
            output = f"line {n}\n" * 30
            add("result", f"<nagent-shell-result>\nexit_code: 0\nstdout:\n{output}</nagent-shell-result>",
                action="shell")
        add("stats", "{}")
        ends.append(len(records))
    add("reply", "<nagent-response>done</nagent-response>", valid="true")
    add("prompt", "Now the next batch.", source="argv")
    ends.append(len(records))
    return records, ends


def flat_blocks(messages):
    """[(role, text, marked)] of an Anthropic messages list, in cache order."""
    return [(m["role"], b["text"], "cache_control" in b) for m in messages for b in m["content"]]


class LayoutTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.rows = {name: resolve_settings({"provider": name}, self.env).provider
                     for name in ("anthropic", "openai", "google")}

    def anthropic_messages(self, records):
        from nagent_provider_anthropic import build_messages
        return build_messages(build_request(records, self.rows["anthropic"], cache_key="k"))

    def test_anthropic_one_block_per_record_and_static_context_marked(self):
        records, ends = growing_conversation()
        blocks = flat_blocks(self.anthropic_messages(records[:ends[0]]))
        self.assertEqual(blocks[0], ("user", STATIC, True))  # its own block, a breakpoint
        self.assertEqual(blocks[1][:2], ("user", SESSION))
        self.assertEqual(blocks[2][:2], ("user", "Audit the logs."))
        self.assertTrue(blocks[-1][2])
        for end in ends:
            blocks = flat_blocks(self.anthropic_messages(records[:end]))
            marked = [index for index, block in enumerate(blocks) if block[2]]
            self.assertLessEqual(len(marked), MAX_BREAKPOINTS)
            self.assertEqual(marked[0], 0)
            self.assertEqual(marked[-1], len(blocks) - 1)  # the newest message

    def test_each_anthropic_request_can_read_back_the_previous_one(self):
        """The previous request's last block is a block boundary of the next request, within the
        lookback of one of its breakpoints — so its cached prefix is found."""
        self.assert_reads_back(*growing_conversation())
        # A reply asking for many actions adds more blocks than the lookback: the end of the
        # previous request must itself be a breakpoint.
        self.assert_reads_back(*growing_conversation(turns=3, results_per_turn=LOOKBACK + 5))

    def assert_reads_back(self, records, ends):
        previous = None
        for end in ends:
            blocks = flat_blocks(self.anthropic_messages(records[:end]))
            if previous is not None:
                self.assertEqual([b[:2] for b in blocks[:len(previous)]], [b[:2] for b in previous])
                last = len(previous) - 1
                marked = [index for index, block in enumerate(blocks) if block[2]]
                self.assertTrue(any(0 <= mark - last <= LOOKBACK for mark in marked),
                                f"previous end {last} not within lookback of {marked}")
            previous = blocks

    def test_openai_and_gemini_get_a_stable_prefix(self):
        from nagent_provider_openai import _messages
        records, ends = growing_conversation()
        before = None
        for end in ends:
            request = build_request(records[:end], self.rows["openai"], cache_key="nagent-abc")
            self.assertEqual(request.cache_key, "nagent-abc")
            self.assertEqual(request.stop, ())  # OpenAI: no stop sequences, nothing varies
            messages = _messages(request, "responses")
            self.assertTrue(all(isinstance(m["content"], str) for m in messages))
            if before is not None:
                # Every earlier message is sent unchanged; only the newest user turn may grow.
                self.assertEqual(messages[:len(before) - 1], before[:-1])
                self.assertTrue(messages[len(before) - 1]["content"].startswith(before[-1]["content"]))
            before = messages
        google = build_request(records, self.rows["google"])
        self.assertEqual([m.parts for m in google.messages],
                         [m.parts for m in build_request(records, self.rows["anthropic"]).messages])


class InProcessCase(FakeVendorTestCase):
    """Harness: the real loop in this process against the fake vendor."""
    PROVIDER = "anthropic"
    EXTRA = {}

    def setUp(self):
        super().setUp()
        self.configure()

    def configure(self, **extra):
        self.write_config(dict({"provider": self.PROVIDER, "retry": {"base_delay": 0, "max_delay": 0},
                                "max_calls": 200}, **dict(self.EXTRA, **extra)))

    def session(self, conversation="t"):
        import nagent_session
        return nagent_session.build_session(Selection(conversation=conversation), dict(self.env),
                                            self.cwd)

    def run_prompt(self, prompt, conversation="t"):
        import nagent_loop
        with self.patched_environ():
            outcome = nagent_loop.run_agent_loop(self.session(conversation), prompt, "argv")
        return outcome

    def path(self, name="t"):
        return os.path.join(self.home, ".nagent", "conversations", name)

    @staticmethod
    def calls(path):
        """Every model call's usage (the stats records' last_call), oldest first."""
        out = []
        for record in read_records(path):
            if record.kind == "stats":
                data = decode_stats(record.body)
                if data.get("last_call"):
                    out.append(data["last_call"])
        return out

    def generation_requests(self, vendor):
        marks = {"anthropic": "/v1/messages", "openai": "/v1/responses", "google": "enerateContent"}
        return [r for r in self.fake.requests_for(vendor) if marks[vendor] in r["path"]
                and not r["path"].endswith("count_tokens")]


class AnthropicCacheTest(InProcessCase):
    def test_second_call_reads_and_each_call_reads_back_what_the_previous_wrote(self):
        self.write_file("a.txt", "alpha line\n" * 400)
        for text in ("<nagent-shell>printf 'x%.0s' $(seq 1 3000)</nagent-shell>",
                     '<nagent-read path="a.txt"/>', "<nagent-response>first done</nagent-response>",
                     "<nagent-response>second done</nagent-response>"):
            self.fake.reply(text, vendor="anthropic")
        first = self.run_prompt("Look at a.txt and the shell.")
        second = self.run_prompt("And now?")
        self.assertEqual((first.exit_code, second.exit_code), (0, 0), (first.error, second.error))
        calls = self.calls(self.path())
        self.assertEqual(len(calls), 4)
        self.assertEqual(calls[0]["cache_read_tokens"], 0)
        self.assertGreater(calls[0]["cache_write_tokens"], 0)
        self.assertGreater(calls[1]["cache_read_tokens"], 0)  # the second turn reads
        for before, after in zip(calls, calls[1:]):
            self.assertGreaterEqual(after["cache_read_tokens"],
                                    before["cache_read_tokens"] + before["cache_write_tokens"])
            # Only the new turn is uncached (written for the next call).
            fresh = after["input_tokens"] - after["cache_read_tokens"]
            self.assertLess(fresh, after["input_tokens"] - before["input_tokens"] + 200)
        for record in self.generation_requests("anthropic"):
            blocks = flat_blocks(record["json"]["messages"])
            self.assertTrue(blocks[0][2] and blocks[-1][2])
            self.assertTrue(blocks[0][1].startswith("<initial_context>"))
        totals = second.conversation_stats
        self.assertEqual(totals.cache_read_tokens, sum(c["cache_read_tokens"] for c in calls))
        self.assertEqual(totals.input_tokens, sum(c["input_tokens"] for c in calls))
        self.assertGreater(totals.cache_read_tokens / totals.input_tokens, 0.5)
        data = second.as_dict()  # what --json prints
        self.assertGreater(data["conversation_totals"]["cache_read_share"], 0.5)
        self.assertGreater(data["totals"]["cache_read_tokens"], 0)
        self.assertIsNotNone(data["totals"]["cost_usd"])  # claude-sonnet-4-6 has a price

        status = self.run_tool("nagent", "--status", "--json", "--conversation", "t")
        shown = json.loads(status.stdout)
        self.assertEqual(shown["totals"]["cache_read_tokens"], totals.cache_read_tokens)
        self.assertAlmostEqual(shown["totals"]["cost_usd"], totals.cost_usd, places=5)
        self.assertEqual(shown["last_run"]["calls"], 1)
        text = self.run_tool("nagent", "--status", "--conversation", "t").stdout
        self.assertIn(f"cache read {totals.cache_read_tokens} ", text)
        self.assertIn(f"cost: ${totals.cost_usd:.4f}", text)
        self.assertIn("last run: 1 call,", text)


class OpenAICacheTest(InProcessCase):
    PROVIDER = "openai"

    def test_prompt_cache_key_per_conversation_and_cached_prefix(self):
        self.fake.cache_min_tokens = 256
        for text in ("<nagent-shell>echo one</nagent-shell>", "<nagent-response>done</nagent-response>",
                     "<nagent-response>other</nagent-response>"):
            self.fake.reply(text, vendor="openai")
        outcome = self.run_prompt("Run echo.")
        other = self.run_prompt("Another conversation.", conversation="u")
        self.assertEqual((outcome.exit_code, other.exit_code), (0, 0), (outcome.error, other.error))
        requests = self.generation_requests("openai")
        keys = [r["json"].get("prompt_cache_key") for r in requests]
        self.assertEqual(keys[0], self.session("t").cache_key)
        self.assertEqual(keys[0], keys[1])
        self.assertNotEqual(keys[2], keys[0])
        self.assertTrue(all(key and key.startswith("nagent-") for key in keys))
        calls = self.calls(self.path())
        self.assertEqual(calls[0]["cache_read_tokens"], 0)
        self.assertGreater(calls[1]["cache_read_tokens"], 0)
        self.assertEqual(calls[1]["cache_read_tokens"] % 128, 256 % 128)  # OpenAI's 128-token steps


class GeminiCacheTest(InProcessCase):
    PROVIDER = "google"

    def test_implicit_prefix_cache_reads_from_the_second_call(self):
        for text in ("<nagent-shell>echo one</nagent-shell>", "<nagent-response>done</nagent-response>"):
            self.fake.reply(text, vendor="google")
        outcome = self.run_prompt("Run echo.")
        self.assertEqual(outcome.exit_code, 0, outcome.error)
        calls = self.calls(self.path())
        self.assertEqual(calls[0]["cache_read_tokens"], 0)
        self.assertGreater(calls[1]["cache_read_tokens"], 1000)  # the whole first request
        requests = self.generation_requests("google")
        first, second = (r["json"]["contents"] for r in requests)
        self.assertEqual(second[:len(first)], first)  # byte-stable prefix
