"""nagent-file-summarize logic with a fake model callable (end-to-end runs live elsewhere)."""
import json
import os

from base import HermeticTestCase

import nagent_file_split_lib as split_lib
import nagent_file_summarize_lib as summarize_lib
from nagent_config import resolve_settings
from nagent_errors import InputError


class FakeModel:
    """Records prompts; answers with a short numbered summary (or a long one)."""

    def __init__(self, reply_bytes=0):
        self.prompts = []
        self.reply_bytes = reply_bytes

    def __call__(self, prompt):
        self.prompts.append(prompt)
        reply = f"summary {len(self.prompts)}"
        return reply + " " + "x" * self.reply_bytes + "\n"


def big_python(functions):
    return "".join(f"def function_{n}(value):\n    '''Doc {n}.'''\n" + "    value += 1\n" * 40
                   + "    return value\n\n\n" for n in range(functions))


class SummarizeTest(HermeticTestCase):
    def test_small_file_is_one_call_with_the_whole_text(self):
        source = self.write_file("small.py", "def a():\n    return 1\n")
        model = FakeModel()
        result = summarize_lib.summarize_file(source, model)
        self.assertEqual((result["mode"], result["calls"], result["summary"]),
                         ("inline", 1, "summary 1"))
        self.assertEqual(len(model.prompts), 1)
        self.assertIn("def a():\n    return 1\n", model.prompts[0])
        self.assertIn("small.py", model.prompts[0])
        self.assertEqual(result["segments"], [])

    def test_exactly_64_kib_is_still_inline(self):
        source = self.write_file("edge.txt", "a" * (split_lib.READ_SPLIT_THRESHOLD_BYTES - 1)
                                 + "\n")
        self.assertEqual(summarize_lib.summarize_file(source, FakeModel())["mode"], "inline")

    def test_large_file_is_split_summarised_per_segment_and_combined(self):
        content = big_python(150)
        self.assertGreater(len(content), split_lib.READ_SPLIT_THRESHOLD_BYTES)
        source = self.write_file("big.py", content)
        model = FakeModel()
        result = summarize_lib.summarize_file(source, model)
        segments = result["segments"]
        self.assertEqual(result["mode"], "split")
        self.assertGreater(len(segments), 2)
        self.assertEqual(result["calls"], len(segments) + 1)
        self.assertEqual(len(model.prompts), result["calls"])
        self.assertEqual(result["summary"], f"summary {len(segments) + 1}")
        self.assertEqual(segments[0]["first_line"], 1)
        self.assertEqual(segments[-1]["last_line"], content.count("\n"))
        for segment, prompt in zip(segments, model.prompts):
            self.assertIn(f"lines {segment['first_line']}-{segment['last_line']}", prompt)
        self.assertIn("def function_0(value):", model.prompts[0])
        combine = model.prompts[-1]
        for segment in segments:
            self.assertIn(segment["summary"], combine)
        self.assertEqual(os.listdir(self.tmpdir), [])

    def test_long_summaries_are_combined_in_batches(self):
        source = self.write_file("big.py", big_python(150))
        model = FakeModel(reply_bytes=20_000)
        result = summarize_lib.summarize_file(source, model)
        count = len(result["segments"])
        self.assertGreater(result["calls"], count + 1)
        self.assertEqual(len(model.prompts), result["calls"])
        self.assertTrue(all(len(p.encode()) < 2 * split_lib.READ_SPLIT_THRESHOLD_BYTES
                            for p in model.prompts[count:]))

    def test_empty_file_needs_no_call(self):
        source = self.write_file("empty.txt", "")
        model = FakeModel()
        result = summarize_lib.summarize_file(source, model)
        self.assertEqual((result["mode"], result["calls"], model.prompts), ("empty", 0, []))

    def test_bad_files_are_input_errors(self):
        self.write_file("bin.dat", b"\x00\xff\xfe", "wb")
        for path in ("bin.dat", "missing.txt", self.cwd):
            with self.subTest(path=path), self.assertRaises(InputError):
                summarize_lib.summarize_file(path, FakeModel())

    def test_segment_summarizer_feeds_split_summaries(self):
        source = self.write_file("m.py", "def a():\n    pass\n\n\ndef b():\n    pass\n")
        model = FakeModel()
        index = split_lib.split_file(source, "out", 20,
                                     summarize=summarize_lib.segment_summarizer(model, "m.py"))
        self.assertEqual([r["summary"] for r in index["segments"]], ["summary 1", "summary 2"])
        self.assertIn("segment 2 of 2", model.prompts[1])
        self.assertIn("def b():", model.prompts[1])


