"""Peak memory of nagent-file-split per input: each split runs in a child process and its peak
RSS is resource.getrusage(RUSAGE_CHILDREN).ru_maxrss, read by a small launcher process that
starts it. (The launcher keeps the figure honest: a child forked straight from this benchmark
would count the pages it inherited from it, the generated inputs included.) The baseline is the
child's own peak (VmHWM) once the interpreter and the modules are loaded.

Inputs: generated worst cases at --mb megabytes (default 5): one string literal (Python
triple-quoted over many lines, Python on one line full of escapes, a C string and a JS string
on one line), minified JavaScript on one line, a Python module and a C file of ordinary code,
a file of nothing but newlines, one tiny C statement or Markdown list item per line (a boundary
on every line), C blocks nested 100,000 deep over lines and JSON nested 100,000 deep on
one line. Each row: input, bytes, baseline RSS (interpreter and
modules loaded), peak RSS, (peak - baseline) / bytes, seconds, segments, largest segment.
The bound: peak - baseline <= 10 x bytes. Prints figures; asserts nothing.
Run: python3 benchmarks/split_memory.py [--mb N]
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

BENCH = os.path.dirname(os.path.abspath(__file__))
HELPERS = os.path.join(os.path.dirname(BENCH), "bin", "helpers")
BOUND = 10

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import nagent_file_split_lib as lib
with open("/proc/self/status") as handle:
    base = next(int(l.split()[1]) for l in handle if l.startswith("VmHWM:")) * 1024
started = time.perf_counter()
index = lib.split_file(sys.argv[2], sys.argv[3], split_type=sys.argv[4] or None)
print(json.dumps({"base": base, "seconds": time.perf_counter() - started,
                  "segments": len(index["segments"]),
                  "largest": max(s["bytes"] for s in index["segments"])}))
"""


LAUNCHER = r"""
import json, resource, subprocess, sys
proc = subprocess.run(sys.argv[1:], capture_output=True, text=True)
if proc.returncode:
    print(json.dumps({"error": proc.stderr.strip().splitlines()[-1:]}))
else:
    report = json.loads(proc.stdout)
    report["peak"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(json.dumps(report))
"""


def peak_rss(path, workdir, split_type=""):
    """Split `path` in a grandchild; returns its report plus "peak" (bytes), or "error"."""
    out = tempfile.mkdtemp(prefix="split-", dir=workdir)
    try:
        proc = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, "-c", CHILD,
                               HELPERS, path, out, split_type],
                              capture_output=True, text=True, check=True)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return json.loads(proc.stdout)


def generated(size):
    """{name: (bytes, split type)} worst cases of about `size` bytes."""
    lines = size // 40
    return {
        "python: one triple-quoted string, many lines": (
            b'DATA = """\n' + b"".join(b"line %07d of one long string literal\n" % n
                                       for n in range(lines)) + b'"""\n', "python"),
        "python: one line, a string of escapes": (b'DATA = "' + b"\\n" * (size // 2) + b'"\n',
                                                  "python"),
        "c: one string literal on one line": (b'const char *s = "' + b"\\\\" * (size // 2)
                                              + b'";\n', "c"),
        "javascript: one string literal on one line": (b'var s = "' + b"ab\\t" * (size // 4)
                                                       + b'";\n', "javascript"),
        "javascript: minified, one line": (b"".join(b'function f%d(a){return a+"%d;"};' % (n, n)
                                                    for n in range(size // 32)) + b"\n",
                                           "javascript"),
        "python: ordinary module": (b"".join(b"def f%d(x):\n    return x + %d  # n\n\n\n" % (n, n)
                                             for n in range(size // 38)), "python"),
        "c: ordinary code": (b"".join(b"int f%d(int x)\n{\n    return x + %d;\n}\n\n" % (n, n)
                                      for n in range(size // 40)), "c"),
        "text: nothing but newlines": (b"\n" * size, "text"),
        "c: one tiny statement per line": (b"x;\n" * (size // 3), "c"),
        "markdown: one tiny list item per line": (b"- a\n" * (size // 4), "markdown"),
        "c: blocks nested over lines, 100,000 deep": (
            b"void f(void)\n{\n" + b"    if (x) {\n" * 100_000 + b"}\n" * 100_001, "c"),
        "rust: one line of repeated keywords": (b"unsafe " * (size // 7) + b"fn f() {}\n", "rust"),
        "java: one line of repeated modifiers": (b"public " * (size // 7) + b"class A {}\n", "java"),
        "json: nested 100,000 deep": (b"[" * 100_000 + b"1" + b"]" * 100_000 + b"\n"
                                      + b"[\n" + b"1,\n" * (size // 3) + b"1]\n", "json"),
    }


def row(label, size, report):
    if "error" in report:
        return f"| {label} | {size:,} | error: {report['error']} |"
    extra = report["peak"] - report["base"]
    verdict = "pass" if extra <= BOUND * size else "FAIL"
    return (f"| {label} | {size / 1e6:.1f} MB | {report['base'] / 2**20:.0f} MiB | "
            f"{report['peak'] / 2**20:.0f} MiB | {extra / size:.1f}x | {report['seconds']:.2f} s | "
            f"{report['segments']} | {report['largest']:,} | {verdict} |")


HEADER = ("| input | size | baseline RSS | peak RSS | (peak-baseline)/size | time | segments | "
          "largest segment | <= 10x |\n|---|---|---|---|---|---|---|---|---|")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5.0, help="size of each generated input")
    parser.add_argument("--only", metavar="WORD", help="run only inputs whose name has WORD")
    args = parser.parse_args(argv)
    size = int(args.mb * 1_000_000)
    workdir = tempfile.mkdtemp(prefix="nagent-bench-memory-")
    try:
        print(HEADER)
        for label, (data, split_type) in generated(size).items():
            if args.only and args.only not in label:
                continue
            path = os.path.join(workdir, "input")
            with open(path, "wb") as handle:
                handle.write(data)
            print(row(label, len(data), peak_rss(path, workdir, split_type)), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
