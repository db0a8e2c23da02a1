"""The first answer against `llm` (issue 25's row "first answer, nagent -n hello vs llm"): from
spawning each tool to the first byte of its answer on stdout, and to its exit, both through the
OpenAI SDK against the same local fake vendor (which answers at once), alternating, after one
warm-up run each (bytecode cached).

Usage: python3 benchmarks/first_answer_llm.py [--llm PATH] [--runs N]
`llm` is not a dependency: install it where you like (python3 -m venv V && V/bin/pip install llm)
and pass its path. Prints figures; asserts nothing.
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests"))

from base import clean_environ  # noqa: E402
from fakes import FakeVendor  # noqa: E402

ANSWER = "Hello there, how can I help you today?"


def timed(cmd, env, cwd):
    """(seconds to the first byte on stdout, seconds to the exit)."""
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(1)
    first = time.monotonic() - started
    proc.stdout.read()
    error = proc.stderr.read()
    proc.wait()
    if proc.returncode:
        raise RuntimeError(f"{cmd[0]} exit {proc.returncode}: {error[-300:]!r}")
    return first, time.monotonic() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm", default=shutil.which("llm"), help="the llm executable")
    parser.add_argument("--python", default=sys.executable,
                        help="nagent's interpreter: give one set up like llm's (a venv) for a fair pair, since a"
                             " .pth file in one interpreter's site-packages runs at every start")
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args(argv)
    if not args.llm:
        print("llm not found: pass --llm PATH")
        return []
    fake = FakeVendor().start()
    fake.reply_fn(lambda record: f"<nagent-response>{ANSWER}</nagent-response>"
                  if "nagent" in str(record.get("json")) else ANSWER)
    home = tempfile.mkdtemp(prefix="nagent-bench-llm-")
    env = clean_environ()
    env.update(HOME=home, OPENAI_BASE_URL=fake.url + "/v1", OPENAI_API_KEY="sk-bench-0123456789abcdef",
               LLM_USER_PATH=os.path.join(home, "llm"))
    commands = {"nagent -n -q hello": [args.python, os.path.join(REPO, "bin", "nagent"), "-n", "-q", "hello"],
                "llm -m gpt-4o-mini hello": [args.llm, "-m", "gpt-4o-mini", "hello"]}
    try:
        times = {name: [] for name in commands}
        for cmd in commands.values():
            timed(cmd, env, home)
        for _ in range(args.runs):
            for name, cmd in commands.items():
                times[name].append(timed(cmd, env, home))
    finally:
        fake.stop()
        shutil.rmtree(home, ignore_errors=True)
    rows = []
    for name, pairs in times.items():
        first, end = [p[0] * 1000 for p in pairs], [p[1] * 1000 for p in pairs]
        rows.append({"command": name, "first_ms": statistics.median(first), "exit_ms": statistics.median(end)})
        print(f"{name:28} first byte {statistics.median(first):6.0f} ms (min {min(first):.0f})   "
              f"exit {statistics.median(end):6.0f} ms (min {min(end):.0f})   median of {args.runs}")
    print(f"ratio, first byte: {rows[0]['first_ms'] / rows[1]['first_ms']:.2f}x (target <= 0.75x)")
    return rows


if __name__ == "__main__":
    main()
