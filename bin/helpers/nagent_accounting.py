"""Token, cache and cost accounting for runs and conversations.

Data contract: `TokenStats` is a frozen record of counters: model_calls, current
input (the last request's input tokens = the conversation's current size as the model sees
it), input/output totals, cache-read/cache-write totals, reasoning totals and dollar cost
(None when any call's model has no known price). `add_result(stats, result, prices)` and
`add_child(stats, child_totals)` return new records (a nested nagent's totals, model
calls included: a run's totals count every call made for it); `difference(after, before)` is
the totals dict of what a conversation recorded between two of its totals dicts; `as_dict()`/`from_dict()` round-trip
through the conversation's "stats" records. Prices: per million tokens (input, output,
cache read, cache write) from `PRICES`, overridable by config `prices.{model}`; an unknown
model is counted in tokens only — never a guessed price.
"""
import re
from dataclasses import asdict, dataclass, fields, replace

SNAPSHOT_RE = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8})$")

# USD per million tokens: (input, output, cache read, cache write).
PRICES = {
    "gpt-5.5": (1.25, 10.0, 0.125, 1.25),
    "gpt-5.5-mini": (0.25, 2.0, 0.025, 0.25),
    "gpt-5": (1.25, 10.0, 0.125, 1.25),
    "gpt-5-mini": (0.25, 2.0, 0.025, 0.25),
    "gpt-4.1": (2.0, 8.0, 0.5, 2.0),
    "claude-sonnet-4-6": (3.0, 15.0, 0.30, 3.75),
    "claude-opus-4-6": (5.0, 25.0, 0.50, 6.25),
    "claude-haiku-4-5": (1.0, 5.0, 0.10, 1.25),
    "gemini-2.5-flash": (0.30, 2.50, 0.075, 0.30),
    "gemini-2.5-pro": (1.25, 10.0, 0.31, 1.25),
    "gemini-2.5-flash-lite": (0.10, 0.40, 0.025, 0.10),
}


@dataclass(frozen=True)
class TokenStats:
    """Token and cost totals of calls, runs or a conversation."""

    model_calls: int = 0
    current_input: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float | None = 0.0
    estimated: bool = False

    def as_dict(self):
        data = asdict(self)
        data["cost_usd"] = None if self.cost_usd is None else round(self.cost_usd, 6)
        data["cache_read_share"] = round(self.cache_read_tokens / self.input_tokens, 4) \
            if self.input_tokens else 0.0
        return data

    @classmethod
    def from_dict(cls, data):
        if not isinstance(data, dict):
            return cls()
        known = {f.name for f in fields(cls)}
        clean = {}
        for key, value in data.items():
            key = "model_calls" if key == "turns" else key   # stats records before 0.2
            if key in known and (value is None or isinstance(value, (int, float, bool))):
                clean[key] = value
        return cls(**clean)


def price_for(model, prices=None):
    """(input, output, cache read, cache write) per million tokens, or None. `prices` is
    Settings.prices ({model: Price}, the config's overrides). A dated snapshot name the API
    reports (gpt-4.1-2025-04-14, claude-...-20250929) is priced as its base model."""
    price = _price_exact(model, prices)
    base = SNAPSHOT_RE.sub("", model or "")
    return price if price is not None or base == model else _price_exact(base, prices)


def _price_exact(model, prices):
    override = (prices or {}).get(model)
    if override is not None:
        return (override.input, override.output, override.cache_read, override.cache_write)
    return PRICES.get(model)


def call_cost(result, prices=None):
    """Dollar cost of one call, or None for a model without a known price."""
    price = price_for(result.model, prices) or price_for(getattr(result, "requested_model", ""), prices)
    if price is None:
        return None
    uncached = max(0, result.input_tokens - result.cache_read_tokens - result.cache_write_tokens)
    return (uncached * price[0] + result.output_tokens * price[1]
            + result.cache_read_tokens * price[2] + result.cache_write_tokens * price[3]) / 1e6


def add_cost(total, cost):
    return None if total is None or cost is None else total + cost


def add_result(stats, result, prices=None):
    return replace(
        stats, model_calls=stats.model_calls + 1, current_input=result.input_tokens,
        input_tokens=stats.input_tokens + result.input_tokens,
        output_tokens=stats.output_tokens + result.output_tokens,
        cache_read_tokens=stats.cache_read_tokens + result.cache_read_tokens,
        cache_write_tokens=stats.cache_write_tokens + result.cache_write_tokens,
        reasoning_tokens=stats.reasoning_tokens + result.reasoning_tokens,
        cost_usd=add_cost(stats.cost_usd, call_cost(result, prices)),
        estimated=stats.estimated or result.estimated,
    )


def add_child(stats, child):
    """Fold a nested nagent's recursive totals (a dict from its --json output) into ours."""
    other = TokenStats.from_dict(child)
    return replace(
        stats, model_calls=stats.model_calls + other.model_calls,
        input_tokens=stats.input_tokens + other.input_tokens,
        output_tokens=stats.output_tokens + other.output_tokens,
        cache_read_tokens=stats.cache_read_tokens + other.cache_read_tokens,
        cache_write_tokens=stats.cache_write_tokens + other.cache_write_tokens,
        reasoning_tokens=stats.reasoning_tokens + other.reasoning_tokens,
        cost_usd=add_cost(stats.cost_usd, other.cost_usd if "cost_usd" in child else 0.0),
        estimated=stats.estimated or other.estimated,
    )


def difference(after, before):
    """`after` - `before` (totals dicts of one conversation at two moments), as a totals dict."""
    later, earlier = TokenStats.from_dict(after), TokenStats.from_dict(before)
    counters = ("model_calls", "input_tokens", "output_tokens", "cache_read_tokens",
                "cache_write_tokens", "reasoning_tokens")
    delta = {name: max(0, getattr(later, name) - getattr(earlier, name)) for name in counters}
    cost = None if later.cost_usd is None or earlier.cost_usd is None \
        else max(0.0, later.cost_usd - earlier.cost_usd)
    return replace(later, current_input=0, cost_usd=cost, **delta).as_dict()
