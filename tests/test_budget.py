"""Issue 23's budget: --max-cost, --max-tokens and --max-time for the whole run tree.

- cache pricing is exact against a hand-computed table, for each vendor's usage format (cache
  reads and writes at their own rates, reasoning billed as output: Gemini's thoughts included);
- a parent and its sub-agent together stop within one call of the cap; the reported cost is the
  sum over the requests the fake vendor saw, priced by hand; exit 13, the figure in --json;
- a cost cap with a model that has no price is refused before any call, unless prices.MODEL;
- a nested edit session (<nagent-file-edit>) spends from the same cap and stops the same way;
- --max-tokens and --max-time stop the same way; --status shows the last run against its cap.
"""
import json
import re

from fakes import FakeVendorTestCase, ReplySpec
from test_loop import NagentRunCase

import nagent_llm
from nagent_accounting import call_cost
from nagent_config import resolve_settings

USAGE = {"input": 1000, "cache_read": 3000, "cache_write": 500, "output": 200, "reasoning": 50}
# USD per call of USAGE, by hand (per million tokens: input, output, cache read, cache write):
HAND = {
    # uncached 1500 (the write is plain input here) * 1.25 + 250 out * 10 + 3000 * 0.125
    ("openai", "gpt-5.5"): 0.004750,
    # 1000 * 3.0 + 250 * 15.0 + 3000 * 0.30 + 500 * 3.75
    ("anthropic", "claude-sonnet-4-6"): 0.009525,
    # 1500 * 0.30 + (200 + 50 thoughts) * 2.50 + 3000 * 0.075
    ("google", "gemini-2.5-flash"): 0.001300,
    # a configured price: 1500 * 2 + 250 * 8 + 3000 * 0.5 (Chat Completions)
    ("local", "my-model"): 0.006500,
}
LOCAL_PRICE = {"my-model": {"input": 2, "output": 8, "cache_read": 0.5, "cache_write": 2}}


class CachePricing(FakeVendorTestCase):
    def test_each_vendor_priced_exactly(self):
        config = {"providers": {"local": {"base_url": self.fake.url + "/v1", "model": "my-model"}},
                  "prices": LOCAL_PRICE, "retry": {"base_delay": 0}}
        self.write_config(config)
        for (provider, model), expected in HAND.items():
            with self.subTest(provider=provider):
                self.fake.reply("priced", usage=USAGE)
                settings = resolve_settings({"provider": provider, "model": model}, self.env)
                result = nagent_llm.generate_text("hello", settings)
                self.assertAlmostEqual(call_cost(result, settings.prices), expected, places=12)


# gemini-2.5-flash: 10000 * 0.30 + 2000 * 0.075 + 100 * 2.50 = 3400 per million: $0.0034 a call
CALL = {"input": 10000, "cache_read": 2000, "cache_write": 0, "output": 100, "reasoning": 0}
CALL_COST = 0.0034
PARENT = "PARENT-TASK"


def priced(usage):
    """A request's cost from the usage the fake served, by hand (gemini-2.5-flash)."""
    return ((usage["input"] + usage["cache_write"]) * 0.30 + usage["cache_read"] * 0.075
            + (usage["output"] + usage["reasoning"]) * 2.50) / 1e6


