"""Edit route benchmark (issue 20): what a one-line fix costs through the routes the initial
context teaches, against the fake vendor (tests/fakes.py), in a git project outside the temp roots.

Scenarios, each one real `nagent --events` run (bin/nagent, or --nagent PATH) with a scripted
model taking the cheapest taught route:
- replace, 2,000-line file: grep for the function, <nagent-replace> of one line, answer;
- replace, 229 kB file (over the 64 KiB inline limit: its per-file session starts from a split):
  the same three replies;
- file-edit: one <nagent-file-edit> with an instruction; the nested session replaces the line
  and answers (two nested calls).
Figures: output tokens over all calls (the fake counts ceil(bytes / 4) of each reply), nested
model calls, segments rewritten (write and file-patch actions, the main conversation's and the
nested sessions' both), and for file-edit nagent's own time on top of the nested session's model
calls: the action's seconds (its action_end) less the elapsed time of each nested call (the
nested conversation's stats records). For comparison, the same session started as a new
process (`nagent-file-edit` run directly: a new interpreter and SDK import, the cost of the
route issue 20 replaced). Prints a table; asserts nothing.

Run: python3 benchmarks/edit_route.py [--runs 3] [--nagent PATH]
`main(argv) -> rows` returns the table as dicts (run_all.py reads them).
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "bin", "helpers"))

from base import clean_environ  # noqa: E402
from fakes import FakeVendor, ReplySpec  # noqa: E402

import nagent_conversation  # noqa: E402
from nagent_stats_format import decode_stats  # noqa: E402

NESTED = "Write rules (per-file edit session)"
BUGGY, FIXED = "    return start + size - 1", "    return start + size"
GREP = '<nagent-shell>grep -n "def window_end" -A 2 app.py</nagent-shell>'
REPLACE = f'<nagent-replace path="app.py">\n<old>{BUGGY}</old>\n<new>{FIXED}</new>\n</nagent-replace>'
ANSWER = "<nagent-response>\nwindow_end returned one short; fixed.\n</nagent-response>"


def project_source(lines):
    """A Python file of about `lines` lines with one off-by-one in window_end near its end."""
    body, n = [], 0
    while len(body) < lines - 8:
        body += [f"def handler_{n}(request, size={n % 97}):",
                 f'    """Handle request kind {n}."""',
                 f"    return respond(request, code={n}, size=size)", "", ""]
        n += 1
    body += ["def window_end(start, size):", '    """The last index of a window."""', BUGGY, ""]
    return "\n".join(body) + "\n"


def make_project(lines):
    # Outside every temp root, as a user's project is: a replace there goes to its file's session.
    root = os.path.realpath(tempfile.mkdtemp(prefix=".nagent-bench-edit-", dir=ROOT))
    home, work = os.path.join(root, "home"), os.path.join(root, "work")
    os.makedirs(home)
    os.makedirs(work)
    with open(os.path.join(work, "app.py"), "w", encoding="utf-8") as handle:
        handle.write(project_source(lines))
    git = ["git", "-c", "user.email=b@example.com", "-c", "user.name=Bench"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "app"]):
        subprocess.run(git + args, cwd=work, check=True, capture_output=True)
    return root, home, work


def environment(fake, root, home):
    env = clean_environ()
    env.update(fake.env(), HOME=home, NAGENT_NO_SPINNER="1", TMPDIR=root)
    for name in ("ANTHROPIC_API_KEY", "GOOGLE_API_KEY"):
        env.pop(name)
    return env


def nested_call_seconds(home):
    """Model call time of every per-file session in this HOME, from their stats records."""
    total = 0.0
    for path in glob.glob(os.path.join(home, ".nagent", "conversations", "file-app-*")):
        if path.endswith(".d") or not os.path.isfile(path):
            continue
        for record in nagent_conversation.read_records(path):
            if record.kind == "stats":
                total += float((decode_stats(record.body).get("last_call") or {}).get("elapsed") or 0)
    return total


def run_scenario(nagent, lines, main_replies, nested_replies):
    fake = FakeVendor().start()
    root, home, work = make_project(lines)
    main, nested, counts = list(main_replies), list(nested_replies), {"nested": 0}

    def reply(record):
        if NESTED in json.dumps(record.get("json")):
            counts["nested"] += 1
            return ReplySpec(nested.pop(0))
        return ReplySpec(main.pop(0))

    fake.reply_fn(reply)
    try:
        command = [sys.executable, nagent] if nagent.endswith(("bin/nagent", ".py")) else [nagent]
        started = time.monotonic()
        proc = subprocess.run(command + ["--events", "--pid", "bench", "fix window_end"],
                              env=environment(fake, root, home), cwd=work, capture_output=True,
                              text=True, timeout=600)
        wall = time.monotonic() - started
        if proc.returncode != 0 or main or nested:
            raise RuntimeError(f"nagent failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
        events = [json.loads(line) for line in proc.stdout.splitlines()]
        with open(os.path.join(work, "app.py"), encoding="utf-8") as handle:
            if FIXED + "\n" not in handle.read():
                raise RuntimeError("the fix did not land")
        kinds = [e["kind"] for e in events if e["type"] == "action_end"]
        rewritten = sum(kind in ("write", "file-patch") for kind in kinds)
        rewritten += sum(kind in ("write", "file-patch") for record in _nested_records(home)
                         for kind in _action_kinds(record))
        edit = [e for e in events if e["type"] == "action_end" and e["kind"] == "file-edit"]
        own = edit[0]["seconds"] - nested_call_seconds(home) if edit else None
        end = events[-1]
        return {"output_tokens": end["totals"]["output_tokens"], "calls": end["totals"]["model_calls"],
                "nested_calls": counts["nested"], "rewritten": rewritten, "wall_s": wall,
                "own_s": own, "bytes": len(project_source(lines).encode())}
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)


def _nested_records(home):
    for path in glob.glob(os.path.join(home, ".nagent", "conversations", "file-app-*")):
        if os.path.isfile(path):
            yield from nagent_conversation.read_records(path)


def _action_kinds(record):
    if record.kind == "result":
        yield record.attr("action") or ""


def direct_session(lines):
    """The same nested session started as a new process: wall time less its model calls."""
    fake = FakeVendor().start()
    root, home, work = make_project(lines)
    replies = [REPLACE, ANSWER]
    fake.reply_fn(lambda record: ReplySpec(replies.pop(0)))
    env = environment(fake, root, home)
    try:
        # The tool list is cached as in a session that ran before (the nested case has it warm).
        from nagent_discovery import default_bin_dirs, default_cache_path, discover_tools
        discover_tools(default_bin_dirs(env), default_cache_path(env), environ=env)
        tool = os.path.join(ROOT, "bin", "nagent-file-edit")
        started = time.monotonic()
        proc = subprocess.run([sys.executable, tool, "--file", "app.py", "--json", "--pid", "bench",
                               "Fix window_end: it returns one short."],
                              env=env, cwd=work, capture_output=True, text=True, timeout=600)
        wall = time.monotonic() - started
        if proc.returncode != 0:
            raise RuntimeError(f"nagent-file-edit failed: {proc.stderr.strip()[-300:]}")
        return wall - nested_call_seconds(home)
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per scenario (median shown)")
    parser.add_argument("--nagent", default=os.path.join(ROOT, "bin", "nagent"),
                        help="the nagent to measure (a bin/nagent or an installed script)")
    args = parser.parse_args(argv)
    instruction = '<nagent-file-edit path="app.py">\nFix window_end: it returns one short.\n' \
                  "</nagent-file-edit>"
    scenarios = (("replace, 2,000-line file", 2000, (GREP, REPLACE, ANSWER), ()),
                 ("replace, 229 kB file", 9380, (GREP, REPLACE, ANSWER), ()),
                 ("file-edit, 2,000-line file", 2000, (instruction, ANSWER), (REPLACE, ANSWER)))
    rows = []
    print(f"{'scenario':<28} {'size':>9} {'out tokens':>10} {'nested calls':>12} "
          f"{'rewritten':>9} {'own time':>9} {'wall':>7}")
    for label, lines, main_replies, nested_replies in scenarios:
        runs = [run_scenario(args.nagent, lines, main_replies, nested_replies)
                for _ in range(args.runs)]
        row = dict(runs[0], label=label, wall_s=round(statistics.median(r["wall_s"] for r in runs), 2))
        if row["own_s"] is not None:
            row["own_s"] = round(statistics.median(r["own_s"] for r in runs), 3)
        rows.append(row)
        own = f"{row['own_s']:.2f}s" if row["own_s"] is not None else "-"
        print(f"{label:<28} {row['bytes'] / 1000:>7.0f}kB {row['output_tokens']:>10} "
              f"{row['nested_calls']:>12} {row['rewritten']:>9} {own:>9} {row['wall_s']:>6.2f}s")
    direct = round(statistics.median(direct_session(2000) for _ in range(args.runs)), 3)
    rows.append({"label": "nagent-file-edit as a new process (comparison)", "own_s": direct})
    print(f"{'the same session as a new process':<44} own time {direct:.2f}s")
    return rows


if __name__ == "__main__":
    main()
