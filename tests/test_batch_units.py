"""nagent-batch's parts that need no model: workspaces and their removal, the results file as a
user may leave it, resume selection, the batch budget, task locks, and the nagent command line."""
import json
import os

from base import HermeticTestCase
from batch_fixture import git, make_repo, read_lines, write_tasks

import nagent_batch_dask
import nagent_batch_store as store
import nagent_batch_workspace as workspace
from nagent_batch_exec import Outcome, RunOptions, new_result
from nagent_batch_pool import BatchOptions, prepare, take_task
from nagent_batch_tasks import Task, load_tasks, nagent_argv, task_sha


def stored_line(task_id, status, cost=0.0, sha=None, attempt="20260101T000000Z-0000000a"):
    return {"id": task_id, "attempt": attempt, "status": status,
            "failure": None if status == "ok" else "check", "reason": None, "cost_usd": cost,
            "task_sha": sha}


class WorkspaceTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.repo = make_repo(os.path.join(self.cwd, "repo"))
        self.workdir = os.path.join(self.cwd, "work")
        self.outside = self.make_outside_dir()
        self.write_file(os.path.join(self.outside, "precious.txt"), "keep\n")

    def make(self, name="t.1", **task):
        return workspace.create(Task(id="t", prompt="p", repo=task.pop("repo", self.repo), **task),
                                self.workdir, name, self.env)

    def test_links_out_are_removed_as_links_and_the_repo_is_left_clean(self):
        ws = self.make()
        os.symlink(self.outside, os.path.join(ws.path, "escape-dir"))
        os.symlink(os.path.join(self.outside, "precious.txt"), os.path.join(ws.path, "escape-file"))
        self.write_file(os.path.join(ws.path, "new.txt"), "new\n")
        diff = workspace.diff(ws, self.env)
        self.assertIn("new file mode 120000", diff)
        self.assertIn("+++ b/new.txt", diff)
        self.assertEqual(git(ws.path, "status", "--porcelain", "--untracked-files=no"), "")  # nothing staged
        self.assertIsNone(workspace.remove(ws, self.env))
        self.assertFalse(os.path.lexists(ws.path))
        self.assertEqual(os.listdir(self.outside), ["precious.txt"])
        self.assertEqual(len(git(self.repo, "worktree", "list").splitlines()), 1)

    def test_a_path_that_now_leads_elsewhere_is_left_alone(self):
        ws = self.make()
        os.rename(ws.path, ws.path + ".moved")
        os.symlink(self.outside, ws.path)               # the same name, now a link out
        self.assertIn("left alone", workspace.remove(ws, self.env))
        self.assertEqual(os.listdir(self.outside), ["precious.txt"])
        os.unlink(ws.path)
        os.mkdir(ws.path)                               # a directory of the same name, not ours
        self.write_file(os.path.join(ws.path, "theirs.txt"), "x")
        self.assertIn("left alone", workspace.remove(ws, self.env))
        self.assertTrue(os.path.exists(os.path.join(ws.path, "theirs.txt")))

    def test_a_url_is_cloned_at_its_ref(self):
        git(self.repo, "checkout", "-q", "-b", "other")
        self.write_file(os.path.join(self.repo, "b.txt"), "b\n")
        git(self.repo, "add", "b.txt")
        git(self.repo, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "b")
        git(self.repo, "checkout", "-q", "-")
        ws = self.make(repo=f"file://{self.repo}", ref="other")
        self.assertEqual(ws.kind, "clone")
        self.assertTrue(os.path.isfile(os.path.join(ws.path, "b.txt")))
        self.assertEqual(ws.base, git(self.repo, "rev-parse", "other").strip())
        self.assertIsNone(workspace.remove(ws, self.env))
        self.assertFalse(os.path.lexists(ws.path))

    def test_a_missing_ref_is_a_clear_error_and_a_name_is_never_reused(self):
        with self.assertRaises(workspace.WorkspaceError) as caught:
            self.make(ref="no-such-branch")
        self.assertIn("ref not found", caught.exception.line())
        self.make()
        with self.assertRaises(FileExistsError):
            self.make()

    def test_the_nagent_command_carries_no_key_and_a_fresh_named_conversation(self):
        argv = nagent_argv(Task(id="t", prompt="-rf /", repo="/r", model="gpt-5-mini", max_cost=1.0),
                           "batch-0-t-1", "b-1")
        self.assertEqual(argv[-1], "-")                 # the prompt goes on stdin, never in argv
        self.assertNotIn("-rf /", argv)
        for expected in (["--conversation", "batch-0-t-1"], ["-n"], ["--events"], ["--model=gpt-5-mini"],
                         ["--max-cost=1.0"]):   # the task's budget is nagent's own (exit 13)
            self.assertTrue(any(argv[i:i + len(expected)] == expected for i in range(len(argv))), expected)


class ResultsFileTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        make_repo(os.path.join(self.cwd, "r"))
        write_tasks("t.jsonl", [{"id": name, "prompt": f"p {name}", "repo": "r"} for name in ("a", "b", "c")])
        self.tasks = load_tasks("t.jsonl")
        os.makedirs("t.out")

    def write_results(self, *lines, tail=""):
        with open("t.out/results.jsonl", "w", encoding="utf-8") as handle:
            handle.write("".join(json.dumps(line) + "\n" for line in lines) + tail)

    def killed_attempt(self):
        """(task a, OUT, workdir, attempt, Workspace): what a batch killed mid-attempt leaves."""
        a = self.tasks[0]
        out, attempt = os.path.abspath("t.out"), "20260101T000000Z-0000000a"
        workdir = os.path.join(out, "work")
        with self.patched_environ():
            ws = workspace.create(a, workdir, f"a.{attempt}", self.env,
                                  lambda made: store.write_manifest(workdir, made, a, attempt, "conv"))
        return a, out, workdir, attempt, ws

    def printed(self, *args):
        proc = self.run_tool("nagent-batch", "t.jsonl", "--print-commands", *args)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return [line.split("--run-one ", 1)[1].split()[0] for line in proc.stdout.splitlines()], proc.stderr

    def test_what_runs_again_after_hand_edits(self):
        a, b, c = self.tasks
        self.write_results(stored_line("a", "ok", sha=task_sha(a)), stored_line("b", "failed"),
                           stored_line("c", "ok", sha="0" * 16), tail='{"id": "a", "sta')
        todo, warnings = self.printed()
        self.assertEqual(todo, ["c"])                    # a done, b failed, c's task changed
        self.assertIn("line 4 is not a result", warnings)
        self.assertIn("task c changed since its result", warnings)
        self.assertEqual(self.printed("--retry-failed")[0], ["b", "c"])
        store.append(os.path.abspath("t.out"),
                     stored_line("a", "interrupted", attempt="20260101T000001Z-0000000b"))
        with open("t.out/results.jsonl", encoding="utf-8") as handle:
            self.assertEqual(handle.read().splitlines()[-2:],
                             ['{"id": "a", "sta', json.dumps(stored_line("a", "interrupted",
                                                              attempt="20260101T000001Z-0000000b"),
                                                              separators=(",", ":"))])
        self.assertEqual(self.printed()[0], ["a", "c"])

    def test_a_batch_killed_between_storing_and_appending_loses_nothing(self):
        a, out, workdir, attempt, ws = self.killed_attempt()
        with self.patched_environ():
            store.store(out, Outcome(new_result("a", attempt, task_sha(a)), {}, ws))   # then killed
            results, todo, _ = prepare(self.tasks, BatchOptions(out, 1, RunOptions(workdir)))
        self.assertEqual((results.latest["a"]["status"], results.latest["a"]["attempt"]), ("ok", attempt))
        self.assertEqual(len(results.lines), 1)
        self.assertEqual([task.id for task in todo], ["b", "c"])
        self.assertEqual([name for name in os.listdir(workdir) if not name.startswith(".repo-")], [])

    def test_a_batch_killed_while_writing_a_manifest_leaves_nothing_once_run_again(self):
        # The kill lands between the workspace's mkdir and its manifest's rename: the temp file
        # of the manifest and the still empty directory are all that is left.
        out, attempt = os.path.abspath("t.out"), "20260101T000000Z-0000000a"
        workdir = os.path.join(out, "work")
        os.makedirs(os.path.join(workdir, f"a.{attempt}"))
        self.write_file(os.path.join(workdir, f".a.{attempt}.json.0123456789ab.tmp"), '{"id": "a"')
        # Earlier still: after the mkdir, before the manifest's temp file (CI found one).
        os.makedirs(os.path.join(workdir, "c.20260101T000000Z-0000000c"))
        other = "20260101T000000Z-0000000b"                     # not empty: git ran, or not ours
        self.write_file(os.path.join(workdir, f"b.{other}", "kept.txt"), "x")
        self.write_file(os.path.join(workdir, f".b.{other}.json.0123456789ab.tmp"), "")
        with self.patched_environ():
            results, todo, _ = prepare(self.tasks, BatchOptions(out, 1, RunOptions(workdir)))
        self.assertEqual([task.id for task in todo], ["a", "b", "c"])
        self.assertEqual(sorted(name for name in os.listdir(workdir) if not name.startswith(".repo-")),
                         [f"b.{other}"])

    def test_an_attempt_whose_lock_outlived_the_kill_is_recovered_once_the_task_is_ours(self):
        # At the restart, something of the killed attempt still held the task's lock: the
        # batch's first look passes its workspace by ("still running somewhere"). Once the
        # task's lock is this batch's, before the task runs again, nothing of it may be left
        # (CI once found the workspace and its manifest after the second batch ended).
        a, out, workdir, attempt, _ = self.killed_attempt()
        with self.patched_environ():
            held = store.task_lock(out, "a")
            results, todo, _ = prepare(self.tasks, BatchOptions(out, 1, RunOptions(workdir)))
            self.assertEqual([task.id for task in todo], ["a", "b", "c"])
            self.assertIn(f"a.{attempt}", os.listdir(workdir))
            os.close(held)
            lock = take_task(a, out, RunOptions(workdir), patience=5.0)
        self.assertIsNotNone(lock)
        os.close(lock)
        self.assertEqual([name for name in os.listdir(workdir) if not name.startswith(".repo-")], [])
        self.assertEqual([(line["id"], line["attempt"], line["status"])
                          for line in read_lines("t.out/results.jsonl")],
                         [("a", attempt, "interrupted")])

    def test_run_one_stores_a_recovered_attempt_for_collect_to_append(self):
        # --run-one appends nothing to results.jsonl (the collecting command does): neither
        # its own line nor the line of an attempt it recovers.
        a, out, workdir, attempt, _ = self.killed_attempt()
        with self.patched_environ():
            lock = take_task(a, out, RunOptions(workdir), patience=0, append=False)
        self.assertIsNotNone(lock)
        os.close(lock)
        self.assertEqual([name for name in os.listdir(workdir) if not name.startswith(".repo-")], [])
        self.assertFalse(os.path.exists("t.out/results.jsonl"))
        self.assertEqual([(line["id"], line["attempt"], line["status"]) for line in store.collect(out)],
                         [("a", attempt, "interrupted")])

    def test_a_workspace_recovery_could_not_remove_keeps_its_manifest(self):
        # The manifest is the only record of a workspace: dropped while the directory stays, the
        # workspace would be left for good (a run's own removal already kept it; recovery did
        # not). Here the path leads to another directory now, which is never removed.
        a, out, workdir, attempt, ws = self.killed_attempt()
        with self.patched_environ():
            os.rename(ws.path, ws.path + ".moved")
            os.makedirs(ws.path)
            prepare(self.tasks, BatchOptions(out, 1, RunOptions(workdir)))
            self.assertTrue(os.path.isdir(ws.path))
            self.assertTrue(os.path.exists(store.manifest_path(workdir, "a", attempt)))
            prepare(self.tasks, BatchOptions(out, 1, RunOptions(workdir)))
        self.assertEqual([(line["id"], line["status"]) for line in read_lines("t.out/results.jsonl")],
                         [("a", "interrupted")], "stored once, however often it is looked at")

    def test_deleting_a_line_by_hand_runs_the_task_again(self):
        out = os.path.abspath("t.out")
        for task in self.tasks[:2]:
            attempt = f"20260101T000000Z-0000000{task.id}"
            outcome = Outcome(new_result(task.id, attempt, task_sha(task)), {}, None)
            store.append(out, store.store(out, outcome))
        self.assertEqual(self.printed()[0], ["c"])
        with open("t.out/results.jsonl", encoding="utf-8") as handle:
            kept = [line for line in handle if '"id":"a"' not in line]
        with open("t.out/results.jsonl", "w", encoding="utf-8") as handle:
            handle.writelines(kept)
        self.assertEqual(self.printed()[0], ["a", "c"])
        self.assertEqual(store.collect(out), [])      # the stored attempt is not brought back

    def test_the_batch_budget_starts_nothing_past_it(self):
        self.write_results(stored_line("a", "ok", cost=5.0, sha=task_sha(self.tasks[0])))
        proc = self.run_tool("nagent-batch", "t.jsonl", "--max-cost", "1", "--json")
        self.assertEqual(proc.returncode, 9, proc.stderr)
        summary = json.loads(proc.stdout)
        self.assertEqual((summary["ok"], summary["not_started"], summary["ran"]), (1, ["b", "c"], 0))
        self.assertEqual(len(read_lines("t.out/results.jsonl")), 0)   # the fixture's line has no folder
        self.assertFalse(os.path.exists("t.out/tasks"))

    def test_run_one_refuses_a_task_another_process_holds(self):
        out = os.path.abspath("t.out")
        lock = store.task_lock(out, "a")
        self.addCleanup(os.close, lock)
        task = json.dumps({"id": "a", "prompt": "p a", "repo": os.path.join(self.cwd, "r")})
        proc = self.run_tool("nagent-batch", "--run-one", "a", "--task", task, "--out", out)
        self.assertCleanError(proc, 7, "running elsewhere")
        self.assertFalse(os.path.exists(os.path.join(out, "work")))
        proc = self.run_tool("nagent-batch", "--run-one", "b", "--task", task, "--out", out)
        self.assertCleanError(proc, 2, "differ")


