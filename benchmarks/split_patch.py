"""Split and patch speed: a generated 100,000-line Python file and a 20 MB text file.

For each file: split it (default target size), edit one segment in the middle, patch it back,
in this process; for the Python file also the split as a user meets it, from outside: the
`nagent-file-split --file big.py --output DIR` process, start-up included (median of --runs).
Prints seconds and MB/s per step. Targets for the Python file: the split <= 0.5 s (in process
and from outside), the patch <= 1 s.
Run: python3 benchmarks/split_patch.py [--python-lines N] [--text-mb N] [--runs N]
"""
import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bin", "helpers"))
SPLIT_TARGET_S, PATCH_TARGET_S = 0.5, 1.0

import nagent_file_patch_lib  # noqa: E402
import nagent_file_split_lib  # noqa: E402

WORDS = ("alpha beta gamma delta segment index patch split source target value result "
         "line file model token river mountain cloud signal buffer window vector").split()


def _method(number, method, rng):
    head = ["    @property"] if method == 0 else [f"    # helper {method} of widget {number}"]
    body = [f"        total += len('{rng.choice(WORDS)}') + {k}" for k in range(4)]
    return head + [f"    def helper_{method}(self, value={method}):",
                   f"        total = value * {number}", *body, "        return total", ""]


def _function(number, rng):
    head = ["@functools.lru_cache" if number % 7 == 0 else f"# function {number}"]
    body = [f"    argument = argument + {k}  # {rng.choice(WORDS)}" for k in range(8)]
    return head + [f"def function_{number}(argument, *, flag=False):",
                   f'    """Return a value derived from {rng.choice(WORDS)}."""',
                   "    items = [", *(f"        '{rng.choice(WORDS)}'," for _ in range(3)),
                   "    ]", *body, "    return argument if flag else items", "", ""]


def python_source(lines, rng):
    out = ['"""Generated module for the split/patch benchmark."""', "import functools", "", ""]
    number = 0
    while len(out) < lines:
        number += 1
        if number % 5 == 0:
            out += [f"class Widget{number}:", f'    """Widget number {number}."""', ""]
            for method in range(6):
                out += _method(number, method, rng)
            out += [""]
        else:
            out += _function(number, rng)
    return ("\n".join(out[:lines]) + "\n").encode("utf-8")


def text_source(megabytes, rng):
    chunks, size, limit = [], 0, megabytes * 1024 * 1024
    while size < limit:
        paragraph = "\n".join(" ".join(rng.choice(WORDS) for _ in range(12))
                              for _ in range(rng.randint(2, 8))) + "\n\n"
        chunks.append(paragraph)
        size += len(paragraph)
    return "".join(chunks).encode("utf-8")


def measure(label, data, name, workdir):
    source = os.path.join(workdir, name)
    with open(source, "wb") as handle:
        handle.write(data)
    out = os.path.join(workdir, name + ".split")
    megabytes = len(data) / 1e6
    started, cpu = time.perf_counter(), time.process_time()
    index = nagent_file_split_lib.split_file(source, out)
    split_seconds, split_cpu = time.perf_counter() - started, time.process_time() - cpu
    middle = index["segments"][len(index["segments"]) // 2]
    path = os.path.join(out, middle["file"])
    with open(path, "rb") as handle:
        segment = handle.read()
    with open(path, "wb") as handle:
        handle.write(b"# edited by the benchmark\n" + segment)
    started, cpu = time.perf_counter(), time.process_time()
    result = nagent_file_patch_lib.patch_from_index(os.path.join(out, "index.json"))
    patch_seconds, patch_cpu = time.perf_counter() - started, time.process_time() - cpu
    assert result["status"] == "applied" and result["changed_lines"] == 1, result
    lines = data.count(b"\n")
    print(f"{label}: {len(data):,} bytes, {lines:,} lines, "
          f"{len(index['segments'])} segments")
    # CPU seconds next to wall seconds: on a busy machine the wall figure includes waiting.
    print(f"  split  {split_seconds:6.3f} s  {megabytes / split_seconds:8.1f} MB/s"
          f"  (cpu {split_cpu:.3f} s)")
    print(f"  patch  {patch_seconds:6.3f} s  {megabytes / patch_seconds:8.1f} MB/s"
          f"  (cpu {patch_cpu:.3f} s)")
    return split_seconds, patch_seconds


def measure_process(source, workdir, runs):
    """Wall seconds of the nagent-file-split process on `source`, one fresh output per run."""
    tool = os.path.join(REPO, "bin", "nagent-file-split")
    times, cpu = [], []
    for number in range(runs + 1):  # the first run warms the page and bytecode caches
        out = os.path.join(workdir, f"process-{number}")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run([sys.executable, tool, "--file", source, "--output", out],
                       check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        shutil.rmtree(out, ignore_errors=True)
    times, cpu = times[1:], cpu[1:]
    median = statistics.median(times)
    print(f"  split process  {median:6.3f} s  median of {runs} "
          f"({min(times):.3f}-{max(times):.3f} s; cpu {statistics.median(cpu):.3f} s): "
          f"nagent-file-split --file {os.path.basename(source)} --output DIR")
    return median


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-lines", type=int, default=100_000)
    parser.add_argument("--text-mb", type=int, default=20)
    parser.add_argument("--runs", type=int, default=5, help="runs of the split process")
    args = parser.parse_args()
    rng = random.Random(4)
    workdir = tempfile.mkdtemp(prefix="nagent-bench-")
    try:
        split_s, patch_s = measure("python", python_source(args.python_lines, rng), "big.py",
                                   workdir)
        process_s = measure_process(os.path.join(workdir, "big.py"), workdir, args.runs)
        met = max(split_s, process_s) <= SPLIT_TARGET_S and patch_s <= PATCH_TARGET_S
        print(f"  targets for the Python file (split <= {SPLIT_TARGET_S} s in process and from "
              f"outside, patch <= {PATCH_TARGET_S} s): {'met' if met else 'MISSED'}")
        measure("text", text_source(args.text_mb, rng), "big.txt", workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