class TreeBudget(NagentRunCase):
    CONFIG = {"provider": "google", "model": "gemini-2.5-flash",
              "retry": {"base_delay": 0, "max_delay": 0}}

    def route(self, parent_first):
        """The parent first asks for `parent_first`, then keeps working; the child never stops."""
        steps = {"parent": 0, "child": 0}

        def reply(record):
            who = "parent" if PARENT in json.dumps(record.get("json")) else "child"
            steps[who] += 1
            if who == "parent" and steps[who] == 1:
                return ReplySpec(parent_first, usage=CALL)
            return ReplySpec(f"<nagent-shell>\necho {who} step {steps[who]}\n</nagent-shell>",
                             usage=CALL)

        self.fake.reply_fn(reply)
        return steps

    def test_parent_and_child_stop_within_one_call_and_cost_is_what_the_vendor_saw(self):
        cap = 0.02
        steps = self.route("<nagent-agent>\nchild task\n</nagent-agent>")
        proc = self.nagent("--json", "--max-cost", str(cap), "--conversation", "tree", PARENT)
        self.assertEqual(proc.returncode, 13, proc.stderr)
        data = self.json_of(proc)
        seen = self.generation_requests()
        vendor_cost = sum(priced(record["reply"].usage) for record in seen)
        self.assertAlmostEqual(data["totals"]["cost_usd"], vendor_cost, places=6)
        self.assertAlmostEqual(data["budget"]["cost_usd"], vendor_cost, places=6)
        self.assertGreaterEqual(vendor_cost, cap)                     # the budget was used
        self.assertLessEqual(vendor_cost, cap + CALL_COST + 1e-9)     # and passed by one call at most
        self.assertGreater(steps["child"], 1)                         # the child spent its share
        self.assertEqual(steps["parent"], 1)                          # no parent call after it
        self.assertEqual(data["error"]["kind"], "budget")
        self.assertEqual(data["budget"]["max_cost"], cap)
        self.assertTrue(data["budget"]["reached"])
        self.assertIn("Error: the run's cost cap is reached: spent $", proc.stderr)
        child = [r.body for r in self.kinds(self.named_path("tree"), "result")][0]
        self.assertIn("exit_code: 13", child)
        # --status: the last run against its cap
        status = self.nagent("--status", "--conversation", "tree")
        self.assertRegex(status.stdout, r"last run: .*cost \$0\.\d+ of \$0\.02 \(max_cost\)")

    def test_a_batch_of_children_shares_what_is_left(self):
        cap = 0.02
        self.route("<nagent-agent>\nchild A\n</nagent-agent>\n<nagent-agent>\nchild B\n</nagent-agent>")
        proc = self.nagent("--json", "--max-cost", str(cap), "--conversation", "batch", PARENT)
        self.assertEqual(proc.returncode, 13, proc.stderr)
        spent = sum(priced(record["reply"].usage) for record in self.generation_requests())
        self.assertAlmostEqual(self.json_of(proc)["totals"]["cost_usd"], spent, places=6)
        # each child of the batch gets half of what was left: each passes its half by one call
        # at most, so the tree passes the cap by one call per child at most
        self.assertLessEqual(spent, cap + 2 * CALL_COST + 1e-9)

    def test_a_nested_edit_session_counts_toward_the_cap(self):
        cap = 0.012   # the parent's call and three of the session's
        self.write_file("a.py", "A = 1\n")
        steps = self.route('<nagent-file-edit path="a.py">\nkeep improving it\n</nagent-file-edit>')
        proc = self.nagent("--json", "--max-cost", str(cap), "--conversation", "nested", PARENT)
        self.assertEqual(proc.returncode, 13, proc.stderr)
        data = self.json_of(proc)
        vendor_cost = sum(priced(record["reply"].usage) for record in self.generation_requests())
        self.assertAlmostEqual(data["totals"]["cost_usd"], vendor_cost, places=6)
        self.assertGreaterEqual(vendor_cost, cap)
        self.assertLessEqual(vendor_cost, cap + CALL_COST + 1e-9)
        self.assertGreater(steps["child"], 1)          # the session spent the budget
        self.assertEqual(steps["parent"], 1)           # and the parent asked nothing after it
        self.assertEqual((data["error"]["kind"], data["budget"]["reached"]), ("budget", True))
        self.assertIn("Error: the run's cost cap is reached: spent $", proc.stderr)
        result = [r.body for r in self.kinds(self.named_path("nested"), "result")][0]
        self.assertIn("exit_code: 13", result)

    def test_an_unpriced_model_with_a_cost_cap_is_refused(self):
        self.write_config(dict(self.CONFIG, model="gemini-unpriced"))
        proc = self.nagent("--json", "--max-cost", "1", "--conversation", "x", "hello")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("Error: a cost cap needs the model's price: gemini-unpriced has none", proc.stderr)
        self.assertEqual(self.generation_requests(), [])
        self.write_config(dict(self.CONFIG, model="gemini-unpriced",
                               prices={"gemini-unpriced": {"input": 1, "output": 2}}))
        self.fake.reply("<nagent-response>fine</nagent-response>", usage=CALL)
        proc = self.nagent("--json", "--max-cost", "1", "--conversation", "y", "hello")
        self.assertEqual(proc.returncode, 0, proc.stderr)

    def test_token_and_time_caps(self):
        self.fake.reply_fn(lambda record: ReplySpec(
            f"<nagent-shell>\necho {len(self.generation_requests())}\n</nagent-shell>", usage=CALL))
        proc = self.nagent("--json", "--max-tokens", "25000", "--conversation", "tokens", "go")
        self.assertEqual(proc.returncode, 13, proc.stderr)
        data = self.json_of(proc)
        self.assertEqual(len(self.generation_requests()), 3)   # 12100 a call: stops past 25000
        self.assertEqual(data["budget"]["tokens"], 36300)
        self.assertEqual((data["error"]["error"], data["error"]["value"]),
                         ("the run's token cap is reached", "used 36300 of 25000 tokens"))
        proc = self.nagent("--json", "--max-time", "0.001", "--conversation", "time", "go")
        self.assertEqual(proc.returncode, 13, proc.stderr)
        self.assertEqual(len(self.generation_requests()), 3)   # no call started at all
        self.assertEqual(self.json_of(proc)["model_calls"], 0)
        self.assertTrue(re.search(r"time cap is reached", proc.stderr))
