"""nagent-batch benchmark: 20 tasks of 2 model calls each, one worker vs four, against the fake vendor.

Each task is a real `nagent` run in its own git worktree of one repository (tests/fakes.py
answers: a shell action, then the response), every call taking --delay seconds (2 by default:
a model's latency; without it the runs would measure only CPU, which 2 cores cannot share
among 4 workers). Scenarios: `-j 1` (serial) and `-j 4`, each a fresh output folder.
Figures: wall time of each, their ratio (target: 4 workers ≤ 0.35× serial), and the
coordinator's own overhead per task: (serial wall − the sum of the nagent processes' own time,
results' nagent_s) / tasks, i.e. worktree add and remove, diff, storing the attempt, process
start-up and bookkeeping; and nagent-batch's own CPU time per task (its --json
coordinator_cpu_s: its threads, not the processes it starts), which load barely moves.
Prints a table; asserts nothing.

Run: python3 benchmarks/batch.py [--tasks 20] [--delay 2] [--jobs 4]
`main(argv) -> rows` returns the figures as dicts (run_all.py reads them).
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from base import clean_environ  # noqa: E402
from fakes import FakeVendor, ReplySpec  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import make_workspace  # noqa: E402

TARGET = 0.35
MARK_RE = re.compile(r"BENCH-TASK-(\d+)")


def make_repo(path):
    os.makedirs(path)
    for args in (["init", "-q"], ["add", "."],
                 ["-c", "user.email=b@example.com", "-c", "user.name=b", "commit", "-qm", "init"]):
        if args[0] == "add":
            with open(os.path.join(path, "README"), "w", encoding="utf-8") as handle:
                handle.write("bench\n")
        subprocess.run(["git", "-C", path, *args], check=True, capture_output=True)


def run_batch(root, env, tasks_file, jobs, name):
    out = os.path.join(root, name)
    started = time.monotonic()
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "bin", "nagent-batch"), tasks_file,
                           "--out", out, "-j", str(jobs), "--json"], env=env, cwd=root, capture_output=True,
                          text=True, timeout=1800)
    wall = time.monotonic() - started
    with open(os.path.join(out, "results.jsonl"), encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle]
    bad = [line["id"] for line in lines if line["status"] != "ok" or line["calls"] != 2]
    if proc.returncode != 0 or bad:
        raise RuntimeError(f"batch -j {jobs} failed ({proc.returncode}, {bad}): {proc.stderr[-300:]}")
    return wall, lines, json.loads(proc.stdout)["coordinator_cpu_s"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20)
    parser.add_argument("--delay", type=float, default=2.0, help="seconds per model call")
    parser.add_argument("--jobs", type=int, default=4)
    args = parser.parse_args(argv)
    fake = FakeVendor().start()

    def reply(record):
        body = json.dumps(record.get("json"))
        found = MARK_RE.search(body)
        if not found:
            return None
        if '"role": "assistant"' not in body:
            return ReplySpec(f"<nagent-shell>echo {found.group(1)} > out.txt</nagent-shell>",
                             delay=args.delay)
        return ReplySpec(f"<nagent-response>task {found.group(1)} done</nagent-response>", delay=args.delay)

    fake.reply_fn(reply)
    root, home, _work, config = make_workspace("nagent-bench-batch-", {"provider": "openai"})
    try:
        make_repo(os.path.join(root, "repo"))
        tasks_file = os.path.join(root, "tasks.jsonl")
        with open(tasks_file, "w", encoding="utf-8") as handle:
            for number in range(args.tasks):
                handle.write(json.dumps({"id": f"t{number}", "repo": "repo",
                                         "prompt": f"BENCH-TASK-{number}: write out.txt"}) + "\n")
        env = dict(clean_environ(), HOME=home, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1", **fake.env())
        serial, lines, cpu = run_batch(root, env, tasks_file, 1, "serial")
        nagent_total = sum(line["nagent_s"] for line in lines)
        attempt_total = sum(line["wall_s"] for line in lines)
        pool, _, _ = run_batch(root, env, tasks_file, args.jobs, "pool")
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
    row = {"tasks": args.tasks, "jobs": args.jobs, "delay_s": args.delay, "serial_s": round(serial, 2),
           "pool_s": round(pool, 2), "ratio": round(pool / serial, 3),
           "overhead_ms": round((serial - nagent_total) / args.tasks * 1000, 1),
           "attempt_overhead_ms": round((attempt_total - nagent_total) / args.tasks * 1000, 1),
           "coordinator_cpu_ms": round(cpu / args.tasks * 1000, 1),
           "nagent_s": round(nagent_total / args.tasks, 2)}
    print(f"{args.tasks} tasks x 2 calls ({args.delay:g} s each): serial {row['serial_s']:.1f} s, "
          f"-j {args.jobs} {row['pool_s']:.1f} s = {row['ratio']:.2f}x serial (target <= {TARGET}x)")
    print(f"per task: nagent {row['nagent_s']:.2f} s; coordinator overhead {row['overhead_ms']:.0f} ms wall "
          f"(of which inside the attempt: worktree, diff, wrapper {row['attempt_overhead_ms']:.0f} ms), "
          f"{row['coordinator_cpu_ms']:.0f} ms of nagent-batch's own CPU")
    return [row]


if __name__ == "__main__":
    main()
