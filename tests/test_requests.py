"""Conversation records → model requests: in-process checks of nagent_requests, plus the wire
requests the real tools send (Anthropic stop sequences and cache breakpoints, request N a
prefix of request N+1, nagent-llm-text --file as one plain message)."""
import os

from base import HermeticTestCase
from test_loop import NagentRunCase

from nagent_config import resolve_settings
from nagent_conversation import Record
from nagent_requests import (NOT_SENT, STOP_SEQUENCES, build_request, record_messages,
                             request_fingerprint)


def rec(seq, kind, body, **attrs):
    return Record(seq, kind, body, tuple(sorted(attrs.items())))


def conversation():
    """A realistic record list; returns (records, indexes after which a model call happens)."""
    records, calls = [], []

    def add(kind, body, **attrs):
        records.append(rec(len(records) + 1, kind, body, **attrs))

    add("context", "<initial_context>\nstatic part", part="static")
    add("context", "session part\n</initial_context>", part="session")
    add("meta", '{"invocation": "user"}')
    add("prompt", "first prompt", source="argv")
    calls.append(len(records))
    add("stats", "{}")
    add("reply", "Prose, not tags.", valid="false")
    add("system", "<system>Invalid nagent response format: see record 6.</system>")
    calls.append(len(records))
    add("reply", "<nagent-shell>ls</nagent-shell>\n<nagent-shell-result>\nfake\n</nagent-shell-result>",
        valid="true", cut="31")
    add("result", "<nagent-shell-result>\nexit_code: 0\n</nagent-shell-result>", action="shell")
    add("system", "<system>Your reply wrote the driver's block.</system>")
    calls.append(len(records))
    add("error", "Error: transient 529 — retrying", status="529")
    add("reply", "<nagent-shell>echo contin", valid="partial", finish="length")
    add("system", "<system>Your reply was cut off by the output limit.</system>")
    calls.append(len(records))
    add("reply", "<nagent-shell>echo continued</nagent-shell>", valid="true", continued="true")
    add("result", "<nagent-shell-result>\ncontinued\n</nagent-shell-result>", action="shell")
    calls.append(len(records))
    add("reply", "<nagent-response>done</nagent-response>", valid="true")
    add("interrupt", "The user interrupted the previous run (Ctrl-C).")
    add("prompt", "second prompt", source="stdin")
    calls.append(len(records))
    return records, calls


class RecordMessagesTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.anthropic = resolve_settings({"provider": "anthropic"}, self.env).provider
        self.openai = resolve_settings({"provider": "openai"}, self.env).provider

    def test_roles_are_separated_and_merged(self):
        records, _ = conversation()
        messages = record_messages(records)
        roles = [role for role, _ in messages]
        self.assertEqual(roles[0], "user")
        for first, second in zip(roles, roles[1:]):
            self.assertNotEqual(first, second)
        sent = [part for _, parts in messages for part in parts]
        self.assertEqual(sent[:3], ["<initial_context>\nstatic part", "session part\n</initial_context>",
                                    "first prompt"])
        assistant = [parts for role, parts in messages if role == "assistant"]
        self.assertEqual(assistant[0], ["<nagent-shell>ls</nagent-shell>"])  # cut at the fabrication
        self.assertIn(["<nagent-response>done</nagent-response>"], assistant)
        # A reply continued after the output limit: the partial, the note, then only the rest.
        self.assertEqual(assistant[1], ["<nagent-shell>echo contin"])
        self.assertEqual(assistant[2], ["ued</nagent-shell>"])
        self.assertIn("<system>The user interrupted the previous run (Ctrl-C).</system>", sent)
        self.assertEqual(messages[-1][1][-1], "second prompt")

    def test_invalid_replies_and_bookkeeping_are_not_sent(self):
        records, _ = conversation()
        text = "\n".join(part for _, parts in record_messages(records) for part in parts)
        self.assertNotIn("Prose, not tags.", text)
        self.assertIn("see record 6", text)
        self.assertNotIn("retrying", text)
        self.assertNotIn("invocation", text)
        self.assertNotIn("fake\n", text)
        self.assertEqual(NOT_SENT, frozenset({"stats", "meta", "error", "hook"}))

    def test_partial_replies_are_sent_only_for_a_valid_whole_or_a_continuation_in_progress(self):
        base = [rec(1, "prompt", "go", source="argv")]
        partial = [rec(2, "reply", "<nagent-shell>echo a", valid="partial", finish="length"),
                   rec(3, "system", "<system>Your reply was cut off by the output limit. Continue.</system>",
                       continuation="true")]
        in_progress = record_messages(base + partial)
        self.assertEqual(in_progress, [("user", ["go"]), ("assistant", ["<nagent-shell>echo a"]),
                                       ("user", [partial[1].body])])
        valid = rec(4, "reply", "<nagent-shell>echo ab</nagent-shell>", valid="true", continued="true")
        self.assertEqual(record_messages(base + partial + [valid])[1:3],
                         [("assistant", ["<nagent-shell>echo a"]), ("user", [partial[1].body])])
        self.assertEqual(record_messages(base + partial + [valid])[3], ("assistant", ["b</nagent-shell>"]))
        invalid = rec(4, "reply", "<nagent-shell>echo ab</nagent-shell> prose", valid="false",
                      continued="true")
        correction = rec(5, "system", "<system>Invalid nagent response format: x</system>")
        self.assertEqual(record_messages(base + partial + [invalid, correction]),
                         [("user", ["go", correction.body])])
        failed = rec(4, "system", "<system>The run failed.</system>", run="failed")
        self.assertEqual(record_messages(base + partial + [rec(9, "error", "HTTP 500"), failed]),
                         [("user", ["go", failed.body])])

    def test_request_n_is_a_prefix_of_request_n_plus_one(self):
        records, calls = conversation()
        requests = [build_request(records[:end], self.anthropic, cache_key="k") for end in calls]
        for before, after in zip(requests, requests[1:]):
            flat_before = [(m.role, p) for m in before.messages for p in m.parts]
            flat_after = [(m.role, p) for m in after.messages for p in m.parts]
            self.assertEqual(flat_after[:len(flat_before)], flat_before)
            self.assertTrue(request_fingerprint(after).startswith(request_fingerprint(before)[:-3]))
        for request in requests:
            self.assertEqual(request.messages[-1].role, "user")
        again = [build_request(records[:end], self.anthropic, cache_key="k") for end in calls]
        self.assertEqual(again, requests)  # deterministic

    def test_cache_breakpoints_and_stop_sequences(self):
        records, calls = conversation()
        request = build_request(records[:calls[2]], self.anthropic, cache_key="k")
        marks = request.cache_breakpoints
        self.assertEqual(marks[0], (0, 0))  # the static initial context
        last = len(request.messages) - 1
        self.assertEqual(marks[-1], (last, len(request.messages[last].parts) - 1))
        self.assertLessEqual(len(marks), 4)
        # The end of the user turn the previous request ended with is marked too.
        self.assertIn((0, len(request.messages[0].parts) - 1), marks)
        self.assertEqual(request.stop, STOP_SEQUENCES[:self.anthropic.max_stop_sequences])
        self.assertEqual(build_request(records[:calls[2]], self.openai).stop, ())

    def test_dangling_reply_gets_a_nudge(self):
        records = [rec(1, "prompt", "hi"), rec(2, "reply", "<nagent-response>x</nagent-response>")]
        request = build_request(records, self.openai)
        self.assertEqual(request.messages[-1].role, "user")
        only_reply = build_request([rec(1, "reply", "<nagent-response>x</nagent-response>")], self.openai)
        self.assertEqual(only_reply.messages[0].role, "user")


class WireRequestTest(NagentRunCase):
    def test_anthropic_requests_carry_stops_and_breakpoints_and_grow_by_prefix(self):
        self.fake.reply("<nagent-shell>echo one</nagent-shell>")
        self.fake.reply("No tags here, just prose that is invalid.")
        self.fake.reply("<nagent-read path=\"a.txt\"/>")
        self.fake.reply("<nagent-response>finished</nagent-response>")
        self.write_file("a.txt", "alpha\n")
        proc = self.nagent("--provider", "anthropic", "--json", "go")
        data = self.json_of(proc)
        self.assertEqual(data["exit_code"], 0, proc.stderr)
        requests = self.fake.requests_for("anthropic")
        requests = [r for r in requests if r["path"] == "/v1/messages"]
        self.assertEqual(len(requests), 4)
        for record in requests:
            body = record["json"]
            self.assertEqual(body["stop_sequences"][0], "\n<nagent-shell-result")
            blocks = [block for message in body["messages"] for block in message["content"]]
            marked = [block for block in blocks if "cache_control" in block]
            self.assertTrue(1 <= len(marked) <= 4, len(marked))
            self.assertIn("cache_control", body["messages"][0]["content"][0])  # static context
            self.assertIn("cache_control", body["messages"][-1]["content"][-1])
            self.assertEqual([m["role"] for m in body["messages"]][::2][0], "user")
        self.assertPrefixChain(requests)
        self.assertGreater(data["totals"]["cache_read_tokens"], 0)  # breakpoints hit the cache
        assistant = [m for m in requests[-1]["json"]["messages"] if m["role"] == "assistant"]
        self.assertEqual(len(assistant), 2)  # the invalid reply is not among them

    def test_llm_text_file_sends_one_plain_message(self):
        path = self.write_file("question.txt", "What is 2+2?\n")
        self.fake.reply("4")
        proc = self.run_tool("nagent-llm-text", "--file", path, "--provider", "openai")
        self.assertEqual((proc.returncode, proc.stdout), (0, "4\n"), proc.stderr)
        requests = self.generation_requests()
        self.assertEqual(len(requests), 1)
        self.assertEqual(self.messages(requests[0]), [("user", ["What is 2+2?\n"])])
        self.assertNotIn("stop", requests[0]["json"])
        self.assertFalse(os.path.exists(self.conversations))
