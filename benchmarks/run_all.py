"""Run every benchmark of the project and print one summary table (figure, value, target, verdict).

Runs benchmarks/startup.py, turns.py, split_patch.py, split_memory.py, parser.py, long_run.py,
sandbox.py, first_answer.py, parallel_agents.py, context.py, edit_route.py, batch.py, snapshots.py,
interactive.py, mcp_calls.py and warm_children.py through their main() (a missing or failing one is
reported and skipped), then
its own measurement: `nagent --status` on a 50 MB conversation (generated with
nagent_conversation.encode_record into a temp HOME; median of 5 runs). split_corpus.py (every
splittable file of the stdlib, site-packages and /usr/include: minutes) runs only when asked:
`--corpus`, or `--only split_corpus`; with --quick it splits only the files over 64 KiB and
measures no peak memory (about 30 s). Each benchmark's own output is
printed first, the table last as Markdown, under a line naming the machine it ran on. Prints
figures; asserts nothing.

Run: python3 benchmarks/run_all.py [--quick] [--corpus] [--only NAME ...]
--quick uses smaller inputs and fewer runs (a smoke run; its figures are not the README's).
"""
import argparse
import contextlib
import importlib.util
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "bin", "helpers"))

from base import clean_environ  # noqa: E402

STARTUP_TARGET = 2.5        # no-model command ≤ 2.5× python3 -c pass (ratio of minimums)
TURN_TARGET_MS = 30.0
WARM_TARGET_MS = 300        # a sub-agent or nested edit session: parent's request → child's first
PER_TURN_TARGET_MS, GAP_TARGET_MS = 8.0, 10.0       # issue 25: (T20 − T1)/19; later gaps
FIRST_STEP_TARGET_MS, ANSWER_EXIT_TARGET_MS = 40.0, 50.0
PREFIX_TARGET = 0.95
STATUS_TARGET_MS = 150.0
SPLIT_TARGET_S, PATCH_TARGET_S = 0.5, 1.0  # the 100,000-line Python file
PARALLEL_TARGET = 1.5       # four delegated tasks within 1.5× the wall time of one
BATCH_TARGET = 0.35         # nagent-batch: 4 workers within 0.35× the serial wall time
STATUS_MB = 50
FIRST_REQUEST_TARGET_MS = 20.0  # nagent's own time before its first request
EDIT_TOKENS_2000, EDIT_TOKENS_229K = 300, 400   # a one-line fix with <nagent-replace>
EDIT_OWN_S = 1.0                # one <nagent-file-edit>: nagent's time beyond the nested calls


class Table:
    def __init__(self):
        self.rows = []

    def add(self, figure, value, target="", ok=None):
        verdict = "" if ok is None else ("pass" if ok else "FAIL")
        self.rows.append((figure, value, target, verdict))

    def markdown(self):
        lines = ["| figure | value | target | result |", "|---|---|---|---|"]
        lines += [f"| {figure} | {value} | {target} | {verdict} |"
                  for figure, value, target, verdict in self.rows]
        return "\n".join(lines)


def machine():
    cpu = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            names = [line.split(":", 1)[1].strip() for line in handle if line.startswith("model name")]
        cpu = names[0] if names else cpu
    except OSError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return (f"{platform.system()} {platform.release()}, {cpu}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, load {load:.1f} at start")


def load_module(name):
    path = os.path.join(BENCH, f"{name}.py")
    if not os.path.exists(path):
        return None
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def call_main(module, argv):
    """(return value, captured stdout) of module.main, whether it takes argv or reads sys.argv."""
    saved = sys.argv
    sys.argv = [module.__file__, *argv]
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            try:
                value = module.main(argv)
            except TypeError as error:
                if "positional argument" not in str(error):
                    raise
                value = module.main()
    finally:
        sys.argv = saved
    return value, buffer.getvalue()


# -- per-benchmark summaries -----------------------------------------------------------------

def summarize_startup(rows, _text, table):
    baseline = next(row for row in rows if row["command"] == "python3 -c pass")
    table.add("`python3 -c pass`", f"{baseline['min_ms']:.0f} ms (min)", "baseline")
    for row in rows[1:]:
        if "--file" in row["command"]:   # the one command that calls a model
            table.add(f"`{row['command']}` (model call, fake)", f"{row['median_ms']:.0f} ms")
            continue
        table.add(f"start-up `{row['command']}`", f"{row['ratio']:.2f}× ({row['min_ms']:.0f} ms min)",
                  f"≤ {STARTUP_TARGET:g}×", row["ratio"] <= STARTUP_TARGET)


