"""Per-turn overhead of the nagent loop and prefix stability of its requests.

A 20-turn scripted run (19 replies with a shell and a read action, then a response) of the
real bin/nagent against the local fake vendor, which answers instantly. For each turn after
the first: the gap between the fake finishing answer N and receiving request N+1 — the
loop's own time per turn (parse, actions, appends, request building, HTTP), without the
fake's handling time. Prefix stability: each recorded request's messages serialised
canonically; the share of request N that is a byte-identical prefix of request N+1.
Targets: ≤ 30 ms per turn on top of the fake; ≥ 95 % prefix stability. Snapshots are on, as
users run (`run_once(provider, snapshots=False)` measures without them: benchmarks/snapshots.py).

The ends of a run, from the same runs (issue 25):
- first_step_ms: the first gap (the run's first shell and read step: one-time set-up shows
  here), later_gap_ms: the median of the other gaps (the "request gap" of a 20-step session);
- answer_exit_ms: from the answer's first byte on stdout to the process's exit (taken from
  os.wait4 in its own thread, not from the pipes' closing); fake_answer_exit_ms from the fake
  having sent the final answer to the exit (the SDK's and the loop's handling of the reply
  included);
- per_turn_ms: (T20 − T1) / 19, the wall time of the 20-turn run minus that of a 1-turn run
  (a plain answer), over the 19 extra turns; cpu_per_turn_ms the same of the CPU time nagent and
  the processes it waited for used (os.wait4), which other load disturbs much less.
`--latency MS` makes the fake answer each request after MS ms, as a model does: set-up done while
a request is in flight then shows in the gaps (which exclude the latency itself).
With --runs N every figure is the minimum over N runs (the least disturbed by other load); with
`--compare DIR` the runs alternate between this checkout and the one at DIR (e.g. an
unpacked `git archive` of the base commit), one row each, so both see the same load.
`--profile DIR` runs nagent under cProfile, one .prof file per run in DIR.

`--project FILES` runs in a committed git project of FILES files (what a snapshot's git status
looks at) instead of a directory of three notes files.

Usage: python3 benchmarks/turns.py [--runs N] [--compare DIR] [--profile DIR] [--project FILES]
[--latency MS] [provider ...]
(default: openai anthropic google). `main(argv) -> [row dicts]` for benchmarks/run_all.py.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))

from base import clean_environ  # noqa: E402
from fakes import FakeVendor, common_prefix_len  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import make_workspace  # noqa: E402

TURNS = 20
PYCACHE = os.path.join(tempfile.gettempdir(), f"nagent-bench-turns-pycache-{os.getuid()}")
PROVIDERS = ("openai", "anthropic", "google")
GENERATION_MARKS = (":generateContent", ":streamGenerateContent", "/v1/responses", "/v1/chat/completions", "/v1/messages")


class TimedFake(FakeVendor):
    """The fake, noting when each generation request arrived and when its answer was ready."""

    def __init__(self):
        super().__init__()
        self.timings = []

    def _handle(self, method, target, headers, body):
        started = time.perf_counter()
        answer = super()._handle(method, target, headers, body)
        if method == "POST" and any(mark in target for mark in GENERATION_MARKS):
            # A scripted latency is waited out after this returns: the answer ends after it.
            self.timings.append((started, time.perf_counter() + (answer.delay or 0.0)))
        return answer


def script(fake, turns=TURNS, latency=0.0):
    for turn in range(turns - 1):
        fake.reply(f"<nagent-shell>echo turn {turn}; ls</nagent-shell>\n"
                   f'<nagent-read path="notes-{turn % 3}.txt"/>', delay=latency)
    fake.reply("<nagent-response>Finished the scripted run.</nagent-response>", delay=latency)


def canonical_messages(body):
    """The request's conversation as canonical JSON of (role, text) pairs, vendor-neutral."""
    pairs = []
    if "contents" in body:
        for content in body["contents"]:
            pairs += [(content.get("role"), part.get("text", "")) for part in content.get("parts", [])]
    else:
        items = body.get("messages") if "messages" in body else body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
        for item in items:
            content = item.get("content")
            blocks = [{"text": content}] if isinstance(content, str) else content or []
            pairs += [(item.get("role"), block.get("text", "")) for block in blocks]
    return json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def populate(cwd, files):
    """A committed git project of `files` small source files, 100 to a directory, around the
    notes files: what a snapshot's `git status` has to look at in a real project."""
    for index in range(files):
        folder = os.path.join(cwd, "src", f"pkg{index // 100:03d}")
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"mod{index % 100:02d}.py"), "w", encoding="utf-8") as handle:
            handle.write(f"VALUE = {index}\n")
    git = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost", "-C", cwd]
    env = dict(os.environ, GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "project"]):
        subprocess.run(git + args, check=True, env=env, capture_output=True)


