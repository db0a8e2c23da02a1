"""Warm children benchmark (issue 25): from the parent's request that asked for a child to the
child's first request, for a sub-agent (<nagent-agent>) and a nested edit session
(<nagent-file-edit>), against the fake vendor (tests/fakes.py) through the real SDK.

Each run is one real `nagent --json` run (bin/nagent, or --nagent PATH) in a git project: the
parent's first reply asks for the child (or its second, after a shell step: the parent's SDK
has then built the response types the first reply needs, as in most runs), the child answers
(the edit session replaces one line first), the parent answers. Both ends are read from the fake's request log (the wall-clock time
each request arrived), so the figure holds everything nagent does in between: parsing the
reply, the action's checks, starting the child, the child's own start-up and its first request.
`--cold` sets the config key warm_children to false: every child is a new interpreter that
imports the provider SDK again (how sub-agents started before issue 25; nested edit sessions
were forks already). Prints a table; asserts nothing.

Run: python3 benchmarks/warm_children.py [--runs 5] [--cold] [--provider openai] [--nagent PATH]
`main(argv) -> rows` returns the table as dicts (run_all.py reads them).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from base import clean_environ  # noqa: E402
from fakes import FakeVendor, ReplySpec  # noqa: E402

PARENT = "BENCH-WARM-PARENT"
CHILD_TASK = "BENCH-WARM-CHILD-TASK"
NESTED = "Write rules (per-file edit session)"
BUGGY, FIXED = "    return start + size - 1", "    return start + size"
REPLACE = f'<nagent-replace path="app.py">\n<old>{BUGGY}</old>\n<new>{FIXED}</new>\n</nagent-replace>'
ANSWER = "<nagent-response>\ndone\n</nagent-response>"
STEP = "<nagent-shell>true</nagent-shell>"
ASKS = {"sub-agent": f"<nagent-agent>\n{CHILD_TASK}: say hello\n</nagent-agent>",
        "nested edit session": f'<nagent-file-edit path="app.py">\n{CHILD_TASK}: fix window_end.'
                               "\n</nagent-file-edit>"}
VENDORS = {"openai": "openai", "anthropic": "anthropic", "google": "google"}


def make_project(config):
    # Outside the temp roots, as a user's project is (edit targets are confined to it).
    root = os.path.realpath(tempfile.mkdtemp(prefix=".nagent-bench-warm-", dir=ROOT))
    home, work = os.path.join(root, "home"), os.path.join(root, "work")
    os.makedirs(home)
    os.makedirs(work)
    with open(os.path.join(work, "app.py"), "w", encoding="utf-8") as handle:
        handle.write("def window_end(start, size):\n" + BUGGY + "\n")
    git = ["git", "-c", "user.email=b@example.com", "-c", "user.name=Bench"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "app"]):
        subprocess.run(git + args, cwd=work, check=True, capture_output=True)
    config_path = os.path.join(root, "config.json")
    with open(config_path, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    return root, home, work, config_path


def run_once(nagent, scenario, provider, cold, later):
    fake = FakeVendor().start()
    config = {"provider": provider, **({"warm_children": False} if cold else {})}
    root, home, work, config_path = make_project(config)
    parent_replies = [STEP] * later + [ASKS[scenario], ANSWER]
    child_replies = [REPLACE, ANSWER] if scenario == "nested edit session" else [ANSWER]

    def reply(record):
        text = json.dumps(record.get("json"))
        if CHILD_TASK in text and (NESTED in text or scenario == "sub-agent") and PARENT not in text:
            return ReplySpec(child_replies.pop(0))
        return ReplySpec(parent_replies.pop(0))

    fake.reply_fn(reply, vendor=VENDORS[provider])
    try:
        env = clean_environ()
        env.update(fake.env(), HOME=home, NAGENT_CONFIG=config_path, NAGENT_NO_SPINNER="1",
                   TMPDIR=root)
        command = [sys.executable, nagent] if nagent.endswith(("bin/nagent", ".py")) else [nagent]
        proc = subprocess.run(command + ["--json", "--pid", "bench", PARENT], env=env, cwd=work,
                              capture_output=True, text=True, timeout=600)
        if proc.returncode != 0 or parent_replies or child_replies:
            raise RuntimeError(f"nagent failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
        log = fake.requests_for(VENDORS[provider])
        first = next(r["received"] for r in log
                     if CHILD_TASK in json.dumps(r.get("json"))
                     and PARENT not in json.dumps(r.get("json")))
        asked = max(r["received"] for r in log
                    if PARENT in json.dumps(r.get("json")) and r["received"] < first)
        return first - asked
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per scenario (median shown)")
    parser.add_argument("--cold", action="store_true",
                        help="warm_children false: children as new interpreters")
    parser.add_argument("--provider", default="openai", choices=sorted(VENDORS))
    parser.add_argument("--nagent", default=os.path.join(ROOT, "bin", "nagent"),
                        help="the nagent to measure (a bin/nagent or an installed script)")
    args = parser.parse_args(argv)
    rows = []
    mode = "cold" if args.cold else "warm"
    print(f"{'child, asked in the':<36} {'mode':<5} {'provider':<10} {'median':>8} {'min':>8} {'max':>8}")
    for scenario in ASKS:
        for later, when in ((0, "first reply"), (1, "second reply")):
            times = [run_once(args.nagent, scenario, args.provider, args.cold, later)
                     for _ in range(args.runs)]
            row = {"label": f"{scenario} asked in the {when} ({mode})", "provider": args.provider,
                   "median_ms": round(statistics.median(times) * 1000),
                   "min_ms": round(min(times) * 1000), "max_ms": round(max(times) * 1000)}
            rows.append(row)
            print(f"{scenario + ', ' + when:<36} {mode:<5} {args.provider:<10} "
                  f"{row['median_ms']:>6}ms {row['min_ms']:>6}ms {row['max_ms']:>6}ms")
    return rows


if __name__ == "__main__":
    main()
