"""Start-up of the interactive session (issue 24), on a pseudo-terminal as a person meets it.

Rows:
- "session prompt appears": wall time from starting `nagent` (no prompt, stdin and stdout on a
  pty) to its prompt's last bytes on the terminal, against `python3 -c pass` started the same
  way (to its exit), run alternately. Target: <= 3x.
- "first request, one-shot": from starting `nagent "hi"` to the fake vendor receiving the request.
- "first request, session, typed at once": from the prompt appearing to the request, the prompt
  typed the moment it appears (the session's SDK import, started when the prompt shows, is
  still running). Target: no slower than the one-shot.
- "first request, session, typed after 2 s": the same, typed 2 s after the prompt (the import
  is done by then, as for anyone who reads the prompt before typing).

The prompt row is the median of --runs; the request rows are the minimum of --runs/2 (at least
3) alternating runs each, the least disturbed by other load (a shared machine moves their medians
by hundreds of ms between runs), with the median beside it.

Usage: python3 benchmarks/interactive.py [--runs N] [--python PATH]
--python runs the prompt row (and its baseline) with another interpreter, e.g. the system
Python whose start-up no site-packages .pth slows (the request rows need the SDKs and use this
interpreter). `main(argv) -> [row dicts]` for benchmarks/run_all.py.
"""
import os
import pty
import select
import shutil
import statistics
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, "bin")
sys.path.insert(0, os.path.join(REPO, "tests"))

from base import clean_environ  # noqa: E402
from fakes import FakeVendor  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import make_workspace  # noqa: E402

PROMPT = "› ".encode()
TARGET = 3.0


def spawn(argv, env, cwd):
    pid, master = pty.fork()
    if pid == 0:
        try:
            os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    return pid, master


def read_until(master, mark, timeout=60):
    """Bytes shown until `mark` (None: until the program closes the terminal)."""
    seen, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([master], [], [], 0.5)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                return seen
            seen += chunk
            if mark is not None and mark in seen:
                return seen
    raise RuntimeError(f"nothing like {mark!r} within {timeout} s: {seen[-400:]!r}")


def end(pid, master, keys=b"\x04"):
    if keys:
        os.write(master, keys)
    try:
        read_until(master, None, 30)
    finally:
        os.close(master)
        os.waitpid(pid, 0)


def prompt_ms(python, env, cwd):
    started = time.perf_counter()
    pid, master = spawn([python, os.path.join(BIN, "nagent")], env, cwd)
    read_until(master, PROMPT)
    shown = (time.perf_counter() - started) * 1000
    end(pid, master)
    return shown


def baseline_ms(python, env, cwd):
    started = time.perf_counter()
    pid, master = spawn([python, "-c", "pass"], env, cwd)
    read_until(master, None)
    os.close(master)
    os.waitpid(pid, 0)
    return (time.perf_counter() - started) * 1000


def request_after(fake, since, timeout=60):
    deadline = time.monotonic() + timeout
    while not fake.arrivals and time.monotonic() < deadline:
        time.sleep(0.002)
    if not fake.arrivals:
        raise RuntimeError("the fake never saw the request")
    return (fake.arrivals.pop() - since) * 1000


def one_shot_ms(fake, env, cwd):
    started = time.monotonic()
    pid, master = spawn([sys.executable, os.path.join(BIN, "nagent"), "hi"], env, cwd)
    waited = request_after(fake, started)
    end(pid, master, keys=None)
    return waited


def session_ms(fake, env, cwd, pause):
    pid, master = spawn([sys.executable, os.path.join(BIN, "nagent")], env, cwd)
    read_until(master, PROMPT)
    time.sleep(pause)
    typed = time.monotonic()
    os.write(master, b"hi\r")
    waited = request_after(fake, typed)
    read_until(master, PROMPT)
    end(pid, master)
    return waited


def main(argv=None):
    argv = list(argv or ())
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 7
    python = argv[argv.index("--python") + 1] if "--python" in argv else sys.executable
    root, home, cwd, config = make_workspace("nagent-bench-interactive-",
                                             {"provider": "openai",
                                              "retry": {"base_delay": 0, "max_delay": 0}})
    fake = FakeVendor().start()
    fake.arrivals = []

    def answer(_record):
        fake.arrivals.append(time.monotonic())
        return "<nagent-response>hello</nagent-response>"
    try:
        env = clean_environ()
        env.update(fake.env())
        env.update(HOME=home, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1", TMPDIR=root,
                   TERM="xterm", NO_COLOR="1", PYTHONPYCACHEPREFIX=os.path.join(root, "pycache"))
        fake.reply_fn(answer)
        prompt_ms(python, env, cwd)   # bytecode cached, as an install has it
        own, base = [], []
        for _ in range(runs):
            base.append(baseline_ms(python, env, cwd))
            own.append(prompt_ms(python, env, cwd))
        one_shot_ms(fake, env, cwd)
        oneshot, at_once, later = [], [], []
        for _ in range(max(3, runs // 2)):
            oneshot.append(one_shot_ms(fake, env, cwd))
            at_once.append(session_ms(fake, env, cwd, 0.0))
            later.append(session_ms(fake, env, cwd, 2.0))
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
    prompt, baseline = statistics.median(own), statistics.median(base)
    first = min(oneshot)
    rows = [{"figure": "python3 -c pass (on a pty)", "ms": round(baseline, 1)},
            {"figure": "session prompt appears", "ms": round(prompt, 1),
             "ratio": round(prompt / baseline, 2), "target": f"<= {TARGET:g}x",
             "ok": prompt / baseline <= TARGET},
            {"figure": "first request, one-shot nagent \"hi\" (from start)", "ms": round(first),
             "median": round(statistics.median(oneshot))},
            {"figure": "first request, session, typed at once (from the prompt)",
             "ms": round(min(at_once)), "median": round(statistics.median(at_once)),
             "target": "<= one-shot", "ok": min(at_once) <= first},
            {"figure": "first request, session, typed after 2 s (from the keypress)",
             "ms": round(min(later)), "median": round(statistics.median(later)),
             "target": "<= one-shot", "ok": min(later) <= first}]
    for row in rows:
        verdict = "" if "ok" not in row else ("pass" if row["ok"] else "FAIL")
        ratio = f"  {row['ratio']:.2f}x" if "ratio" in row else ""
        median = f" (median {row['median']})" if "median" in row else ""
        print(f"{row['figure']:<62} {row['ms']:>8} ms{ratio}{median}  {row.get('target', '')} "
              f"{verdict}")
    return rows


if __name__ == "__main__":
    main(sys.argv[1:])
