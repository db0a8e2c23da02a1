"""Start-up time of the CLI tools: median wall time over N runs of `python3 -c pass`, every
no-model command (--help, --version, --status, --config, listings) and one `nagent-llm-text
--file` call against the local fake, with the ratio to `python3 -c pass` (run alternately with
each command, so load on the machine hits both alike) in wall time and in CPU time (user +
system of the child, steadier on a busy machine). Target: every no-model command ≤ 3×
`python3 -c pass`.

Usage: python3 benchmarks/startup.py [--runs N] [--no-pyc] [--python PATH]   (default 10 runs)
--python runs the commands (and the baseline) with another interpreter, e.g. a system Python
whose start-up is not slowed by site-packages .pth files; the model-call row is then skipped
unless that interpreter has the openai SDK.
Bytecode is cached as an installed copy has it (pip compiles at install time; a checkout
writes __pycache__ on its first run): the cache goes to a temporary PYTHONPYCACHEPREFIX, one
warm-up run per command fills it, and PYTHONDONTWRITEBYTECODE is unset for the runs. With
--no-pyc every module is compiled from source on every run instead (PYTHONDONTWRITEBYTECODE=1,
an empty cache), as in a read-only checkout; the target is for the cached case.
`main(argv) -> [row dicts]` for benchmarks/run_all.py. Tools whose file does not exist yet
are skipped. Runs use a temporary HOME and config, so nothing of the user's is read.
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, "bin")
sys.path.insert(0, os.path.join(REPO, "tests"))

from base import clean_environ  # noqa: E402
from fakes import FakeVendor  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import make_workspace  # noqa: E402

HELP_TARGET = 3.0
NO_MODEL = (("nagent", "--help"), ("nagent", "--version"), ("nagent", "--status"), ("nagent", "--config"),
            ("nagent", "--list-conversations"), ("nagent", "--list-file-edits"),
            ("nagent-llm-text", "--help"), ("nagent-llm-upload", "--help"),
            ("nagent-file-split", "--help"), ("nagent-file-patch", "--help"), ("nagent-file-edit", "--help"),
            ("nagent-file-summarize", "--help"), ("nagent-mcp", "--help"), ("nagent-mcp", "--description"))


def sample(argv, env, cwd):
    """(wall ms, CPU ms of the child: user + system) of one run; RuntimeError when it fails."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = (time.perf_counter() - started) * 1000
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            err.seek(0)
            raise RuntimeError(f"{' '.join(argv[1:])} failed: {err.read().decode()[-300:]}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def measure(argv, baseline, env, cwd, runs, warm=True):
    """Medians (wall, CPU) of `argv` and of the baseline, run alternately so that a change of
    load on the machine hits both alike."""
    if warm:  # compile and cache the bytecode once, as an install does
        subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=120)
    own, base = [], []
    for _ in range(runs):
        base.append(sample(baseline, env, cwd))
        own.append(sample(argv, env, cwd))
    return ([statistics.median(item[0] for item in own), statistics.median(item[1] for item in own)],
            [statistics.median(item[0] for item in base), statistics.median(item[1] for item in base)])


def main(argv=None):
    argv = list(argv or ())
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 10
    cached = "--no-pyc" not in argv
    python = argv[argv.index("--python") + 1] if "--python" in argv else sys.executable
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
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = os.path.join(root, "pycache")
        if not cached:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        fake.reply_fn(lambda record: "4")

        baseline_argv = [python, "-c", "pass"]
        commands = [(tool, args) for tool, *args in NO_MODEL]
        if subprocess.run([python, "-c", "import openai"], capture_output=True).returncode == 0:
            commands.append(("nagent-llm-text", ["--file", question]))
        rows, bases = [], []
        for tool, args in commands:
            path = os.path.join(BIN, tool)
            if not os.path.exists(path):
                continue
            (wall, cpu), base = measure([python, path, *args], baseline_argv, env, cwd, runs,
                                        warm=cached)
            bases.append(base)
            rows.append({"command": " ".join([tool, *args]).replace(question, "question.txt"),
                         "median_ms": round(wall, 1), "ratio": round(wall / base[0], 2),
                         "cpu_ms": round(cpu, 1), "cpu_ratio": round(cpu / base[1], 2)})
        rows.insert(0, {"command": "python3 -c pass",
                        "median_ms": round(statistics.median(b[0] for b in bases), 1), "ratio": 1.0,
                        "cpu_ms": round(statistics.median(b[1] for b in bases), 1), "cpu_ratio": 1.0})
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
    for row in rows:
        if row["command"] != "python3 -c pass" and "question.txt" not in row["command"]:
            row["target"] = "ok" if row["ratio"] <= HELP_TARGET else f"over {HELP_TARGET:g}x"
    print_table(rows, runs, cached)
    return rows


def print_table(rows, runs, cached=True):
    width = max(len(row["command"]) for row in rows)
    print(f"{'command'.ljust(width)}  median_ms  ratio  cpu_ms  cpu_ratio  (median of {runs} runs, "
          f"{'cached bytecode' if cached else 'no bytecode cache'})")
    for row in rows:
        print(f"{row['command'].ljust(width)}  {row['median_ms']:9.1f}  {row['ratio']:5.2f}  "
              f"{row['cpu_ms']:6.1f}  {row['cpu_ratio']:9.2f}  {row.get('target', '')}")
    print(f"target: no-model commands <= {HELP_TARGET:g}x python3 -c pass")


if __name__ == "__main__":
    main(sys.argv[1:])
