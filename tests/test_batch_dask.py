"""nagent-batch --engine dask, for real: a dask scheduler and two dask worker processes started
here over TCP on 127.0.0.1 run the six tasks of tests/batch_fixture.py. Worker A talks to a fake
vendor that never answers; the moment its first model call arrives, worker A is SIGKILLed.
Its task must end exactly once, on worker B, and nothing A started may live on."""
import importlib.util
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from base import BIN, HELPERS, clean_environ
from batch_fixture import EXPECTED, Script, final, make_repo, read_lines, six_tasks, write_tasks
from fakes import FakeVendor, ReplySpec
from test_batch import wait_gone

from nagent_batch_store import batch_tag

BATCH = os.path.join(BIN, "nagent-batch")
CANARY = "coordinator-canary-key-0000"


@unittest.skipUnless(importlib.util.find_spec("distributed"), "needs distributed (.ci/run installs it)")
class DaskEngineTest(unittest.TestCase):
    def setUp(self):
        self.root = os.path.realpath(tempfile.mkdtemp(prefix="nagent-test-dask-"))
        self.addCleanup(shutil.rmtree, self.root, True)
        self.procs = []
        self.addCleanup(self.stop_all)
        self.stalled, self.reached_a = FakeVendor().start(), threading.Event()
        self.fake = FakeVendor().start()
        for fake in (self.stalled, self.fake):
            self.addCleanup(fake.stop)
        self.stalled.reply_fn(lambda record: (self.reached_a.set(), ReplySpec("never", delay=120))[1])
        self.outside = os.path.join(self.root, "outside")
        os.makedirs(self.outside)
        self.script = Script(self.fake, self.outside)

    def stop_all(self):
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()

    def start(self, argv, env, stdout=subprocess.DEVNULL):
        log = open(os.path.join(self.root, f"{len(self.procs)}.log"), "w", encoding="utf-8")
        self.addCleanup(log.close)
        proc = subprocess.Popen(argv, env=env, cwd=self.root, stdout=stdout, stderr=log,
                                stdin=subprocess.DEVNULL, text=True)
        self.procs.append(proc)
        return proc

    def logs(self):
        """What every process started here said on stderr: the message of a failed assertion."""
        texts = []
        for number in range(len(self.procs)):
            with open(os.path.join(self.root, f"{number}.log"), encoding="utf-8", errors="replace") as handle:
                texts.append(f"--- process {number}: {self.procs[number].args[:5]}\n{handle.read()[-3000:]}")
        return "\n".join(texts)

    def worker_env(self, name, fake):
        home, tmp = os.path.join(self.root, name, "home"), os.path.join(self.root, name, "tmp")
        os.makedirs(home)
        os.makedirs(tmp)
        config = os.path.join(self.root, name, "config.json")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write("{}")
        # The worker's own keys and vendor; nagent_batch_* importable as on an installed worker.
        return dict(clean_environ(), HOME=home, TMPDIR=tmp, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1",
                    PYTHONPATH=HELPERS, **fake.env())

    def scheduler(self):
        info = os.path.join(self.root, "scheduler.json")
        self.start([sys.executable, "-m", "dask", "scheduler", "--host", "127.0.0.1", "--port", "0",
                    "--no-dashboard", "--scheduler-file", info], dict(clean_environ(), PYTHONPATH=HELPERS))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                with open(info, encoding="utf-8") as handle:
                    return json.load(handle)["address"]
            except (OSError, ValueError, KeyError):
                time.sleep(0.05)
        self.fail("the dask scheduler did not start")

    def registered(self, proc, seconds=60):
        """The address of the worker `proc`, once its log says it registered with the scheduler
        (read from the log: the test process never imports distributed)."""
        log = os.path.join(self.root, f"{self.procs.index(proc)}.log")
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and proc.poll() is None:
            with open(log, encoding="utf-8", errors="replace") as handle:
                text = handle.read()
            found = re.search(r"Start worker at:\s+(\S+)", text)
            if found and "Registered to:" in text:
                return found.group(1)
            time.sleep(0.05)
        self.fail("a dask worker did not register\n" + self.logs())

    def test_six_tasks_on_two_workers_one_killed_mid_task(self):
        address = self.scheduler()
        worker = [sys.executable, "-m", "dask", "worker", address, "--no-nanny", "--no-dashboard"]
        killed = self.start(worker + ["--nthreads", "1", "--name", "A"], self.worker_env("A", self.stalled))
        kept = self.start(worker + ["--nthreads", "3", "--name", "B"], self.worker_env("B", self.fake))
        names = {"A": self.registered(killed), "B": self.registered(kept)}
        repo = make_repo(os.path.join(self.root, "my repo"))
        os.symlink(repo, os.path.join(self.root, "repo-link"))
        tasks = write_tasks(os.path.join(self.root, "tasks.jsonl"),
                            six_tasks("my repo", "repo-link", self.outside))
        # The coordinator has no vendor to reach and a key of its own that must go nowhere.
        env = dict(clean_environ(), HOME=os.path.join(self.root, "coordinator"), OPENAI_API_KEY=CANARY,
                   OPENAI_BASE_URL=self.fake.url + "/v1", NAGENT_NO_SPINNER="1")
        batch = self.start([sys.executable, BATCH, tasks, "--engine", "dask", "--scheduler", address,
                            "--events"], env, stdout=subprocess.PIPE)
        self.assertTrue(self.reached_a.wait(90), self.logs())
        killed.send_signal(signal.SIGKILL)
        out, _ = batch.communicate(timeout=240)
        self.assertEqual(batch.returncode, 1, self.logs())   # t2 and t3 fail, as on the pool
        events = [json.loads(line) for line in out.splitlines()]

        lines = read_lines(os.path.join(self.root, "tasks.out", "results.jsonl"))
        self.assertEqual(sorted(line["id"] for line in lines), sorted(EXPECTED))   # each ends once
        latest = final(lines)
        self.assertEqual({task_id: line["status"] for task_id, line in latest.items()}, EXPECTED)
        self.assertEqual((latest["t3"]["failure"], latest["t2"]["failure"]), ("budget", "check"))
        starts = {}
        for event in events:
            if event["type"] == "task_start":
                starts.setdefault(event["id"], []).append(event["worker"])
        moved = [task_id for task_id, where in starts.items() if where[0] == names["A"]]
        self.assertTrue(moved, starts)
        for task_id in moved:
            self.assertEqual(starts[task_id], [names["A"], names["B"]])
            self.assertEqual(latest[task_id]["status"], EXPECTED[task_id])
        self.assertEqual(sum(event["type"] == "task_end" for event in events), 6)
        self.assertEqual(len(self.stalled.requests), 1)
        self.assertEqual(wait_gone(batch_tag(os.path.join(self.root, "tasks.out"))), [])

        # Conversations came back from the worker; keys stayed where they were.
        for task_id, line in latest.items():
            with open(os.path.join(self.root, "tasks.out", line["conversation"]), encoding="utf-8") as handle:
                self.assertIn(f"TASK-{task_id}", handle.read())
        self.assertEqual(set(self.fake.seen_keys), {"test-openai-key"})
        self.assertNotIn(CANARY, json.dumps(lines))
        tag = batch_tag(os.path.join(self.root, "tasks.out"))
        leftovers = os.path.join(self.root, "B", "tmp", f"nagent-{tag}")
        self.assertEqual([name for name in os.listdir(leftovers) if not name.startswith(".repo-")], [])


if __name__ == "__main__":
    unittest.main()
