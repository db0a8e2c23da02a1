"""The NAGENT_CONFIG file is resolved in one place, so a relative path is protected too.

Issue 10 item 3: nagent's own state is never a write target. A NAGENT_CONFIG given as a relative
path (`cfg/config.json` under the working directory, which lives under /tmp here: a temp root
where model writes are otherwise allowed) names the same file for the config reader, the write
policy and the sandbox: a model's <nagent-write> to it is refused and the file stays unchanged,
and a sandboxed command finds it covered.
"""
import json
import os

from base import HermeticTestCase
from fakes import FakeVendorTestCase

import nagent_conversation
import nagent_sandbox
import nagent_write_policy as wp
from nagent_config import config_layers
from nagent_errors import RefusedError
from nagent_paths import config_file, in_nagent_state, nagent_state_roots
from nagent_shell import ShellPolicy

RELATIVE = os.path.join("cfg", "config.json")


class RelativeConfigRulesTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.real = self.write_file(RELATIVE, "{}\n")
        self.assertTrue(any(self.real.startswith(root + "/") for root in wp.temp_roots(self.env)))
        self.env["NAGENT_CONFIG"] = RELATIVE

    def test_one_resolution_for_reader_policy_and_sandbox(self):
        self.assertEqual(config_file(self.env), os.path.realpath(self.real))
        self.assertEqual([path for _label, path in config_layers(self.env)], [self.real])
        self.assertIn(os.path.realpath(self.real), nagent_state_roots(self.env))
        self.assertTrue(in_nagent_state(os.path.realpath(self.real), self.env))
        self.assertEqual(config_file(dict(self.env, NAGENT_CONFIG="")), None)

    def test_write_policy_refuses_the_relative_config(self):
        for path in (self.real, RELATIVE, os.path.join("cfg", ".", "config.json")):
            with self.subTest(path=path):
                with self.assertRaises(RefusedError) as caught:
                    wp.write_file_atomic(path, b"pwned", wp.WriteMode("main"), self.cwd, self.env)
                self.assertIn("nagent's own state", str(caught.exception.line()))
        with open(self.real, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "{}\n")

    def test_sandbox_covers_the_relative_config(self):
        os.makedirs(os.path.join(self.home, ".nagent"), exist_ok=True)
        plan = nagent_sandbox.plan(self.cwd, ShellPolicy(sandbox="bwrap"), self.env)
        self.assertIn(("ro-bind", "/dev/null", os.path.realpath(self.real)), plan.mounts)

    def test_children_get_the_resolved_config_path(self):
        from nagent_secrets import scrubbed_env
        self.assertEqual(scrubbed_env(self.env, ())["NAGENT_CONFIG"], os.path.realpath(
            os.path.join(self.cwd, RELATIVE)))


class RelativeConfigModelWriteTest(FakeVendorTestCase):
    def test_model_write_to_relative_config_is_refused(self):
        self.env["OPENAI_API_KEY"] = "sk-test-key"
        config = {"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}}
        real = self.write_file(RELATIVE, json.dumps(config))
        self.env["NAGENT_CONFIG"] = RELATIVE
        self.fake.reply(f'<nagent-write path="{RELATIVE}">\n{{"shell": {{"approval": "auto"}}}}\n'
                        "</nagent-write>")
        self.fake.reply("<nagent-response>tried</nagent-response>")
        proc = self.run_tool("nagent", "--conversation", "relcfg", "tidy the config")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        path = os.path.join(self.home, ".nagent", "conversations", "relcfg")
        results = [r.body for r in nagent_conversation.read_records(path) if r.kind == "result"]
        self.assertIn('status="error"', results[0])
        self.assertIn("nagent's own state", results[0])
        with open(real, encoding="utf-8") as handle:
            self.assertEqual(json.load(handle), config)