def summarize_turns(rows, _text, table):
    for row in rows:
        table.add(f"per-turn overhead ({row['provider']}, {row['turns']} turns)",
                  f"{row['turn_median_ms']:.1f} ms median, {row['turn_max_ms']:.0f} ms max",
                  f"≤ {TURN_TARGET_MS:g} ms", row["turn_median_ms"] <= TURN_TARGET_MS)
        name = row["provider"]
        table.add(f"per-turn overhead, (T20 − T1)/19 ({name}; CPU in brackets)",
                  f"{row['per_turn_ms']:.1f} ms ({row['cpu_per_turn_ms']:.1f} ms CPU)",
                  f"≤ {PER_TURN_TARGET_MS:g} ms", row["per_turn_ms"] <= PER_TURN_TARGET_MS)
        table.add(f"first shell step of a run, between requests ({name}, fake's clock)",
                  f"{row['first_step_ms']:.1f} ms", f"≤ {FIRST_STEP_TARGET_MS:g} ms",
                  row["first_step_ms"] <= FIRST_STEP_TARGET_MS)
        table.add(f"request gap of a {row['turns']}-step session, median of later steps ({name})",
                  f"{row['later_gap_ms']:.1f} ms", f"≤ {GAP_TARGET_MS:g} ms",
                  row["later_gap_ms"] <= GAP_TARGET_MS)
        worst = max(row["answer_exit_ms"], row["one_answer_exit_ms"])
        table.add(f"the final answer on stdout to the process's exit ({name}; 20 turns / 1)",
                  f"{row['answer_exit_ms']:.1f} / {row['one_answer_exit_ms']:.1f} ms",
                  f"≤ {ANSWER_EXIT_TARGET_MS:g} ms", worst <= ANSWER_EXIT_TARGET_MS)
        table.add(f"request prefix stability ({row['provider']})",
                  f"{row['prefix_min']:.1%} min, {row['prefix_mean']:.1%} mean",
                  f"≥ {PREFIX_TARGET:.0%}", row["prefix_min"] >= PREFIX_TARGET)


def summarize_split_patch(_value, text, table):
    label = None
    for line in text.splitlines():
        head = re.match(r"(\w+): ([\d,]+) bytes, ([\d,]+) lines", line)
        if head:
            label = (head.group(1), head.group(2), head.group(3))
            continue
        step = re.match(r"\s+(split|patch)\s+([\d.]+) s\s+([\d.]+) MB/s", line)
        process = re.match(r"\s+split process\s+([\d.]+) s\s+(median of \d+) .*(cpu [\d.]+ s)",
                           line)
        if step and label:
            seconds = float(step.group(2))
            target = (SPLIT_TARGET_S if step.group(1) == "split" else PATCH_TARGET_S) \
                if label[0] == "python" else None
            table.add(f"{step.group(1)} {label[0]} file ({label[2]} lines, {label[1]} bytes)",
                      f"{seconds:.3f} s ({step.group(3)} MB/s)",
                      f"≤ {target:g} s" if target else "", seconds <= target if target else None)
        elif process and label:
            seconds = float(process.group(1))
            table.add(f"split {label[0]} file, `nagent-file-split` process ({label[2]} lines)",
                      f"{seconds:.3f} s ({process.group(2)}; {process.group(3)})",
                      f"≤ {SPLIT_TARGET_S:g} s",
                      seconds <= SPLIT_TARGET_S)


def summarize_parser(_value, text, table):
    fuzz = re.search(r"fuzz: (\d+) cases .* = ([\d,]+) cases/s", text)
    if fuzz:
        table.add(f"parser: fuzz replies ({fuzz.group(1)} cases)", f"{fuzz.group(2)} cases/s")
    sizes = {}
    for match in re.finditer(r"^\s*([\d.]+) MB (.+?)\s+([\d.]+) ms\s+([\d.]+) MB/s", text, re.M):
        # Shapes are made "about" 1 MB or 10 MB: group them by the nominal size.
        nominal = "1" if float(match.group(1)) < 5 else "10"
        sizes.setdefault(nominal, []).append((float(match.group(4)), match.group(2).strip()))
    for size, shapes in sizes.items():
        fastest, slowest = max(shapes), min(shapes)
        table.add(f"parser: ~{size} MB replies ({len(shapes)} shapes)",
                  f"{slowest[0]:.0f}–{fastest[0]:.0f} MB/s (slowest: {slowest[1]})")


