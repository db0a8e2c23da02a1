"""Issue 25, children that start warm: a sub-agent and a nested edit session run as forks of the
driver (nagent_fork, nagent_agents.start_tool), end to end through the real SDKs against the
fake vendor.

- A sub-agent is a fork: its shell step sees, as its parent process, a nagent with the driver's
  command line (a new process would have `--invocation delegated` in its own); its shell gets no
  provider key; its calls and tokens count in the parent's --json totals and last stats record.
- The same under --shell-sandbox bwrap: the child's shell runs in the sandbox (another pid
  namespace), still without a key, and the run's totals hold.
- warm_children false (or no fork possible: not on the main thread) falls back to a new process
  of the tool: a sub-agent and a nested edit session still run, and count.
"""
import json
import os
import shutil
import tempfile
import threading
import unittest

import test_edit_journey
from base import HermeticTestCase
from fakes import ReplySpec
from project_fixture import ProjectFixture
from test_loop import NagentRunCase

from nagent_agents import start_tool
from nagent_fork import Forked

PARENT = "WARM-PARENT-PROMPT-5521"
TASK = "WARM-CHILD-TASK-8812"
NESTED_MARK = "Write rules (per-file edit session)"
PARENT_USAGE = {"input": 100, "cache_read": 0, "cache_write": 0, "output": 10, "reasoning": 0}
CHILD_USAGE = {"input": 1000, "cache_read": 0, "cache_write": 0, "output": 20, "reasoning": 0}
KEYS = ("test-openai-key", "test-anthropic-key", "test-google-key")


class WarmCase(ProjectFixture, NagentRunCase):
    CONFIG = {"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}}

    def setUp(self):
        super().setUp()
        test_edit_journey.edit_project(self)

    def script(self, child_step):
        """Parent: one <nagent-agent>, then its answer; the child: `child_step`, then its answer."""
        parent = [f"<nagent-agent>\n{TASK}: look around\n</nagent-agent>",
                  "<nagent-response>parent done</nagent-response>"]
        child = [child_step, "<nagent-response>child done</nagent-response>"]

        def reply(record):
            text = json.dumps(record.get("json"))
            if PARENT in text:
                return ReplySpec(parent.pop(0), usage=PARENT_USAGE)
            if TASK in text:
                return ReplySpec(child.pop(0), usage=CHILD_USAGE)
            return None
        self.fake.reply_fn(reply)
        return parent, child

    def run_sub_agent(self, *flags):
        dump = os.path.join(self.cwd, "child-dump")
        parent, child = self.script(
            f"<nagent-shell>\nmkdir -p {dump} && env > {dump}/env.txt && "
            f"tr '\\0' ' ' < /proc/$PPID/cmdline > {dump}/parent.txt && "
            f"readlink /proc/self/ns/pid > {dump}/pidns.txt\n</nagent-shell>")
        proc = self.nagent("--json", *flags, "--conversation", "tree", PARENT)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual((parent, child), ([], []), "not every scripted reply was asked for")
        data = self.json_of(proc)
        # Two parent calls and two child calls, each counted once.
        self.assertEqual(data["totals"]["model_calls"], 4)
        self.assertEqual(data["totals"]["input_tokens"], 2 * 100 + 2 * 1000)
        self.assertEqual(data["totals"]["output_tokens"], 2 * 10 + 2 * 20)
        self.assertIn("in=2200", self.kinds(self.named_path("tree"), "stats")[-1].body)
        read = {}
        for name in ("env", "parent", "pidns"):
            with open(os.path.join(dump, f"{name}.txt"), encoding="utf-8") as handle:
                read[name] = handle.read()
        for key in KEYS:
            self.assertNotIn(key, read["env"])
        self.assertNotIn("OPENAI_API_KEY=", read["env"])
        self.assertIn("HOME=", read["env"])
        return read


class WarmSubAgent(WarmCase):
    def test_a_sub_agent_is_a_fork_without_keys_and_counts_in_the_totals(self):
        read = self.run_sub_agent()
        # The shell's parent is the child nagent: a fork carries the driver's command line (a
        # new process has its own, with --invocation delegated: the fallback test sees it).
        self.assertTrue(read["parent"].strip())
        self.assertNotIn("--invocation", read["parent"])

    @unittest.skipUnless(shutil.which("bwrap"), "bwrap not installed")
    def test_under_bwrap_the_childs_shell_is_sandboxed_and_gets_no_key(self):
        read = self.run_sub_agent("--shell-sandbox", "bwrap")
        self.assertNotEqual(read["pidns"].strip(), os.readlink("/proc/self/ns/pid"),
                            "the child's shell step did not run in the sandbox")


class ColdFallback(WarmCase):
    def test_warm_children_false_starts_new_processes_that_still_count(self):
        self.write_config(dict(self.CONFIG, warm_children=False))
        read = self.run_sub_agent()
        self.assertIn("--invocation delegated", read["parent"])

    def test_a_nested_edit_session_as_a_new_process(self):
        self.write_config(dict(self.CONFIG, warm_children=False))
        replies = [f'<nagent-file-edit path="calc.py">\n{TASK}: look\n</nagent-file-edit>',
                   "<nagent-response>parent done</nagent-response>"]
        nested = [f'<nagent-shell>\ntr "\\0" " " < /proc/$PPID/cmdline > nested-parent.txt\n'
                  "</nagent-shell>", "<nagent-response>looked</nagent-response>"]

        def reply(record):
            text = json.dumps(record.get("json"))
            if NESTED_MARK in text:
                return ReplySpec(nested.pop(0), usage=CHILD_USAGE)
            return ReplySpec(replies.pop(0), usage=PARENT_USAGE)
        self.fake.reply_fn(reply)
        proc = self.nagent("--json", "--conversation", "edit", PARENT)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        data = self.json_of(proc)
        self.assertEqual((replies, nested), ([], []))
        self.assertEqual(data["totals"]["model_calls"], 4)
        self.assertEqual(data["totals"]["input_tokens"], 2 * 100 + 2 * 1000)
        with open(os.path.join(self.cwd, "nested-parent.txt"), encoding="utf-8") as handle:
            self.assertIn("nagent-file-edit", handle.read())


class StartTool(HermeticTestCase):
    def start(self, warm):
        files = tuple(tempfile.TemporaryFile() for _ in range(3))
        self.addCleanup(lambda: [handle.close() for handle in files])
        got = []
        thread = threading.Thread(target=lambda: got.append(
            start_tool("nagent", ["--description"], dict(self.env), self.cwd, files, warm)))
        thread.start()
        thread.join(60)
        proc = got[0]
        self.assertEqual(proc.wait(60), 0)
        files[1].seek(0)
        self.assertIn(b"agent loop", files[1].read())
        return proc

    def test_no_fork_off_the_main_thread_a_new_process_instead(self):
        self.assertNotIsInstance(self.start(warm=True), Forked)
