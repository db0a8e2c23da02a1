"""Output for scripts: `nagent --json` prints one JSON object for every outcome (usage, config,
setup and run errors included) with exit_code, error, provider, model and the actions run;
`nagent --events` writes JSON Lines as the run goes, each line parseable alone and following
the schema docs/scripting.md documents (nagent_events.EVENT_FIELDS)."""
import json
import os
import re

from base import REPO, HermeticTestCase
from test_loop import NagentRunCase

from nagent_events import EVENT_FIELDS

ERROR_KEYS = {"error", "value", "fix", "kind", "exit_code"}


class JsonEveryOutcomeTest(NagentRunCase):
    CONFIG = {"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}}

    def document(self, proc, code):
        self.assertEqual(proc.returncode, code, proc.stderr)
        data = json.loads(proc.stdout)  # exactly one document
        self.assertEqual(data["exit_code"], code)
        self.assertNotIn("Traceback", proc.stderr)
        return data

    def test_usage_config_and_setup_errors_are_json_objects(self):
        data = self.document(self.nagent("--json", "--no-such-flag", "hi"), 2)
        self.assertEqual(data["error"]["kind"], "usage")
        self.assertTrue(ERROR_KEYS <= set(data["error"]))
        self.assertEqual((data["response"], data["actions"], data["provider"]), (None, [], None))
        data = self.document(self.nagent("--output-format", "json", "--turn", "x", "hi"), 2)
        self.assertEqual(data["error"]["kind"], "usage")
        data = self.document(self.nagent("--json", "--events", "hi"), 2)
        self.assertIn("--events", data["error"]["error"])
        data = self.document(self.nagent("--json", "--conversation", "../escape", "hi"), 2)
        self.assertEqual(data["error"]["kind"], "usage")
        with open(self.config_path, "w") as handle:
            handle.write("{not json")
        data = self.document(self.nagent("--json", "hi"), 3)
        self.assertEqual(data["error"]["kind"], "config")
        self.write_config(self.CONFIG)
        env = dict(self.env)
        env.pop("OPENAI_API_KEY")
        data = self.document(self.nagent("--json", "hi", env=env), 4)
        self.assertEqual(data["error"]["kind"], "setup")
        self.assertEqual((data["provider"], data["model"]), ("openai", "gpt-5.5"))
        data = self.document(self.nagent("--json", "--load-conversation", "nope"), 6)
        self.assertEqual(data["error"]["kind"], "input")
        proc = self.run_tool("nagent-llm-text", "--file", "missing.txt", "--json")
        self.assertEqual(json.loads(proc.stdout)["kind"], "input")

    def test_a_run_reports_provider_model_and_actions(self):
        self.fake.reply('<nagent-shell>echo one; echo two</nagent-shell>\n'
                        '<nagent-read path="missing.txt"/>')
        self.fake.reply("<nagent-response>done</nagent-response>")
        data = self.document(self.nagent("--json", "--conversation", "j", "go"), 0)
        self.assertEqual((data["response"], data["provider"], data["model"]), ("done", "openai", "gpt-5.5"))
        self.assertEqual([(a["kind"], a["summary"], a["ok"]) for a in data["actions"]],
                         [("shell", "echo one; echo two", True), ("read", "missing.txt", False)])
        self.assertRegex(data["actions"][0]["outcome"], r"^exit 0 · \d+\.\d s · 2 lines$")
        self.assertEqual(data["actions"][1]["outcome"], "file not found")
        self.fake.fault(401)
        data = self.document(self.nagent("--json", "--conversation", "j", "again"), 5)
        self.assertEqual((data["error"]["kind"], data["provider"]), ("provider", "openai"))
        self.assertIsNone(data["response"])


class EventsTest(NagentRunCase):
    CONFIG = {"provider": "anthropic", "retry": {"base_delay": 0, "max_delay": 0}}

    def lines(self, proc):
        self.assertNotIn("Traceback", proc.stderr)
        events = [json.loads(line) for line in proc.stdout.splitlines()]  # each line alone
        for event in events:
            self.assertIn(event["type"], EVENT_FIELDS)
            self.assertTrue(set(EVENT_FIELDS[event["type"]]) <= set(event), event)
            self.assertIsInstance(event["t"], (int, float))
        times = [event["t"] for event in events]
        self.assertEqual(times, sorted(times))
        return events

    def test_a_run_as_json_lines(self):
        self.fake.reply("<nagent-shell>echo evented</nagent-shell>", chunk=8)
        self.fake.fault(529, headers={"retry-after-ms": "1"})
        self.fake.reply("Not a tagged reply.")
        self.fake.reply("<nagent-response>All good.</nagent-response>", chunk=5)
        proc = self.nagent("--events", "--conversation", "e", "go")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        events = self.lines(proc)
        kinds = [event["type"] for event in events if event["type"] != "reply_delta"]
        self.assertEqual(kinds, [
            "run_start", "prompt", "model_call_start", "model_call_end", "reply", "action_start",
            "action_end", "model_call_start", "retry", "model_call_end", "reply", "model_call_start",
            "model_call_end", "reply", "response", "run_end"])
        deltas = [event for event in events if event["type"] == "reply_delta"]
        self.assertEqual("".join(e["text"] for e in deltas if e["call"] == 1),
                         "<nagent-shell>echo evented</nagent-shell>")
        by_type = {event["type"]: event for event in events}
        self.assertEqual(by_type["retry"]["reason"], "HTTP 529")
        self.assertEqual((by_type["retry"]["attempt"], by_type["retry"]["max_attempts"]), (2, 4))
        self.assertEqual(by_type["action_end"]["outcome"].split(" · ")[0], "exit 0")
        self.assertEqual(by_type["response"]["text"], "All good.")
        self.assertEqual(by_type["run_end"]["exit_code"], 0)
        self.assertEqual(by_type["run_end"]["calls"], 3)
        self.assertGreater(by_type["model_call_end"]["usage"]["input_tokens"], 0)
        invalid = [e for e in events if e["type"] == "reply" and not e["valid"]]
        self.assertIn("text outside tags", invalid[0]["error"])

    def test_errors_are_events_too_and_stream_json_is_an_alias(self):
        proc = self.nagent("--output-format", "stream-json", "--max-calls", "0", "hi")
        events = self.lines(proc)
        self.assertEqual([e["type"] for e in events], ["error", "run_end"])
        self.assertEqual((events[0]["kind"], events[1]["exit_code"]), ("usage", 2))
        self.fake.fault(400)
        events = self.lines(self.nagent("--events", "--conversation", "x", "hi"))
        self.assertEqual([e["type"] for e in events][-2:], ["error", "run_end"])
        self.assertEqual(events[-1]["exit_code"], 5)
        self.assertEqual(events[0]["type"], "run_start")
        proc = self.nagent("--events", "--status")
        self.assertEqual(self.lines(proc)[0]["kind"], "usage")


class GatedAnswerTest(NagentRunCase):
    CONFIG = {"provider": "google", "retry": {"base_delay": 0, "max_delay": 0}}

    def test_a_response_hook_turns_streaming_off(self):
        self.fake.reply("<nagent-response>gated answer</nagent-response>", chunk=3, gap=0.01)
        proc = self.nagent("--hook-per-response", "true", "--events", "--conversation", "g", "go")
        events = [json.loads(line) for line in proc.stdout.splitlines()]
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertNotIn("reply_delta", [e["type"] for e in events])
        self.assertEqual([e["text"] for e in events if e["type"] == "response"], ["gated answer"])
        self.fake.reply("<nagent-response>gated answer</nagent-response>", chunk=3, gap=0.01)
        proc = self.nagent("--hook-per-response", "true", "--stream", "--conversation", "g", "again")
        self.assertEqual(proc.stdout, "gated answer\n")
        # Not shown live; read as a stream all the same (the read timeout bounds silences).
        self.assertEqual([":streamGenerateContent" in r["path"] for r in self.generation_requests()],
                         [True, True])


class EventsDocumentedTest(HermeticTestCase):
    def test_docs_schema_matches_the_code(self):
        with open(os.path.join(REPO, "docs", "scripting.md"), encoding="utf-8") as handle:
            page = handle.read()
        section = page[page.index("## Events"):]
        section = section[:section.index("\n## ")]
        rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]*) \|", section, re.M))
        self.assertEqual(set(rows), set(EVENT_FIELDS))
        for kind, fields in EVENT_FIELDS.items():
            documented = set(re.findall(r"`(\w+)`", rows[kind]))
            self.assertEqual(documented, set(fields), kind)
