"""Config rows of issue 13 (hooks, context layers, skills) and the one predicate other modules
ask before streaming a final response: `nagent_hooks.response_gated(settings)`."""
import subprocess
import sys
import textwrap

from base import HELPERS, HermeticTestCase

from nagent_config import resolve_settings
from nagent_errors import ConfigError, UsageError
import nagent_hooks


class HookSettingsTest(HermeticTestCase):
    def test_defaults(self):
        settings = resolve_settings({}, self.env)
        self.assertIsNone(settings.hooks.response)
        self.assertIsNone(settings.hooks.action)
        self.assertEqual(settings.hooks.max_gate_refusals, 3)
        self.assertGreater(settings.hooks.timeout, 0)
        self.assertTrue(settings.context.user)
        self.assertTrue(settings.context.project)
        self.assertTrue(settings.context.directory)
        self.assertTrue(settings.context.skills)
        self.assertEqual(settings.context.max_bytes, 32 * 1024)
        self.assertFalse(nagent_hooks.response_gated(settings))

    def test_response_hook_from_file_or_flag_gates_the_response(self):
        self.write_config({"hooks": {"response": "make test", "action": "./policy",
                                     "timeout": 5}, "max_gate_refusals": 2,
                           "context": {"project": False}, "skills": False})
        settings = resolve_settings({}, self.env)
        self.assertEqual(settings.hooks.response, "make test")
        self.assertEqual(settings.hooks.action, "./policy")
        self.assertEqual((settings.hooks.timeout, settings.hooks.max_gate_refusals), (5.0, 2))
        self.assertFalse(settings.context.project)
        self.assertFalse(settings.context.skills)
        self.assertTrue(nagent_hooks.response_gated(settings))
        self.write_config({})
        flagged = resolve_settings({"hook_per_response": "true"}, self.env)
        self.assertEqual(flagged.hooks.response, "true")
        self.assertEqual(str(flagged.source("hooks.response")), "flag --hook-per-response")
        self.assertTrue(nagent_hooks.response_gated(flagged))

    def test_bad_values_are_errors(self):
        for data in ({"hooks": {"response": ""}}, {"hooks": {"timeout": 0}},
                     {"max_gate_refusals": 0}, {"skills": "no"}, {"context": {"max_bytes": 10}}):
            self.write_config(data)
            with self.assertRaises(ConfigError, msg=data):
                resolve_settings({}, self.env)
        self.write_config({})
        with self.assertRaises(UsageError):
            resolve_settings({"hook_per_response": " "}, self.env)

    def test_the_predicate_is_cheap_to_import(self):
        code = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {HELPERS!r})
            import nagent_hooks
            heavy = [m for m in ("yaml", "subprocess", "openai", "anthropic", "google.genai")
                     if m in sys.modules]
            print(heavy)
        """)
        proc = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.stdout.strip(), "[]", proc.stderr)