def summarize_long_run(rows, _text, table):
    rows = rows or []
    for row in rows:
        share = row.get("cache_share")
        table.add(f"long run: {row.get('label', '?')}",
                  f"{row.get('calls')} calls, {row.get('uncached_tokens')} uncached input tokens, "
                  f"cache read {share:.0%}, {row.get('rebuilds')} rebuilds, ${row.get('cost_usd')}"
                  if isinstance(share, float) else json.dumps(row)[:160])
    if len(rows) >= 2:   # long_run.py's own targets, on its last (default windows) row
        naive, windowed = rows[0], rows[-1]
        saving = 1 - windowed["uncached_tokens"] / naive["uncached_tokens"]
        table.add("long run: uncached input below the naive loop", f"{saving:.0%}", "≥ 50%",
                  saving >= 0.5)
        table.add("long run: cache reads between rebuilds", f"{windowed['steady_cache_share']:.0%}",
                  "≥ 80%", windowed["steady_cache_share"] >= 0.8)


def summarize_parallel(rows, _text, table):
    for row in rows:
        table.add(f"sub-agents: {row['label']} ({row['delay_s']:g} s per call)",
                  f"{row['wall_s']:.1f} s wall ({row['ratio_to_one']:.2f}× one task), "
                  f"delegation {row['delegation_s']:.1f} s ({row['delegation_ratio']:.2f}×)",
                  f"≤ {PARALLEL_TARGET:g}× one task" if row["tasks"] > 1 and row["max_parallel_agents"] > 1
                  else "", row["ratio_to_one"] <= PARALLEL_TARGET
                  if row["tasks"] > 1 and row["max_parallel_agents"] > 1 else None)


def summarize_sandbox(rows, _text, table):
    for row in rows or []:
        table.add(row["label"], f"{row['median_ms']:.1f} ms")


def summarize_first_answer(rows, _text, table):
    for row in rows:
        name = row["provider"]
        table.add(f"own CPU before the first request ({name}; new / continued conversation)",
                  f"{row['cpu_new_ms']:.1f} / {row['cpu_continued_ms']:.1f} ms "
                  f"(wall to the hand-off, SDK's stdlib imports included: "
                  f"{row['mark_new_ms']:.0f} / {row['mark_continued_ms']:.0f} ms)",
                  f"≤ {FIRST_REQUEST_TARGET_MS:g} ms",
                  max(row["cpu_new_ms"], row["cpu_continued_ms"]) <= FIRST_REQUEST_TARGET_MS)
        table.add(f"first byte of the answer ({name}; fake: a delta every 50 ms), streamed / whole",
                  f"{row['stream_first_ms']:.0f} / {row['whole_first_ms']:.0f} ms from start; "
                  f"{row['stream_after_request_ms']:.0f} / {row['whole_after_request_ms']:.0f} ms "
                  "after the request")


def summarize_split_memory(_value, text, table):
    rows = re.findall(r"^\| ([^|]+?) \| ([\d.]+) MB \| [^|]+ \| [^|]+ \| ([\d.]+)x \| "
                      r"([\d.]+) s \|.*\| (pass|FAIL) \|$", text, re.M)
    errors = re.findall(r"^\| ([^|]+?) \| [\d,]+ \| error: ", text, re.M)
    if not rows and not errors:
        raise ValueError("no rows")
    worst = max(rows, key=lambda row: float(row[2]), default=None)
    slowest = max(rows, key=lambda row: float(row[3]), default=None)
    value = (f"at most {worst[2]}× the input ({worst[0]}); slowest {slowest[3]} s ({slowest[0]})"
             if worst else "no input split")
    if errors:
        value += f"; {len(errors)} failed ({errors[0]})"
    sizes = sorted({float(row[1]) for row in rows})
    table.add(f"split peak memory - baseline, {len(rows) + len(errors)} generated worst cases "
              f"({sizes[0]:g}–{sizes[-1]:g} MB)" if sizes else "split peak memory", value,
              "≤ 10×", not errors and all(row[4] == "pass" for row in rows))


