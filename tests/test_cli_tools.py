"""Every bin/ tool: --description is one line, --help works, neither imports a provider SDK;
nagent-llm-text end to end (plain and --json, stdin, errors)."""
import json
import os

from base import BIN, HermeticTestCase
from fakes import FakeVendorTestCase

TOOLS = sorted(name for name in os.listdir(BIN)
               if os.path.isfile(os.path.join(BIN, name)) and os.access(os.path.join(BIN, name), os.X_OK))
SDK_MODULES = ("openai", "anthropic", "google.genai")


class DescriptionHelpTest(HermeticTestCase):
    def test_every_tool_has_description_and_help_without_sdk_imports(self):
        import subprocess
        import sys
        from concurrent.futures import ThreadPoolExecutor
        self.assertIn("nagent", TOOLS)
        self.assertIn("nagent-llm-text", TOOLS)

        def probe(tool):
            description = self.run_tool(tool, "--description")
            help_proc = subprocess.run([sys.executable, "-X", "importtime", os.path.join(BIN, tool),
                                        "--help"], capture_output=True, text=True, env=self.env)
            return tool, description, help_proc

        with ThreadPoolExecutor(max_workers=4) as pool:
            probes = list(pool.map(probe, TOOLS))
        for tool, proc, help_proc in probes:
            self.assertEqual(proc.returncode, 0, (tool, proc.stderr))
            self.assertEqual(len(proc.stdout.strip().splitlines()), 1, tool)
            self.assertGreater(len(proc.stdout.strip()), 10, tool)
            self.assertEqual(help_proc.returncode, 0, (tool, help_proc.stderr[-500:]))
            self.assertIn("usage:", help_proc.stdout, tool)
            imported = {line.rsplit("|", 1)[-1].strip() for line in help_proc.stderr.splitlines()}
            for module in SDK_MODULES:
                self.assertNotIn(module, imported, f"{tool} --help imports {module}")


class LlmTextTest(FakeVendorTestCase):
    def setUp(self):
        super().setUp()
        self.write_config({"retry": {"base_delay": 0, "max_delay": 0}})

    def test_plain_json_and_stdin(self):
        self.write_file("q.txt", "What is 2+2?\n")
        self.fake.reply("4")
        proc = self.run_tool("nagent-llm-text", "--file", "q.txt")
        self.assertEqual((proc.returncode, proc.stdout), (0, "4\n"), proc.stderr)
        self.fake.reply("four", usage={"input": 5, "output": 1})
        proc = self.run_tool("nagent-llm-text", "--file", "-", "--json", "--provider", "anthropic",
                             input="What is 2+2?")
        data = json.loads(proc.stdout)
        for key in ("text", "provider", "model", "input_tokens", "output_tokens", "cache_read_tokens",
                    "cache_write_tokens", "reasoning_tokens", "finish_reason", "elapsed", "estimated"):
            self.assertIn(key, data)
        self.assertEqual((data["text"], data["provider"], data["model"]),
                         ("four", "anthropic", "claude-sonnet-4-6"))
        body = self.fake.requests_for("anthropic")[-1]["json"]
        self.assertEqual(len(body["messages"]), 1)
        self.assertEqual(body["messages"][0]["content"][0]["text"], "What is 2+2?")

    def test_a_reply_cut_by_the_output_limit_is_reported(self):
        self.write_file("q.txt", "Write a long essay.\n")
        self.fake.reply("The essay begins and then", finish="length")
        proc = self.run_tool("nagent-llm-text", "--file", "q.txt", "--provider", "google")
        self.assertEqual((proc.returncode, proc.stdout), (0, "The essay begins and then\n"))
        self.assertEqual([line for line in proc.stderr.splitlines() if line.strip()],
                         ["warning: the reply was cut off by the output limit (max_output_tokens); "
                          "it is incomplete"])
        self.fake.reply("The essay begins and then", finish="length")
        data = json.loads(self.run_tool("nagent-llm-text", "--file", "q.txt", "--json",
                                        "--provider", "google").stdout)
        self.assertIs(data["truncated"], True)
        self.assertEqual(data["finish_reason"], "length")
        self.fake.reply("Short and whole.")
        data = json.loads(self.run_tool("nagent-llm-text", "--file", "q.txt", "--json",
                                        "--provider", "google").stdout)
        self.assertIs(data["truncated"], False)

    def test_errors_are_one_line_with_exit_codes(self):
        proc = self.run_tool("nagent-llm-text", "--file", "missing.txt")
        self.assertCleanError(proc, 6, "file not found")
        proc = self.run_tool("nagent-llm-text")
        self.assertCleanError(proc, 2, "no input file")
        self.write_file("q.txt", "hi")
        env = dict(self.env)
        del env["OPENAI_API_KEY"]
        proc = self.run_tool("nagent-llm-text", "--file", "q.txt", env=env)
        self.assertCleanError(proc, 4, "OPENAI_API_KEY")
        self.fake.fault(401, times=1)
        proc = self.run_tool("nagent-llm-text", "--file", "q.txt")
        self.assertCleanError(proc, 5, "OPENAI_API_KEY rejected by openai with HTTP 401")
        self.assertNotIn("test-openai-key", proc.stderr + proc.stdout)
        with open(self.config_path, "w") as handle:
            handle.write("[1, 2")
        proc = self.run_tool("nagent-llm-text", "--file", "q.txt")
        self.assertCleanError(proc, 3, self.config_path)

    def test_list_models_json(self):
        proc = self.run_tool("nagent-llm-text", "--list-models", "--json", "--provider", "gemini")
        data = json.loads(proc.stdout)
        self.assertEqual((data["provider"], data["source"]), ("google", "api"))
        self.assertIn("gemini-2.5-flash", data["models"])
