"""Start-up time of the CLI tools: wall time over N runs of `python3 -c pass`, every
no-model command (every executable's --help, --version, --status, --config, --changes, --ps,
listings) and one `nagent-llm-text --file` call against the local fake, with the ratio to
`python3 -c pass` (run alternately with each command, so load on the machine hits both alike).
`ratio` is the minimum of the command's runs over the minimum of the baseline's (a loaded
machine only ever adds time, so the minimum is the steadiest figure); the medians and the CPU
time (user + system of the child) are printed beside it. Target: every no-model command ≤ 2.5×
`python3 -c pass` (issue 25).

Usage: python3 benchmarks/startup.py [--runs N] [--no-pyc] [--python PATH] [--importtime]
                                    [--against DIR]
(default 10 runs). --importtime also prints, per command, what `python3 -X importtime` counts:
the modules imported, their summed self time, and the five costliest. --against DIR runs the
same commands of another checkout (e.g. `git archive BASE | tar -x -C DIR`) in the same
alternation, for a before/after pair measured in one run: its rows follow, marked "(DIR)".
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

HELP_TARGET = 2.5
NO_MODEL = (("nagent", "--help"), ("nagent", "--version"), ("nagent", "--status"), ("nagent", "--config"),
            ("nagent", "--list-conversations"), ("nagent", "--list-file-edits"),
            ("nagent", "--changes"), ("nagent", "--ps"), ("nagent", "--list-skills"),
            ("nagent-llm-text", "--help"), ("nagent-llm-upload", "--help"),
            ("nagent-file-split", "--help"), ("nagent-file-patch", "--help"), ("nagent-file-edit", "--help"),
            ("nagent-file-summarize", "--help"), ("nagent-mcp", "--help"), ("nagent-mcp", "--description"),
            ("nagent-batch", "--help"))


# Commands whose answer in the benchmark's fresh project is an error with this exit code: they
# still read what they read for a user (--changes: the project's empty snapshot store, exit 6).
EXIT_CODES = {("nagent", "--changes"): 6}


def sample(argv, env, cwd, expect=0):
    """(wall ms, CPU ms of the child: user + system) of one run; RuntimeError when it fails."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = (time.perf_counter() - started) * 1000
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != expect:
            err.seek(0)
            raise RuntimeError(f"{' '.join(argv[1:])} failed: {err.read().decode()[-300:]}")
    return wall, (usage.ru_utime + usage.ru_stime) * 1000


def measure(argv, baseline, env, cwd, runs, warm=True, expect=0, other=None):
    """Samples [(wall, CPU)] of `argv`, of the baseline and of `other` (another checkout's argv,
    or None), run alternately so that a change of load on the machine hits them alike."""
    if warm:  # compile and cache the bytecode once, as an install does
        for command in filter(None, (argv, other)):
            subprocess.run(command, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
    own, base, theirs = [], [], []
    for _ in range(runs):
        base.append(sample(baseline, env, cwd))
        own.append(sample(argv, env, cwd, expect))
        if other:
            theirs.append(sample(other, env, cwd, expect))
    return own, base, theirs


def import_profile(argv, env, cwd):
    """(modules imported, summed self time in ms, the five costliest as "name ms") of one run
    under `-X importtime`."""
    proc = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], env=env, cwd=cwd,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, timeout=120)
    rows = []
    for line in proc.stderr.splitlines():
        if line.startswith("import time:") and "|" in line and "self [us]" not in line:
            own, _, name = line[len("import time:"):].split("|")
            rows.append((int(own), name.strip()))
    top = sorted(rows, reverse=True)[:5]
    return len(rows), sum(own for own, _ in rows) / 1000, [f"{name} {own / 1000:.1f}" for own, name in top]


def main(argv=None):
    argv = list(argv or ())
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 10
    cached = "--no-pyc" not in argv
    python = argv[argv.index("--python") + 1] if "--python" in argv else sys.executable
    profile = "--importtime" in argv
    against = os.path.abspath(argv[argv.index("--against") + 1]) if "--against" in argv else None
    root, home, cwd, config = make_workspace("nagent-bench-startup-",
                                             {"retry": {"base_delay": 0, "max_delay": 0}})
    fake = FakeVendor().start()
    try:
        question = os.path.join(cwd, "question.txt")
        with open(question, "w", encoding="utf-8") as handle:
            handle.write("What is 2+2?\n")
        # --changes reads the project of the working directory: make it one.
        subprocess.run(["git", "init", "-q", cwd], check=True, env=clean_environ())
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
            other = os.path.join(against, "bin", tool) if against else None
            other = [python, other, *args] if other and os.path.exists(other) else None
            own, base, theirs = measure([python, path, *args], baseline_argv, env, cwd, runs,
                                        warm=cached, expect=EXIT_CODES.get((tool, *args), 0),
                                        other=other)
            bases.extend(base)
            name = " ".join([tool, *args]).replace(question, "question.txt")
            row = figures(own, base)
            row["command"] = name
            if profile:
                row["modules"], row["import_ms"], row["costliest"] = import_profile(
                    [python, path, *args], env, cwd)
            rows.append(row)
            if theirs:
                row = figures(theirs, base)
                row["command"] = f"{name} ({against})"
                if profile:
                    row["modules"], row["import_ms"], row["costliest"] = import_profile(
                        other, env, cwd)
                rows.append(row)
        rows.insert(0, dict(figures(bases, bases), command="python3 -c pass"))
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
    for row in rows:
        if row["command"] != "python3 -c pass" and "question.txt" not in row["command"]:
            row["target"] = "ok" if row["ratio"] <= HELP_TARGET else f"over {HELP_TARGET:g}x"
    print_table(rows, runs, cached)
    return rows


def figures(own, base):
    """A row's figures: min and median wall time, CPU median, and each ratio to the baseline."""
    walls, base_walls = [s[0] for s in own], [s[0] for s in base]
    cpu, base_cpu = statistics.median(s[1] for s in own), statistics.median(s[1] for s in base)
    return {"min_ms": round(min(walls), 1), "ratio": round(min(walls) / min(base_walls), 2),
            "median_ms": round(statistics.median(walls), 1),
            "median_ratio": round(statistics.median(walls) / statistics.median(base_walls), 2),
            "cpu_ms": round(cpu, 1), "cpu_ratio": round(cpu / base_cpu, 2)}


def print_table(rows, runs, cached=True):
    width = max(len(row["command"]) for row in rows)
    print(f"{'command'.ljust(width)}  min_ms  ratio  median_ms  median_ratio  cpu_ratio  "
          f"(min and median of {runs} runs, {'cached bytecode' if cached else 'no bytecode cache'})")
    for row in rows:
        print(f"{row['command'].ljust(width)}  {row['min_ms']:6.1f}  {row['ratio']:5.2f}  "
              f"{row['median_ms']:9.1f}  {row['median_ratio']:12.2f}  {row['cpu_ratio']:9.2f}  "
              f"{row.get('target', '')}")
    if any("modules" in row for row in rows):
        print("\n-X importtime per command: modules imported, summed self time, the costliest (ms)")
        for row in rows:
            if "modules" in row:
                print(f"{row['command'].ljust(width)}  {row['modules']:4d}  {row['import_ms']:6.1f} ms  "
                      + ", ".join(row["costliest"]))
    print(f"target: no-model commands <= {HELP_TARGET:g}x python3 -c pass (ratio of the minimums)")


if __name__ == "__main__":
    main(sys.argv[1:])
