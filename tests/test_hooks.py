"""Hooks (issue 13): the response gate and the action policy, through the real bin/nagent
against the fake vendor: accept, refuse, time out, crash; nothing printed before the gate
passed; hook runs recorded; no provider keys in a hook's environment."""
import json
import os
import signal
import time

from test_loop import NagentRunCase

import nagent_hooks


def script(case, name, body):
    path = case.write_file(os.path.join(case.tmp, "hooks", name), "#!/bin/sh\n" + body)
    os.chmod(path, 0o755)
    return path


class ResponseGateTest(NagentRunCase):
    def hook_records(self, path, hook="response"):
        return [r for r in self.kinds(path, "hook") if r.attr("hook") == hook]

    def test_accepting_hook_sees_the_response_and_no_keys(self):
        seen = os.path.join(self.tmp, "seen")
        hook = script(self, "accept", f'cat > "{seen}.stdin"\nenv > "{seen}.env"\n'
                                      'echo "all good"\nexit 0\n')
        self.fake.reply("<nagent-response>Final answer.</nagent-response>")
        proc = self.nagent("--hook-per-response", hook, "answer me")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, "Final answer.\n")
        with open(seen + ".stdin", encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "Final answer.")
        with open(seen + ".env", encoding="utf-8") as handle:
            env = handle.read()
        self.assertIn(f"NAGENT_CONVERSATION={self.default_path()}\n", env)
        for name, value in self.fake.env().items():
            if name.endswith("_KEY"):
                self.assertNotIn(value, env)
                self.assertNotIn(name + "=", env)
        records = self.hook_records(self.default_path())
        self.assertEqual([(r.attr("status"), r.attr("exit_code")) for r in records], [("accepted", "0")])
        self.assertIn("all good", records[0].body)
        # Hook records are bookkeeping: the next request does not carry them.
        self.fake.reply("<nagent-response>again</nagent-response>")
        self.nagent("--hook-per-response", hook, "once more")
        self.assertNotIn("all good", self.request_text(self.generation_requests()[-1]))

    def test_a_refusal_goes_back_to_the_model_and_nothing_is_printed_before_acceptance(self):
        state = os.path.join(self.tmp, "refused-once")
        hook = script(self, "once", f'if [ ! -e "{state}" ]; then touch "{state}"; '
                                    'echo "2 tests failed: test_parse"; echo "on stderr" >&2; exit 1; fi\n'
                                    "exit 0\n")
        self.write_config(dict(self.CONFIG, hooks={"response": hook}))
        self.fake.reply("<nagent-response>First try.</nagent-response>")
        self.fake.reply("<nagent-response>Second try.</nagent-response>")
        proc = self.nagent("fix the tests")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(proc.stdout, "Second try.\n")
        requests = self.generation_requests()
        self.assertEqual(len(requests), 2)
        last = self.request_text(requests[1])
        self.assertIn("<system>", last)
        self.assertIn("2 tests failed: test_parse", last)
        self.assertIn("on stderr", last)
        self.assertPrefixChain(requests)
        statuses = [r.attr("status") for r in self.hook_records(self.default_path())]
        self.assertEqual(statuses, ["refused", "accepted"])

    def test_after_max_gate_refusals_the_run_stops_with_its_own_exit_code(self):
        hook = script(self, "never", 'echo "still failing"\nexit 3\n')
        self.write_config(dict(self.CONFIG, hooks={"response": hook}))
        for word in ("One", "Two", "Three"):
            self.fake.reply(f"<nagent-response>{word}.</nagent-response>")
        proc = self.nagent("do it")
        self.assertOneError(proc, 12, "response hook")
        self.assertEqual(proc.stdout, "Three.\n")
        self.assertIn("not accepted", proc.stderr)
        self.assertEqual(len(self.generation_requests()), 3)
        self.assertEqual(len(self.hook_records(self.default_path())), 3)
        self.assertTrue(any(r.attr("run") == "failed" for r in self.kinds(self.default_path(), "system")))

        self.write_config(dict(self.CONFIG, hooks={"response": hook}, max_gate_refusals=1))
        self.fake.reply("<nagent-response>Json one.</nagent-response>")
        proc = self.nagent("--json", "again")
        data = self.json_of(proc)
        self.assertEqual((proc.returncode, data["exit_code"]), (12, 12))
        self.assertEqual(data["response"], "Json one.")
        self.assertIs(data["accepted"], False)
        self.assertEqual(data["error"]["kind"], "gate")

    def test_a_hook_that_times_out_or_crashes_refuses(self):
        state = os.path.join(self.tmp, "calls")
        hook = script(self, "bad", f'echo x >> "{state}"\n'
                                   f'if [ "$(wc -l < "{state}")" -eq 1 ]; then sleep 30 & sleep 30; fi\n'
                                   "kill -9 $$\n")
        self.write_config(dict(self.CONFIG, hooks={"response": hook, "timeout": 1},
                               max_gate_refusals=2))
        self.fake.reply("<nagent-response>Slow.</nagent-response>")
        self.fake.reply("<nagent-response>Crash.</nagent-response>")
        started = time.monotonic()
        proc = self.nagent("go")
        self.assertLess(time.monotonic() - started, 20)
        self.assertOneError(proc, 12)
        self.assertEqual(proc.stdout, "Crash.\n")
        text = self.request_text(self.generation_requests()[1])
        self.assertIn("timed out after 1", text)
        statuses = [r.attr("status") for r in self.hook_records(self.default_path())]
        self.assertEqual(statuses, ["timeout", "refused"])
        self.assertIn("signal 9", self.hook_records(self.default_path())[1].body)

    def test_ctrl_c_during_a_hook_ends_the_hook_too(self):
        pidfile = os.path.join(self.tmp, "hook.pid")
        hook = script(self, "slow", f'echo $$ > "{pidfile}.tmp"; mv "{pidfile}.tmp" "{pidfile}"\n'
                                    "exec sleep 60\n")
        self.write_config(dict(self.CONFIG, hooks={"response": hook}))
        self.fake.reply("<nagent-response>Waiting.</nagent-response>")
        proc = self.start_nagent("go")
        deadline = time.monotonic() + 30
        while not os.path.exists(pidfile):
            self.assertLess(time.monotonic(), deadline, "the hook never started")
            time.sleep(0.02)
        with open(pidfile, encoding="utf-8") as handle:
            pid = int(handle.read())
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        self.assertEqual(proc.returncode, 130)
        self.assertEqual(out, "")  # the refused-by-interruption response was never printed
        deadline = time.monotonic() + 10
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            self.assertLess(time.monotonic(), deadline, "the hook outlived nagent")
            time.sleep(0.05)

    def test_delegated_children_are_not_gated(self):
        self.assertTrue(nagent_hooks.gates_invocation("user"))
        self.assertFalse(nagent_hooks.gates_invocation("delegated"))


