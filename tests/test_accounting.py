"""Cost and token arithmetic of nagent_accounting: prices per million tokens (input, output,
cache read, cache write), config overrides, unknown models (tokens only, cost None for good),
run/conversation totals, sub-agent folding, the JSON round trip and the status line."""
from base import HermeticTestCase

from nagent_accounting import PRICES, TokenStats, add_child, add_result, call_cost, price_for
from nagent_config import resolve_settings
from nagent_errors import ConfigError
from nagent_llm import Result


def result(model="claude-sonnet-4-6", input_tokens=0, output_tokens=0, read=0, write=0, **extra):
    return Result(text="", provider="anthropic", model=model, input_tokens=input_tokens,
                  output_tokens=output_tokens, cache_read_tokens=read, cache_write_tokens=write,
                  **extra)


class PriceTest(HermeticTestCase):
    def test_every_table_row_is_four_non_negative_prices(self):
        for model, row in PRICES.items():
            self.assertEqual(len(row), 4, model)
            self.assertTrue(all(isinstance(p, (int, float)) and p >= 0 for p in row), model)
            self.assertLessEqual(row[2], row[0], f"{model}: cache reads cost more than input")

    def test_call_cost_splits_input_into_uncached_read_and_write(self):
        # claude-sonnet-4-6: 3 in, 15 out, 0.30 read, 3.75 write per million.
        cost = call_cost(result(input_tokens=1_000_000, output_tokens=100_000, read=600_000,
                                write=300_000))
        expected = (100_000 * 3.0 + 100_000 * 15.0 + 600_000 * 0.30 + 300_000 * 3.75) / 1e6
        self.assertAlmostEqual(cost, expected, places=9)
        self.assertAlmostEqual(cost, 3.105, places=9)

    def test_openai_style_usage_without_writes(self):
        # gpt-5.5: 1.25 in, 10 out, 0.125 read; input counts the cached tokens too.
        cost = call_cost(result("gpt-5.5", input_tokens=10_000, output_tokens=2_000, read=8_000))
        self.assertAlmostEqual(cost, (2_000 * 1.25 + 2_000 * 10.0 + 8_000 * 0.125) / 1e6, places=12)

    def test_dated_snapshot_names_are_priced_as_their_model(self):
        self.assertEqual(price_for("gpt-4.1-2025-04-14"), PRICES["gpt-4.1"])
        self.assertEqual(price_for("claude-haiku-4-5-20251001"), PRICES["claude-haiku-4-5"])
        self.assertIsNone(price_for("gpt-4.1-preview"))  # no guessing beyond a date suffix
        self.assertIsNone(price_for("claude-sonnet"))

    def test_unknown_model_counts_tokens_but_no_price(self):
        self.assertIsNone(price_for("my-local-llama"))
        self.assertIsNone(call_cost(result("my-local-llama", input_tokens=10, output_tokens=5)))
        stats = add_result(TokenStats(), result("my-local-llama", input_tokens=10, output_tokens=5))
        self.assertIsNone(stats.cost_usd)
        self.assertEqual((stats.input_tokens, stats.output_tokens), (10, 5))
        # Once a call had no price, the total stays unknown rather than understated.
        later = add_result(stats, result(input_tokens=1000, output_tokens=10))
        self.assertIsNone(later.cost_usd)
        self.assertEqual(later.input_tokens, 1010)
        self.assertEqual(later.model_calls, 2)

    def test_config_overrides_and_defaults_for_cache_prices(self):
        self.write_config({"prices": {"corp-large": {"input": 1.0, "output": 4.0, "cache_read": 0.1,
                                                     "cache_write": 1.25},
                                      "plain": {"input": 2, "output": 8},
                                      "claude-sonnet-4-6": {"input": 1, "output": 1, "cache_read": 1,
                                                            "cache_write": 1}}})
        prices = resolve_settings({}, self.env).prices
        self.assertEqual(price_for("corp-large", prices), (1.0, 4.0, 0.1, 1.25))
        # Without cache prices, cached tokens cost what input costs (never a guessed discount).
        self.assertEqual(price_for("plain", prices), (2.0, 8.0, 2.0, 2.0))
        self.assertEqual(price_for("claude-sonnet-4-6", prices), (1.0, 1.0, 1.0, 1.0))
        cost = call_cost(result("corp-large", input_tokens=2_000_000, output_tokens=1_000_000,
                                read=1_000_000, write=500_000), prices)
        self.assertAlmostEqual(cost, 0.5 + 4.0 + 0.1 + 0.625, places=9)

    def test_a_broken_price_is_a_config_error_naming_the_key(self):
        self.write_config({"prices": {"broken": {"input": "cheap", "output": 1}}})
        with self.assertRaises(ConfigError) as caught:
            resolve_settings({}, self.env)
        self.assertIn("prices.broken.input must be a number >= 0", caught.exception.line())
        self.assertIn(self.config_path, caught.exception.line())


