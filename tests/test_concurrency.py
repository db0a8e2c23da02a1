"""Concurrency (issue 6): simultaneous invocations on one conversation and simultaneous
per-file edit sessions from one shell, as separate bin/nagent processes against one fake vendor.
The shared-conversation runs are fresh `python3 bin/nagent` processes; the ten edit sessions
are children of the suite's zygote (tests/zygote.py: bin/nagent run in a forked process that
already imported the SDK), which saves ten seconds of SDK imports and starts them closer together.

Contract checked:
- 10 invocations started together on one conversation: each exits 0 or 7 (one `Error:` line
  naming the busy conversation, nothing written); the file holds one prompt per successful run,
  each run's records contiguous (no interleaving) with seqs 1..n.
- 10 per-file edit sessions on different files with one --pid, started together: all succeed,
  each file gets its own conversation holding only its own run, and the shell's file index is
  one valid JSON document with a record for every file.
- 10 processes hammering resolve_file_edit on 5 files each: the index ends with all 50 records.
"""
import json
import os
import re
import subprocess
import sys
import threading

from base import BIN, HELPERS
from fakes import FakeVendorTestCase, ReplySpec
import zygote

import nagent_conversation
import nagent_file_edit_lib

RUNS = 10
TASK_RE = re.compile(r"task-(\d+)")
NAGENT = os.path.join(BIN, "nagent")


def scripted(record):
    """Reply by the request's own content: a shell marker first, then the final response."""
    text = json.dumps(record["json"])
    task = TASK_RE.findall(text)[-1]
    tail = text[text.rfind(f"task-{task}"):]
    if f"marker-{task}" in tail.replace(f"echo marker-{task}", ""):
        return ReplySpec(f"<nagent-response>done {task}</nagent-response>", delay=0.1)
    return ReplySpec(f"<nagent-shell>echo marker-{task}</nagent-shell>", delay=0.2)


