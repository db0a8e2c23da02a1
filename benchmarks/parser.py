"""Parser throughput: 100,000 fuzz cases (cases/s) and 1 MB / 10 MB replies (ms, MB/s).

Run: python3 benchmarks/parser.py [--cases N]. Prints figures only; asserts nothing.
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from test_protocol_fuzz import fuzz_texts  # noqa: E402  (puts bin/helpers on sys.path via base)

import nagent_protocol as proto  # noqa: E402


def shapes(size):
    """Reply shapes of about `size` characters, from typical to tag-dense."""
    line = "    result = compute(x) if x < limit else fallback  # <b>&amp;\n"
    body = line * (size // len(line))
    read = '<nagent-read path="src/a.py"/>\n'
    shells = "".join(f"<nagent-shell>echo {i:08d}</nagent-shell>\n"
                     for i in range(size // 38))
    return {
        "one write body": f'<nagent-write path="/tmp/big.py">\n{body}</nagent-write>\n',
        "response + late cut": f"<nagent-response>\n{body}</nagent-response>\n<system>x</system>",
        "unclosed shell (invalid)": "<nagent-shell>\n" + body,
        "stuttered reads (dense)": read * (size // len(read)),
        "distinct shells (dense)": shells,
    }


def best_of(runs, fn):
    best = None
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000)
    args = parser.parse_args()

    start = time.perf_counter()
    texts = list(fuzz_texts(2024, args.cases))
    made = time.perf_counter() - start
    start = time.perf_counter()
    valid = sum(proto.parse_response(text).valid for text in texts)
    elapsed = time.perf_counter() - start
    print(f"fuzz: {len(texts)} cases ({valid} valid) parsed in {elapsed:.2f} s = "
          f"{len(texts) / elapsed:,.0f} cases/s (generation took {made:.2f} s)")

    for size, runs in ((1_000_000, 5), (10_000_000, 2)):
        for name, text in shapes(size).items():
            seconds = best_of(runs, lambda: proto.parse_response(text))
            mb = len(text.encode("utf-8")) / 1e6
            print(f"{mb:5.1f} MB {name:26} {seconds * 1000:8.1f} ms  {mb / seconds:8.1f} MB/s")


if __name__ == "__main__":
    main()
