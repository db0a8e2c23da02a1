"""Boundary identity of nagent-file-split across a change: record a digest of every file's split
with one version of the code, then check another version against the record.

Inputs: the corpus of split_corpus.py (every splittable file of the standard library,
site-packages and /usr/include) plus generated Python inputs (tests/split_python_inputs.py:
edge cases, fragment soups, random modules, mutants of real and random modules), optionally
--extra DIR.
Per input it records the segment count and a digest of the index the split lib builds at the
default target (every segment's byte range, lines, sha256 and notes; the time stamp and path
left out); for Python also a digest of the boundary scan itself (every candidate, level, pull,
attach line and mask: the structure all targets cut at), and for generated inputs the
indexes at two small targets too. Non-UTF-8 corpus files are recorded as refused.
Run: python3 benchmarks/split_identity.py --record FILE   (with the old code)
     python3 benchmarks/split_identity.py --check FILE    (with the new code)
     [--generated-only] [--extra DIR]
Prints counts and every difference; exit status 1 when --check finds one.
"""
import argparse
import hashlib
import json
import os
import sys
import time
from array import array

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "bin", "helpers"))

import nagent_file_split_lib as lib  # noqa: E402
import split_python_inputs as gen  # noqa: E402
from nagent_errors import InputError  # noqa: E402
from nagent_split_scan import scan  # noqa: E402
from nagent_splitters import BOM, LANGUAGES  # noqa: E402
from split_corpus import corpora, corpus_files  # noqa: E402

SMALL_TARGETS = (2048, 256)
SCAN_ARRAYS = ("pos", "level", "pull", "attach_pos", "attach_level", "mask_start", "mask_end",
               "mask_kind")


def index_digest(path, data, split_type, target):
    segments = lib.plan_segments(data, split_type, target)
    records = lib.segment_records(data, segments,
                                  lib.segment_names(path, len(segments)))
    index = {"split_type": split_type, "target_bytes": target, "source_size": len(data),
             "source_sha256": lib.sha256_hex(data), "segments": records}
    text = json.dumps(index, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return records, hashlib.sha256(text).hexdigest()


def scan_digest(data):
    found = scan(data, len(BOM) if data.startswith(BOM) else 0, LANGUAGES["python"])
    digest = hashlib.sha256()
    for name in SCAN_ARRAYS:
        digest.update(array("q", getattr(found, name)).tobytes() + b"|")
    return digest.hexdigest()


def describe(path, data, split_type, generated):
    if not generated:
        try:
            lib.check_utf8(data, path)
        except InputError:
            return {"refused": "not UTF-8"}
    records, digest = index_digest(path, data, split_type, lib.DEFAULT_TARGET_BYTES)
    record = {"segments": len(records), "index": digest,
              "over": sum(r["bytes"] > lib.READ_SPLIT_THRESHOLD_BYTES for r in records)}
    if split_type == "python" and data:
        record["scan"] = scan_digest(data)
    if generated:
        record["small"] = [index_digest(path, data, split_type, target)[1]
                           for target in SMALL_TARGETS]
    return record


def generated_inputs():
    bases = []
    for name, path in [("golden.py", os.path.join(REPO, "tests", "golden", "split", "python",
                                                  "input.py"))] + [
            (module + ".py", os.path.join(os.path.dirname(os.__file__), module + ".py"))
            for module in ("textwrap", "tokenize", "dataclasses", "argparse")]:
        with open(path, "rb") as handle:
            bases.append((name, handle.read()))
    modules = gen.modules(13, 3000)
    return (gen.edge_cases() + gen.soups(11, 3000) + gen.mutants(bases, 12, 1500) + bases
            + modules + gen.mutants(modules[:300], 14, 3000))


def inputs(extra, generated_only):
    for name, data in generated_inputs():
        yield "generated/" + name, data, "python", True
    if generated_only:
        return
    sources = corpora()
    sources.update((folder, (folder, None)) for folder in extra)
    for corpus, (root, exclude) in sources.items():
        for path, _size in corpus_files(root, exclude):
            with open(path, "rb") as handle:
                data = handle.read()
            yield path, data, lib.detect_split_type(path, None, data), False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--record", metavar="FILE")
    mode.add_argument("--check", metavar="FILE", action="append",
                      help="a record to check against (several: their union)")
    parser.add_argument("--extra", metavar="DIR", action="append", default=[])
    parser.add_argument("--generated-only", action="store_true",
                        help="only the generated inputs (seconds, not minutes)")
    args = parser.parse_args(argv)
    expected = {}
    for record in args.check or ():
        with open(record, encoding="utf-8") as handle:
            expected.update(json.load(handle))
    found, differences, unrecorded = {}, [], []
    started = time.perf_counter()
    counts = {"files": 0, "generated": 0, "segments": 0, "over": 0, "refused": 0}
    for path, data, split_type, generated in inputs(args.extra, args.generated_only):
        record = describe(path, data, split_type, generated)
        found[path] = record
        counts["generated" if generated else "files"] += 1
        counts["segments"] += record.get("segments", 0)
        counts["over"] += record.get("over", 0)
        counts["refused"] += "refused" in record
        if args.check and path not in expected:
            unrecorded.append(path)
        elif args.check and expected[path] != record:
            differences.append(path)
    elapsed = time.perf_counter() - started
    print(f"{counts['files']:,} corpus files, {counts['generated']:,} generated inputs, "
          f"{counts['segments']:,} segments at the default target ({counts['over']} over "
          f"64 KiB), {counts['refused']} non-UTF-8 refused; {elapsed:.0f} s")
    if args.record:
        with open(args.record, "w", encoding="utf-8") as handle:
            json.dump(found, handle, indent=0, sort_keys=True)
        print(f"recorded {len(found):,} inputs in {args.record}")
        return 0
    missing = sorted(set(expected) - set(found)) if not args.generated_only else []
    print(f"checked against {', '.join(args.check)}: {len(found) - len(unrecorded):,} inputs "
          f"compared, {len(differences)} differences, {len(unrecorded)} inputs not recorded, "
          f"{len(missing)} recorded inputs not found now")
    for label, paths in (("differs:", differences), ("not recorded:", unrecorded),
                         ("missing:", missing)):
        for path in paths[:20]:
            print(label, path)
    return 1 if differences or unrecorded or missing else 0


if __name__ == "__main__":
    sys.exit(main())
