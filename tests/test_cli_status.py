"""Issue 12 (cli): the short stats record and its readers (old format too), --status with
prompts and model calls apart plus the provider, model and config in effect, one definition of
a turn (user prompts) for --branch-conversation --turn, -n/--new, and the --list-conversations
table."""
import json
import os
import re

from test_loop import NagentRunCase

from nagent_accounting import TokenStats
from nagent_conversation import ConversationWriter, read_records, read_tail_summary
from nagent_conversation_lifecycle import records_through_turn
from nagent_conversation_format import Record
from nagent_stats_format import decode_stats, encode_stats

OLD_STATS = {"conversation": {"turns": 2, "current_input": 300, "input_tokens": 500, "output_tokens": 40,
                              "cache_read_tokens": 200, "cache_write_tokens": 100, "reasoning_tokens": 0,
                              "cost_usd": 0.01, "estimated": False, "cache_read_share": 0.4},
             "run": {"turns": 1, "input_tokens": 300, "output_tokens": 20, "cost_usd": 0.005},
             "windows": [], "last_call": {"provider": "google", "model": "gemini-2.5-flash",
                                          "input_tokens": 300, "output_tokens": 20, "attempts": 3}}


def totals(**values):
    return TokenStats(**values).as_dict()


class StatsFormatTest(NagentRunCase):
    def test_round_trip_is_one_short_line(self):
        conv = totals(model_calls=12, current_input=5120, input_tokens=48211, output_tokens=3012,
                      cache_read_tokens=40100, cache_write_tokens=5000, cost_usd=0.1234)
        run = totals(model_calls=3, input_tokens=15000, output_tokens=600, cache_read_tokens=12000, cost_usd=None,
                     estimated=True)
        call = {"provider": "openai", "model": "gpt-5.5", "input_tokens": 5120, "output_tokens": 210,
                "cache_read_tokens": 4096, "cache_write_tokens": 0, "reasoning_tokens": 7,
                "finish_reason": "stop", "elapsed": 1.4234, "attempts": 2, "estimated": False}
        line = encode_stats(conv, run, call, prompts=3)
        self.assertNotIn("\n", line)
        self.assertLess(len(line), 300, line)
        data = decode_stats(line)
        for key in ("model_calls", "current_input", "input_tokens", "output_tokens", "cache_read_tokens",
                    "cache_write_tokens", "reasoning_tokens", "estimated"):
            self.assertEqual(data["conversation"][key], conv[key], key)
            self.assertEqual(data["run"][key], run[key], key)
        self.assertAlmostEqual(data["conversation"]["cost_usd"], 0.1234)
        self.assertIsNone(data["run"]["cost_usd"])
        self.assertEqual(data["prompts"], 3)
        self.assertEqual(data["last_call"], dict(call, elapsed=1.42))
        self.assertEqual((data["window"], data["previous"], data["windows"]), (1, None, None))
        # TokenStats reads it back as it wrote it.
        self.assertEqual(TokenStats.from_dict(data["conversation"]).input_tokens, 48211)

    def test_odd_values_survive_and_garbage_is_none(self):
        previous = "/home/me/my convs/archive/a|b=c%20d"
        call = {"provider": "corp", "model": "big model|v=2", "input_tokens": 1, "output_tokens": 1}
        data = decode_stats(encode_stats(totals(), totals(), call, window=3, previous=previous))
        self.assertEqual((data["window"], data["previous"]), (3, previous))
        self.assertEqual((data["last_call"]["provider"], data["last_call"]["model"]), ("corp", "big model|v=2"))
        for body in ("", "not stats", "[1, 2]", "{broken"):
            self.assertIsNone(decode_stats(body), body)

    def test_old_json_records_are_still_read(self):
        data = decode_stats(json.dumps(dict(OLD_STATS, windows=["/a", "/b"])))
        self.assertEqual(data["conversation"]["model_calls"], 2)
        self.assertEqual(data["run"]["input_tokens"], 300)
        self.assertEqual(data["last_call"]["attempts"], 3)
        self.assertEqual((data["windows"], data["window"], data["previous"]), (["/a", "/b"], 3, "/b"))
        self.assertIsNone(data["prompts"])
        self.assertEqual(decode_stats("{}")["conversation"]["input_tokens"], 0)

    def test_a_run_writes_one_line_records_that_status_reads(self):
        self.fake.reply("<nagent-shell>echo one</nagent-shell>", usage={"input": 100, "output": 10})
        self.fake.reply("<nagent-response>done</nagent-response>", usage={"input": 120, "output": 5})
        proc = self.nagent("--conversation", "c", "first prompt")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.fake.reply("<nagent-next>keep going</nagent-next>")
        self.fake.reply("<nagent-response>done again</nagent-response>")
        self.assertEqual(self.nagent("--conversation", "c", "second prompt").returncode, 0)
        stats = [r for r in read_records(self.named_path("c")) if r.kind == "stats"]
        self.assertEqual(len(stats), 4)
        for record in stats:
            self.assertNotIn("\n", record.body)
            self.assertLess(len(record.body), 300, record.body)
            self.assertTrue(record.body.startswith("total calls="), record.body)
        last = decode_stats(stats[-1].body)
        self.assertEqual((last["conversation"]["model_calls"], last["run"]["model_calls"], last["prompts"]), (4, 2, 2))

        status = self.json_of(self.nagent("--status", "--json", "--conversation", "c"))
        self.assertEqual((status["prompts"], status["model_calls"]), (2, 4))
        self.assertEqual((status["provider"], status["model"]), ("google", "gemini-2.5-flash"))
        self.assertEqual(status["config_files"], [{"layer": "NAGENT_CONFIG", "path": self.config_path}])
        self.assertEqual(status["last_run"]["calls"], 2)
        self.assertEqual(status["last_call"]["model"], "gemini-2.5-flash")
        text = self.nagent("--status", "--conversation", "c").stdout
        self.assertIn("prompts: 2", text)
        self.assertIn("model calls: 4", text)
        self.assertIn("provider: google, model gemini-2.5-flash", text)
        self.assertIn(self.config_path, text)
        self.assertNotIn("turns:", text)

    def test_status_counts_a_prompt_whose_run_failed_before_any_stats(self):
        path = self.named_path("f")
        with ConversationWriter(path) as writer:
            writer.append("prompt", "one", {"source": "argv"})
            writer.append("stats", encode_stats(totals(model_calls=1), totals(model_calls=1), prompts=1))
            writer.append("prompt", "two", {"source": "argv"})
            writer.append("prompt", "continued", {"source": "next"})
        summary = read_tail_summary(path)
        self.assertEqual((summary["stats"]["prompts"], summary["prompts_after"]), (1, 1))
        status = self.json_of(self.nagent("--status", "--json", "--conversation", "f"))
        self.assertEqual((status["prompts"], status["model_calls"]), (2, 1))

    def test_status_of_an_old_format_file(self):
        path = self.named_path("old")
        with ConversationWriter(path) as writer:
            writer.append("prompt", "q", {"source": "argv"})
            writer.append("reply", "<nagent-response>a</nagent-response>", {"valid": "true"})
            writer.append("stats", json.dumps(OLD_STATS))
        status = self.json_of(self.nagent("--status", "--json", "--conversation", "old"))
        self.assertEqual((status["model_calls"], status["prompts"]), (2, None))
        self.assertEqual(status["totals"]["input_tokens"], 500)
        text = self.nagent("--status", "--conversation", "old").stdout
        self.assertIn("model calls: 2", text)
        self.assertIn("prompts: not recorded", text)


