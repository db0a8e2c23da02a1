"""nagent-file-split on a real-file corpus that any machine of this kind can rebuild: the Python
standard library (sysconfig.get_paths()['stdlib'], without site-packages), site-packages
(sysconfig.get_paths()['purelib']) and /usr/include.

Every regular file (no symlinks) whose extension names a split type is split at the default
target. A file over 64 KiB is split for real with nagent-file-split's library into a temporary
directory and its segment files are read back and compared with the source; a smaller file is
planned only (segments tile it byte for byte). Per corpus and language it reports files, files
over 64 KiB, segments, segments over the 64 KiB read limit (the bound; 0 expected), segments cut
inside a construct or inside a line, byte errors (0 expected), non-UTF-8 files refused (exit 6),
crashes, and split time; then the done-check of issue 11 (every stdlib .py and /usr/include .h
over 64 KiB: only readable segments, byte-exact) and peak memory for the largest files (each in
a child, see split_memory.py). Prints figures; asserts nothing.
Run: python3 benchmarks/split_corpus.py [--big-only] [--largest N] [--extra DIR [--only-extra]]
"""
import argparse
import collections
import os
import shutil
import sys
import sysconfig
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(os.path.dirname(BENCH), "bin", "helpers"))

import nagent_file_split_lib as lib  # noqa: E402
from nagent_errors import InputError  # noqa: E402
from split_memory import peak_rss  # noqa: E402

LIMIT = lib.READ_SPLIT_THRESHOLD_BYTES


def corpora():
    paths = sysconfig.get_paths()
    purelib = os.path.realpath(paths["purelib"])
    return {"stdlib": (paths["stdlib"], purelib), "site-packages": (purelib, None),
            "/usr/include": ("/usr/include", None)}


def corpus_files(root, exclude):
    """(path, size) of the regular files under `root` with a known extension."""
    table = lib._extension_table()
    for folder, dirs, names in os.walk(root):
        if exclude:
            dirs[:] = [d for d in dirs if os.path.realpath(os.path.join(folder, d)) != exclude]
        dirs.sort()
        for name in sorted(names):
            if os.path.splitext(name)[1].lower() not in table:
                continue
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            yield path, os.path.getsize(path)


class Tally:
    FIELDS = ("files", "big", "segments", "over", "inside", "mid_line", "byte_errors",
              "not_utf8", "crashes", "seconds")

    def __init__(self):
        self.counts = collections.Counter()
        self.largest = 0

    def add(self, other):
        self.counts.update(other.counts)
        self.largest = max(self.largest, other.largest)


def split_one(path, size, workdir, tally, problems):
    started = time.perf_counter()
    try:
        if size > LIMIT:
            out = tempfile.mkdtemp(prefix="s-", dir=workdir)
            index = lib.split_file(path, out)
            parts = []
            for record in index["segments"]:
                with open(os.path.join(out, record["file"]), "rb") as handle:
                    parts.append(handle.read())
            shutil.rmtree(out, ignore_errors=True)
            with open(path, "rb") as handle:
                data = handle.read()
            records = index["segments"]
            sizes = [len(part) for part in parts]
            exact = b"".join(parts) == data
        else:
            with open(path, "rb") as handle:
                data = handle.read()
            lib.check_utf8(data, path)
            split_type = lib.detect_split_type(path, None, data)
            segments = lib.plan_segments(data, split_type, lib.DEFAULT_TARGET_BYTES)
            records = lib.segment_records(data, segments, [""] * len(segments))
            sizes = [end - start for start, end, *_ in segments]
            exact = b"".join(data[s:e] for s, e, *_ in segments) == data
    except InputError as error:
        if "UTF-8" in error.what:
            tally.counts["not_utf8"] += 1
        else:
            tally.counts["crashes"] += 1
            problems.append(f"{path}: {error.line()}")
        return None
    except Exception as error:  # a crash is a figure here, not the end of the run
        tally.counts["crashes"] += 1
        problems.append(f"{path}: {type(error).__name__}: {error}")
        return None
    finally:
        tally.counts["seconds"] += time.perf_counter() - started
    tally.counts["segments"] += len(sizes)
    tally.counts["over"] += sum(size > LIMIT for size in sizes)
    tally.counts["inside"] += sum("inside" in record for record in records)
    tally.counts["mid_line"] += sum("mid_line" in record for record in records)
    tally.largest = max(tally.largest, max(sizes))
    if not exact:
        tally.counts["byte_errors"] += 1
        problems.append(f"{path}: segments do not concatenate to the source")
    if any(size > LIMIT for size in sizes):
        problems.append(f"{path}: a segment over {LIMIT} bytes ({max(sizes)})")
    return records


