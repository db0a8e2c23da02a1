"""Issue 21, "found by trying it as a new user would": the shipped config works with --config,
no executable takes an abbreviated flag (an unknown one is an error with a "did you mean"),
what one command prints another accepts, counts and numbers read as written, conversations are
listed by what they are, and the missing-SDK hint is the install's own command."""
import importlib
import json
import os
import shutil

from base import REPO, HermeticTestCase
from test_loop import NagentRunCase

import nagent_install
from nagent_errors import UsageError
from nagent_install import TOOLS


class ShippedConfigTest(HermeticTestCase):
    def test_config_example_is_shown_by_config(self):
        shutil.copy(os.path.join(REPO, "config.example.json"), self.config_path)
        proc = self.run_tool("nagent", "--config")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertRegex(proc.stdout, r"prices\.corp-large +\{\"input\": 1, \"output\": 4")
        self.assertRegex(proc.stdout, r"timeouts\.read +300 ")     # written 300, shown 300
        data = json.loads(self.run_tool("nagent", "--config", "--json").stdout)
        rows = {row["key"]: row["value"] for row in data["settings"]}
        self.assertEqual(rows["prices.corp-large"],
                         {"input": 1, "output": 4, "cache_read": 0.1, "cache_write": 1.25})

    def test_a_flag_value_is_echoed_as_written(self):
        proc = self.run_tool("nagent", "--shell-timeout", "0", "x")
        self.assertCleanError(proc, 2, "--shell-timeout must be a number > 0: 0")
        self.assertTrue(proc.stderr.rstrip().endswith(": 0"), proc.stderr)


class AbbreviationTest(HermeticTestCase):
    """Every executable's parser: a prefix of a flag is an error naming the flag."""

    def test_no_executable_takes_an_abbreviated_flag(self):
        checked = 0
        for tool, module in TOOLS.items():
            parser = importlib.import_module(module).build_parser()
            for action in parser._actions:
                action.required = False   # a missing --output must not answer first
            flags = [flag for action in parser._actions for flag in action.option_strings
                     if flag.startswith("--") and action.help != "==SUPPRESS=="]
            for flag in flags:
                prefix = flag[:-1]
                if any(other != flag and other.startswith(prefix) for other in flags):
                    continue    # ambiguous: argparse refused it before too
                with self.subTest(tool=tool, flag=prefix), self.assertRaises(UsageError) as caught:
                    parser.parse_args([prefix])
                self.assertIn(f"did you mean {flag}", caught.exception.line())
                checked += 1
        self.assertGreater(checked, 60)

    def test_a_prefix_is_no_flag_and_a_typo_gets_a_suggestion(self):
        # `--mode plan` once ran with model "plan"; --mode is a flag of its own now (issue 23),
        # and a prefix of both is neither.
        plan = self.run_tool("nagent", "--mod", "plan", "change the project")
        self.assertCleanError(plan, 2, "unknown flag: --mod (did you mean --model or --mode?")
        typo = self.run_tool("nagent", "--modle", "gpt-5.5", "x")
        self.assertCleanError(typo, 2, "unknown flag: --modle (did you mean ")
        self.assertIn("--model", typo.stderr.split("did you mean", 1)[1])
        # Whole flags and --flag=value still work; hidden flags are never suggested.
        self.assertEqual(self.run_tool("nagent", "--output-format=json", "--config").returncode, 0)
        depth = self.run_tool("nagent", "--dept", "1", "x")
        self.assertCleanError(depth, 2, "--dept")
        self.assertNotIn("--depth", depth.stderr)


class WordingTest(NagentRunCase):
    def test_counts_read_as_written(self):
        from nagent_terminal_text import counted
        self.assertEqual([counted(n, "call") for n in (0, 1, 2)], ["0 calls", "1 call", "2 calls"])
        self.assertEqual(counted(1, "reply", "replies"), "1 reply")
        self.fake.reply("<nagent-response>one</nagent-response>")
        self.assertEqual(self.nagent("--conversation", "w", "first").returncode, 0)
        status = self.nagent("--status", "--conversation", "w")
        self.assertIn("last run: 1 call,", status.stdout)
        branch = self.nagent("--branch-conversation", "w", "--turn", "2")
        self.assertCleanError(branch, 2, "no such turn")
        self.assertIn("the conversation has 1 turn,", branch.stderr)

    def test_a_refused_answer_is_worded_as_a_sentence(self):
        from nagent_hooks import HookRun, refusal_note
        note = refusal_note(HookRun("response", "make test", 1, False, "", "2 failed", 0.1, None, 5))
        self.assertIn("did not accept your final response (exit 1)", note)
        self.assertNotIn("it exit", note)

    def test_per_file_edit_and_agent_conversations_are_listed_as_such(self):
        self.write_file("src/app.py", "x = 1\n")
        self.fake.reply("<nagent-agent>look around</nagent-agent>")
        self.fake.reply("<nagent-response>child answer</nagent-response>")
        self.fake.reply("<nagent-response>parent answer</nagent-response>")
        self.fake.reply("<nagent-response>edited</nagent-response>")
        self.assertEqual(self.nagent("--conversation", "mine", "delegate").returncode, 0)
        self.assertEqual(self.nagent("--file-edit", "src/app.py", "tidy").returncode, 0)
        data = self.json_of(self.nagent("--list-conversations", "--json"))
        kinds = {item["name"].split("-")[0]: item["kind"] for item in data["conversations"]}
        self.assertEqual(kinds, {"mine": "saved", "agent": "agent", "file": "file-edit"})
        table = self.nagent("--list-conversations").stdout
        self.assertRegex(table, r"(?m)^file-app-\w+ +file-edit ")


class InstallHintTest(HermeticTestCase):
    """The missing-SDK line is the command for the way nagent was installed."""

    def layout(self, marker=None, base=False):
        prefix = os.path.join(self.tmp, f"env-{marker}-{base}")
        os.makedirs(os.path.join(prefix, "bin"), exist_ok=True)
        if marker:
            with open(os.path.join(prefix, marker), "w", encoding="utf-8") as handle:
                handle.write(MARKERS[marker])
        python = os.path.join(prefix, "bin", "python")
        return dict(prefix=prefix, base_prefix=prefix if base else "/usr", executable=python,
                    checkout=None)

    def test_each_layout_gets_its_own_command(self):
        hint = nagent_install.install_command
        self.assertEqual(hint("mcp>=2", **self.layout("pipx_metadata.json")),
                         "pipx inject nagent 'mcp>=2'")
        self.assertEqual(hint("mcp>=2", **self.layout("uv-receipt.toml")),
                         "uv tool install --with 'mcp>=2' '/src/nagent checkout'")
        venv = self.layout()
        self.assertEqual(hint("mcp>=2", **venv), f"{venv['executable']} -m pip install 'mcp>=2'")
        checkout = dict(venv, checkout="/src/nagent/bin", executable="/opt/py 3/bin/python3")
        self.assertEqual(hint("google-genai>=3.4", **checkout),
                         "'/opt/py 3/bin/python3' -m pip install 'google-genai>=3.4'")
        system = self.layout(base=True)
        self.assertEqual(hint("cursor-agent-sdk", **system),
                         f"{system['executable']} -m pip install cursor-agent-sdk")
        # This checkout, as the tests run it: the running interpreter's pip.
        self.assertIn(" -m pip install 'mcp>=2'", hint("mcp>=2"))


MARKERS = {"pipx_metadata.json": '{"main_package": {"package": "nagent"}}\n',
           "uv-receipt.toml": '[tool]\nrequirements = [{ name = "nagent", directory = '
                              '"/src/nagent checkout" }]\n'}