class ForgedManifestTest(HermeticTestCase):
    """A manifest is data a task's own commands may write: the workdir is the workspace's
    parent (writable to a sandboxed command when it lies in a temp root, and to an unsandboxed
    one always). Recovery trusts none of its paths, names or revisions (found in review)."""
    FORGED = "20260101T000000Z-0000000f"

    def setUp(self):
        super().setUp()
        make_repo(os.path.join(self.cwd, "r"))
        write_tasks("t.jsonl", [{"id": n, "prompt": f"p {n}", "repo": "r"} for n in ("a", "b")])
        self.tasks = load_tasks("t.jsonl")
        self.out = os.path.abspath("t.out")
        self.workdir = os.path.join(self.out, "work")
        os.makedirs(self.workdir)
        self.outside = self.make_outside_dir()
        self.write_file(os.path.join(self.outside, "precious", "keep.txt"), "keep\n")

    def forge(self, task_id, path, ident=(0, 0), kind="clone", admin=None, conversation="conv",
              repo="x", base=""):
        data = {"id": task_id, "attempt": self.FORGED, "task_sha": None,
                "conversation": conversation,
                "workspace": {"path": path, "kind": kind, "repo": repo, "base": base,
                              "ident": list(ident), "admin": admin}}
        self.write_file(store.manifest_path(self.workdir, task_id, self.FORGED), json.dumps(data))

    def take(self, task):
        with self.patched_environ():
            lock = take_task(task, self.out, RunOptions(self.workdir), patience=0)
        self.assertIsNotNone(lock)
        os.close(lock)

    def test_an_admin_directory_outside_the_repository_is_never_removed(self):
        own = os.path.join(self.workdir, f"b.{self.FORGED}")
        os.makedirs(own)
        info = os.stat(own)
        self.forge("b", own, ident=(info.st_dev, info.st_ino), kind="worktree",
                   repo=os.path.join(self.cwd, "r"), admin=os.path.join(self.outside, "precious"))
        self.take(self.tasks[1])
        self.assertTrue(os.path.exists(os.path.join(self.outside, "precious", "keep.txt")))

    def test_a_workspace_path_is_the_manifests_own_name_in_the_workdir(self):
        info = os.stat(self.out)
        self.write_file("t.out/results.jsonl", "")
        self.forge("b", self.workdir + "/..", ident=(info.st_dev, info.st_ino))
        self.take(self.tasks[1])
        self.assertTrue(os.path.exists(os.path.join(self.out, "results.jsonl")))
        self.assertTrue(os.path.isdir(self.workdir))

    def test_another_tasks_live_workspace_is_left_alone(self):
        a, attempt = self.tasks[0], "20260101T000000Z-0000000a"
        with self.patched_environ():
            ws = workspace.create(a, self.workdir, f"a.{attempt}", self.env,
                                  lambda made: store.write_manifest(self.workdir, made, a, attempt,
                                                                    "conv"))
        held = store.task_lock(self.out, "a")          # a is running
        self.addCleanup(os.close, held)
        self.write_file(os.path.join(ws.path, "work-in-progress.txt"), "x")
        self.forge("b", ws.path, ident=ws.ident, kind="worktree", repo=ws.repo, admin=ws.admin)
        self.take(self.tasks[1])
        self.assertTrue(os.path.exists(os.path.join(ws.path, "work-in-progress.txt")))
        self.assertTrue(os.path.isdir(ws.admin))

    def test_a_conversation_or_revision_it_names_is_never_used(self):
        own = os.path.join(self.workdir, f"b.{self.FORGED}")
        os.makedirs(own)
        info = os.stat(own)
        target = os.path.join(self.outside, "written")
        self.forge("b", own, ident=(info.st_dev, info.st_ino), base=f"--output={target}")
        self.take(self.tasks[1])                        # not a revision: not a manifest
        self.assertFalse(os.path.exists(target))
        self.forge("b", own, ident=(info.st_dev, info.st_ino), conversation="../../etc/passwd")
        with self.patched_environ():                    # before: UsageError, every batch after
            prepare(self.tasks, BatchOptions(self.out, 1, RunOptions(self.workdir)))
        self.assertFalse(os.path.isdir(own))
        line, = read_lines("t.out/results.jsonl")
        self.assertEqual((line["id"], line["status"]), ("b", "interrupted"))
        self.assertTrue(line["conversation"] is None or "passwd" not in line["conversation"], line)


class LostWorker(Exception):
    """Stands for distributed's KilledWorker: the scheduler gave up on a task."""


class Gone:
    def __init__(self, error):
        self.error = error

    def result(self):
        raise self.error


class DaskSettlingTest(HermeticTestCase):
    def test_a_task_dask_gave_up_on_is_stored_once_as_failed_with_the_reason(self):
        task = Task(id="t", prompt="p", repo="/r")
        outcome, address = nagent_batch_dask.settled(Gone(LostWorker("Attempted to run task t on 4 "
                                                                      "different workers")), task, LostWorker)
        self.assertIsNone(address)
        self.assertIsNone(outcome.workspace)
        self.assertEqual((outcome.result["status"], outcome.result["failure"]), ("failed", "lost"))
        self.assertIn("dask lost the workers running it: Attempted to run task t on 4",
                      outcome.result["reason"])
        out = os.path.abspath("out")
        os.makedirs(out)
        store.append(out, store.store(out, outcome))
        self.assertEqual([line["reason"] for line in read_lines(os.path.join(out, "results.jsonl"))],
                         [outcome.result["reason"]])
