"""Action handlers of the loop: sub-agents end to end (child process, own conversation, token
roll-up, nesting limit) and fast in-process checks of read/write/shell/next/agent edge cases
through `nagent_actions.process_action`."""
import importlib.util
import os
import re

from test_loop import NagentRunCase
from base import HermeticTestCase

import nagent_actions
from nagent_actions import ActionContext, process_action
from nagent_protocol import parse_response
from nagent_shell import ShellPolicy
from nagent_write_policy import WriteMode

USAGE = {"input": 100, "cache_read": 0, "cache_write": 0, "output": 10, "reasoning": 0}


class SubAgentTest(NagentRunCase):
    CONFIG = dict(NagentRunCase.CONFIG, max_agent_depth=1)

    def test_child_runs_in_its_own_conversation_and_tokens_roll_up(self):
        # FIFO script shared by parent and child: parent asks, child (depth 1) tries to nest
        # (refused: limit 1), child answers, parent answers.
        self.fake.reply("<nagent-agent>\nFind the answer.\n</nagent-agent>", usage=USAGE)
        self.fake.reply("<nagent-agent>nested task</nagent-agent>", usage=USAGE)
        self.fake.reply("<nagent-response>child answer 42</nagent-response>", usage=USAGE)
        self.fake.reply("<nagent-response>parent done</nagent-response>", usage=USAGE)
        proc = self.nagent("--json", "--pid", "4242", "delegate it")
        data = self.json_of(proc)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(data["response"], "parent done")
        # Parent: 2 calls; child: 2 calls, rolled up into the parent's totals (calls included).
        self.assertEqual(data["totals"]["model_calls"], 4)
        self.assertEqual(data["totals"]["input_tokens"], 400)
        self.assertEqual(data["totals"]["output_tokens"], 40)
        self.assertEqual(data["conversation_totals"]["input_tokens"], 400)

        parent = self.default_path("4242")
        result = [r for r in self.records(parent) if r.kind == "result"][0]
        match = re.search(r'conversation="(agent-[0-9a-f]{32}-(4242))"', result.body)
        self.assertIsNotNone(match, result.body)
        self.assertIn('tokens_in="200"', result.body)
        self.assertIn('tokens_out="20"', result.body)
        self.assertIn("exit_code: 0\noutput:\nchild answer 42\n", result.body)

        child = self.named_path(match.group(1))
        child_records = self.records(child)
        prompts = [r for r in child_records if r.kind == "prompt"]
        self.assertEqual([(p.attr("source"), p.body) for p in prompts], [("delegated", "Find the answer.")])
        meta = [r.body for r in child_records if r.kind == "meta"][0]
        self.assertIn('"invocation": "delegated"', meta)
        self.assertIn(parent, meta)
        nested = [r.body for r in child_records if r.kind == "result"][0]
        self.assertIn("nesting limit (1)", nested)
        self.assertIn('status="error"', nested)

        # The parent's next request holds only the child's final response.
        requests = self.generation_requests()
        self.assertEqual(len(requests), 4)
        last = self.request_text(requests[-1])
        self.assertIn("child answer 42", last)
        self.assertNotIn("nested task", last)
        self.assertNotIn("Find the answer.\n</nagent-agent-result", last)
        self.assertPrefixChain([requests[0], requests[3]])


def action(text):
    parsed = parse_response(text)
    assert parsed.valid, parsed.error
    return parsed.actions[0]


