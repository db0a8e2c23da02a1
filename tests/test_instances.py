"""Issue 14: running instances. Every running nagent (and sub-agent) keeps a run file under
~/.nagent/run/, removed when it ends (a signal included); `nagent --ps [--json]` shows them as a
tree; `--status` of a running conversation says so; a crashed run's file (dead pid, or a pid
reused by another process) is cleaned up by the next read.
"""
import json
import os
import signal
import subprocess
import sys
import time

from base import HermeticTestCase
from fakes import ReplySpec
from test_parallel_agents import PARENT, USAGE, ParallelCase, agents
from test_processes import wait_for
from test_shell import sleepers

import nagent_instances as instances
from nagent_conversation_lock import conversation_lock
from nagent_pids import start_ticks


class PsDuringRun(ParallelCase):
    def test_ps_tree_json_status_and_cleanup_on_sigterm(self):
        def child(task, _record):
            return ReplySpec(f"<nagent-shell>\nsleep 30.{ord(task[-1])}\n</nagent-shell>", usage=USAGE)

        self.route([ReplySpec(agents("task-A", "task-B"), usage=USAGE)], child)
        proc = self.start_nagent("--conversation", "psrun", PARENT)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        env = self.env

        def shells_running():
            # the parent notes "2 of 2 running" at its next look at the children, which forked
            # children can beat to their shell actions
            found = instances.list_instances(env)
            return len(found) == 3 and sum(1 for item in found
                                           if (item.get("action") or "").startswith("shell: sleep")) == 2 \
                and any(item.get("action") == "agents: 2 of 2 running" for item in found)

        self.assertTrue(wait_for(shells_running, 60), instances.list_instances(env))
        listing = self.nagent("--ps", "--json")
        self.assertEqual(listing.returncode, 0, listing.stderr)
        tree = json.loads(listing.stdout)["instances"]
        self.assertEqual(len(tree), 1, tree)
        root = tree[0]
        self.assertEqual((root["pid"], root["name"], root["depth"]), (proc.pid, "psrun", 0))
        self.assertEqual(root["action"], "agents: 2 of 2 running")
        self.assertEqual(len(root["children"]), 2)
        for node in root["children"]:
            self.assertEqual((node["depth"], node["parent_pid"]), (1, proc.pid))
            self.assertTrue(node["name"].startswith("agent-"))
            self.assertTrue(node["parent_conversation"].endswith("/psrun"))
            self.assertTrue(node["action"].startswith("shell: sleep 30."))
            self.assertGreaterEqual(node["calls"], 1)
            self.assertEqual(node["children"], [])
        text = self.nagent("--ps").stdout.splitlines()
        self.assertEqual(len(text), 4, text)
        self.assertTrue(text[1].startswith(str(proc.pid)))
        self.assertIn("psrun", text[1])
        self.assertTrue(text[2].startswith("├─ ") and text[3].startswith("└─ "), text)
        status = self.nagent("--status", "--conversation", "psrun")
        self.assertIn(f"running: pid {proc.pid} for ", status.stdout)
        status_json = json.loads(self.nagent("--status", "--json", "--conversation", "psrun").stdout)
        self.assertEqual(status_json["running"]["pid"], proc.pid)
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 143, err)
        self.assertEqual(os.listdir(os.path.join(self.home, ".nagent", "run")), [])
        self.assertEqual(self.nagent("--ps").stdout.strip(), "no nagent is running")
        idle = json.loads(self.nagent("--status", "--json", "--conversation", "psrun").stdout)
        self.assertIsNone(idle["running"])

    def test_a_killed_run_leaves_a_file_the_next_read_cleans_up(self):
        self.fake.reply("<nagent-shell>\nsleep 30.991\n</nagent-shell>", usage=USAGE)
        proc = self.start_nagent("--conversation", "crash", "go")
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        path = instances.run_file_path(proc.pid, self.env)
        self.assertTrue(wait_for(lambda: "shell" in str((instances.read_run_file(proc.pid, self.env)
                                                          or {}).get("action")), 60))
        proc.kill()       # no cleanup runs: the file stays
        proc.communicate(timeout=30)
        self.assertTrue(os.path.exists(path))
        listing = self.nagent("--ps", "--json")
        self.assertEqual(json.loads(listing.stdout), {"instances": []})
        self.assertFalse(os.path.exists(path))
        for pid in sleepers("30.991"):   # the killed run's shell command, by pid
            os.kill(pid, signal.SIGKILL)