def summarize_split_corpus(_value, text, table):
    total = re.search(r"^\| all \| all \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| (\d+) \| [\d,]+ \| "
                      r"[\d,]+ \| [\d,]+ \| (\d+) \| (\d+) \| (\d+) \|", text, re.M)
    wall = re.search(r"^wall time (\d+) s", text, re.M)
    files, big, segments, over, byte_errors, refused, crashes = total.groups()
    table.add(f"split corpus: stdlib, site-packages, /usr/include ({files} files, {big} over "
              "64 KiB)",
              f"{segments} segments, {over} over 64 KiB, {byte_errors} byte errors, {refused} "
              f"non-UTF-8 refused, {crashes} crashes; {wall.group(1) if wall else '?'} s",
              "0 over 64 KiB", over == byte_errors == crashes == "0")
    done = re.search(r"^done-check \(([^)]*)\): (\d+) files, ([\d,]+) segments, (\d+) over 64 KiB, "
                     r"(\d+) failed, .*: (pass|FAIL)$", text, re.M)
    if done:
        table.add(f"split done-check: {done.group(1)} ({done.group(2)} files)",
                  f"{done.group(3)} segments, {done.group(4)} over 64 KiB, {done.group(5)} failed",
                  "0 over 64 KiB", done.group(6) == "pass")


def summarize_edit_route(rows, _text, table):
    by_label = {row["label"]: row for row in rows}
    for label, limit in (("replace, 2,000-line file", EDIT_TOKENS_2000),
                         ("replace, 229 kB file", EDIT_TOKENS_229K)):
        row = by_label[label]
        table.add(f"edit: one-line fix in a {label[len('replace, '):]} with <nagent-replace>",
                  f"{row['output_tokens']} output tokens over {row['calls']} calls, "
                  f"{row['nested_calls']} nested model calls, {row['rewritten']} segments rewritten",
                  f"≤ {limit} output tokens, 0 nested calls, none rewritten",
                  row["output_tokens"] <= limit and row["nested_calls"] == 0 and not row["rewritten"])
    edit, direct = by_label["file-edit, 2,000-line file"], by_label[
        "nagent-file-edit as a new process (comparison)"]
    table.add("edit: one <nagent-file-edit>, nagent's own time beyond the nested model calls",
              f"{edit['own_s']:.2f} s ({edit['nested_calls']} nested calls, {edit['output_tokens']} "
              f"output tokens; the same session as a new process: {direct['own_s']:.2f} s)",
              f"≤ {EDIT_OWN_S:g} s", edit["own_s"] <= EDIT_OWN_S)


def summarize_batch(rows, _text, table):
    for row in rows:
        table.add(f"nagent-batch: {row['tasks']} tasks × 2 calls ({row['delay_s']:g} s each), "
                  f"-j {row['jobs']} / serial",
                  f"{row['pool_s']:.1f} / {row['serial_s']:.1f} s = {row['ratio']:.2f}×",
                  f"≤ {BATCH_TARGET:g}×", row["ratio"] <= BATCH_TARGET)
        table.add("nagent-batch: coordinator overhead per task (serial wall − nagent's own time; "
                  "nagent-batch's own CPU)",
                  f"{row['overhead_ms']:.0f} ms; {row['coordinator_cpu_ms']:.0f} ms CPU")


def summarize_context(rows, _text, table):
    for row in rows:
        table.add(f"context: {row['figure']}", f"{row['median_ms']:.1f} ms")


def summarize_snapshots(rows, _text, table):
    for row in rows:
        target = row.get("target_ms")
        value = row.get("text") or f"{row['ms']:.1f} ms"
        table.add(row["figure"], value, f"≤ {'+' if 'on − off' in row['figure'] else ''}"
                  f"{target:g} ms" if target else "", row["ms"] <= target if target else None)


