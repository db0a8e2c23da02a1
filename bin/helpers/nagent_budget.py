"""The budget of a run tree: caps on money, tokens and wall time for a run and everything it
starts (sub-agents, nested edit sessions), counted from the run's own totals.

Data contract:
- `Caps(cost, tokens, seconds)`: USD, tokens (input + output) and seconds; None: no cap.
- `caps_for(settings, passed=None) -> Caps`: `max_cost`, `max_tokens`, `max_time` of the
  settings, each tightened by `passed` (the hidden `--budget` value a parent nagent gives its
  own child processes: `encode(caps)` / `decode(text)`, "cost=0.25 tokens=9000 seconds=61.5";
  never put in an environment variable or anywhere a shell command could see it).
  ConfigError when a cost cap meets a model without a price (`prices.MODEL` gives one): such
  a model is not free.
- `spent(stats, seconds) -> Caps`: what a run's totals (nagent_accounting.TokenStats, children
  folded in by add_child: the one counter) and its wall time amount to; cost None when a call
  had no price.
- `over(caps, stats, seconds) -> BudgetError | None`: the error when a cap is reached (a cost
  cap with an unknown cost counts as reached). No model call starts past it.
- `left(caps, stats, seconds) -> Caps` and `share(caps, ways) -> Caps` (cost and tokens split
  `ways` ways, time shared): what a batch of children may spend, each child getting its share,
  so the tree stays within one call per process of the cap.
- `exhausted(caps) -> bool`: nothing left to start a child with.
- `report(caps, stats, seconds) -> dict | None`: the --json "budget" object (caps and what was
  spent), None without caps. `shown(caps, stats)`: " of $1.00" style text for the closing line.
"""
from dataclasses import dataclass

from nagent_accounting import price_for
from nagent_errors import BudgetError, ConfigError, UsageError


@dataclass(frozen=True)
class Caps:
    cost: "float | None" = None
    tokens: "int | None" = None
    seconds: "float | None" = None

    @property
    def any(self):
        return any(value is not None for value in (self.cost, self.tokens, self.seconds))


def encode(caps):
    parts = []
    if caps.cost is not None:
        parts.append(f"cost={max(0.0, caps.cost):.9f}")
    if caps.tokens is not None:
        parts.append(f"tokens={max(0, int(caps.tokens))}")
    if caps.seconds is not None:
        parts.append(f"seconds={max(0.0, caps.seconds):.3f}")
    return " ".join(parts)


def decode(text):
    values = {}
    for part in (text or "").split():
        name, _, value = part.partition("=")
        try:
            values[name] = int(value) if name == "tokens" else float(value)
        except ValueError:
            raise UsageError("--budget is not nagent's own", text) from None
        if name not in ("cost", "tokens", "seconds"):
            raise UsageError("--budget is not nagent's own", text)
    return Caps(values.get("cost"), values.get("tokens"), values.get("seconds"))


def _least(first, second):
    if first is None:
        return second
    return first if second is None else min(first, second)


def caps_for(settings, passed=None):
    budget = settings.budget
    caps = Caps(budget.max_cost, budget.max_tokens, budget.max_time)
    if passed:
        given = decode(passed)
        caps = Caps(_least(caps.cost, given.cost), _least(caps.tokens, given.tokens),
                    _least(caps.seconds, given.seconds))
    if caps.cost is not None and price_for(settings.model, settings.prices) is None:
        raise ConfigError("a cost cap needs the model's price", f"{settings.model} has none",
                          f"add prices.{settings.model} with input, output, cache_read and "
                          "cache_write in USD per million tokens to the config, or cap "
                          "--max-tokens instead")
    return caps


def spent(stats, seconds):
    return Caps(stats.cost_usd, stats.input_tokens + stats.output_tokens, seconds)


def over(caps, stats, seconds):
    used = spent(stats, seconds)
    if caps.cost is not None and (used.cost is None or used.cost >= caps.cost):
        figure = "unknown (a call had no price)" if used.cost is None else f"${used.cost:.4f}"
        return BudgetError("the run's cost cap is reached", f"spent {figure} of ${caps.cost:g}",
                           "raise --max-cost or max_cost, or continue with another prompt")
    if caps.tokens is not None and used.tokens >= caps.tokens:
        return BudgetError("the run's token cap is reached",
                           f"used {used.tokens} of {caps.tokens} tokens",
                           "raise --max-tokens or max_tokens, or continue with another prompt")
    if caps.seconds is not None and seconds >= caps.seconds:
        return BudgetError("the run's time cap is reached", f"{seconds:.1f} s of {caps.seconds:g} s",
                           "raise --max-time or max_time, or continue with another prompt")
    return None


def left(caps, stats, seconds):
    used = spent(stats, seconds)
    cost = None if caps.cost is None else caps.cost - (used.cost if used.cost is not None
                                                       else caps.cost)
    return Caps(cost, None if caps.tokens is None else caps.tokens - used.tokens,
                None if caps.seconds is None else caps.seconds - seconds)


def share(caps, ways):
    ways = max(1, ways)
    return Caps(None if caps.cost is None else caps.cost / ways,
                None if caps.tokens is None else caps.tokens // ways, caps.seconds)


def exhausted(caps):
    return any(value is not None and value <= 0 for value in (caps.cost, caps.tokens, caps.seconds))


def report(caps, stats, seconds):
    if not caps.any:
        return None
    used = spent(stats, seconds)
    return {"max_cost": caps.cost, "max_tokens": caps.tokens, "max_time": caps.seconds,
            "cost_usd": None if used.cost is None else round(used.cost, 6),
            "tokens": used.tokens, "seconds": round(seconds, 3),
            "reached": over(caps, stats, seconds) is not None}


def shown(caps, what):
    """" of $1.00" after the cost, " of 5000" after tokens: the cap beside the figure."""
    if what == "cost" and caps.cost is not None:
        return f" of ${caps.cost:g}"
    if what == "tokens" and caps.tokens is not None:
        return f" of {caps.tokens} tokens"
    return ""