def run_once(provider, snapshots=True, turns=TURNS, repo=REPO, profile=None, latency=0.0,
             project=0):
    root, home, cwd, config = make_workspace(
        "nagent-bench-turns-", {"provider": provider, "retry": {"base_delay": 0, "max_delay": 0},
                                "snapshots": {"enabled": snapshots}})
    fake = TimedFake().start()
    try:
        for index in range(3):
            with open(os.path.join(cwd, f"notes-{index}.txt"), "w", encoding="utf-8") as handle:
                handle.write(f"notes file {index}\n" * 20)
        if project:
            populate(cwd, project)
        env = clean_environ()
        env.update(fake.env())
        env.update(HOME=home, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1", TMPDIR=root)
        script(fake, turns, latency)
        # Bytecode caches as an installed package has them (written by the first run).
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(PYCACHE, os.path.basename(repo.rstrip("/")))
        python = [sys.executable] + (["-m", "cProfile", "-o", profile] if profile else [])
        started = time.perf_counter()
        proc = subprocess.Popen(python + [os.path.join(repo, "bin", "nagent"), "--conversation",
                                          "bench", "run the scripted turns"],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env, cwd=cwd)
        ended, answered, out, err = [], [], [], []

        def read(stream, chunks, first=None):
            while True:
                data = os.read(stream.fileno(), 65536)
                if not data:
                    return
                if first is not None and not first:
                    first.append(time.perf_counter())
                chunks.append(data)
        # The exit is taken from wait4 in its own thread: reading the pipes to their end
        # would time their closing, not the exit.
        threads = [threading.Thread(target=lambda: ended.append(
                       (os.wait4(proc.pid, 0), time.perf_counter()))),
                   threading.Thread(target=read, args=(proc.stdout, out, answered)),
                   threading.Thread(target=read, args=(proc.stderr, err))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(600)
        proc.stdout.close()
        proc.stderr.close()
        (_, status, usage), exited = ended[0]
        proc.returncode = os.waitstatus_to_exitcode(status)
        total = exited - started
        if proc.returncode != 0 or not answered:
            raise RuntimeError(f"nagent failed ({proc.returncode}): "
                               f"{b''.join(err).decode().strip()[-500:]}")
        bodies = [r["json"] for r in fake.requests
                  if r["method"] == "POST" and any(mark in r["path"] for mark in GENERATION_MARKS)]
        timings = list(fake.timings)
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
    gaps = [(timings[i + 1][0] - timings[i][1]) * 1000 for i in range(len(timings) - 1)]
    handling = [(end - start) * 1000 for start, end in timings]
    serial = [canonical_messages(body) for body in bodies]
    shares = [common_prefix_len(serial[i], serial[i + 1]) / len(serial[i]) for i in range(len(serial) - 1)]
    row = {"provider": provider, "turns": len(bodies), "total_s": round(total, 3),
           "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
           "first_request_s": round(timings[0][0] - started, 3) if timings else None,
           "answer_exit_ms": round((exited - answered[0]) * 1000, 1),
           "fake_answer_exit_ms": round((exited - timings[-1][1]) * 1000, 1)}
    if gaps:
        row.update(turn_median_ms=round(statistics.median(gaps), 1), turn_max_ms=round(max(gaps), 1),
                   first_step_ms=round(gaps[0], 1),
                   later_gap_ms=round(statistics.median(gaps[1:] or gaps), 1),
                   fake_median_ms=round(statistics.median(handling), 1),
                   prefix_min=round(min(shares), 4), prefix_mean=round(statistics.mean(shares), 4),
                   last_request_bytes=len(serial[-1]))
    return row


def measure(provider, runs=1, repos=(REPO,), profile=None, latency=0.0, project=0):
    """One row per checkout in `repos`: each figure the minimum over `runs` alternating runs of a
    20-turn and a 1-turn session (per_turn_ms from the two totals)."""
    samples = {repo: [] for repo in repos}
    for number in range(runs):
        for index, repo in enumerate(repos):
            prof = (os.path.join(profile, f"{provider}-{index}-{number}.prof")
                    if profile else None)
            long = run_once(provider, repo=repo, profile=prof, latency=latency, project=project)
            short = run_once(provider, turns=1, repo=repo, latency=latency, project=project)
            long["per_turn_ms"] = round((long["total_s"] - short["total_s"]) * 1000 / (TURNS - 1)
                                        - latency * 1000, 1)
            long["one_turn_s"] = short["total_s"]
            long["cpu_per_turn_ms"] = round((long["cpu_s"] - short["cpu_s"]) * 1000 / (TURNS - 1), 1)
            long["one_answer_exit_ms"] = short["answer_exit_ms"]
            long["one_fake_answer_exit_ms"] = short["fake_answer_exit_ms"]
            samples[repo].append(long)
    rows = []
    for repo in repos:
        row = dict(samples[repo][0])
        for key, value in row.items():
            if isinstance(value, (int, float)) and not key.startswith("prefix"):
                row[key] = min(sample[key] for sample in samples[repo])
        row["checkout"] = "this" if repo == REPO else repo
        row["runs"] = runs
        row["latency_ms"] = round(latency * 1000)
        rows.append(row)
    return rows


def print_table(rows):
    columns = ("checkout", "provider", "runs", "latency_ms", "turns", "total_s", "first_request_s",
               "per_turn_ms", "cpu_per_turn_ms", "first_step_ms", "later_gap_ms", "answer_exit_ms",
               "one_answer_exit_ms", "fake_answer_exit_ms", "one_fake_answer_exit_ms", "turn_median_ms", "turn_max_ms", "fake_median_ms",
               "prefix_min", "prefix_mean", "last_request_bytes")
    rows = [{column: row.get(column, "") for column in columns} for row in rows]
    widths = [max(len(column), *(len(str(row[column])) for row in rows)) for column in columns]
    print("  ".join(column.ljust(width) for column, width in zip(columns, widths)))
    for row in rows:
        print("  ".join(str(row[column]).ljust(width) for column, width in zip(columns, widths)))
    print("targets: per_turn_ms <= 8; first_step_ms <= 40; later_gap_ms <= 10; answer_exit_ms <= 50 "
          "(each the minimum over the runs; the gaps are the fake's clock, its handling excluded); "
          "turn_median_ms <= 30; prefix_min >= 0.95")
    print(f"load average at the end: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")


def main(argv=None):
    parser = argparse.ArgumentParser(description="per-turn overhead and the ends of a run")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--compare", metavar="DIR", help="another checkout, run alternately")
    parser.add_argument("--profile", metavar="DIR", help="cProfile output of each 20-turn run")
    parser.add_argument("--latency", type=float, default=0.0, metavar="MS",
                        help="the fake answers each request after MS ms, as a model takes time "
                             "(the gaps exclude it, and per_turn_ms subtracts it: set-up started "
                             "while a request is in flight shows)")
    parser.add_argument("--project", type=int, default=0, metavar="FILES",
                        help="run in a committed git project of FILES source files (100 to a "
                             "directory) instead of a bare directory of three notes files")
    parser.add_argument("providers", nargs="*")
    args = parser.parse_args(list(argv or ()))
    repos = (REPO, os.path.realpath(args.compare)) if args.compare else (REPO,)
    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
    print(f"load average at the start: {os.getloadavg()[0]:.1f} ({os.cpu_count()} cores)")
    rows = []
    for provider in args.providers or PROVIDERS:
        for repo in repos:   # writes the bytecode caches; unmeasured
            run_once(provider, turns=1, repo=repo)
        rows += measure(provider, args.runs, repos, args.profile, args.latency / 1000,
                        args.project)
    print_table(rows)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
