"""Provider faults through the whole loop, for every vendor adapter (issue 6).

Each fault is served by the fake vendor on the real wire format; the loop runs in-process
(build_session + run_agent_loop, the code bin/nagent runs) so the three SDKs are imported
once per test process, and a few runs go through the real bin/nagent to check the CLI
surface (exit code, one `Error:` line, no traceback). Retries are instant: base/max delay 0,
and a server's retry-after is honoured but capped at RETRY_AFTER_CAP by config.

Contract checked: retryable faults (429 with retry-after, 500, 503, 529, read timeout,
connection reset, connection refused, malformed 2xx body) are retried within max_attempts,
each retry leaving an `error` record with the retry note; exhausted → exit 5 with the error
recorded; 400 is never retried; an empty reply gets a format correction; a reply cut by the
output limit is continued. After every run the file parses and the bytes already written
are an unchanged prefix.
"""
import os
import socket

from fakes import FakeVendorTestCase

import nagent_conversation
from nagent_conversation_layout import Selection
from nagent_errors import EXIT_CODES
from nagent_stats_format import decode_stats

RETRY_AFTER_CAP = 0.2
READ_TIMEOUT = 1
CONFIG = {"retry": {"base_delay": 0, "max_delay": 0, "max_attempts": 3,
                    "retry_after_cap": RETRY_AFTER_CAP}, "read_timeout": READ_TIMEOUT}


def closed_port():
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class FaultCase(FakeVendorTestCase):
    PROVIDER = "openai"

    def setUp(self):
        super().setUp()
        self.write_config(dict(CONFIG, provider=self.PROVIDER))
        self.path = os.path.join(self.home, ".nagent", "conversations", "faults")

    def loop(self, prompt, env=None):
        """One in-process invocation on the "faults" conversation -> RunOutcome."""
        import nagent_loop
        import nagent_session
        env = self.env if env is None else env
        before = self.read_bytes()
        with self.patched_environ():  # the spinner and redaction look at os.environ
            session = nagent_session.build_session(Selection(conversation="faults"), dict(env), self.cwd)
            outcome = nagent_loop.run_agent_loop(session, prompt, "argv")
        self.assertTrue(self.read_bytes().startswith(before), "bytes already written changed")
        return outcome

    def read_bytes(self):
        try:
            with open(self.path, "rb") as handle:
                return handle.read()
        except FileNotFoundError:
            return b""

    def records(self, kind=None, since=0):
        records = nagent_conversation.read_records(self.path)
        return [r for r in records if r.seq > since and (kind is None or r.kind == kind)]

    def last_seq(self):
        return max((r.seq for r in self.records()), default=0)

    def assertRetried(self, errors, statuses):
        self.assertEqual([e.attr("status") for e in errors], statuses, [e.body for e in errors])
        for number, error in enumerate(errors, 2):
            self.assertIn(f"(attempt {number})", error.body)
            self.assertTrue(error.body.startswith("Error: "), error.body)