class RunFiles(HermeticTestCase):
    """In-process: stale files, reused pids, temp files, the tree."""

    def write_run(self, pid, **fields):
        folder = instances.run_dir(self.env)
        os.makedirs(folder, exist_ok=True)
        record = dict({"pid": pid, "start_ticks": start_ticks(pid), "started_at": time.time(),
                       "conversation": f"/c/{pid}"}, **fields)
        path = os.path.join(folder, f"{pid}.json")
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        return path

    def dead_pid(self):
        proc = subprocess.Popen([sys.executable, "-c", "pass"])
        proc.wait()
        return proc.pid

    def test_stale_and_reused_pid_files_are_removed(self):
        dead = self.write_run(self.dead_pid(), start_ticks=1)
        reused = self.write_run(os.getpid(), start_ticks=(start_ticks(os.getpid()) or 0) + 1)
        folder = instances.run_dir(self.env)
        temp = os.path.join(folder, f".{self.dead_pid()}.json.0123456789ab.tmp")
        with open(temp, "w", encoding="utf-8") as handle:
            handle.write("{")
        self.assertEqual(instances.list_instances(self.env), [])
        for path in (dead, reused, temp):
            self.assertFalse(os.path.exists(path), path)
        # A live pid with its start ticks is a running nagent while it holds its conversation's lock.
        conversation = os.path.join(self.home, ".nagent", "conversations", "live")
        live = self.write_run(os.getpid(), conversation=conversation)
        with conversation_lock(conversation):
            self.assertEqual([item["pid"] for item in instances.list_instances(self.env)],
                             [os.getpid()])
        self.assertTrue(os.path.exists(live))

    def test_a_planted_fifo_or_link_is_skipped_without_blocking(self):
        folder = instances.run_dir(self.env)
        os.makedirs(folder)
        os.mkfifo(os.path.join(folder, f"{os.getpid()}.json"))
        secret = self.write_file("secret.json", json.dumps({"pid": 1, "conversation": "/x"}))
        os.symlink(secret, os.path.join(folder, "1.json"))
        self.assertEqual(instances.list_instances(self.env), [])   # returns: the FIFO is not opened
        proc = self.run_tool("nagent", "--ps", timeout=30)
        self.assertEqual(proc.stdout.strip(), "no nagent is running")

    def test_run_file_lifecycle(self):
        run_file = instances.RunFile.create(self.env, conversation="/c/x", depth=0)
        record = instances.read_run_file(os.getpid(), self.env)
        self.assertEqual((record["pid"], record["conversation"], record["start_ticks"]),
                         (os.getpid(), "/c/x", start_ticks(os.getpid())))
        self.assertEqual(os.stat(run_file.path).st_mode & 0o777, 0o600)
        run_file.update(action="shell: ls", tokens={"input": 5, "output": 1})
        self.assertEqual(instances.read_run_file(os.getpid(), self.env)["action"], "shell: ls")
        self.assertEqual(os.listdir(instances.run_dir(self.env)), [f"{os.getpid()}.json"])
        run_file.remove()
        run_file.remove()
        self.assertEqual(os.listdir(instances.run_dir(self.env)), [])

    def test_tree_links_children_by_pid_then_conversation(self):
        rows = [{"pid": 1, "conversation": "/c/a", "parent_pid": None},
                {"pid": 2, "conversation": "/c/b", "parent_pid": 1},
                {"pid": 3, "conversation": "/c/c", "parent_pid": 99, "parent_conversation": "/c/b"},
                {"pid": 4, "conversation": "/c/d", "parent_pid": 5},
                {"pid": 5, "conversation": "/c/e", "parent_pid": 4},
                {"pid": 6, "conversation": "/c/f", "parent_pid": 77}]
        roots = instances.instance_tree(rows)
        self.assertEqual([root["pid"] for root in roots], [1, 4, 5, 6])
        self.assertEqual([child["pid"] for child in roots[0]["children"]], [2])
        self.assertEqual([child["pid"] for child in roots[0]["children"][0]["children"]], [3])