class ActionHookTest(NagentRunCase):
    def test_allow_refuse_error_and_timeout(self):
        log = os.path.join(self.tmp, "actions.jsonl")
        marker = os.path.join(self.tmp, "FORBIDDEN-RAN")
        written = os.path.join(self.tmpdir, "w.txt")
        policy = self.write_file(os.path.join(self.tmp, "hooks", "policy.py"), f"""
import json, sys, time
action = json.load(sys.stdin)
with open({log!r}, "a") as handle:
    handle.write(json.dumps(action) + "\\n")
if action["kind"] == "shell" and "forbidden" in action["command"]:
    print("no forbidden commands here")
    sys.exit(2)
if action["kind"] == "write":
    print("policy crashed", file=sys.stderr)
    sys.exit(1)
if action["kind"] == "read":
    time.sleep(30)
""")
        self.write_file("small.txt", "small content\n")
        self.write_config(dict(self.CONFIG, hooks={"action": f"python3 {policy}", "timeout": 2}))
        self.fake.reply("<nagent-shell>echo allowed-ran</nagent-shell>\n"
                        f'<nagent-shell>touch "{marker}"; echo forbidden</nagent-shell>\n'
                        f'<nagent-write path="{written}">x</nagent-write>\n'
                        '<nagent-read path="small.txt"/>')
        self.fake.reply("<nagent-response>done</nagent-response>")
        proc = self.nagent("try things")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertFalse(os.path.exists(marker))
        self.assertFalse(os.path.exists(written))
        results = [r.body for r in self.kinds(self.default_path(), "result")]
        self.assertEqual(len(results), 4)
        self.assertIn("allowed-ran", results[0])
        self.assertIn('status="refused"', results[1])
        self.assertIn("no forbidden commands here", results[1])
        self.assertIn('status="error"', results[2])
        self.assertIn("policy crashed", results[2])
        self.assertIn("exit 1", results[2])
        self.assertIn('status="error"', results[3])
        self.assertIn("timed out", results[3])
        self.assertNotIn("small content", results[3])
        with open(log, encoding="utf-8") as handle:
            actions = [json.loads(line) for line in handle]
        self.assertEqual([a["kind"] for a in actions], ["shell", "shell", "write", "read"])
        self.assertEqual(actions[0]["command"], "echo allowed-ran")
        self.assertEqual(actions[2]["path"], written)
        self.assertEqual(actions[3]["path"], "small.txt")
        self.assertEqual({a["mode"] for a in actions}, {"main"})
        hooks = [r for r in self.kinds(self.default_path(), "hook") if r.attr("hook") == "action"]
        self.assertEqual([r.attr("status") for r in hooks], ["accepted", "refused", "error", "timeout"])


class HookRunTest(NagentRunCase):
    def test_a_missing_command_is_a_clean_failure(self):
        run = nagent_hooks.run_hook("no-such-command-anywhere", "in", self.cwd, self.env, 5)
        self.assertEqual(run.status(), "refused")
        self.assertEqual(run.exit_code, 127)
        self.assertIn("not found", run.output())