def table(rows):
    out = ["| corpus | type | files | > 64 KiB | segments | over 64 KiB | cut inside a construct "
           "| cut inside a line | largest | byte errors | non-UTF-8 refused | crashes | time |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for (corpus, kind), tally in rows:
        c = tally.counts
        out.append(f"| {corpus} | {kind} | {c['files']:,} | {c['big']:,} | {c['segments']:,} | "
                   f"{c['over']} | {c['inside']:,} | {c['mid_line']:,} | {tally.largest:,} | "
                   f"{c['byte_errors']} | {c['not_utf8']} | {c['crashes']} | "
                   f"{c['seconds']:.1f} s |")
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-only", action="store_true",
                        help="split only the files over 64 KiB (count the others)")
    parser.add_argument("--largest", type=int, default=3,
                        help="peak memory of the N largest files of each corpus (0: none)")
    parser.add_argument("--extra", metavar="DIR", action="append", default=[],
                        help="also split the files under DIR (a corpus of its own)")
    parser.add_argument("--only-extra", action="store_true",
                        help="skip the three standard corpora")
    args = parser.parse_args(argv)
    sources = {} if args.only_extra else corpora()
    sources.update((folder, (folder, None)) for folder in args.extra)
    workdir = tempfile.mkdtemp(prefix="nagent-bench-corpus-")
    rows, problems, done = {}, [], Tally()
    largest = collections.defaultdict(list)
    started = time.perf_counter()
    try:
        for corpus, (root, exclude) in sources.items():
            for path, size in corpus_files(root, exclude):
                with open(path, "rb") as handle:
                    head = handle.read()  # for the type: a .h with C++ content is cpp
                kind = lib.detect_split_type(path, None, head)
                del head
                tally = rows.setdefault((corpus, kind), Tally())
                tally.counts["files"] += 1
                tally.counts["big"] += size > LIMIT
                largest[corpus].append((size, path))
                if args.big_only and size <= LIMIT:
                    continue
                records = split_one(path, size, workdir, tally, problems)
                checked = size > LIMIT and (
                    (corpus == "stdlib" and path.endswith(".py"))
                    or (corpus == "/usr/include" and path.endswith(".h")))
                if checked:
                    done.counts["files"] += 1
                    if records is None:
                        done.counts["crashes"] += 1
                    else:
                        done.counts["segments"] += len(records)
                        done.counts["over"] += sum(r["bytes"] > LIMIT for r in records)
        elapsed = time.perf_counter() - started
        totals = Tally()
        for tally in rows.values():
            totals.add(tally)
        print(table(sorted(rows.items()) + [(("all", "all"), totals)]))
        print(f"\nwall time {elapsed:.0f} s; byte check: files over 64 KiB written and read back, "
              "smaller files planned")
        c = done.counts
        print(f"done-check (stdlib .py and /usr/include .h over 64 KiB): {c['files']} files, "
              f"{c['segments']:,} segments, {c['over']} over 64 KiB, {c['crashes']} failed, "
              f"byte errors counted above: "
              f"{'pass' if c['over'] == 0 and c['crashes'] == 0 else 'FAIL'}")
        for line in problems[:20]:
            print("problem:", line)
        if args.largest:
            print("\n| file | size | peak RSS - baseline | per byte | time |\n|---|---|---|---|---|")
            tiny = os.path.join(workdir, "constant.py")
            with open(tiny, "wb") as handle:
                handle.write(b"def f():\n    return 1\n" * 50)
            report = peak_rss(tiny, workdir)
            print(f"| (the constant: a 1 KB file) | 1.1 kB | "
                  f"{(report['peak'] - report['base']) / 2**20:.1f} MiB | | |")
            for corpus, found in largest.items():
                for size, path in sorted(found, reverse=True)[:args.largest]:
                    report = peak_rss(path, workdir)
                    if "error" in report:
                        print(f"| {path} | {size:,} | {report['error']} | | |")
                        continue
                    extra = report["peak"] - report["base"]
                    print(f"| {path} | {size / 1e6:.1f} MB | {extra / 2**20:.1f} MiB | "
                          f"{extra / size:.1f}x | {report['seconds']:.2f} s |")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
