"""How soon a user sees an answer: nagent's own time before its first request, and the time to
the first byte of a streamed answer, per provider, against the local fake.

1. Before the first request: the CPU time nagent spends from its first line until it hands the
   request to the provider SDK (context, lock, records, request, and its own modules), beyond
   what the provider SDK imports anyway (the standard-library modules `import SDK` loads are
   imported first, outside the measurement; the SDK import itself comes after the hand-off).
   Measured in process: bin/nagent runs under a small harness that stops at the hand-off
   (nagent_run.Run.provider_client), for a new conversation and for one continued after 60
   earlier records (about 150 KB). Also the wall time of the same span as `--events` reports
   it (`model_call_start.t`, the shared imports included), in a plain run.
2. Time to first byte. The fake streams a 40-word answer in 4-character deltas, one every
   50 ms (its first token 50 ms after the request, the whole reply about 2 s; without
   streaming it answers once the whole reply would be written). From spawning
   `bin/nagent -q --stream` / `--no-stream` to the first byte on stdout, and that moment minus
   the request's arrival.
Runs use a temporary HOME and config, bytecode caches in a temp PYTHONPYCACHEPREFIX (as an
installed package has them), one warm-up run, medians of --runs (default 5; CPU figures: the
minimum, the least disturbed by other load).

Usage: python3 benchmarks/first_answer.py [--runs N] [provider ...]
`main(argv) -> [row dicts]` for benchmarks/run_all.py. Prints figures; asserts nothing.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, "bin")
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "bin", "helpers"))

from base import clean_environ  # noqa: E402
from fakes import FakeVendor  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_env import make_workspace  # noqa: E402

PROVIDERS = ("openai", "anthropic", "google")
OVERHEAD_TARGET_MS = 20.0
ANSWER = "<nagent-response>" + " ".join(f"word{n}" for n in range(40)) + "</nagent-response>"
GENERATION = (":generateContent", ":streamGenerateContent", "/v1/responses", "/v1/messages")
SDK_MODULE = {"openai": "openai", "anthropic": "anthropic", "google": "google.genai"}
# Stops bin/nagent where it hands its first request to the provider SDK and prints the CPU
# milliseconds spent since the harness started: argv[1] the repository, argv[2] a file listing
# standard-library modules to import before the clock starts, the rest nagent's arguments.
HARNESS = """
import importlib, os, runpy, sys, time
repo, shared = sys.argv[1], open(sys.argv[2]).read().split()
for name in shared:
    try:
        importlib.import_module(name)
    except Exception:
        pass
sys.path.insert(0, os.path.join(repo, "bin", "helpers"))
start = time.process_time()
import nagent_run
def handed_off(self):
    print(f"{(time.process_time() - start) * 1000:.2f}", flush=True)
    os._exit(0)
