"""The suite's zygote (tests/zygote.py) runs a tool as a fresh interpreter would: the same exit
code, stdout, stderr and files for the same argv, environment, cwd and stdin. Each case runs once
fresh and once forked and compares what a test can see."""
import json
import os
import subprocess

from base import HermeticTestCase
from fakes import FakeVendorTestCase
import zygote

import nagent_conversation


class ZygoteEqualsFreshTest(FakeVendorTestCase):
    def both(self, name, *args, input=None, env=None):
        fresh = self.run_tool(name, *args, input=input, env=env, fresh=True)
        forked = self.run_tool(name, *args, input=input, env=env)
        return fresh, forked

    def assertSameRun(self, fresh, forked):
        self.assertEqual((forked.returncode, forked.stdout, forked.stderr),
                         (fresh.returncode, fresh.stdout, fresh.stderr))

    def test_exit_codes_and_error_lines(self):
        for args in (["--version"], ["--no-such-flag"], ["--conversation", "../x", "hi"],
                     ["--status"]):
            with self.subTest(args=args):
                self.assertSameRun(*self.both("nagent", *args))

    def test_stdin_environment_cwd_and_files(self):
        self.write_config({"provider": "openai"})
        self.fake.reply_fn(lambda record: "<nagent-response>seen</nagent-response>")
        env = dict(self.env, NAGENT_CONFIG=self.write_file("other.json", json.dumps(
            {"provider": "openai", "model": "gpt-zygote"})))
        fresh, forked = self.both("nagent", "--json", "--conversation", "piped", input="from stdin\n",
                                  env=env)
        self.assertEqual(fresh.returncode, 0, fresh.stderr)
        self.assertEqual(forked.returncode, fresh.returncode, forked.stderr)
        self.assertEqual(json.loads(forked.stdout)["response"], json.loads(fresh.stdout)["response"])
        prompts = [r.body for r in nagent_conversation.read_records(
            os.path.join(self.home, ".nagent", "conversations", "piped")) if r.kind == "prompt"]
        self.assertEqual(prompts, ["from stdin\n"] * 2)
        models = [request["json"]["model"] for request in self.fake.requests]
        self.assertEqual(models, ["gpt-zygote", "gpt-zygote"])

    def test_temp_dir_is_read_per_run(self):
        code = "import tempfile, sys; print(tempfile.gettempdir())"
        script = self.write_file("show_tmp", code)
        for tmpdir in (self.tmpdir, self.cwd):
            env = dict(self.env, TMPDIR=tmpdir)
            forked = zygote.shared().run(script, [], env, self.cwd)
            self.assertEqual(forked.stdout.strip(), tmpdir)


class ZygoteExitTest(HermeticTestCase):
    def run_forked(self, source, input=None, timeout=60):
        script = self.write_file("script.py", source)
        return zygote.shared().run(script, [], self.env, self.cwd, input=input, timeout=timeout)

    def test_exit_codes_follow_the_interpreter(self):
        cases = [("import sys; sys.exit(3)", 3, ""), ("raise SystemExit('bye')", 1, "bye\n"),
                 ("print('out')", 0, ""), ("import sys; sys.exit(None)", 0, "")]
        for source, code, stderr in cases:
            with self.subTest(source=source):
                proc = self.run_forked(source)
                self.assertEqual((proc.returncode, proc.stderr), (code, stderr))
        proc = self.run_forked("raise ValueError('boom')")
        self.assertEqual(proc.returncode, 1)
        self.assertIn("ValueError: boom", proc.stderr)

    def test_threads_and_atexit_run_before_the_exit(self):
        proc = self.run_forked(
            "import atexit, threading, time\n"
            "atexit.register(lambda: print('atexit ran', flush=True))\n"
            "threading.Thread(target=lambda: (time.sleep(0.2), print('thread ended'))).start()\n")
        self.assertEqual(proc.stdout, "thread ended\natexit ran\n")

    def test_timeout_kills_the_child(self):
        with self.assertRaises(subprocess.TimeoutExpired):
            self.run_forked("import time; time.sleep(60)", timeout=1)


class PidReuseTest(HermeticTestCase):
    """The kernel reuses pids (pid_max 32768 on these machines, shared by every engineer's
    suite): a child's exit must be told apart from the exit of an earlier child that had its
    pid. Keyed by pid, a run whose pid was reused "ended" at once with the old child's code and
    no output (seen as exit 6 with an empty stderr, and as CompactCommandTest failing)."""

    def test_a_reused_pid_never_answers_for_its_new_child(self):
        server = zygote.Zygote.__new__(zygote.Zygote)   # the bookkeeping only, no process
        server.init_state()
        for line in ("spawned 1 4242", "exit 1 6", "spawned 2 4242"):
            server.record(line)
        new = zygote.Forked(server, server.spawned.pop(2), 2)
        self.assertIsNone(new.poll())
        server.record("exit 2 0")
        self.assertEqual(new.wait(1), 0)