class ActionHandlerTest(HermeticTestCase):
    """In-process: each handler returns a result block and never raises."""

    def setUp(self):
        super().setUp()
        conversation = os.path.join(self.home, "conv")
        self.ctx = ActionContext(
            cwd=self.cwd, environ=self.env, write_mode=WriteMode(), conversation=conversation,
            side_dir=conversation + ".d", shell_policy=ShellPolicy(timeout=10, output_cap=64),
            pid="7", depth=0, max_depth=2)
        os.makedirs(self.ctx.side_dir)

    def run_action(self, text, ctx=None):
        return process_action(action(text), ctx or self.ctx)

    def test_read_inline_limit_and_errors(self):
        limit = nagent_actions.READ_SPLIT_THRESHOLD_BYTES
        self.write_file("exact.txt", "a" * limit)
        self.write_file("over.txt", "a" * (limit + 1))
        os.makedirs(os.path.join(self.cwd, "adir"))
        self.write_file("bin.dat", b"ab\x00cd", mode="wb")
        self.write_file("bad.txt", b"\xff\xfe ok", mode="wb")
        exact = self.run_action('<nagent-read path="exact.txt"/>')
        self.assertFalse(exact.failed)
        self.assertIn("a" * limit, exact.block)
        self.assertIn(f'bytes="{limit}"', exact.block)
        over = self.run_action('<nagent-read path="over.txt"/>')
        self.assertTrue(over.failed)
        self.assertIn("<nagent-file-read path=", over.block)
        for name, words in (("missing.txt", "file not found"), ("adir", "is a directory"),
                            ("bin.dat", "binary"), ("bad.txt", "not UTF-8")):
            outcome = self.run_action(f'<nagent-read path="{name}"/>')
            self.assertTrue(outcome.failed, name)
            self.assertTrue(outcome.block.startswith(f'<nagent-read-result path="{name}" status="error">'))
            self.assertIn(words, outcome.block)

    def test_write_refused_outside_temp_and_allowed_in_tmpdir(self):
        target = os.path.join(self.tmpdir, "sub", "note.txt")
        os.makedirs(os.path.dirname(target))
        ok = self.run_action(f'<nagent-write path="{target}">\nbody\n</nagent-write>')
        self.assertFalse(ok.failed, ok.block)
        with open(target, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "body\n")
        outside = "/proc/nagent-never-created.txt"
        refused = self.run_action(f'<nagent-write path="{outside}">x</nagent-write>')
        self.assertTrue(refused.failed)
        self.assertIn("refused", refused.block)
        self.assertFalse(os.path.exists(outside))

    def test_shell_next_and_agent_limits(self):
        shell = self.run_action("<nagent-shell>echo $OPENAI_API_KEY-x; exit 3</nagent-shell>",
                                ctx=self.with_env(OPENAI_API_KEY="sk-secret-value"))
        self.assertTrue(shell.failed)
        self.assertIn("exit_code: 3", shell.block)
        self.assertNotIn("sk-secret-value", shell.block)
        nxt = self.run_action("<nagent-next>keep going</nagent-next>")
        self.assertEqual((nxt.block, nxt.prompt), ("", "keep going"))
        deep = ActionContext(**dict(vars(self.ctx), depth=2))
        limited = self.run_action("<nagent-agent>task</nagent-agent>", ctx=deep)
        self.assertTrue(limited.failed)
        self.assertIn("nesting limit (2)", limited.block)
        self.assertIn('conversation="agent-', limited.block)

    def with_env(self, **extra):
        return ActionContext(**dict(vars(self.ctx), environ=dict(self.env, **extra)))

    def test_file_read_small_is_inline_and_missing_is_an_error(self):
        self.write_file("small.txt", "tiny\n")
        inline = self.run_action('<nagent-file-read path="small.txt"/>')
        self.assertIn("tiny\n", inline.block)
        missing = self.run_action('<nagent-file-read path="nope.txt"/>')
        self.assertTrue(missing.failed)
        self.assertIn("file not found", missing.block)

    @classmethod
    def split_available(cls):
        return importlib.util.find_spec("nagent_file_split_lib") is not None

    def test_file_read_large_splits_into_segments(self):
        if not self.split_available():
            self.skipTest("nagent_file_split_lib not in the tree yet")
        self.write_file("big.txt", "".join(f"line {n}\n" for n in range(12000)))
        outcome = self.run_action('<nagent-file-read path="big.txt"/>')
        self.assertFalse(outcome.failed, outcome.block)
        self.assertIn('split="true"', outcome.block)
        self.assertIn("index.json", outcome.block)
        again = self.run_action('<nagent-file-read path="big.txt"/>')
        self.assertIn("reused", again.block)