def summarize_interactive(rows, _text, table):
    for row in rows:
        value = (f"{row['ratio']:.2f}× ({row['ms']:.0f} ms)" if "ratio" in row
                 else f"{row['ms']:.0f} ms" + (f" (median {row['median']} ms)"
                                               if "median" in row else ""))
        table.add(row["figure"], value, row.get("target", "").replace("<=", "≤"), row.get("ok"))


def summarize_mcp_calls(rows, _text, table):
    for row in rows:
        table.add(f"nagent-mcp call ({row['server']}) in a run: later calls over the server's own time "
                  f"(first {row['first_ms']} ms, cold outside a run {row['cold_ms']} ms, "
                  f"channel {row['wire_ms']} ms, python3 floor {row['floor_ms']} ms)",
                  f"{row['over_own_ms']:.0f} ms", f"≤ {row['target_ms']:g} ms",
                  row["over_own_ms"] <= row["target_ms"])


def summarize_warm_children(rows, _text, table):
    for row in rows:
        table.add(f"{row['label']}: parent's request to the child's first request",
                  f"{row['median_ms']} ms (min {row['min_ms']}, max {row['max_ms']})",
                  f"≤ {WARM_TARGET_MS} ms", row["median_ms"] <= WARM_TARGET_MS)


BENCHMARKS = (  # name, full argv, --quick argv, summary
    ("startup", [], ["--runs", "3"], summarize_startup),
    ("turns", [], ["openai"], summarize_turns),
    ("split_patch", [], ["--python-lines", "20000", "--text-mb", "2", "--runs", "2"],
     summarize_split_patch),
    ("split_memory", [], ["--mb", "1"], summarize_split_memory),
    ("split_corpus", [], ["--big-only", "--largest", "0"], summarize_split_corpus),
    ("parser", [], ["--cases", "5000"], summarize_parser),
    ("long_run", [], ["--turns", "12", "--runs", "2"], summarize_long_run),
    ("sandbox", [], ["--runs", "5"], summarize_sandbox),
    ("first_answer", [], ["--runs", "2", "openai"], summarize_first_answer),
    ("parallel_agents", [], ["--delay", "0.5"], summarize_parallel),
    ("context", [], ["--runs", "3"], summarize_context),
    ("edit_route", [], ["--runs", "1"], summarize_edit_route),
    ("batch", [], ["--tasks", "8", "--delay", "1"], summarize_batch),
    ("snapshots", [], ["--runs", "3", "--files", "2000", "--turns", "20", "--turn-runs", "1"],
     summarize_snapshots),
    ("interactive", [], ["--runs", "3"], summarize_interactive),
    ("mcp_calls", [], ["--calls", "4", "--runs", "1", "--cold", "1"], summarize_mcp_calls),
    ("warm_children", [], ["--runs", "2"], summarize_warm_children),
)
OPT_IN = ("split_corpus",)  # minutes long: run only when asked (--corpus or --only)


# -- --status on a big conversation ----------------------------------------------------------

def make_conversation(path, megabytes):
    """A realistic-looking conversation of about `megabytes` MB: turns of reply, shell result,
    file read result and stats, written with the real record encoder."""
    from nagent_conversation import encode_record
    from nagent_stats_format import encode_stats
    stamp = "2026-11-22T00:00:00Z"
    seq, size, turn = 0, 0, 0
    listing = "".join(f"-rw-r--r-- 1 user user {n * 37:6d} Nov 22 00:00 file_{n:04d}.py\n" for n in range(60))
    source = "".join(f"def handler_{n}(request):\n    return respond(request, code={n})\n\n" for n in range(120))
    with open(path, "wb") as handle:
        def put(kind, body, attrs=None):
            nonlocal seq, size
            seq += 1
            data = encode_record(seq, kind, body, attrs, time=stamp)
            handle.write(data)
            size += len(data)
        put("context", "<initial_context>\n" + "static facts\n" * 200, {"part": "static"})
        put("context", "session facts\n</initial_context>", {"part": "session"})
        put("prompt", "audit the handlers", {"source": "argv"})
        while size < megabytes * 1_000_000:
            turn += 1
            put("reply", f"<nagent-shell>ls -l src/part{turn}</nagent-shell>\n"
                         f'<nagent-read path="src/part{turn}/handlers.py"/>',
                {"provider": "openai", "model": "gpt-5.5", "valid": "true", "finish": "stop"})
            put("result", f"<nagent-shell-result>\nexit_code: 0\nstdout:\n{listing}stderr:\n"
                          "</nagent-shell-result>", {"action": "shell"})
            put("result", f'<nagent-read-result path="src/part{turn}/handlers.py">\n{source}'
                          "</nagent-read-result>", {"action": "read"})
            totals = {"turns": turn, "input_tokens": turn * 9000, "output_tokens": turn * 300,
                      "cache_read_tokens": turn * 8000, "cache_write_tokens": 1000,
                      "cost_usd": turn * 0.012}
            put("stats", encode_stats(totals, totals, prompts=1))
    return size, seq