class _ProviderFaults:
    """The fault matrix; mixed into one concrete class per provider."""

    def test_http_faults_are_retried_and_recorded(self):
        self.fake.fault(429, headers={"retry-after": "30"})
        self.fake.fault(500)
        self.fake.reply("<nagent-shell>echo step-one</nagent-shell>")
        self.fake.fault(503)
        self.fake.fault(529)
        self.fake.reply("<nagent-response>survived</nagent-response>")
        outcome = self.loop("survive http faults")
        self.assertEqual((outcome.exit_code, outcome.response), (0, "survived"), outcome.error)
        errors = self.records("error")
        self.assertEqual([e.attr("status") for e in errors], ["429", "500", "503", "529"])
        # retry-after 30 s was honoured but capped by config; the others back off from 0.
        self.assertIn(f"retrying in {RETRY_AFTER_CAP:.1f} s (attempt 2)", errors[0].body)
        self.assertIn("retrying in 0.0 s (attempt 3)", errors[1].body)
        self.assertRetried(errors[2:], ["503", "529"])
        self.assertIn("step-one", "".join(r.body for r in self.records("result")))
        calls = [decode_stats(r.body)["last_call"] for r in self.records("stats")]
        self.assertEqual([call for call in calls if call][-1]["attempts"], 3)
        self.assertEqual(self.fake.pending(), [])

    def test_timeout_and_reset_are_retried(self):
        self.fake.reply("<nagent-response>too late</nagent-response>", delay=READ_TIMEOUT + 2)
        self.fake.fault(500, drop=True)
        self.fake.reply("<nagent-response>after network faults</nagent-response>")
        outcome = self.loop("survive network faults")
        self.assertEqual(outcome.exit_code, 0, outcome.error)
        self.assertEqual(outcome.response, "after network faults")
        errors = self.records("error")
        self.assertRetried(errors, ["timeout", "connection"])
        self.assertIn("timed out", errors[0].body)

    def test_exhausted_retries_exit_5_and_the_next_run_continues(self):
        self.fake.reply("<nagent-shell>echo kept-result</nagent-shell>")
        self.fake.fault(503, times=3)
        outcome = self.loop("first task")
        self.assertEqual(outcome.exit_code, EXIT_CODES["provider"])
        self.assertEqual(outcome.error["kind"], "provider")
        self.assertIn("after 3 attempts", outcome.error["value"])
        errors = self.records("error")
        self.assertEqual([e.attr("status") for e in errors], ["503"] * 3)
        self.assertIn(", after 3 attempts", errors[-1].body)
        self.assertNotIn("retrying", errors[-1].body)
        self.assertEqual([r.kind for r in self.records()[-2:]], ["error", "system"])  # + failed mark
        seq = self.last_seq()
        self.fake.reply("<nagent-response>second ok</nagent-response>")
        outcome = self.loop("second task")
        self.assertEqual((outcome.exit_code, outcome.response), (0, "second ok"))
        prompts = [r.body for r in self.records("prompt")]
        self.assertEqual(prompts, ["first task", "second task"])
        self.assertIn("kept-result", "".join(r.body for r in self.records("result")))
        self.assertGreater(self.records("prompt")[-1].seq, seq)

    def test_400_is_not_retried(self):
        self.fake.fault(400)
        self.fake.reply("<nagent-response>never used</nagent-response>")
        outcome = self.loop("bad request")
        self.assertEqual(outcome.exit_code, EXIT_CODES["provider"])
        errors = self.records("error")
        self.assertEqual([e.attr("status") for e in errors], ["400"])
        self.assertNotIn("attempts", errors[0].body)
        self.assertEqual(len(self.fake.pending()), 1)

    def test_malformed_body_is_retried_then_a_clear_error(self):
        self.fake.fault(200, body=b"<html>upstream proxy says hi</html>")
        self.fake.reply("<nagent-response>recovered</nagent-response>")
        outcome = self.loop("garbage once")
        self.assertEqual((outcome.exit_code, outcome.response), (0, "recovered"), outcome.error)
        self.assertRetried(self.records("error"), ["malformed"])
        seq = self.last_seq()
        self.fake.fault(200, body=b'{"truncated": ', times=3)
        outcome = self.loop("garbage always")
        self.assertEqual(outcome.exit_code, EXIT_CODES["provider"])
        self.assertIn("malformed response", outcome.error["error"])
        errors = self.records("error", since=seq)
        self.assertEqual([e.attr("status") for e in errors], ["malformed"] * 3)
        self.assertIn("garbage always", [r.body for r in self.records("prompt")])

    def test_wrong_shaped_json_never_escapes(self):
        # The SDKs do not validate answers: a JSON list where an object belongs must end as a
        # provider error or an (empty, corrected) reply, never as an exception.
        self.fake.fault(200, body=b"[1, 2, 3]", times=3)
        self.fake.reply("<nagent-response>fine</nagent-response>")
        outcome = self.loop("odd json")
        self.assertIn(outcome.exit_code, (0, EXIT_CODES["provider"]), outcome.error)
        if outcome.exit_code == 0:
            self.assertEqual(outcome.response, "fine")
            self.assertTrue(any("empty reply" in r.body for r in self.records("system")))
        else:
            self.assertIn("malformed", outcome.error["error"])

    def test_empty_reply_gets_a_format_correction(self):
        self.fake.reply("")
        self.fake.reply("<nagent-response>not empty now</nagent-response>")
        outcome = self.loop("say something")
        self.assertEqual((outcome.exit_code, outcome.response), (0, "not empty now"))
        replies = self.records("reply")
        self.assertEqual([(r.attr("valid"), r.body) for r in replies],
                         [("false", ""), ("true", "<nagent-response>not empty now</nagent-response>")])
        corrections = [r.body for r in self.records("system") if "Invalid nagent response" in r.body]
        self.assertEqual(len(corrections), 1)
        self.assertIn("empty reply", corrections[0])
        self.assertIn(f"record {replies[0].seq}", corrections[0])

    def test_truncated_reply_is_continued(self):
        self.fake.reply("<nagent-response>first half, ", finish="length")
        self.fake.reply("second half</nagent-response>")
        outcome = self.loop("long answer")
        self.assertEqual((outcome.exit_code, outcome.response), (0, "first half, second half"))
        replies = self.records("reply")
        self.assertEqual([(r.attr("valid"), r.attr("finish")) for r in replies],
                         [("partial", "length"), ("true", "stop")])
        self.assertEqual(replies[1].attr("continued"), "true")
        self.assertTrue(any("cut off by the output limit" in r.body for r in self.records("system")))

    def test_connection_refused_exhausts_with_exit_5(self):
        env = dict(self.env)
        url = f"http://127.0.0.1:{closed_port()}"
        env.update(OPENAI_BASE_URL=url + "/v1", ANTHROPIC_BASE_URL=url, GOOGLE_GEMINI_BASE_URL=url)
        outcome = self.loop("nobody home", env=env)
        self.assertEqual(outcome.exit_code, EXIT_CODES["provider"])
        self.assertIn("cannot reach", outcome.error["error"])
        errors = self.records("error")
        self.assertEqual([e.attr("status") for e in errors], ["connection"] * 3)
        self.assertEqual([r.body for r in self.records("prompt")], ["nobody home"])


