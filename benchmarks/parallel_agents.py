"""Parallel sub-agents benchmark: delegated tasks against a fake vendor that takes 2 s per call.

Each scenario is one real `nagent` run (bin/nagent, or --nagent PATH) against the fake (tests/fakes.py):
the parent's first call answers with N <nagent-agent> tags, each child answers its task in one
call, the parent's second call gives the final response. Every call, the parent's included,
takes --delay seconds (2 by default). Scenarios:
- one task;
- four tasks, concurrently (max_parallel_agents 4, the default);
- four tasks one after another (--max-parallel-agents 1: how nagent ran them before issue 14).
Figures per scenario: the run's wall time, and the delegation phase (from the parent's first
request to its second, less its own call's delay: the time the children took as a batch). The
target: four tasks within 1.5x the wall time of one. Prints a table; asserts nothing.

Run: python3 benchmarks/parallel_agents.py [--delay 2] [--runs 1] [--nagent PATH]
`main(argv) -> rows` returns the table as dicts (run_all.py reads them).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from base import clean_environ  # noqa: E402
from fakes import FakeVendor, ReplySpec  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import make_workspace  # noqa: E402

PARENT = "BENCH-PARENT-PROMPT"
TARGET = 1.5


def run_once(nagent, tasks, parallel, delay):
    fake = FakeVendor().start()
    root, home, work, config = make_workspace("nagent-bench-parallel-",
                                              {"provider": "openai", "max_parallel_agents": parallel})
    parent_requests, lock = [], threading.Lock()

    def reply(record):
        if PARENT in json.dumps(record.get("json")):
            with lock:
                parent_requests.append(time.monotonic())
                first = len(parent_requests) == 1
            text = ("".join(f"<nagent-agent>\nbench task {n}\n</nagent-agent>\n" for n in range(tasks))
                    if first else "<nagent-response>all done</nagent-response>")
            return ReplySpec(text, delay=delay)
        return ReplySpec("<nagent-response>task answered</nagent-response>", delay=delay)

    fake.reply_fn(reply)
    try:
        env = clean_environ()
        env.update(fake.env(), HOME=home, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1", TMPDIR=root)
        command = ([sys.executable, nagent] if nagent.endswith(("bin/nagent", ".py")) else [nagent])
        started = time.monotonic()
        proc = subprocess.run(command + ["--json", "--conversation", "bench", PARENT], env=env,
                              cwd=work, capture_output=True, text=True, timeout=600)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise RuntimeError(f"nagent failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
        if len(parent_requests) != 2:
            raise RuntimeError(f"expected 2 parent calls, saw {len(parent_requests)}")
        return wall, parent_requests[1] - parent_requests[0] - delay
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=2.0, help="seconds per model call")
    parser.add_argument("--runs", type=int, default=1, help="runs per scenario (median shown)")
    parser.add_argument("--nagent", default=os.path.join(ROOT, "bin", "nagent"),
                        help="the nagent to measure (a bin/nagent or an installed script)")
    args = parser.parse_args(argv)
    scenarios = (("one task", 1, 4), ("four tasks, concurrent", 4, 4),
                 ("four tasks, one at a time", 4, 1))
    rows = []
    print(f"{'scenario':<28} {'wall':>8} {'delegation':>11}")
    for label, tasks, parallel in scenarios:
        walls, phases = [], []
        for _ in range(args.runs):
            wall, phase = run_once(args.nagent, tasks, parallel, args.delay)
            walls.append(wall)
            phases.append(phase)
        row = {"label": label, "tasks": tasks, "max_parallel_agents": parallel, "delay_s": args.delay,
               "wall_s": round(statistics.median(walls), 2),
               "delegation_s": round(statistics.median(phases), 2)}
        rows.append(row)
        print(f"{label:<28} {row['wall_s']:>7.2f}s {row['delegation_s']:>10.2f}s")
    one, four, serial = rows
    ratio = four["wall_s"] / one["wall_s"]
    print(f"\nfour concurrent tasks / one task: {ratio:.2f}x wall time "
          f"(target <= {TARGET}x), delegation phase {four['delegation_s'] / one['delegation_s']:.2f}x; "
          f"one at a time: {serial['wall_s'] / one['wall_s']:.2f}x wall, "
          f"{serial['delegation_s'] / one['delegation_s']:.2f}x delegation")
    for row in rows:
        row["ratio_to_one"] = round(row["wall_s"] / one["wall_s"], 2)
        row["delegation_ratio"] = round(row["delegation_s"] / one["delegation_s"], 2)
    return rows


if __name__ == "__main__":
    main()
