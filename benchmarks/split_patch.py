"""Split and patch speed: a generated 100,000-line Python file and a 20 MB text file.

For each file: split it (default target size), edit one segment in the middle, patch it back.
Prints seconds and MB/s per step. Target: each step <= 1 s for the Python file.
Run: python3 benchmarks/split_patch.py [--python-lines N] [--text-mb N]
"""
import argparse
import os
import random
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "bin", "helpers"))

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


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-lines", type=int, default=100_000)
    parser.add_argument("--text-mb", type=int, default=20)
    args = parser.parse_args()
    rng = random.Random(4)
    workdir = tempfile.mkdtemp(prefix="nagent-bench-")
    try:
        split_s, patch_s = measure("python", python_source(args.python_lines, rng), "big.py",
                                   workdir)
        verdict = "met" if max(split_s, patch_s) <= 1.0 else "MISSED"
        print(f"  target <= 1 s per step for the Python file: {verdict}")
        measure("text", text_source(args.text_mb, rng), "big.txt", workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
