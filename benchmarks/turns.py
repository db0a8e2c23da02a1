"""Per-turn overhead of the nagent loop and prefix stability of its requests.

A 20-turn scripted run (19 replies with a shell and a read action, then a response) of the
real bin/nagent against the local fake vendor, which answers instantly. For each turn after
the first: the gap between the fake finishing answer N and receiving request N+1 — the
loop's own time per turn (parse, actions, appends, request building, HTTP), without the
fake's handling time. Prefix stability: each recorded request's messages serialised
canonically; the share of request N that is a byte-identical prefix of request N+1.
Targets: ≤ 30 ms per turn on top of the fake; ≥ 95 % prefix stability. Snapshots are on, as
users run (`run_once(provider, snapshots=False)` measures without them: benchmarks/snapshots.py).

Usage: python3 benchmarks/turns.py [provider ...]   (default: openai anthropic google)
`main(argv) -> [row dicts]` for benchmarks/run_all.py.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))

from base import clean_environ  # noqa: E402
from fakes import FakeVendor, common_prefix_len  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import make_workspace  # noqa: E402

TURNS = 20
PROVIDERS = ("openai", "anthropic", "google")
GENERATION_MARKS = (":generateContent", "/v1/responses", "/v1/chat/completions", "/v1/messages")


class TimedFake(FakeVendor):
    """The fake, noting when each generation request arrived and when its answer was ready."""

    def __init__(self):
        super().__init__()
        self.timings = []

    def _handle(self, method, target, headers, body):
        started = time.perf_counter()
        answer = super()._handle(method, target, headers, body)
        if method == "POST" and any(mark in target for mark in GENERATION_MARKS):
            self.timings.append((started, time.perf_counter()))
        return answer


def script(fake):
    for turn in range(TURNS - 1):
        fake.reply(f"<nagent-shell>echo turn {turn}; ls</nagent-shell>\n"
                   f'<nagent-read path="notes-{turn % 3}.txt"/>')
    fake.reply("<nagent-response>Finished the scripted run.</nagent-response>")


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


def run_once(provider, snapshots=True):
    root, home, cwd, config = make_workspace(
        "nagent-bench-turns-", {"provider": provider, "retry": {"base_delay": 0, "max_delay": 0},
                                "snapshots": {"enabled": snapshots}})
    fake = TimedFake().start()
    try:
        for index in range(3):
            with open(os.path.join(cwd, f"notes-{index}.txt"), "w", encoding="utf-8") as handle:
                handle.write(f"notes file {index}\n" * 20)
        env = clean_environ()
        env.update(fake.env())
        env.update(HOME=home, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1", TMPDIR=root)
        script(fake)
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, os.path.join(REPO, "bin", "nagent"), "--json",
                               "--conversation", "bench", "run the scripted turns"],
                              capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
        total = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(f"nagent failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
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
    return {"provider": provider, "turns": len(bodies), "total_s": round(total, 3),
            "first_request_s": round(timings[0][0] - started, 3) if timings else None,
            "turn_median_ms": round(statistics.median(gaps), 1), "turn_max_ms": round(max(gaps), 1),
            "fake_median_ms": round(statistics.median(handling), 1),
            "prefix_min": round(min(shares), 4), "prefix_mean": round(statistics.mean(shares), 4),
            "last_request_bytes": len(serial[-1])}


def print_table(rows):
    columns = ("provider", "turns", "total_s", "first_request_s", "turn_median_ms", "turn_max_ms",
               "fake_median_ms", "prefix_min", "prefix_mean", "last_request_bytes")
    widths = [max(len(column), *(len(str(row[column])) for row in rows)) for column in columns]
    print("  ".join(column.ljust(width) for column, width in zip(columns, widths)))
    for row in rows:
        print("  ".join(str(row[column]).ljust(width) for column, width in zip(columns, widths)))
    print("targets: turn_median_ms <= 30 (loop time per turn after the first, fake excluded); "
          "prefix_min >= 0.95")


def main(argv=None):
    providers = list(argv or ()) or list(PROVIDERS)
    rows = [run_once(provider) for provider in providers]
    print_table(rows)
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