class OpenAIFaultTest(_ProviderFaults, FaultCase):
    PROVIDER = "openai"


class AnthropicFaultTest(_ProviderFaults, FaultCase):
    PROVIDER = "anthropic"


class GoogleFaultTest(_ProviderFaults, FaultCase):
    PROVIDER = "google"


class CliSurfaceTest(FaultCase):
    """The real bin/nagent: exit codes and one clean error line."""

    def test_exhausted_and_malformed_end_in_one_error_line(self):
        self.fake.fault(503, times=3)
        proc = self.run_tool("nagent", "--conversation", "faults", "will fail")
        self.assertCleanError(proc, code=5, contains="HTTP 503")
        self.assertIn("after 3 attempts", proc.stderr)
        self.assertEqual(proc.stdout, "")
        before = self.read_bytes()
        self.fake.fault(200, body=b"\x00\xffnot json at all", times=3)
        proc = self.run_tool("nagent", "--conversation", "faults", "--json", "garbage")
        self.assertNotIn("Traceback", proc.stderr)
        self.assertEqual(proc.returncode, 5, proc.stderr)
        import json
        data = json.loads(proc.stdout)
        self.assertEqual(data["exit_code"], 5)
        self.assertIn("malformed", data["error"]["error"])
        self.assertTrue(self.read_bytes().startswith(before))
        self.assertEqual([r.body for r in self.records("prompt")], ["will fail", "garbage"])
