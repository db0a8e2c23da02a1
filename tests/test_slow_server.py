"""Issue 21, "found against a real model server": a CPU server generates slowly and may stall.
Replies are read as a stream whether or not they are shown, so the read timeout bounds the
silence between chunks, not the generation; a reply cut after output started is kept and
continued (nagent) or reported (nagent-llm-text, exit 11), never generated again from scratch;
what a provider may bill is counted, a call cut by Ctrl-C and a call that timed out included;
and the live view says "asking again" only when the run asks again."""
import json
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

from base import BIN
from test_loop import NagentRunCase

ANSWER = "<nagent-response>\nThe slow server answered in the end, one small piece at a time.\n</nagent-response>"
PRINTED = "The slow server answered in the end, one small piece at a time.\n"
PROVIDERS = ("openai", "anthropic", "google", "local")


def provider_config(provider, url, **extra):
    config = {"provider": provider, "retry": {"base_delay": 0, "max_delay": 0}, **extra}
    if provider == "local":
        config["providers"] = {"local": {"base_url": url + "/v1", "model": "llama-x"}}
    return config


class SlowServerTest(NagentRunCase):
    def test_a_slow_reply_that_is_not_shown_live_still_arrives_for_every_provider(self):
        # 16 deltas 0.15 s apart: 2.4 s of generation against a 1 s read timeout. Read whole,
        # the call timed out and was run again 4 times; read as a stream, each wait is short.
        text = "The server is slow but it answers in the end, " * 2

        def ask(provider):
            config = os.path.join(self.tmp, f"{provider}.json")
            with open(config, "w", encoding="utf-8") as handle:
                json.dump(provider_config(provider, self.fake.url), handle)
            return self.run_tool("nagent-llm-text", "--file", "q.txt", "--no-stream",
                                 "--read-timeout", "1", env=dict(self.env, NAGENT_CONFIG=config))
        self.write_file("q.txt", "question?\n")
        for provider in ("openai", "anthropic", "google", "openai"):   # openai twice: "local"
            self.fake.reply(text, chunk=6, gap=0.15, vendor=provider)
        with ThreadPoolExecutor(max_workers=4) as pool:
            procs = list(pool.map(ask, PROVIDERS))
        for provider, proc in zip(PROVIDERS, procs):
            self.assertEqual((proc.returncode, proc.stdout), (0, text + "\n"),
                             f"{provider}: {proc.stderr}")
        requests = self.generation_requests()
        self.assertEqual(len(requests), 4)       # one request each: nothing generated twice
        self.assertTrue(all((r["json"] or {}).get("stream") or "stream" in r["path"].lower()
                            for r in requests))

    def test_a_stalled_stream_is_kept_and_continued_not_run_again(self):
        self.write_config(provider_config("openai", self.fake.url, max_attempts=4))
        cut_at = len(ANSWER) // 2 // 6 * 6
        self.fake.reply(ANSWER, chunk=6, stall_after=cut_at // 6)
        self.fake.reply(ANSWER[cut_at:])
        proc = self.nagent("-v", "--read-timeout", "1", "--conversation", "stall", "answer slowly")
        self.assertEqual((proc.returncode, proc.stdout), (0, PRINTED), proc.stderr)
        self.assertIn(f"! reply cut off after {cut_at} characters (no data for 1 s, the read "
                      "timeout); asking for the rest", proc.stderr)
        self.assertEqual(len(self.generation_requests()), 2)
        records = self.records(self.named_path("stall"))
        replies = [(r.attr("valid"), r.attr("finish"), r.body) for r in records if r.kind == "reply"]
        self.assertEqual(replies, [("partial", "cut", ANSWER[:cut_at]), ("true", "stop", ANSWER)])
        second = self.request_text(self.generation_requests()[1])
        self.assertIn(ANSWER[:cut_at].rstrip(), second)
        self.assertIn("the connection to you ended before it was complete", second)
        status = json.loads(self.nagent("--status", "--json", "--conversation", "stall").stdout)
        self.assertEqual(status["model_calls"], 2)
        self.assertTrue(status["totals"]["estimated"])   # the cut call's usage is estimated

    def test_llm_text_reports_a_cut_reply_and_counts_a_timed_out_call(self):
        self.write_config(provider_config("anthropic", self.fake.url, max_attempts=2))
        self.write_file("q.txt", "question?\n")
        self.fake.reply(PRINTED, chunk=8, stall_after=3)
        cut = self.run_tool("nagent-llm-text", "--file", "q.txt", "--read-timeout", "1", "--json")
        self.assertEqual(cut.returncode, 11, cut.stderr)
        data = json.loads(cut.stdout)
        self.assertEqual((data["text"], data["finish_reason"], data["truncated"]),
                         (PRINTED[:24], "cut", True))
        self.assertIn("warning: the reply was cut off after 24 characters: no data for 1 s, the "
                      "read timeout; it is incomplete", cut.stderr)
        self.assertEqual(len(self.generation_requests()), 1)
        # No output at all within the read timeout: retried, and each attempt may be billed.
        self.fake.reply(ANSWER, delay=30)
        self.fake.reply(ANSWER, delay=30)
        self.fake.reply("<nagent-response>never</nagent-response>")
        proc = self.nagent("--read-timeout", "0.5", "--conversation", "late", "hello")
        self.assertCleanError(proc, 5, "anthropic request timed out")
        self.assertIn("after 2 attempts", proc.stderr)
        status = json.loads(self.nagent("--status", "--json", "--conversation", "late").stdout)
        self.assertEqual(status["model_calls"], 1)
        self.assertGreater(status["totals"]["input_tokens"], 0)


class AskingAgainTest(NagentRunCase):
    def test_the_last_invalid_reply_is_not_asked_again(self):
        for _ in range(4):
            self.fake.reply("Prose.")     # short: the line is cut at the terminal's width
        proc = self.nagent("-v", "never in the protocol")
        self.assertEqual(proc.returncode, 8, proc.stderr)
        notes = [line for line in proc.stderr.splitlines() if "was not in the protocol" in line]
        self.assertEqual(len(notes), 4)
        self.assertEqual([line.endswith("; asking again") for line in notes],
                         [True, True, True, False])
        self.assertEqual(len(self.generation_requests()), 4)


class InterruptedCallTest(NagentRunCase):
    def test_a_call_cut_by_ctrl_c_is_counted(self):
        self.fake.reply("<nagent-shell>echo one</nagent-shell>")
        self.fake.reply(ANSWER, chunk=4, gap=0.3)
        proc = subprocess.Popen([sys.executable, os.path.join(BIN, "nagent"), "--events", "-v",
                                 "--conversation", "cut", "slow task"], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env, cwd=self.cwd)
        self.addCleanup(proc.stderr.close)
        self.addCleanup(proc.stdout.close)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        events, err = [], []
        reader = threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)
        reader.start()
        for line in proc.stdout:
            events.append(json.loads(line))
            if events[-1]["type"] == "reply_delta" and events[-1]["call"] == 2:
                proc.send_signal(signal.SIGINT)
                break
        events += [json.loads(line) for line in proc.stdout]
        self.assertEqual(proc.wait(timeout=60), 130)
        reader.join(30)
        ends = [event for event in events if event["type"] == "model_call_end"]
        self.assertEqual([(e["call"], e["finish"], e["usage"]["estimated"]) for e in ends],
                         [(1, "stop", False), (2, "cut", True)])
        self.assertGreater(ends[1]["usage"]["output_tokens"], 0)
        self.assertEqual(events[-1]["type"], "run_end")
        self.assertEqual(events[-1]["totals"]["model_calls"], 2)
        self.assertRegex(err[0], r"● 2 model calls · ")
        status = json.loads(self.nagent("--status", "--json", "--conversation", "cut").stdout)
        self.assertEqual(status["model_calls"], 2)
        self.assertEqual(self.records(self.named_path("cut"))[-1].kind, "interrupt")