nagent_run.Run.provider_client = handed_off
sys.argv = [os.path.join(repo, "bin", "nagent")] + sys.argv[3:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


class Bench:
    def __init__(self, provider, fake, runs):
        self.provider, self.fake, self.runs = provider, fake, runs
        self.root, self.home, self.cwd, config = make_workspace(
            "nagent-bench-first-", {"provider": provider, "retry": {"base_delay": 0, "max_delay": 0}})
        env = clean_environ()
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.update(fake.env())
        env.update(HOME=self.home, NAGENT_CONFIG=config, TMPDIR=self.root,
                   PYTHONPYCACHEPREFIX=os.path.join(self.root, "pycache"))
        self.env = env
        self.serial = 0

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)

    def spawn(self, argv):
        """(spawn time, first stdout byte time or None, stdout, the generation request's
        arrival time) of one process."""
        before = len(self.fake.requests)
        started = time.time()
        proc = subprocess.Popen(argv, env=self.env, cwd=self.cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first, chunks = [], []

        def read():
            while True:
                data = os.read(proc.stdout.fileno(), 65536)
                if not data:
                    return
                if not first:
                    first.append(time.time())
                chunks.append(data)
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        err = proc.stderr.read()
        proc.wait(timeout=120)
        reader.join(10)
        proc.stdout.close()
        proc.stderr.close()
        if proc.returncode != 0:
            raise RuntimeError(f"{argv[1:]} failed: {err.decode()[-400:]}")
        arrived = [r["received"] for r in self.fake.requests[before:]
                   if r["method"] == "POST" and any(mark in r["path"] for mark in GENERATION)]
        return started, (first[0] if first else None), b"".join(chunks).decode(), arrived[0]

    def nagent(self, *args, conversation=None):
        self.serial += 1
        name = conversation or f"bench-{self.serial}"
        return [sys.executable, os.path.join(BIN, "nagent"), "-q", "--conversation", name, *args,
                "hello"]

    def shared_modules(self):
        """Standard-library modules the provider SDK imports anyway, in a file for HARNESS."""
        proc = subprocess.run([sys.executable, "-X", "importtime", "-c",
                               f"import {SDK_MODULE[self.provider]}"], env=self.env,
                              capture_output=True, text=True, timeout=120)
        names = [line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                 if line.startswith("import time:") and "|" in line]
        names = [n for n in names if n.split(".")[0] in sys.stdlib_module_names]
        path = os.path.join(self.root, "shared-modules.txt")
        with open(path, "w", encoding="utf-8") as handle:
            handle.write("\n".join(names))
        return path

    def own_cpu(self, shared, conversation=None):
        """Minimum CPU ms of nagent before its first request, beyond the shared imports."""
        values = []
        for run in range(self.runs + 1):
            self.serial += 1
            argv = [sys.executable, "-c", HARNESS, REPO, shared, "-q", "--no-stream",
                    "--conversation", conversation or f"cpu-{self.serial}", "hello"]
            proc = subprocess.run(argv, env=self.env, cwd=self.cwd, capture_output=True, text=True,
                                  stdin=subprocess.DEVNULL, timeout=120)
            if proc.returncode != 0 or not proc.stdout.strip():
                raise RuntimeError(f"harness failed: {proc.stderr[-400:]}")
            if run:
                values.append(float(proc.stdout.split()[-1]))
        return min(values)

    def events_mark(self, conversation):
        marks = []
        for run in range(self.runs + 1):
            self.fake.reply(ANSWER)
            _, _, out, _ = self.spawn(self.nagent("--events", conversation=conversation))
            start = next(json.loads(line) for line in out.splitlines()
                         if '"model_call_start"' in line)
            if run:
                marks.append(start["t"] * 1000)
        return statistics.median(marks)

    def continued(self):
        """A conversation with 60 earlier records (about 150 KB) to continue."""
        import nagent_conversation as store
        self.fake.reply(ANSWER)
        self.spawn(self.nagent("--no-stream", conversation="bench-continued"))
        path = os.path.join(self.home, ".nagent", "conversations", "bench-continued")
        seq = store.read_records(path)[-1].seq
        output = "".join(f"line {n} of some command output\n" for n in range(80))
        with open(path, "ab") as handle:
            for turn in range(20):
                for kind, body, attrs in (
                        ("reply", f"<nagent-shell>echo turn {turn}</nagent-shell>", {"valid": "true"}),
                        ("result", f"<nagent-shell-result>\nexit_code: 0\nstdout:\n{output}stderr:\n"
                                   "</nagent-shell-result>", {"action": "shell"}),
                        ("prompt", f"next step {turn}", {"source": "argv"})):
                    seq += 1
                    handle.write(store.encode_record(seq, kind, body, attrs))
        return "bench-continued"

    def first_byte(self, stream):
        late, after_request = [], []
        deltas = -(-len(ANSWER) // 4)
        for run in range(self.runs + 1):
            if stream:
                self.fake.reply(ANSWER, chunk=4, gap=0.05)
            else:  # the whole reply comes when the model has written all of it
                self.fake.reply(ANSWER, delay=deltas * 0.05)
            started, first, out, arrived = self.spawn(
                self.nagent("--stream" if stream else "--no-stream"))
            if out.strip() != ANSWER[len("<nagent-response>"):-len("</nagent-response>")]:
                raise RuntimeError(f"unexpected answer: {out!r}")
            if run:
                late.append((first - started) * 1000)
                after_request.append((first - arrived) * 1000)
        return statistics.median(late), statistics.median(after_request)

    def measure(self):
        row = {"provider": self.provider}
        shared = self.shared_modules()
        name = self.continued()
        row["cpu_new_ms"] = self.own_cpu(shared)
        row["cpu_continued_ms"] = self.own_cpu(shared, name)
        row["mark_new_ms"] = self.events_mark(None)
        row["mark_continued_ms"] = self.events_mark(name)
        row["stream_first_ms"], row["stream_after_request_ms"] = self.first_byte(True)
        row["whole_first_ms"], row["whole_after_request_ms"] = self.first_byte(False)
        return {key: round(value, 1) if isinstance(value, float) else value
                for key, value in row.items()}


def main(argv=None):
    argv = list(argv or ())
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 5
    providers = [name for name in argv if name in PROVIDERS] or list(PROVIDERS)
    rows = []
    fake = FakeVendor().start()
    try:
        for provider in providers:
            bench = Bench(provider, fake, runs)
            try:
                rows.append(bench.measure())
            finally:
                bench.close()
    finally:
        fake.stop()
    print_table(rows, runs)
    return rows


def print_table(rows, runs):
    print(f"nagent's own time before the first request (ms; new / continued conversation; "
          f"target <= {OVERHEAD_TARGET_MS:g} ms)")
    print("provider   CPU beyond the SDK's imports   wall, --events model_call_start.t")
    for row in rows:
        print(f"{row['provider']:<10} {row['cpu_new_ms']:8.1f} / {row['cpu_continued_ms']:<8.1f}"
              f"               {row['mark_new_ms']:6.1f} / {row['mark_continued_ms']:.1f}")
    print(f"time to the first byte of the answer (ms from spawn, median of {runs}; in brackets: "
          "after the request)")
    print("provider   streamed            whole reply")
    for row in rows:
        print(f"{row['provider']:<10} {row['stream_first_ms']:7.0f} ({row['stream_after_request_ms']:5.0f})"
              f"     {row['whole_first_ms']:7.0f} ({row['whole_after_request_ms']:5.0f})")


if __name__ == "__main__":
    main(sys.argv[1:])
