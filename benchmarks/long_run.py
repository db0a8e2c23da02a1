"""Long-run benchmark: a scripted 60-turn session with large tool outputs against the caching
fake Anthropic server, run three ways.

- naive: a whole-file loop (every call sends the whole, never compacted conversation, with no
  prompt cache) — its tokens are the conversation size at each call of the no-window run;
- nagent, no windows: the real loop with cache breakpoints but rebuilds/checkpoints disabled;
- nagent: the real loop with its default window policy for the model (checkpoints, rebuilds).
Figures: model calls, input tokens sent, uncached input (input − cache read), cache-read share
over all calls and "between rebuilds" (loop calls other than the first of each window),
checkpoint calls, rebuilds, largest window (bytes), dollar cost. Prints a table; asserts nothing.

Run: python3 benchmarks/long_run.py [--turns 60] [--runs 6] [--seed 7]
`main(argv) -> rows` returns the table as dicts (tests and scripts can call it).
"""
import argparse
import os
import random
import shutil
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from base import clean_environ  # noqa: E402  (puts bin/helpers on sys.path)
from fakes import FakeVendor  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import make_workspace  # noqa: E402

MODEL = "claude-sonnet-4-6"
CHECKPOINT_REPLY = """## Goal
Audit the generated log files one by one.

## Decisions
- Read each file whole; large outputs stay in side files after a rebuild.

## Current state
Files up to the latest one have been read.

## Next steps
- Continue with the next file.

## Open questions
- None.
"""


def make_files(folder, count, seed):
    """`count` deterministic log files of 4–28 KB; returns their relative paths."""
    rng = random.Random(seed)
    os.makedirs(os.path.join(folder, "data"), exist_ok=True)
    names = []
    for index in range(count):
        size = rng.randint(4_000, 28_000)
        lines, total = [], 0
        while total < size:
            line = (f"2026-11-{1 + index % 28:02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} "
                    f"worker-{rng.randint(1, 64):02d} {rng.choice(('ok', 'retry', 'warn', 'fail'))} "
                    f"job={rng.randint(10**5, 10**6)} took={rng.random() * 9:.3f}s\n")
            lines.append(line)
            total += len(line)
        name = os.path.join("data", f"log-{index:03d}.txt")
        with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
            handle.write("".join(lines))
        names.append(name)
    return names


def is_checkpoint_call(record):
    messages = (record.get("json") or {}).get("messages") or []
    return b"<previous_checkpoint>" in record["body"] and len(messages) == 1


class Script:
    """The scripted model: per run, N−1 tool calls over the log files, then a final response."""

    def __init__(self, files, turns_per_run, conversation):
        self.files, self.per_run, self.conversation = files, turns_per_run, conversation
        self.loop_calls, self.calls, self.sizes = 0, [], []

    def __call__(self, record):
        if is_checkpoint_call(record):
            self.calls.append("checkpoint")
            return CHECKPOINT_REPLY
        index = self.loop_calls
        self.loop_calls += 1
        self.calls.append("loop")
        self.sizes.append(os.path.getsize(self.conversation))
        if index % self.per_run == self.per_run - 1:
            return f"<nagent-response>Step {index // self.per_run + 1} done.</nagent-response>"
        name = self.files[index % len(self.files)]
        if index % 3 == 0:
            return f'<nagent-read path="{name}"/>'
        return f"<nagent-shell>cat {name}</nagent-shell>"


def window_chain(path):
    """Archived windows (oldest first) then the current file, from its last stats record."""
    import nagent_conversation
    import nagent_conversation_tail
    stats = nagent_conversation_tail.last_stats(nagent_conversation.read_records(path))
    return nagent_conversation_tail.window_chain(stats) + [path]


def call_usage(chain):
    """[(window index, last_call dict)] in call order, from every window's stats records."""
    import nagent_conversation
    from nagent_stats_format import decode_stats
    calls = []
    for number, path in enumerate(chain):
        for record in nagent_conversation.read_records(path):
            if record.kind != "stats":
                continue
            data = decode_stats(record.body) or {}
            if data.get("last_call"):
                calls.append((number, data["last_call"]))
    return calls


