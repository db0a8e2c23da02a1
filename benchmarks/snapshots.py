"""Snapshots and rewind (issue 22) on a 10,000-file git repository (100 directories of 100
small Python files, committed by the user).

Figures, each the median of --runs (first a warm-up that is not counted):
1. a snapshot when nothing changed (what each turn and action pays in a quiet tree), taken as a
   run takes it: the store's lock, `git status`, the journal line;          target ≤ 50 ms
2. a snapshot after 100 files changed (a line appended to each);             target ≤ 150 ms
3. `bin/nagent --rewind` of a turn that changed 100 files, the whole process;  target ≤ 1 s
4. the first snapshot of the repository (every file copied once, stated);
5. the store's size after 100 turns of small edits (2 files per turn, a start, before and after
   snapshot each), as the turns leave it and after `git gc`, stated beside the repository's size;
6. the per-turn overhead of benchmarks/turns.py (openai) with snapshots on and off, in pairs
   of runs, each the median of its run's turns; the median difference's target ≤ +10 ms.
Turns are played in process as a run takes its snapshots (nagent_snapshots.take_snapshot under
nagent_snapshot_store.locked); the rewind is the real command.

Usage: python3 benchmarks/snapshots.py [--runs N] [--files N]
`main(argv) -> [row dicts]` for benchmarks/run_all.py. Prints figures; asserts nothing.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "bin", "helpers"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from base import clean_environ  # noqa: E402
from bench_env import make_workspace, median_ms  # noqa: E402
from nagent_conversation import ConversationWriter  # noqa: E402
from nagent_snapshot_retention import start_gc  # noqa: E402
from nagent_snapshot_layout import disk_usage  # noqa: E402
from nagent_snapshot_store import locked, open_store  # noqa: E402
from nagent_snapshots import Limits, project_scope, take_snapshot  # noqa: E402
from turns import run_once  # noqa: E402

LIMITS = Limits(10 << 20, 20000, 512 << 20, 30.0, 200)


def make_repository(work, files, env):
    per_dir = 100
    for index in range(files):
        folder = os.path.join(work, f"pkg{index // per_dir:03d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"mod{index % per_dir:03d}.py"), "w") as handle:
            handle.write(f'"""Module {index}."""\n\n' + "".join(
                f"def f{n}(x):\n    return x + {n}\n\n" for n in range(8)))
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "start"]):
        subprocess.run(git + args, cwd=work, env=env, check=True)


class Player:
    """Turns as a run plays them: a prompt record with a turn_id, snapshots around changes."""

    def __init__(self, work, env, conversation):
        self.env, self.conversation, self.turns = env, conversation, 0
        self.scope = project_scope(work, env, ())
        self.store = open_store(self.scope.root, env, ())

    def snapshot(self, phase, token=""):
        with locked(self.store):
            return take_snapshot(self.store, self.scope, LIMITS,
                                 {"conv": self.conversation, "turn_id": token, "turn": self.turns,
                                  "phase": phase, "kind": "shell", "summary": "bench"})

    def turn(self, change):
        self.turns += 1
        token = os.urandom(8).hex()
        with ConversationWriter(self.conversation) as writer:
            writer.append("prompt", f"turn {self.turns}", {"source": "argv", "turn_id": token})
        self.snapshot("start", token)
        self.snapshot("action", token)
        change()
        self.snapshot("after", token)


def touch(paths, text):
    for path in paths:
        with open(path, "a") as handle:
            handle.write(text)


def turn_overhead(runs):
    """Per-turn overhead of turns.py with snapshots off and on, in pairs of runs (each a median
    over its turns): the medians each way, and the median of the pairs' differences (the pair
    shares the machine's load of the moment)."""
    found = {"on": [], "off": []}
    for _ in range(runs):
        for way in ("off", "on"):
            found[way].append(run_once("openai", snapshots=way == "on")["turn_median_ms"])
    middle = {way: statistics.median(values) for way, values in found.items()}
    middle["diff"] = statistics.median(b - a for a, b in zip(found["off"], found["on"]))
    return middle


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--turn-runs", type=int, default=8, help="pairs of turns.py runs")
    args = parser.parse_args(argv)
    overhead = turn_overhead(args.turn_runs)
    root, home, work, config = make_workspace("nagent-bench-snapshots-", {})
    env = clean_environ()
    env.update(HOME=home, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1", TMPDIR=root)
    rows = []
    try:
        make_repository(work, args.files, env)
        repo_bytes = disk_usage(work) - disk_usage(os.path.join(work, ".git"))
        conversation = os.path.join(home, ".nagent", "conversations", "bench")
        player = Player(work, env, conversation)
        began = time.perf_counter()
        player.snapshot("start")
        first = (time.perf_counter() - began) * 1000
        quiet = median_ms(lambda: player.snapshot("action"), args.runs)
        files = sorted(os.path.join(folder, name) for folder, _, names in os.walk(work)
                       if ".git" not in folder for name in names)
        step = max(1, len(files) // 100)
        hundred = files[::step][:100]
        marks = iter(range(10 ** 6))
        changed = median_ms(lambda: (touch(hundred, f"# {next(marks)}\n"),
                                     player.snapshot("action")), args.runs)
        # The same, less the appends themselves.
        appends = median_ms(lambda: touch(hundred, "#\n"), args.runs)
        player.snapshot("after")
        command = [sys.executable, os.path.join(REPO, "bin", "nagent"), "--conversation",
                   "bench", "--rewind"]

        def rewind():
            player.turn(lambda: touch(hundred, f"# turn {player.turns}\n"))
            began = time.perf_counter()
            proc = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
            spent = (time.perf_counter() - began) * 1000
            if proc.returncode != 0 or "100 files restored" not in proc.stdout:
                raise RuntimeError(f"--rewind failed: {proc.stdout} {proc.stderr}")
            return spent
        rewinds = sorted(rewind() for _ in range(max(3, args.runs // 2)))[1:]
        rewind_ms = rewinds[len(rewinds) // 2]
        store_path = player.store.path
        fresh_home = os.path.join(root, "home2")
        env2 = dict(env, HOME=fresh_home)
        long = Player(work, env2, os.path.join(fresh_home, ".nagent", "conversations", "long"))
        long.snapshot("start")
        for turn in range(args.turns):
            pair = [files[(turn * 37) % len(files)], files[(turn * 91 + 5) % len(files)]]
            long.turn(lambda: touch(pair, f"value_{turn} = {turn}\n"))
        grown = disk_usage(long.store.path)
        with locked(long.store):
            start_gc(long.store, detach=False)
        packed = disk_usage(long.store.path)
        rows = [
            {"figure": f"snapshot, nothing changed ({args.files:,} files)", "ms": quiet,
             "target_ms": 50.0},
            {"figure": f"snapshot, 100 files changed ({args.files:,} files)",
             "ms": changed - appends, "target_ms": 150.0},
            {"figure": "`nagent --rewind` of a turn that changed 100 files (whole process)",
             "ms": rewind_ms, "target_ms": 1000.0},
            {"figure": f"first snapshot of the repository ({args.files:,} files)", "ms": first},
            {"figure": f"store after {args.turns} turns of small edits (repository "
                       f"{repo_bytes / 2**20:.1f} MiB on disk)",
             "text": f"{grown / 2**20:.1f} MiB as left, {packed / 2**20:.1f} MiB after git gc"},
            {"figure": "per-turn overhead with snapshots, turns.py (openai): on − off",
             "ms": overhead["diff"], "target_ms": 10.0,
             "text": f"{overhead['diff']:+.1f} ms ({overhead['on']:.1f} ms on, "
                     f"{overhead['off']:.1f} ms off; median of {args.turn_runs} pairs)"},
        ]
        print(f"store: {store_path}")
        for row in rows:
            value = row.get("text") or f"{row['ms']:.1f} ms"
            target = f" (target ≤ {row['target_ms']:g} ms)" if row.get("target_ms") else ""
            print(f"{row['figure']}: {value}{target}")
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
