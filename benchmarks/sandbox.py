"""The cost of the shell sandbox: one `true` shell action run through nagent_shell.run_shell,
unsandboxed and under `shell.sandbox: bwrap` (median wall time over N runs, the first run not
counted), plus the sandbox plan alone (the path checks and socket scan nagent does per command)
and bare `bwrap ... true` for reference.

Usage: python3 benchmarks/sandbox.py [--runs N]   (default 30)
`main(argv) -> [row dicts]` ({"label", "median_ms"}) for benchmarks/run_all.py. Needs bwrap;
without it only the unsandboxed row is printed. Uses a temporary HOME and config.
"""
import argparse
import os
import shutil
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bin", "helpers"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_env import make_workspace, median_ms  # noqa: E402
from nagent_sandbox import plan  # noqa: E402
from nagent_shell import ShellPolicy, run_shell  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args(argv)
    root, home, work, config = make_workspace("nagent-bench-sandbox-", {})
    try:
        os.makedirs(os.path.join(home, ".nagent"))
        env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": home, "NAGENT_CONFIG": config,
               "TMPDIR": root, "LANG": "C.UTF-8"}
        side = os.path.join(home, ".nagent", "conversations", "bench.d")
        rows = []

        def shell(policy):
            outcome = run_shell("true", work, policy, side, environ=env)
            if outcome.exit_code != 0:
                raise RuntimeError(f"true failed: {outcome.stderr.strip()[-300:]}")

        rows.append({"label": "shell action `true`, unsandboxed",
                     "median_ms": median_ms(lambda: shell(ShellPolicy()), args.runs)})
        if shutil.which("bwrap"):
            sandboxed = ShellPolicy(sandbox="bwrap")
            rows.append({"label": "shell action `true`, sandbox bwrap",
                         "median_ms": median_ms(lambda: shell(sandboxed), args.runs)})
            rows.append({"label": "sandbox plan alone (path checks, socket scan)",
                         "median_ms": median_ms(lambda: plan(work, sandboxed, env), args.runs)})
            bare = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
                    "--unshare-all", "true"]
            rows.append({"label": "bare `bwrap --unshare-all true`",
                         "median_ms": median_ms(lambda: subprocess.run(bare, check=True), args.runs)})
        for row in rows:
            print(f"{row['label']}: {row['median_ms']:.1f} ms median of {args.runs}")
        return rows
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