class SummarizeCliTest(HermeticTestCase):
    def test_description_and_input_errors_before_provider_setup(self):
        proc = self.run_tool("nagent-file-summarize", "--description")
        self.assertEqual(proc.returncode, 0)
        self.assertEqual(len(proc.stdout.splitlines()), 1)
        self.assertCleanError(self.run_tool("nagent-file-summarize", "--file", "nope.txt"), 6,
                              "file not found")
        self.write_file("bin.dat", b"\xff", "wb")
        self.assertCleanError(self.run_tool("nagent-file-summarize", "--file", "bin.dat"), 6,
                              "not UTF-8 text")
        self.assertCleanError(self.run_tool("nagent-file-summarize"), 2)

    def test_split_summarize_without_a_key_is_a_clean_error(self):
        source = self.write_file("a.py", "def a():\n    pass\n")
        proc = self.run_tool("nagent-file-split", "--file", source, "--output", "out",
                             "--summarize")
        self.assertCleanError(proc, 4, "missing API key")
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "out")))


class SummarizeEndToEndTest(HermeticTestCase):
    """Through the real provider helper and SDK against the fake OpenAI server."""

    def setUp(self):
        super().setUp()
        import importlib.util
        if importlib.util.find_spec("openai") is None:
            self.skipTest("openai SDK not installed")
        from fakes import FakeVendor
        self.fake = FakeVendor().start()
        self.addCleanup(self.fake.stop)
        self.env.update(self.fake.env())
        self.write_config({"provider": "openai"})

    def test_summarize_cli_and_split_summaries_via_the_provider(self):
        self.fake.reply_fn(lambda record: f"reply {len(self.fake.requests)}")
        source = self.write_file("big.py", big_python(150))
        proc = self.run_tool("nagent-file-summarize", "--file", source, "--json")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        data = json.loads(proc.stdout)
        self.assertEqual(data["mode"], "split")
        self.assertEqual(data["usage"]["calls"], data["calls"])
        self.assertEqual(len(self.fake.requests), data["calls"])
        self.assertGreater(data["usage"]["input_tokens"], 0)
        with self.patched_environ():
            call, usage = summarize_lib.provider_text_callable(resolve_settings({}, self.env))
            index = split_lib.split_file(source, "out",
                                         summarize=summarize_lib.segment_summarizer(call, "big"))
        self.assertTrue(all(record["summary"].startswith("reply ")
                            for record in index["segments"]))
        self.assertEqual(usage["calls"], len(index["segments"]))

    def test_unknown_config_keys_are_warned_about_once_like_every_tool(self):
        self.write_config({"provider": "openai", "shell": {"timout": 3}})
        warning = f"warning: unknown config key shell.timout in {self.config_path} (ignored)"
        source = self.write_file("small.py", "def a():\n    return 1\n")
        self.fake.reply_fn(lambda record: "a summary")
        for args in (["nagent-file-summarize", "--file", source],
                     ["nagent-file-split", "--file", source, "--output", "out", "--summarize"]):
            proc = self.run_tool(*args)
            with self.subTest(tool=args[0]):
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual(proc.stderr.count(warning), 1, proc.stderr)

    def test_a_summary_cut_by_the_output_limit_is_incomplete_with_its_own_exit_code(self):
        from nagent_errors import EXIT_CODES
        source = self.write_file("small.py", "def a():\n    return 1\n")
        self.fake.reply("This file defines a function that", finish="length")
        proc = self.run_tool("nagent-file-summarize", "--file", source)
        self.assertEqual(proc.returncode, EXIT_CODES["incomplete"], proc.stderr)
        self.assertEqual(proc.stdout, "This file defines a function that\n")
        self.assertIn("warning: 1 of 1 model replies was cut off by the output limit", proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        source = self.write_file("big.py", big_python(150))
        self.fake.reply("segment one, cut", finish="length")
        self.fake.reply_fn(lambda record: "whole")
        proc = self.run_tool("nagent-file-summarize", "--file", source, "--json")
        data = json.loads(proc.stdout)
        self.assertEqual(proc.returncode, EXIT_CODES["incomplete"], proc.stderr)
        self.assertIs(data["truncated"], True)
        self.assertEqual(data["usage"]["truncated_calls"], 1)
        self.fake.reply("all whole")
        data = json.loads(self.run_tool("nagent-file-summarize", "--file", "small.py", "--json").stdout)
        self.assertIs(data["truncated"], False)
