"""How soon a user sees an answer: nagent's own time before its first request, and the time to
the first byte of a streamed answer, per provider, against the local fake.

1. Before the first request. Wall time from spawning the process to the fake receiving the
   generation request, for `bin/nagent -q --no-stream "hello"` (a new conversation, and one
   continued after 60 earlier records, about 150 KB) and for a minimal direct SDK script doing
   the same call (what `llm` does: import the SDK, build a client, send one message). Both pay
   the interpreter and the SDK import; the difference is nagent's own work (its modules,
   settings, context, lock, records, request). Also `model_call_start.t` from `--events`: the
   time from nagent's first line to the moment it hands the request to the SDK layer.
2. Time to first byte. The fake streams a 40-word answer in 4-character deltas, one every
   50 ms (its first token 50 ms after the request, the whole reply about 2 s). From spawning
   `bin/nagent -q --stream` / `--no-stream` to the first byte on stdout, and that moment minus
   the request's arrival (streamed: about one first-token latency).
Runs use a temporary HOME and config, bytecode caches in a temp PYTHONPYCACHEPREFIX (as an
installed package has them), one warm-up run, medians of --runs (default 5).

Usage: python3 benchmarks/first_answer.py [--runs N] [provider ...]
`main(argv) -> [row dicts]` for benchmarks/run_all.py. Prints figures; asserts nothing.
"""
import json
import os
import resource
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
DIRECT = {
    "openai": "import openai\nc = openai.OpenAI(max_retries=0)\n"
              "r = c.responses.create(model='gpt-5.5', input='hello', store=False)\nprint(r.output_text)",
    "anthropic": "import anthropic\nc = anthropic.Anthropic(max_retries=0)\n"
                 "r = c.messages.create(model='claude-sonnet-4-6', max_tokens=1000, "
                 "messages=[{'role': 'user', 'content': 'hello'}])\nprint(r.content[0].text)",
    "google": "import os\nfrom google import genai\nfrom google.genai import types\n"
              "c = genai.Client(http_options=types.HttpOptions("
              "base_url=os.environ['GOOGLE_GEMINI_BASE_URL']))\n"
              "r = c.models.generate_content(model='gemini-2.5-flash', contents='hello')\nprint(r.text)",
}


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
        arrival time) of one process; its CPU seconds go to self.cpu."""
        before = len(self.fake.requests)
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
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
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        self.cpu = (after.ru_utime + after.ru_stime) - (usage.ru_utime + usage.ru_stime)
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

    def before_request(self, argv_of, reply):
        """(median ms from spawn to the request, median CPU ms of the whole process)."""
        times, cpu = [], []
        for run in range(self.runs + 1):
            self.fake.reply(reply)
            started, _, _, arrived = self.spawn(argv_of())
            if run:  # the first run warms the bytecode caches
                times.append((arrived - started) * 1000)
                cpu.append(self.cpu * 1000)
        return statistics.median(times), statistics.median(cpu)

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
        direct = [sys.executable, "-c", DIRECT[self.provider]]
        row = {"provider": self.provider}
        row["direct_ms"], row["direct_cpu_ms"] = self.before_request(lambda: direct, "hello")
        row["new_ms"], row["new_cpu_ms"] = self.before_request(lambda: self.nagent("--no-stream"),
                                                               ANSWER)
        name = self.continued()
        row["continued_ms"], row["continued_cpu_ms"] = self.before_request(
            lambda: self.nagent("--no-stream", conversation=name), ANSWER)
        row["mark_new_ms"] = self.events_mark(None)
        row["mark_continued_ms"] = self.events_mark(name)
        row["overhead_new_ms"] = row["new_ms"] - row["direct_ms"]
        row["overhead_continued_ms"] = row["continued_ms"] - row["direct_ms"]
        row["cpu_overhead_new_ms"] = row["new_cpu_ms"] - row["direct_cpu_ms"]
        row["cpu_overhead_continued_ms"] = row["continued_cpu_ms"] - row["direct_cpu_ms"]
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
    print(f"before the first request (ms, median of {runs}): wall time from spawn to the "
          "request, and CPU time of the whole process")
    print("provider   direct SDK   nagent new   continued   own wall new/cont.  own CPU new/cont."
          "  mark new/cont.")
    for row in rows:
        print(f"{row['provider']:<10} {row['direct_ms']:6.0f} {row['direct_cpu_ms']:5.0f} "
              f"{row['new_ms']:6.0f} {row['new_cpu_ms']:5.0f} {row['continued_ms']:6.0f} "
              f"{row['continued_cpu_ms']:5.0f}   {row['overhead_new_ms']:6.1f} "
              f"{row['overhead_continued_ms']:6.1f}     {row['cpu_overhead_new_ms']:6.1f} "
              f"{row['cpu_overhead_continued_ms']:6.1f}     {row['mark_new_ms']:5.1f} "
              f"{row['mark_continued_ms']:5.1f}")
    print(f"target: nagent's own time before the first request <= {OVERHEAD_TARGET_MS:g} ms")
    print("time to the first byte of the answer (ms from spawn; in brackets: after the request)")
    print("provider   streamed            whole reply")
    for row in rows:
        print(f"{row['provider']:<10} {row['stream_first_ms']:7.0f} ({row['stream_after_request_ms']:5.0f})"
              f"     {row['whole_first_ms']:7.0f} ({row['whole_after_request_ms']:5.0f})")


if __name__ == "__main__":
    main(sys.argv[1:])