class TotalsTest(HermeticTestCase):
    def test_add_result_accumulates_and_tracks_current_input(self):
        stats = TokenStats()
        stats = add_result(stats, result(input_tokens=5000, output_tokens=100, write=4000))
        stats = add_result(stats, result(input_tokens=6000, output_tokens=200, read=4000, write=1500,
                                         reasoning_tokens=7, estimated=True))
        self.assertEqual(stats.model_calls, 2)
        self.assertEqual(stats.current_input, 6000)
        self.assertEqual((stats.input_tokens, stats.output_tokens), (11000, 300))
        self.assertEqual((stats.cache_read_tokens, stats.cache_write_tokens), (4000, 5500))
        self.assertEqual(stats.reasoning_tokens, 7)
        self.assertTrue(stats.estimated)
        first = (1000 * 3 + 100 * 15 + 4000 * 3.75) / 1e6
        second = (500 * 3 + 200 * 15 + 4000 * 0.3 + 1500 * 3.75) / 1e6
        self.assertAlmostEqual(stats.cost_usd, first + second, places=9)

    def test_as_dict_round_trip_and_cache_share(self):
        stats = add_result(TokenStats(), result(input_tokens=1000, output_tokens=10, read=750))
        data = stats.as_dict()
        self.assertEqual(data["cache_read_share"], 0.75)
        self.assertEqual(TokenStats.from_dict(data), stats)
        self.assertEqual(TokenStats().as_dict()["cache_read_share"], 0.0)
        self.assertEqual(TokenStats.from_dict({"turns": "3", "bogus": 1, "input_tokens": 9}),
                         TokenStats(input_tokens=9))
        # Records written before 0.2 named the model-call count "turns".
        self.assertEqual(TokenStats.from_dict({"turns": 3}).model_calls, 3)
        self.assertEqual(TokenStats.from_dict(None), TokenStats())
        self.assertIsNone(TokenStats.from_dict({"cost_usd": None}).cost_usd)

    def test_add_child_folds_a_sub_agents_totals(self):
        parent = add_result(TokenStats(), result(input_tokens=100, output_tokens=10))
        child = add_result(TokenStats(), result(input_tokens=2000, output_tokens=20, read=1500)).as_dict()
        folded = add_child(parent, child)
        # Every call made for the run counts, nested nagents' included (issue 20: a nested edit
        # session's calls were missing from the run's totals).
        self.assertEqual(folded.model_calls, 2)
        self.assertEqual((folded.input_tokens, folded.cache_read_tokens), (2100, 1500))
        self.assertAlmostEqual(folded.cost_usd, parent.cost_usd + child["cost_usd"], places=6)
        unknown = add_child(parent, {"input_tokens": 5, "cost_usd": None})
        self.assertIsNone(unknown.cost_usd)
        no_cost_key = add_child(parent, {"input_tokens": 5})
        self.assertEqual(no_cost_key.cost_usd, parent.cost_usd)
