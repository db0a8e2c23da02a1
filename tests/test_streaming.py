"""Streaming through the real SDKs: the real bin/nagent and nagent-llm-text against a fake that
streams in real chunks with small delays (and drops a stream mid-way), for OpenAI Responses,
Anthropic Messages, Gemini streamGenerateContent and an OpenAI-compatible chat endpoint.
What is printed equals the non-streamed output, it arrives before the reply is complete, the
stored record is the whole reply, a stream dropped after text arrived keeps that text and is
continued (never generated again from scratch) and its output is counted, a reply cut by the
output limit is continued, and a reply that is not shown live is read as a stream too."""
import os
import subprocess
import sys
import threading
import time

from base import BIN
from test_loop import NagentRunCase

from nagent_stats_format import decode_stats

ANSWER = ("<nagent-response>\nStreaming works: line one.\nLine two has `code` and a < sign.\n"
          "</nagent-response>\n")
PRINTED = "Streaming works: line one.\nLine two has `code` and a < sign.\n"
ACTIONS = "<nagent-shell>echo streamed-action</nagent-shell>"


class TimedRun:
    """A bin/nagent process whose stdout is read as it arrives: (time, bytes) chunks."""

    def __init__(self, case, *args):
        self.proc = subprocess.Popen([sys.executable, os.path.join(BIN, "nagent"), *args],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=case.env, cwd=case.cwd)
        self.chunks = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            data = os.read(self.proc.stdout.fileno(), 65536)
            if not data:
                return
            self.chunks.append((time.monotonic(), data))

    def wait(self):
        with self.proc.stderr:
            err = self.proc.stderr.read()  # not communicate(): that would read stdout too
        self.proc.wait(timeout=120)
        self.reader.join(10)
        self.proc.stdout.close()
        return self.proc.returncode, b"".join(data for _, data in self.chunks).decode(), err.decode()


FIRST_HALF = "<nagent-response>\nStreaming works: line one.\nLine two has "
SECOND_HALF = "`code` and a < sign.\n</nagent-response>\n"


class _StreamingRuns:
    """One run per provider: an action reply whose stream drops after two deltas (kept and
    continued), then an answer cut by the output limit and continued, both streamed slowly."""
    PROVIDER = None

    def setUp(self):
        super().setUp()
        config = {"provider": self.PROVIDER, "retry": {"base_delay": 0, "max_delay": 0}}
        if self.PROVIDER == "local":
            config["providers"] = {"local": {"base_url": self.fake.url + "/v1", "model": "llama-x"}}
        self.write_config(config)

    def test_streamed_answer_equals_the_whole_reply_through_a_drop_and_a_continuation(self):
        self.fake.reply(ACTIONS, chunk=6, drop_after=2, gap=0.01)
        self.fake.reply(ACTIONS[12:], chunk=6, gap=0.01)     # the rest, after the 2 deltas
        self.fake.reply(FIRST_HALF, finish="length", chunk=5, gap=0.03, usage={"input": 40})
        self.fake.reply(SECOND_HALF, chunk=5, gap=0.03)
        run = TimedRun(self, "--stream", "--conversation", "s", "go")
        code, out, err = run.wait()
        self.assertEqual(code, 0, err)
        self.assertEqual(out, PRINTED)
        first, last = run.chunks[0][0], run.chunks[-1][0]
        self.assertGreater(len(run.chunks), 3)
        self.assertGreater(last - first, 0.3, "the answer arrived all at once")
        records = self.records(self.named_path("s"))
        replies = [(r.attr("valid"), r.body) for r in records if r.kind == "reply"]
        self.assertEqual(replies, [("partial", ACTIONS[:12]), ("true", ACTIONS),
                                   ("partial", FIRST_HALF), ("true", FIRST_HALF + SECOND_HALF)])
        self.assertEqual([r for r in records if r.kind == "error"], [])   # nothing was re-run
        first_stats = decode_stats([r for r in records if r.kind == "stats"][0].body)
        self.assertEqual(first_stats["last_call"]["finish_reason"], "cut")
        self.assertTrue(first_stats["last_call"]["estimated"])  # the dropped output still counts
        self.assertEqual(first_stats["last_call"]["output_tokens"], 3)    # 12 characters
        self.assertEqual(len(self.generation_requests()), 4)
        self.assertTrue(all(r["json"].get("stream") or "stream" in r["path"].lower()
                            for r in self.generation_requests()))


class OpenAIStreamingTest(_StreamingRuns, NagentRunCase):
    PROVIDER = "openai"

    def test_llm_text_streams_and_no_stream_prints_the_same(self):
        self.write_file("q.txt", "question?\n")
        self.fake.reply("four, as it happens", chunk=3, gap=0.02)
        self.fake.reply("four, as it happens")
        streamed = self.run_tool("nagent-llm-text", "--file", "q.txt", "--stream")
        whole = self.run_tool("nagent-llm-text", "--file", "q.txt", "--no-stream")
        self.assertEqual(streamed.stdout, "four, as it happens\n")
        self.assertEqual(whole.stdout, streamed.stdout)
        bodies = [r["json"] for r in self.generation_requests()]
        self.assertEqual([bool(b.get("stream")) for b in bodies], [True, True])  # read as a stream

    def test_no_stream_prints_what_the_stream_printed(self):
        self.fake.reply(ANSWER)
        proc = self.nagent("--no-stream", "--conversation", "n", "go")
        self.assertEqual(proc.stdout, PRINTED)
        self.assertTrue(self.generation_requests()[0]["json"].get("stream"))  # shown whole, read as a stream


class AnthropicStreamingTest(_StreamingRuns, NagentRunCase):
    PROVIDER = "anthropic"


class GoogleStreamingTest(_StreamingRuns, NagentRunCase):
    PROVIDER = "google"


class ChatEndpointStreamingTest(_StreamingRuns, NagentRunCase):
    PROVIDER = "local"