class ConcurrencyCase(FakeVendorTestCase):
    def setUp(self):
        super().setUp()
        self.write_config({"provider": "openai", "lock_timeout": 2,
                           "retry": {"base_delay": 0, "max_delay": 0}})
        self.fake.reply_fn(scripted)
        self.conversations = os.path.join(self.home, ".nagent", "conversations")

    @staticmethod
    def read_text(path):
        with open(path, encoding="utf-8") as handle:
            return handle.read()

    def start_all(self, argvs):
        """Start every argv at once (a barrier, then Popen from threads) and wait for all."""
        barrier = threading.Barrier(len(argvs))
        results = [None] * len(argvs)

        def run(index, argv):
            barrier.wait()
            results[index] = subprocess.run([sys.executable, os.path.join(BIN, "nagent"), *argv],
                                            capture_output=True, text=True, env=self.env, cwd=self.cwd,
                                            stdin=subprocess.DEVNULL, timeout=120)
        threads = [threading.Thread(target=run, args=item) for item in enumerate(argvs)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return results

    def assertOwnRunsOnly(self, records):
        """Records between one prompt and the next mention only that prompt's task."""
        self.assertEqual([r.seq for r in records], list(range(1, len(records) + 1)))
        current = None
        for record in records:
            if record.kind == "prompt":
                current = TASK_RE.search(record.body).group(1)
                continue
            if record.kind in ("reply", "result"):
                self.assertIsNotNone(current, record)
                tasks = set(re.findall(r"marker-(\d+)|done (\d+)", record.body))
                tasks = {a or b for a, b in tasks}
                self.assertEqual(tasks, {current}, f"record {record.seq} interleaved: {record.body!r}")


class SharedConversationTest(ConcurrencyCase):
    def test_ten_invocations_on_one_conversation_complete_or_are_busy(self):
        procs = self.start_all([["--conversation", "shared", f"task-{i} please"] for i in range(RUNS)])
        done = [i for i, proc in enumerate(procs) if proc.returncode == 0]
        for i, proc in enumerate(procs):
            self.assertNotIn("Traceback", proc.stderr)
            self.assertIn(proc.returncode, (0, 7), proc.stderr)
            if proc.returncode == 0:
                self.assertEqual(proc.stdout, f"done {i}\n")
            else:
                self.assertCleanError(proc, code=7, contains="busy")
                self.assertIn("shared", proc.stderr)
                self.assertEqual(proc.stdout, "")
        self.assertGreaterEqual(len(done), 1)
        self.assertLess(len(done), RUNS)  # each run holds the lock > 0.3 s; the wait is 2 s
        records = nagent_conversation.read_records(os.path.join(self.conversations, "shared"))
        prompts = [TASK_RE.search(r.body).group(1) for r in records if r.kind == "prompt"]
        self.assertEqual(sorted(map(int, prompts)), done)  # busy runs wrote nothing
        self.assertOwnRunsOnly(records)
        for task in prompts:
            bodies = [r.body for r in records if f"marker-{task}" in r.body or f"done {task}" in r.body]
            self.assertEqual(len(bodies), 3, bodies)  # shell reply, its result, final reply


class FileEditSessionsTest(ConcurrencyCase):
    def test_ten_file_edit_sessions_from_one_shell(self):
        files = [self.write_file(f"src/mod{i}.py", f"# module {i}\n") for i in range(RUNS)]
        server = zygote.shared()
        outputs = [(os.path.join(self.tmp, f"out-{i}"), os.path.join(self.tmp, f"err-{i}"))
                   for i in range(RUNS)]
        children = [server.spawn(NAGENT, ["--file-edit", path, "--pid", "shell1", f"task-{i} edit"], self.env,
                                 self.cwd, *outputs[i]) for i, path in enumerate(files)]
        for i, child in enumerate(children):
            code = child.wait(timeout=120)
            out, err = (self.read_text(name) for name in outputs[i])
            self.assertEqual((code, out), (0, f"done {i}\n"), err)
            self.assertNotIn("Traceback", err)
        index_path = nagent_file_edit_lib.file_index_path("shell1", self.env)
        with open(index_path, encoding="utf-8") as handle:
            index = json.load(handle)
        self.assertEqual(nagent_file_edit_lib.parse_file_index(json.dumps(index))[1], None)
        by_path = {r["path"]: r for r in index["by_file_id"].values()}
        self.assertEqual(sorted(by_path), sorted(os.path.realpath(p) for p in files))
        names = {r["conversation"] for r in by_path.values()}
        self.assertEqual(len(names), RUNS)
        for i, path in enumerate(files):
            record = by_path[os.path.realpath(path)]
            self.assertEqual(record["file_id"], nagent_file_edit_lib.file_id_for_path(path))
            records = nagent_conversation.read_records(os.path.join(self.conversations,
                                                                    record["conversation"]))
            self.assertEqual([r.body for r in records if r.kind == "prompt"], [f"task-{i} edit"])
            self.assertOwnRunsOnly(records)


HAMMER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import nagent_file_edit_lib as fe
for round in range(3):
    for path in sys.argv[2:]:
        fe.resolve_file_edit(path, "hammer", lock_timeout=30)
"""


class IndexHammerTest(ConcurrencyCase):
    def test_ten_processes_updating_one_file_index(self):
        groups = [[self.write_file(f"g{g}/f{j}.txt", f"{g}-{j}\n") for j in range(5)] for g in range(RUNS)]
        procs = [subprocess.Popen([sys.executable, "-c", HAMMER, HELPERS, *group], env=self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for group in groups]
        for proc in procs:
            out, err = proc.communicate(timeout=120)
            self.assertEqual(proc.returncode, 0, err)
        index_path = nagent_file_edit_lib.file_index_path("hammer", self.env)
        with open(index_path, "rb") as handle:
            index, warning = nagent_file_edit_lib.parse_file_index(handle.read())
        self.assertIsNone(warning)
        paths = sorted(r["path"] for r in index["by_file_id"].values())
        self.assertEqual(paths, sorted(os.path.realpath(p) for group in groups for p in group))
        self.assertEqual(len({r["conversation"] for r in index["by_file_id"].values()}), RUNS * 5)
        leftovers = [name for name in os.listdir(os.path.dirname(index_path)) if name.endswith(".tmp")]
        self.assertEqual(leftovers, [])