def measure_status(table, runs=5, megabytes=STATUS_MB):
    root = tempfile.mkdtemp(prefix="nagent-bench-status-")
    try:
        home = os.path.join(root, "home")
        conversations = os.path.join(home, ".nagent", "conversations")
        os.makedirs(conversations)
        started = time.perf_counter()
        size, records = make_conversation(os.path.join(conversations, "big"), megabytes)
        made = time.perf_counter() - started
        env = clean_environ()
        config = os.path.join(root, "config.json")   # NAGENT_CONFIG naming a missing file is an error
        with open(config, "w", encoding="utf-8") as handle:
            handle.write("{}\n")
        env.update(HOME=home, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1", TMPDIR=root)
        argv = [sys.executable, os.path.join(REPO, "bin", "nagent"), "--status", "--conversation", "big"]
        times = []
        for _ in range(runs + 1):   # the first run warms the page cache and is not counted
            begin = time.perf_counter()
            proc = subprocess.run(argv, env=env, cwd=root, capture_output=True, text=True, timeout=120)
            times.append((time.perf_counter() - begin) * 1000)
            if proc.returncode != 0:
                raise RuntimeError(f"--status failed: {proc.stderr.strip()[-300:]}")
        median = statistics.median(times[1:])
        print(f"status: {size / 1e6:.1f} MB, {records} records (generated in {made:.1f} s); "
              f"--status median of {runs}: {median:.0f} ms; last output:\n{proc.stdout}")
        table.add(f"`nagent --status` on a {size / 1e6:.0f} MB conversation", f"{median:.0f} ms",
                  f"≤ {STATUS_TARGET_MS:g} ms", median <= STATUS_TARGET_MS)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller inputs, fewer runs")
    parser.add_argument("--corpus", action="store_true",
                        help="also run split_corpus (minutes; with --quick about 30 s)")
    parser.add_argument("--only", nargs="+", metavar="NAME",
                        help="run only these (" + " ".join(name for name, *_ in BENCHMARKS)
                             + " status)")
    args = parser.parse_args(argv)
    wanted = set(args.only or [name for name, *_ in BENCHMARKS if name not in OPT_IN]
                 + ["status"] + (list(OPT_IN) if args.corpus else []))
    header = machine()
    print(f"machine: {header}\n")
    table = Table()
    for name, full, quick, summarize in BENCHMARKS:
        if name not in wanted:
            continue
        module = load_module(name)
        if module is None:
            print(f"== {name}: benchmarks/{name}.py not found, skipped\n")
            table.add(f"{name}", "not run (benchmark missing)")
            continue
        print(f"== {name}")
        started = time.perf_counter()
        try:
            value, text = call_main(module, quick if args.quick else full)
        except Exception as error:  # noqa: BLE001 - one broken benchmark must not hide the others
            print(f"{name} failed: {type(error).__name__}: {error}\n")
            table.add(f"{name}", f"failed: {type(error).__name__}: {str(error)[:80]}", "", False)
            continue
        print(text.rstrip() + f"\n({time.perf_counter() - started:.1f} s)\n")
        try:
            summarize(value, text, table)
        except (KeyError, TypeError, ValueError, StopIteration) as error:
            table.add(f"{name}", f"output not understood ({type(error).__name__}); see above")
    if "status" in wanted:
        print("== status")
        try:
            measure_status(table, runs=3 if args.quick else 5, megabytes=5 if args.quick else STATUS_MB)
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:
            table.add("`nagent --status` on a 50 MB conversation", f"failed: {error}", "", False)
    print(f"\nSummary ({'quick run' if args.quick else 'full run'}) — {header}\n")
    print(table.markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