def conversation(*kinds_and_sources):
    records = []
    for seq, (kind, source) in enumerate(kinds_and_sources, start=1):
        records.append(Record(seq, kind, f"{kind} {seq}", (("source", source),) if source else ()))
    return records


class TurnTest(NagentRunCase):
    def test_a_turn_is_a_user_prompt_and_what_followed(self):
        records = conversation(("context", None), ("prompt", "argv"), ("reply", None), ("result", None),
                               ("prompt", "next"), ("reply", None), ("stats", None),
                               ("prompt", "stdin"), ("reply", None), ("prompt", "retry"), ("reply", None))
        self.assertEqual([r.seq for r in records_through_turn(records, 1)], [1, 2, 3, 4, 5, 6, 7])
        self.assertEqual([r.seq for r in records_through_turn(records, 2)], list(range(1, 10)))
        self.assertEqual(len(records_through_turn(records, 3)), 11)
        with self.assertRaisesRegex(Exception, "no such turn"):
            records_through_turn(records, 4)

    def test_branch_turn_counts_prompts_and_turn_alone_is_a_usage_error(self):
        path = self.named_path("src")
        with ConversationWriter(path) as writer:
            for number in (1, 2):
                writer.append("prompt", f"question {number}", {"source": "argv"})
                writer.append("reply", "<nagent-next>more</nagent-next>", {"valid": "true"})
                writer.append("prompt", "more", {"source": "next"})
                writer.append("reply", f"<nagent-response>answer {number}</nagent-response>", {"valid": "true"})
        proc = self.nagent("--branch-conversation", "src", "--turn", "1", "--conversation", "b")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        kept = read_records(self.named_path("b"))
        self.assertEqual([r.body for r in kept if r.kind == "reply"][-1],
                         "<nagent-response>answer 1</nagent-response>")
        self.assertEqual(len(kept), 4)
        self.assertOneError(self.nagent("--turn", "1", "hello"), 2, "--turn")
        self.assertOneError(self.nagent("--status", "--turn", "1"), 2, "--turn")
        self.assertEqual(self.generation_requests(), [])