def run_session(turns, runs, seed, window_config, label):
    """One scripted session in a fresh temp HOME; returns a row of figures."""
    import nagent_loop
    import nagent_session
    from nagent_conversation_layout import Selection
    from nagent_accounting import TokenStats, call_cost
    from types import SimpleNamespace
    tmp, home, work, config_path = make_workspace("nagent-bench-", dict(
        {"provider": "anthropic", "model": MODEL, "retry": {"base_delay": 0, "max_delay": 0}},
        **window_config))
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    fake = FakeVendor().start()
    try:
        env = clean_environ()
        env.update(fake.env(), HOME=home, NAGENT_CONFIG=config_path, NAGENT_NO_SPINNER="1",
                   TMPDIR=tmp)
        os.environ.clear()
        os.environ.update(env)
        os.chdir(work)
        files = make_files(work, turns, seed)
        options = Selection(conversation="bench")
        session = nagent_session.build_session(options, env, work)
        script = Script(files, max(2, turns // runs), session.path)
        fake.reply_fn(script, vendor="anthropic")
        started = time.perf_counter()
        total = TokenStats()
        for number in range(runs):
            session = nagent_session.build_session(options, env, work)
            outcome = nagent_loop.run_agent_loop(
                session, f"Step {number + 1}: read the next log files and report anomalies.", "argv")
            total = outcome.conversation_stats
            if outcome.exit_code != 0:
                raise SystemExit(f"{label}: run {number + 1} failed: {outcome.error}")
        elapsed = time.perf_counter() - started
        chain = window_chain(session.path)
        usage = call_usage(chain)
        if len(usage) != len(script.calls):
            raise SystemExit(f"{label}: {len(usage)} recorded calls for {len(script.calls)} requests")
        loop = [(window, call) for (window, call), kind in zip(usage, script.calls) if kind == "loop"]
        checkpoint_tokens = sum(call["input_tokens"] for (_, call), kind in zip(usage, script.calls)
                                if kind == "checkpoint")
        firsts, steady_in, steady_read = set(), 0, 0
        for window, call in loop:
            if window not in firsts:
                firsts.add(window)
                continue
            steady_in += call["input_tokens"]
            steady_read += call["cache_read_tokens"]
        largest = max(os.path.getsize(path) for path in chain)
        return {
            "label": label, "calls": len(usage), "loop_calls": len(loop),
            "checkpoint_calls": script.calls.count("checkpoint"), "checkpoint_tokens": checkpoint_tokens,
            "input_tokens": total.input_tokens, "output_tokens": total.output_tokens,
            "uncached_tokens": total.input_tokens - total.cache_read_tokens,
            "cache_read_tokens": total.cache_read_tokens, "cache_write_tokens": total.cache_write_tokens,
            "cache_share": round(total.cache_read_tokens / max(1, total.input_tokens), 4),
            "steady_cache_share": round(steady_read / steady_in, 4) if steady_in else 0.0,
            "rebuilds": len(chain) - 1, "largest_window": largest,
            "cost_usd": round(total.cost_usd, 4) if total.cost_usd is not None else None,
            "naive_sizes": list(script.sizes), "seconds": round(elapsed, 2),
            "_cost": lambda tokens_in, tokens_out: call_cost(SimpleNamespace(
                model=MODEL, input_tokens=tokens_in, output_tokens=tokens_out,
                cache_read_tokens=0, cache_write_tokens=0)),
        }
    finally:
        fake.stop()
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        shutil.rmtree(tmp, ignore_errors=True)


def naive_row(plain):
    """The whole-file loop: each call sends the whole conversation as it stood, uncached."""
    sent = sum((size + 3) // 4 for size in plain["naive_sizes"])
    cost = plain["_cost"](sent, plain["output_tokens"])
    return {"label": "naive whole-file loop", "calls": plain["loop_calls"],
            "loop_calls": plain["loop_calls"], "checkpoint_calls": 0, "checkpoint_tokens": 0,
            "input_tokens": sent,
            "output_tokens": plain["output_tokens"], "uncached_tokens": sent, "cache_read_tokens": 0,
            "cache_write_tokens": 0, "cache_share": 0.0, "steady_cache_share": 0.0, "rebuilds": 0,
            "largest_window": max(plain["naive_sizes"]), "cost_usd": round(cost, 4), "seconds": None}


def print_table(rows, naive):
    columns = [("label", "run", 26), ("calls", "calls", 6), ("checkpoint_calls", "ckpt", 5),
               ("input_tokens", "input tok", 11), ("uncached_tokens", "uncached", 10),
               ("vs_naive", "vs naive", 9), ("cache_share", "cache", 7), ("steady_cache_share", "steady", 7),
               ("rebuilds", "rebuilds", 9), ("largest_window", "largest B", 10), ("cost_usd", "cost $", 8),
               ("seconds", "s", 6)]
    print(" ".join(f"{title:>{width}}" if key != "label" else f"{title:<{width}}"
                   for key, title, width in columns))
    for row in rows:
        row["vs_naive"] = "baseline" if row is naive else \
            f"-{1 - row['uncached_tokens'] / naive['uncached_tokens']:.0%}"
        cells = []
        for key, _, width in columns:
            value = row.get(key)
            if key in ("cache_share", "steady_cache_share"):
                value = f"{value:.0%}"
            elif value is None:
                value = "-"
            cells.append(f"{value:<{width}}" if key == "label" else f"{value!s:>{width}}")
        print(" ".join(cells))


def main(argv=None):
    parser = argparse.ArgumentParser(description="nagent long-run benchmark (prints figures)")
    parser.add_argument("--turns", type=int, default=60, help="loop model calls in the session")
    parser.add_argument("--runs", type=int, default=6, help="user prompts the turns are spread over")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    off = {"window_max_bytes": 0, "checkpoint_every_bytes": 0}
    plain = run_session(args.turns, args.runs, args.seed, off, "nagent, no windows")
    windowed = run_session(args.turns, args.runs, args.seed, {}, "nagent (default windows)")
    naive = naive_row(plain)
    rows = [naive, plain, windowed]
    for row in rows:
        row.pop("_cost", None)
        row.pop("naive_sizes", None)
    print(f"{args.turns} loop turns over {args.runs} prompts, tool outputs 4-28 KB, model {MODEL}, "
          "fake Anthropic prompt cache")
    print_table(rows, naive)
    saving = 1 - windowed["uncached_tokens"] / naive["uncached_tokens"]
    print(f"targets: uncached input {saving:.0%} below the naive loop (target >= 50%): "
          f"{'met' if saving >= 0.5 else 'MISSED'}; cache reads between rebuilds "
          f"{windowed['steady_cache_share']:.0%} (target >= 80%): "
          f"{'met' if windowed['steady_cache_share'] >= 0.8 else 'MISSED'}; checkpoint calls sent "
          f"{windowed['checkpoint_tokens']} uncached tokens")
    return rows


if __name__ == "__main__":
    main()
