"""Issue 10 item 8: no process outlives nagent.

- A sub-agent that times out is ended with its whole tree, including the shell commands it runs
  in sessions of their own (`sleep N; echo > file` never writes the file), and its tokens still
  count in the parent's totals (read from its conversation's last stats record).
- SIGTERM and SIGHUP to nagent end its running shell command's process group, append an
  interrupt record naming the signal, and exit 143 / 129.
- Child conversations are named agent-{full uuid}-{the conversation pid passed through}.
- Library: ending a child that ignores SIGTERM escalates to SIGKILL for it and for a grandchild
  in another session.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

from base import HermeticTestCase, startup_seconds
from fakes import ReplySpec
from test_loop import NagentRunCase
from test_shell import sleepers, wait_gone

import nagent_procs

USAGE = {"input": 100, "cache_read": 0, "cache_write": 0, "output": 10, "reasoning": 0}
CHILD_USAGE = {"input": 7000, "cache_read": 0, "cache_write": 0, "output": 70, "reasoning": 0}


def wait_for(predicate, limit=30.0):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


class SubAgentTimeout(NagentRunCase):
    def setUp(self):
        super().setUp()
        # Long enough for the child to start (a fresh interpreter importing the SDK), make its
        # call and reach its shell command, whose sleep outlasts it: measured here, as
        # FailingSiblings does. A fixed 4 s cut the child off before its call at load 20.
        self.timeout = max(4, round(3 * startup_seconds() + 2))
        self.sleep = f"{self.timeout + 1}.371"
        self.write_config(dict(self.CONFIG, agent_timeout=self.timeout))

    def test_timed_out_child_tree_ends_and_tokens_count(self):
        late, begun = os.path.join(self.cwd, "late.txt"), os.path.join(self.cwd, "begun.txt")
        parent_calls = []

        def reply(record):
            # By conversation, not by arrival order: the child's call may come late.
            if "delegate it" not in json.dumps(record.get("json")):
                return ReplySpec(f"<nagent-shell>\ndate +%s.%N > {begun}; sleep {self.sleep}; "
                                 f"echo late > {late}\n</nagent-shell>",
                                 usage=CHILD_USAGE)
            parent_calls.append(record)
            if len(parent_calls) > 1:
                return ReplySpec("<nagent-response>parent done</nagent-response>", usage=USAGE)
            return ReplySpec("<nagent-agent>\nslow task\n</nagent-agent>", usage=USAGE)

        self.fake.reply_fn(reply)
        proc = self.nagent("--json", "--pid", "4242", "delegate it")
        data = self.json_of(proc)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(data["response"], "parent done")
        self.assertEqual(sleepers(self.sleep), [])       # nothing left in the process table
        self.assertEqual(data["totals"]["input_tokens"], 7200)   # the child's call counts
        self.assertEqual(data["totals"]["output_tokens"], 90)
        results = self.kinds(self.default_path("4242"), "result")
        self.assertEqual(len(results), 1, [r.body for r in results])
        self.assertIn(f"timed out after {self.timeout} s", results[0].body)
        self.assertIn('tokens_in="7000"', results[0].body)
        name = re.search(r'conversation="([^"]+)"', results[0].body).group(1)
        self.assertRegex(name, r"^agent-[0-9a-f]{32}-4242$")
        child = self.records(self.named_path(name))
        self.assertEqual(child[-1].kind, "interrupt")
        self.assertIn("SIGTERM", child[-1].body)
        with open(begun) as handle:   # when the sleep began (wall clock): wait past its end
            time.sleep(max(0.0, float(handle.read()) + float(self.sleep) + 0.3 - time.time()))
        self.assertFalse(os.path.exists(late))


class ExitSignals(NagentRunCase):
    def run_and_signal(self, signum, marker):
        late = os.path.join(self.cwd, f"late-{marker}.txt")
        self.fake.reply(f"<nagent-shell>\nsleep {marker}; echo late > {late}\n</nagent-shell>")
        proc = self.start_nagent("--conversation", f"sig-{signum}", "wait")
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.assertTrue(wait_for(lambda: sleepers(marker)), "the shell command never started")
        started = time.monotonic()   # the sleep is running from here at the latest
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=30)
        self.assertEqual(sleepers(marker), [])
        return proc.returncode, err, late, started

    def test_sigterm_and_sighup_end_the_shell_group_and_are_recorded(self):
        for signum, code, name, marker in ((signal.SIGTERM, 143, "SIGTERM", "2.417"),
                                            (signal.SIGHUP, 129, "SIGHUP", "2.418")):
            with self.subTest(signal=name):
                returncode, err, late, started = self.run_and_signal(signum, marker)
                self.assertEqual(returncode, code, err)
                self.assertNotIn("Traceback", err)
                self.assertIn(f"Error: ended by {name}", err)
                records = self.records(self.named_path(f"sig-{signum}"))
                self.assertEqual(records[-1].kind, "interrupt")
                self.assertIn(f"ended by {name}", records[-1].body)
        time.sleep(max(0.0, started + 2.418 + 0.3 - time.monotonic()))   # the later sleep's end
        self.assertEqual([f for f in os.listdir(self.cwd) if f.startswith("late-")], [])


class SignalWithSubAgent(NagentRunCase):
    def test_sigterm_to_the_parent_ends_the_child_and_its_commands(self):
        self.fake.reply("<nagent-agent>\nslow task\n</nagent-agent>", usage=USAGE)
        self.fake.reply("<nagent-shell>\nsleep 6.127\n</nagent-shell>", usage=CHILD_USAGE)
        proc = self.start_nagent("--conversation", "parent", "delegate")
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.assertTrue(wait_for(lambda: sleepers("6.127")), "the child's command never started")
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 143, err)
        self.assertEqual(sleepers("6.127"), [])
        parent = self.records(self.named_path("parent"))
        self.assertEqual(parent[-1].kind, "interrupt")
        children = [name for name in os.listdir(self.conversations) if name.startswith("agent-")
                    and "." not in name]
        self.assertEqual(len(children), 1, children)
        child = self.records(self.named_path(children[0]))
        self.assertEqual((child[-1].kind, "SIGTERM" in child[-1].body), ("interrupt", True))


class EndProcessTree(HermeticTestCase):
    def test_child_ignoring_sigterm_and_its_other_session_are_killed(self):
        code = ("import os, signal, subprocess, sys, time\n"
                "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                "subprocess.Popen(['sleep', '97.771'], start_new_session=True)\n"
                "print('ready', flush=True)\n"
                "time.sleep(60)\n")
        proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.assertEqual(proc.stdout.readline(), "ready\n")
        self.assertTrue(wait_for(lambda: sleepers("97.771")))
        grandchild = sleepers("97.771")[0]
        started = time.monotonic()
        nagent_procs.end_process_tree(proc, 0.5)
        self.assertLess(time.monotonic() - started, 10)
        self.assertIsNotNone(proc.returncode)
        self.assertTrue(wait_gone(grandchild, 10))
        self.assertEqual(sleepers("97.771"), [])
        json.dumps(nagent_procs.process_tree(os.getpid()))   # plain data
