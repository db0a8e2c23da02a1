"""Start-up time of the CLI tools: median wall time over N runs of `python3 -c pass`, every
no-model command (--help, --status, listings) and one `nagent-llm-text --file` call against
the local fake, with the ratio to `python3 -c pass`. Target: `--help` ≤ 3× `python3 -c pass`.

Usage: python3 benchmarks/startup.py [--runs N]   (default 10)
`main(argv) -> [row dicts]` for benchmarks/run_all.py. Tools whose file does not exist yet
are skipped. Runs use a temporary HOME and config, so nothing of the user's is read.
"""
import os
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, "bin")
sys.path.insert(0, os.path.join(REPO, "tests"))

from base import clean_environ  # noqa: E402
from fakes import FakeVendor  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import make_workspace  # noqa: E402

HELP_TARGET = 3.0
NO_MODEL = (("nagent", "--help"), ("nagent", "--status"), ("nagent", "--list-conversations"),
            ("nagent", "--list-file-edits"), ("nagent-llm-text", "--help"), ("nagent-llm-upload", "--help"),
            ("nagent-file-split", "--help"), ("nagent-file-patch", "--help"), ("nagent-file-edit", "--help"),
            ("nagent-file-summarize", "--help"), ("nagent-mcp", "--help"), ("nagent-mcp", "--description"))


def median_ms(argv, env, cwd, runs):
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        proc = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        times.append((time.perf_counter() - started) * 1000)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv[1:])} failed: {proc.stderr.decode()[-300:]}")
    return statistics.median(times)


def main(argv=None):
    argv = list(argv or ())
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 10
    root, home, cwd, config = make_workspace("nagent-bench-startup-",
                                             {"retry": {"base_delay": 0, "max_delay": 0}})
    fake = FakeVendor().start()
    try:
        question = os.path.join(cwd, "question.txt")
        with open(question, "w", encoding="utf-8") as handle:
            handle.write("What is 2+2?\n")
        env = clean_environ()
        env.update(fake.env())
        env.update(HOME=home, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1", TMPDIR=root)
        fake.reply_fn(lambda record: "4")

        baseline = median_ms([sys.executable, "-c", "pass"], env, cwd, runs)
        rows = [{"command": "python3 -c pass", "median_ms": round(baseline, 1), "ratio": 1.0}]
        commands = [(tool, args) for tool, *args in NO_MODEL]
        commands.append(("nagent-llm-text", ["--file", question]))
        for tool, args in commands:
            path = os.path.join(BIN, tool)
            if not os.path.exists(path):
                continue
            value = median_ms([sys.executable, path, *args], env, cwd, runs)
            rows.append({"command": " ".join([tool, *args]).replace(question, "question.txt"),
                         "median_ms": round(value, 1), "ratio": round(value / baseline, 2)})
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
    for row in rows:
        if row["command"].endswith("--help"):
            row["target"] = "ok" if row["ratio"] <= HELP_TARGET else f"over {HELP_TARGET:g}x"
    print_table(rows, runs)
    return rows


def print_table(rows, runs):
    width = max(len(row["command"]) for row in rows)
    print(f"{'command'.ljust(width)}  median_ms  ratio  (median of {runs} runs)")
    for row in rows:
        print(f"{row['command'].ljust(width)}  {row['median_ms']:9.1f}  {row['ratio']:5.2f}  "
              f"{row.get('target', '')}")
    print(f"target: --help <= {HELP_TARGET:g}x python3 -c pass")


if __name__ == "__main__":
    main(sys.argv[1:])