class NewConversationTest(NagentRunCase):
    def test_new_archives_this_shells_conversation_and_runs_the_prompt(self):
        self.fake.reply("<nagent-response>first</nagent-response>")
        self.assertEqual(self.nagent("--pid", "55", "old question").returncode, 0)
        path = self.default_path("55")
        old = self.read_bytes(path)
        self.fake.reply("<nagent-response>fresh</nagent-response>")
        proc = self.nagent("--pid", "55", "-n", "new question")
        self.assertEqual((proc.returncode, proc.stdout), (0, "fresh\n"), proc.stderr)
        prompts = [r.body for r in read_records(path) if r.kind == "prompt"]
        self.assertEqual(prompts, ["new question"])
        archive = os.path.join(self.conversations, "archive")
        self.assertEqual([self.read_bytes(os.path.join(archive, name)) for name in os.listdir(archive)
                          if not name.endswith(".d")], [old])
        # The default still continues.
        self.fake.reply("<nagent-response>continued</nagent-response>")
        self.assertEqual(self.nagent("--pid", "55", "third").returncode, 0)
        self.assertEqual([r.body for r in read_records(path) if r.kind == "prompt"],
                         ["new question", "third"])

    def test_new_checks_everything_before_archiving(self):
        self.fake.reply("<nagent-response>first</nagent-response>")
        self.assertEqual(self.nagent("--pid", "56", "q").returncode, 0)
        before = self.read_bytes(self.default_path("56"))
        self.assertOneError(self.nagent("--pid", "56", "--new"), 2, "prompt")
        self.assertOneError(self.nagent("--pid", "56", "--new", "--retry"), 2, "--new")
        self.assertOneError(self.nagent("--pid", "56", "--new", "--status"), 2, "--new")
        self.assertOneError(self.nagent("--pid", "56", "--new", "--provider", "nope", "q"), 3, "nope")
        self.assertEqual(self.read_bytes(self.default_path("56")), before)
        self.assertFalse(os.path.exists(os.path.join(self.conversations, "archive")))


class ListTableTest(NagentRunCase):
    def test_header_aligned_columns_one_row_each(self):
        for name, prompt in (("short", "a question"), ("a-much-longer-name", "another\nquestion")):
            with ConversationWriter(self.named_path(name)) as writer:
                writer.append("prompt", prompt, {"source": "argv"})
        proc = self.nagent("--list-conversations")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        lines = proc.stdout.splitlines()
        self.assertEqual(lines[0].split(), ["NAME", "KIND", "SIZE", "MODIFIED", "FIRST", "PROMPT"])
        self.assertEqual(len(lines), 3)
        starts = [line.index("saved") for line in lines[1:]]
        self.assertEqual(starts[0], starts[1])
        self.assertEqual(lines[0].index("KIND"), starts[0])
        for column in ("SIZE", "MODIFIED", "FIRST PROMPT"):
            self.assertTrue(all(len(line) >= lines[0].index(column) for line in lines[1:]))
        self.assertIn("another question", proc.stdout)
        self.assertTrue(re.search(r"\d+ B|\d+(\.\d)? kB", lines[1]), lines[1])
        data = self.json_of(self.nagent("--list-conversations", "--json"))
        self.assertEqual(sorted(item["name"] for item in data["conversations"]),
                         ["a-much-longer-name", "short"])
        self.assertIn("size", data["conversations"][0])
        empty = self.nagent("--list-conversations", "--conversation", "x", "--pid", "1")
        self.assertEqual(empty.returncode, 0)
