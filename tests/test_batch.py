"""nagent-batch on the local pool, end to end: real git worktrees, real nagent processes, the fake
vendor. One batch of the six tasks (tests/batch_fixture.py) over 3 workers is killed (SIGKILL)
after two results, the results file is edited by hand, and the batch is run again; the tests
read what that left. The same tasks through --print-commands, `xargs -P` and --collect must
give the same results."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

from base import BIN, HermeticTestCase, clean_environ
from batch_fixture import (EXPECTED, Script, comparable, final, git, make_repo, read_lines,
                           six_tasks, write_tasks)
from fakes import FakeVendor
from ptys import answer_on_pty
from test_parallel_agents import own_processes

from nagent_batch_store import batch_tag

BATCH = os.path.join(BIN, "nagent-batch")
KEY = "test-openai-key"


def wait_gone(marker, seconds=20.0):
    deadline = time.monotonic() + seconds
    while own_processes(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return own_processes(marker)


class KilledAndResumedPool(unittest.TestCase):
    """setUpClass runs the batch (killed, edited, resumed); each test checks one promise."""

    @classmethod
    def setUpClass(cls):
        cls.root = os.path.realpath(tempfile.mkdtemp(prefix="nagent-test-batch-"))
        cls.fake = FakeVendor().start()
        cls.outside = os.path.join(cls.root, "outside")
        os.makedirs(cls.outside)
        with open(os.path.join(cls.outside, "precious.txt"), "w", encoding="utf-8") as handle:
            handle.write("keep me\n")
        cls.repo = make_repo(os.path.join(cls.root, "my repo"))
        cls.link = os.path.join(cls.root, "repo-link")
        os.symlink(cls.repo, cls.link)
        # t3 too: the kill comes as the second task ends, and t3 (running beside t1 and t2)
        # must still be in flight then; fast, it sometimes ended with them (1 run in 40).
        cls.script = Script(cls.fake, cls.outside, slow=("t3", "t4", "t5", "t6"), delay=1.0)
        cls.tasks = write_tasks(os.path.join(cls.root, "tasks.jsonl"),
                                six_tasks("my repo", "repo-link", cls.outside))
        cls.out = os.path.join(cls.root, "tasks.out")
        home = os.path.join(cls.root, "home")
        os.makedirs(home)
        config = os.path.join(cls.root, "config.json")
        with open(config, "w", encoding="utf-8") as handle:
            handle.write("{}")
        cls.env = dict(clean_environ(), HOME=home, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1",
                       **cls.fake.env())
        cls.first_events, cls.killed_at = cls.run_and_kill()
        cls.orphans = wait_gone(batch_tag(cls.out))
        cls.results = os.path.join(cls.out, "results.jsonl")
        cls.at_kill = final(read_lines(cls.results))
        with open(cls.results, "a", encoding="utf-8") as handle:   # the hand edits
            handle.write('{"id": "../../x", "attempt": "1", "status": "ok"}\nnot json at all\n'
                         '{"id": "t1", "sta')
        cls.second = subprocess.run([sys.executable, BATCH, cls.tasks, "-j", "3", "--events"],
                                    cwd=cls.root, env=cls.env, capture_output=True, text=True,
                                    timeout=300)

    @classmethod
    def run_and_kill(cls):
        proc = subprocess.Popen([sys.executable, BATCH, cls.tasks, "-j", "3", "--events"], cwd=cls.root,
                                env=cls.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        events, ended = [], 0
        for line in proc.stdout:
            events.append(json.loads(line))
            ended += events[-1]["type"] == "task_end"
            if ended == 2:
                proc.kill()
                break
        killed_at = time.time()
        proc.wait()
        proc.stdout.close()
        return events, killed_at

    @classmethod
    def tearDownClass(cls):
        cls.fake.stop()
        shutil.rmtree(cls.root, ignore_errors=True)

    def lines(self):
        return read_lines(self.results)

    def test_results_are_complete_once_resumed(self):
        self.assertEqual(self.second.returncode, 1, self.second.stderr)
        latest = final(self.lines())
        self.assertEqual({task_id: line["status"] for task_id, line in latest.items()}, EXPECTED)
        t2, t3 = latest["t2"], latest["t3"]
        self.assertEqual((t2["failure"], t2["check"]["exit_code"]), ("check", 3))
        self.assertIn("check-said-no", t2["check"]["tail"])
        self.assertEqual((t3["failure"], t3["exit_code"], t3["calls"]), ("budget", 13, 1))
        self.assertIn("--max-cost", t3["reason"])   # nagent's own line, not a SIGINT
        self.assertGreater(t3["cost_usd"], 0.5)
        for task_id in ("t1", "t4", "t5", "t6"):
            line = latest[task_id]
            self.assertEqual((line["response"], line["calls"], line["exit_code"]), (f"done {task_id}", 2, 0))
            self.assertGreater(line["tokens"]["input"], 0)
            self.assertEqual(line["check"] and line["check"]["exit_code"], 0 if task_id != "t6" else None)
            self.assertEqual(line["ref"], git(self.repo, "rev-parse", "HEAD").strip())
        self.assertIn("+++ b/t1.txt", latest["t1"]["diff"])
        self.assertIn("+++ b/setup.txt", latest["t5"]["diff"])
        self.assertIn("new file mode 120000", latest["t4"]["diff"])    # a link, not what it leads to
        self.assertNotIn("keep me", latest["t4"]["diff"])
        models = {record["json"].get("model") for record in self.script.requests("t6")}
        self.assertEqual(models, {"gpt-5-mini"})

    def test_nothing_ran_twice(self):
        self.assertEqual(self.orphans, [], "the killed batch's nagent processes outlived it")
        # Done before the kill: a result of an attempt the first batch started. Not only the
        # lines results.jsonl had at the kill: a result stored but not yet appended then is
        # appended by the second batch (collect), and its task is not run again.
        first = {event["attempt"] for event in self.first_events if event["type"] == "task_start"}
        before = {task_id for task_id, line in final(self.lines()).items()
                  if line["status"] != "interrupted" and line["attempt"] in first}
        self.assertGreaterEqual(before, {task_id for task_id, line in self.at_kill.items()
                                         if line["status"] != "interrupted"})
        self.assertGreaterEqual(len(before), 2)
        for task_id in before:
            late = [r for r in self.script.requests(task_id) if r["received"] > self.killed_at]
            self.assertEqual(late, [], f"{task_id} had its result and ran again")
        lines = self.lines()
        for task_id in EXPECTED:
            finals = [line for line in lines if line["id"] == task_id and line["status"] != "interrupted"]
            self.assertEqual(len(finals), 1, (task_id, finals))
        interrupted = [line for line in lines if line["status"] == "interrupted"]
        self.assertTrue(interrupted, "the kill found no task in flight")
        for line in interrupted:   # its nagent died with the batch: it asked the model nothing more
            asked = [record["received"] for record in self.script.requests(line["id"])
                     if record["attempt"] == line["attempt"]]
            self.assertTrue(all(when < self.killed_at + 1.0 for when in asked), (line["id"], asked))
        second = [json.loads(line) for line in self.second.stdout.splitlines()]
        started = {event["id"] for event in second if event["type"] == "task_start"}
        self.assertEqual(started, set(EXPECTED) - before)

    def test_hand_edited_lines_are_skipped_with_a_warning(self):
        self.assertEqual(self.second.stderr.count("is not a result; ignored"), 3, self.second.stderr)
        with open(self.results, encoding="utf-8") as handle:
            raw = handle.read().splitlines()
        self.assertIn('{"id": "t1", "sta', raw)          # kept as the user left it, on its own line
        self.assertFalse(os.path.exists(os.path.join(self.root, "x")))

    def test_conversations_and_files_are_collected_and_no_key_in_them(self):
        for task_id, line in final(self.lines()).items():
            with open(os.path.join(self.out, line["conversation"]), encoding="utf-8") as handle:
                text = handle.read()
            self.assertIn(f"TASK-{task_id}", text)
            self.assertTrue(os.path.isfile(os.path.join(self.out, line["diff_file"])))
            self.assertNotIn(KEY, text)
        with open(self.results, encoding="utf-8") as handle:
            self.assertNotIn(KEY, handle.read())
        self.assertEqual(set(self.fake.seen_keys), {KEY})

    def test_workspaces_removed_and_links_out_not_followed(self):
        with open(os.path.join(self.outside, "precious.txt"), encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "keep me\n")
        work = os.path.join(self.out, "work")
        self.assertEqual([name for name in os.listdir(work) if not name.startswith(".repo-")], [])
        self.assertEqual(len(git(self.repo, "worktree", "list").splitlines()), 1)
        self.assertEqual(git(self.repo, "status", "--porcelain"), "")

    def test_two_tasks_ran_on_the_same_repo_at_once(self):
        spans, open_at = [], {}
        for event in self.first_events + [json.loads(line) for line in self.second.stdout.splitlines()]:
            if event["type"] == "task_start":
                open_at[event["id"]] = event["t"]
            elif event["type"] == "task_end" and event["id"] in open_at:
                spans.append((open_at.pop(event["id"]), event["t"]))
        overlapping = any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1:])
        self.assertTrue(overlapping, spans)

    def test_print_commands_through_xargs_then_collect_give_the_same_results(self):
        out = os.path.join(self.root, "by-xargs")
        printed = subprocess.run([sys.executable, BATCH, self.tasks, "--out", out, "--print-commands"],
                                 env=self.env, capture_output=True, text=True, cwd=self.root)
        self.assertEqual(printed.returncode, 0, printed.stderr)
        commands = printed.stdout.splitlines()
        self.assertEqual(len(commands), 6)
        self.assertTrue(all("--run-one" in line and "--task" in line and KEY not in line
                            for line in commands))
        ran = subprocess.run(["xargs", "-d", "\n", "-n", "1", "-P", "3", "sh", "-c"], input=printed.stdout,
                             env=self.env, capture_output=True, text=True, cwd="/", timeout=300)
        self.assertEqual(ran.returncode, 123, ran.stderr)   # xargs: some command exited 1 (t2, t3)
        self.assertFalse(os.path.exists(os.path.join(out, "results.jsonl")))
        collected = subprocess.run([sys.executable, BATCH, self.tasks, "--out", out, "--collect"],
                                   env=self.env, capture_output=True, text=True, cwd=self.root)
        self.assertEqual(collected.returncode, 1, collected.stderr)
        self.assertIn("collected 6 new result(s)", collected.stdout)
        by_xargs = {key: comparable(line)
                    for key, line in final(read_lines(os.path.join(out, "results.jsonl"))).items()}
        by_pool = {key: comparable(line) for key, line in final(self.lines()).items()}
        self.assertEqual(by_xargs, by_pool)
        again = subprocess.run([sys.executable, BATCH, self.tasks, "--out", out, "--print-commands"],
                               env=self.env, capture_output=True, text=True, cwd=self.root)
        self.assertEqual(again.stdout, "")


class BatchInputs(HermeticTestCase):
    """What a task file or command line controls, turned against the batch."""

    def batch(self, *args):
        return self.run_tool("nagent-batch", *args)

    def test_a_task_id_that_climbs_out_is_refused_before_anything_is_made(self):
        make_repo(os.path.join(self.cwd, "r"))
        write_tasks("t.jsonl", [{"id": "../../x", "prompt": "p", "repo": "r"}])
        proc = self.batch("t.jsonl")
        self.assertCleanError(proc, 6, "invalid task id")
        self.assertFalse(os.path.exists("t.out"))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "x")))

    def test_bad_task_files_name_the_line(self):
        make_repo(os.path.join(self.cwd, "r"))
        cases = [({"id": "a", "prompt": "p", "repo": "r", "max-cost": 1}, "unknown task key"),
                 ({"id": "a", "prompt": "p", "repo": "ext::sh -c id"}, "neither a directory"),
                 ({"id": "a", "prompt": "p", "repo": "r", "ref": "--upload-pack=x"}, "invalid `ref`"),
                 ({"id": "a", "prompt": "p", "repo": "r", "max_cost": True}, "max_cost"),
                 ({"id": "a", "prompt": "", "repo": "r"}, "prompt")]
        for task, message in cases:
            write_tasks("t.jsonl", [task])
            self.assertCleanError(self.batch("t.jsonl"), 6, message)
        write_tasks("t.jsonl", [{"id": "A", "prompt": "p", "repo": "r"},
                                {"id": "a", "prompt": "p", "repo": "r"}])
        self.assertCleanError(self.batch("t.jsonl"), 6, "line 2: task id already used on line 1")

    def test_an_out_folder_that_is_no_batch_is_refused(self):
        make_repo(os.path.join(self.cwd, "r"))
        write_tasks("t.jsonl", [{"id": "a", "prompt": "p", "repo": "r"}])
        self.write_file("precious/notes.txt", "mine")
        self.assertCleanError(self.batch("t.jsonl", "--out", "precious"), 2, "holds no batch")
        self.assertEqual(os.listdir("precious"), ["notes.txt"])

    def test_a_setup_that_never_ends_is_ended_at_its_timeout_on_a_terminal(self):
        make_repo(os.path.join(self.cwd, "r"))
        pidfile = os.path.join(self.tmp, "setup.pid")
        write_tasks("t.jsonl", [{"id": "a", "prompt": "p", "repo": "r",
                                 "setup": f"echo $$ > '{pidfile}'; sleep 4321.5 & wait"}])
        env = {name: value for name, value in self.env.items() if name != "NAGENT_NO_SPINNER"}
        code, screen, _ = answer_on_pty([sys.executable, BATCH, "t.jsonl", "--setup-timeout", "1"], env,
                                        self.cwd, [])
        screen = screen.decode("utf-8", "replace")
        self.assertEqual(code, 1, screen)
        self.assertIn("\rnagent-batch 0/1 done · 0 failed · 1 running · $0.0000 · ETA ?", screen)
        self.assertIn("  failed a: setup timed out after 1 s", screen)
        self.assertNotIn("\x1b", screen)                  # a plain line, no escape sequence
        line = read_lines("t.out/results.jsonl")[0]
        self.assertLess(line["wall_s"], 20)
        self.assertEqual((line["failure"], line["reason"], line["calls"]),
                         ("setup", "setup timed out after 1 s", 0))
        with open(pidfile, encoding="utf-8") as handle:
            pid = int(handle.read())
        self.assertEqual(own_processes("4321.5"), [])
        self.assertFalse(os.path.exists(f"/proc/{pid}"))
        self.assertEqual(len(git("r", "worktree", "list").splitlines()), 1)


if __name__ == "__main__":
    unittest.main()
