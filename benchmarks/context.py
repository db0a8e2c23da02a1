"""What building the initial context costs at the start of a conversation, outside and inside a
git repository (issue 13): project detection, the context layers, skills, project-tool trust.

Rows (median over N runs, milliseconds):
- find_project outside a repository (a walk up for .git: no git process) and inside one (one
  `git rev-parse`);
- the session part (session_parts: facts, layers, skills, project tools) outside a repository,
  in a repository with AGENTS.md + include + .nagent/context.md + nested AGENTS.md + 3 skills +
  an untrusted .nagent/bin, with 50 skills, and with the .nagent/bin trusted (descriptions cached);
- a cold process: `import nagent_context` + one build, outside vs inside the repository (what a
  new conversation pays, the yaml import included);
- `nagent --config` (settings plus the context overview) outside vs inside the repository.

Usage: python3 benchmarks/context.py [--runs N]   (default 20). Prints figures; asserts nothing.
`main(argv) -> [row dicts]`.
"""
import os
import shutil
import statistics
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, "bin")
HELPERS = os.path.join(BIN, "helpers")
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, HELPERS)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from base import clean_environ  # noqa: E402
from bench_env import make_workspace, median_ms  # noqa: E402

TOOLS = [{"name": "nagent", "description": "main loop"}]


def write(path, text, mode=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    if mode:
        os.chmod(path, mode)


def make_repo(work, home, env):
    def git(*args):
        subprocess.run(["git", "-c", "user.email=b@example.com", "-c", "user.name=Bench", *args],
                       cwd=work, env=env, check=True, capture_output=True)
    git("init", "-q")
    write(os.path.join(work, "AGENTS.md"), "Use tabs.\nSee @docs/style.md.\n" * 20)
    write(os.path.join(work, "docs", "style.md"), "Short functions.\n" * 50)
    write(os.path.join(work, ".nagent", "context.md"), "Run make test.\n")
    write(os.path.join(work, "pkg", "AGENTS.md"), "Generated code.\n")
    os.makedirs(os.path.join(work, "pkg", "sub"), exist_ok=True)
    for name in ("deploy", "review", "release"):
        write(os.path.join(work, ".nagent", "skills", name, "SKILL.md"),
              f"---\nname: {name}\ndescription: {name} things\nrequires:\n  bins: [sh]\n---\nbody\n")
    write(os.path.join(work, ".nagent", "bin", "proj-tool"), "#!/bin/sh\necho a project tool\n", 0o755)
    write(os.path.join(home, ".nagent", "context.md"), "Answer briefly.\n")
    git("add", "-A")
    git("commit", "-q", "-m", "bench")
    return os.path.join(work, "pkg", "sub")


def process_ms(argv, env, cwd, runs):
    def once():
        proc = subprocess.run(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr.decode()[-300:])
    return median_ms(once, runs)


COLD = """
import sys, time
sys.path.insert(0, {helpers!r})
started = time.perf_counter()
import nagent_context
nagent_context.build_initial_context(tools={tools!r})
print((time.perf_counter() - started) * 1000)
"""


def cold_ms(env, cwd, runs):
    code = COLD.format(helpers=HELPERS, tools=TOOLS)
    values = []
    for _ in range(runs):
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True,
                             text=True, timeout=120, check=True).stdout
        values.append(float(out.strip()))
    return statistics.median(values)


def main(argv=None):
    argv = list(argv or ())
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 20
    root, home, work, config = make_workspace("nagent-bench-context-", {})
    outside = os.path.join(root, "outside")
    os.makedirs(outside)
    env = clean_environ()
    env.update(HOME=home, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1", TMPDIR=root,
               GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.path.join(root, "gitconfig"))
    write(env["GIT_CONFIG_GLOBAL"], "")
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    rows = []
    try:
        import nagent_project
        import nagent_trust
        from nagent_context import session_parts
        inside = make_repo(work, home, env)

        def row(name, value):
            rows.append({"figure": name, "median_ms": round(value, 2)})

        row("find_project outside a repository", median_ms(
            lambda: nagent_project.find_project(outside, env), runs))
        row("find_project inside a repository (git rev-parse)", median_ms(
            lambda: nagent_project.find_project(inside, env), runs))
        row("session part outside a repository", median_ms(
            lambda: session_parts("main", env, outside, 0, None), runs))
        row("session part in the repository (layers, 3 skills, untrusted bin)", median_ms(
            lambda: session_parts("main", env, inside, 0, None), runs))
        for n in range(47):
            write(os.path.join(work, ".nagent", "skills", f"extra{n:02d}", "SKILL.md"),
                  f"---\nname: extra{n:02d}\ndescription: extra skill {n}\n---\nbody\n")
        row("session part in the repository, 50 skills", median_ms(
            lambda: session_parts("main", env, inside, 0, None), runs))
        nagent_trust.trust_project(nagent_project.find_project(inside, env), env)
        session_parts("main", env, inside, 0, None)  # describes the tool once: cached after
        row("session part in the repository, 50 skills, trusted bin (cached)", median_ms(
            lambda: session_parts("main", env, inside, 0, None), runs))
        cold_runs = max(3, runs // 4)
        row("cold process: import + build, outside a repository", cold_ms(env, outside, cold_runs))
        row("cold process: import + build, in the repository (50 skills)",
            cold_ms(env, inside, cold_runs))
        nagent = [sys.executable, os.path.join(BIN, "nagent"), "--config"]
        row("nagent --config outside a repository", process_ms(nagent, env, outside, cold_runs))
        row("nagent --config in the repository", process_ms(nagent, env, inside, cold_runs))
    finally:
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(root, ignore_errors=True)
    width = max(len(r["figure"]) for r in rows)
    print(f"{'figure':{width}}  median ms")
    for r in rows:
        print(f"{r['figure']:{width}}  {r['median_ms']:8.2f}")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
