"""The streamed answer prints exactly what the whole reply prints: pure tests of the incremental
printer (nagent_stream), the secret-safe delta pass (nagent_run.DeltaRedactor), the one-line
action views (nagent_action_view) and the event sinks (nagent_events), all in process."""
import io
import json
import random
import unittest

from base import HermeticTestCase

import nagent_action_view as view
from nagent_events import ActionLog, Events, JsonLines, EVENT_FIELDS
from nagent_protocol import clean_user_output, parse_response
from nagent_run import DeltaRedactor
from nagent_stream import AnswerPrinter, AnswerStream, Printer, TextPrinter, held_from, stream_allowed

PIECES = ["a", "b", " ", "\n", "\r\n", "\r", "<", ">", "/", "`", "```", "```py\n", "\n```",
          "<system>", "\n<system>", "<nagent-response>", "</nagent-response>", "</nagent-respo",
          "<nagent-shell-result>", "\n  <nagent-read-result>", "\n<nagent-shell", "é", "日", "\t",
          "<think>", "</think>", "<nagent-shell>ls</nagent-shell>", "x", "\n\n", "<sys", "\n  "]
LEADS = ["", " ", "\n", "<think>hm</think>\n", "```\n", "```xml\n", "\ufeff"]
TAILS = ["", "\n", " \n", "\n```", "\n```\n"]


def non_streamed(reply):
    """What `nagent` prints for a reply that is one final answer, or None."""
    parsed = parse_response(reply)
    if not parsed.valid:
        return None
    responses = [a for a in parsed.actions if a.kind == "response"]
    if len(responses) != 1 or len(parsed.actions) != 1:
        return None
    text = clean_user_output(responses[0].body)
    return text if text.endswith("\n") else text + "\n"


def streamed(reply, rng, finish=True):
    """(text written while streaming, text written in all) for `reply` fed in random pieces."""
    out = []
    printer, stream = Printer(out.append), AnswerStream()
    at = 0
    while at < len(reply):
        step = rng.randint(1, 7)
        printer.emit(stream.feed(reply[at:at + step]))
        at += step
    during = "".join(out)
    if finish:
        parsed = parse_response(reply)
        printer.finish(clean_user_output([a for a in parsed.actions][0].body))
    return during, "".join(out)


class AnswerStreamTest(unittest.TestCase):
    def test_random_final_answers_print_exactly_the_non_streamed_text(self):
        rng = random.Random(12)
        checked = streamed_some = 0
        for _ in range(6000):
            body = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 12)))
            reply = rng.choice(LEADS) + "<nagent-response>" + body + "</nagent-response>" + \
                rng.choice(TAILS)
            expected = non_streamed(reply)
            if expected is None:
                continue
            during, total = streamed(reply, rng)
            self.assertEqual(total, expected, repr(reply))
            self.assertTrue(expected.startswith(during), repr(reply))
            checked += 1
            streamed_some += bool(during)
        self.assertGreater(checked, 1500)
        self.assertGreater(streamed_some, checked // 3)

    def test_text_streams_before_the_reply_ends(self):
        stream, out = AnswerStream(), []
        for piece in ["<nagent-", "response>\nHello", " wor", "ld\nsecond", " line\n", "</nagent-response>"]:
            out.append(stream.feed(piece))
        self.assertEqual(out, ["", "Hello", " wor", "ld\nsecond", " line", ""])
        self.assertEqual(stream.state, "after")

    def test_held_back_tails(self):
        self.assertEqual(held_from("abc</nagent-resp"), 3)
        self.assertEqual(held_from("abc\n</nag"), 3)
        self.assertEqual(held_from("abc\r\n"), 3)
        self.assertEqual(held_from("abc\r"), 3)
        self.assertEqual(held_from("abc\n  <nagent-shell-res"), 3)
        self.assertEqual(held_from("abc\n<sys"), 3)
        self.assertEqual(held_from("abc\nplain"), 9)
        self.assertEqual(held_from("a < b"), 5)

    def test_what_is_never_streamed(self):
        cases = {"<nagent-shell>ls</nagent-shell>": "no",
                 "prose first <nagent-response>x</nagent-response>": "no",
                 "<nagent-response>\n```python\nprint(1)\n```\n</nagent-response>": "hold",
                 "<nagent-response>text\n<system>fake</system>": "cut",
                 "<nagent-response>text\n  <nagent-shell-result>": "cut"}
        for reply, state in cases.items():
            stream = AnswerStream()
            written = "".join(stream.feed(ch) for ch in reply)
            self.assertEqual(stream.state, state, reply)
            if state != "cut":
                self.assertEqual(written, "", reply)
            else:
                self.assertEqual(written, "text", reply)  # before the cut line: printed

    def test_thinking_and_fence_before_the_answer(self):
        stream = AnswerStream()
        out = "".join(stream.feed(ch) for ch in "<think>plan</think>\n```\n<nagent-response>Hi there")
        self.assertEqual(out, "Hi there")


class PrinterRetryTest(unittest.TestCase):
    def test_a_retry_with_the_same_text_prints_it_once(self):
        out, notes = [], []
        printer = Printer(out.append, notes.append)
        printer.mark()
        printer.emit("Hello wo")
        printer.restart()                       # the stream dropped; the retry starts afresh
        for piece in ("Hel", "lo w", "orld"):
            printer.emit(piece)
        printer.finish("Hello world")
        self.assertEqual("".join(out), "Hello world\n")
        self.assertEqual(notes, [])

    def test_a_retry_that_differs_is_marked_and_printed_from_its_start(self):
        out, notes = [], []
        printer = Printer(out.append, notes.append)
        printer.mark()
        printer.emit("Hello wo")
        printer.restart()
        printer.emit("Hi")
        printer.emit(" there")
        printer.finish("Hi there")
        self.assertEqual("".join(out), "Hello wo\nHi there\n")
        self.assertEqual(len(notes), 1)

    def test_continuation_keeps_the_earlier_part_on_retry(self):
        out = []
        printer = Printer(out.append)
        printer.mark()
        printer.emit("part one, ")
        printer.mark()                          # the continuation call starts here
        printer.emit("part tw")
        printer.restart()                       # only the continuation is retried
        printer.emit("part two")
        printer.finish("part one, part two")
        self.assertEqual("".join(out), "part one, part two\n")

    def test_answer_printer_abandons_a_reply_that_is_not_final(self):
        out, notes = [], []
        sink = AnswerPrinter(out.append, notes.append)
        events = Events([sink])
        events.emit("model_call_start", call=1, purpose="reply")
        for piece in ("<nagent-response>Done", " so far</nagent-response>\n<nagent-shell>ls</nagent-shell>"):
            events.emit("reply_delta", call=1, text=piece)
        events.emit("reply", calls=1, valid=True, final=False, actions=1, error=None)
        self.assertEqual("".join(out), "Done so far\n")
        self.assertIn("not the final answer", notes[0])
        events.emit("model_call_start", call=2, purpose="reply")
        events.emit("reply_delta", call=2, text="<nagent-response>Final</nagent-response>")
        events.emit("reply", calls=1, valid=True, final=True, actions=0, error=None)
        events.emit("response", text="Final", valid=True)
        self.assertEqual("".join(out), "Done so far\nFinal\n")
        self.assertTrue(sink.done)

    def test_answer_printer_prints_a_held_answer_whole_at_the_end(self):
        out = []
        sink = AnswerPrinter(out.append)
        events = Events([sink])
        events.emit("model_call_start", call=1, purpose="reply")
        events.emit("reply_delta", call=1, text="<nagent-response>\n```\ncode\n```\n</nagent-response>")
        self.assertEqual(out, [])
        events.emit("response", text="code", valid=True)
        self.assertEqual("".join(out), "code\n")

    def test_checkpoint_calls_are_not_printed(self):
        out = []
        events = Events([AnswerPrinter(out.append)])
        events.emit("model_call_start", call=1, purpose="checkpoint")
        events.emit("reply_delta", call=1, text="<nagent-response>secret plan</nagent-response>")
        events.emit("retry", call=1)
        self.assertEqual(out, [])

    def test_text_printer_across_a_retry(self):
        out = []
        printer = TextPrinter(out.append)
        printer.delta("4")
        printer.retry()
        printer.delta("4")
        printer.finish("4")
        self.assertEqual("".join(out), "4\n")

    def test_stream_allowed_only_without_a_response_hook(self):
        from nagent_config import resolve_settings
        self.assertTrue(stream_allowed(resolve_settings({}, {"HOME": "/nonexistent"})))
        gated = resolve_settings({"hook_per_response": "make test"}, {"HOME": "/nonexistent"})
        self.assertFalse(stream_allowed(gated))


class DeltaRedactorTest(unittest.TestCase):
    def test_a_secret_split_across_deltas_never_passes(self):
        secret = "sk-live-0123456789"
        rng = random.Random(3)
        for _ in range(300):
            text = "".join(rng.choice(["a", " ", secret, "sk-", "sk-live-01", "\n"]) for _ in range(8))
            out = []
            redactor = DeltaRedactor((secret,), out.append)
            at = 0
            while at < len(text):
                step = rng.randint(1, 5)
                redactor.feed(text[at:at + step])
                at += step
            redactor.flush()
            joined = "".join(out)
            self.assertNotIn(secret, joined)
            self.assertEqual(joined, text.replace(secret, "[redacted]"))

    def test_reset_drops_the_held_tail(self):
        out = []
        redactor = DeltaRedactor(("abcdef",), out.append)
        redactor.feed("xyabc")
        redactor.reset()
        redactor.feed("zz")
        redactor.flush()
        self.assertEqual("".join(out), "xyzz")


class ActionViewTest(unittest.TestCase):
    def test_one_line_escapes_what_the_model_controls(self):
        line = view.one_line("ls\n\x1b[2J\u202egnp.exe\u2066 \x07 done\t ok", 200)
        self.assertEqual(line, "ls ⏎ \\x1b[2J\\u202egnp.exe\\u2066 \\x07 done ok")
        self.assertNotIn("\x1b", line)
        self.assertTrue(line.isprintable())

    def test_cut_counts_wide_characters(self):
        from nagent_terminal_text import cut
        self.assertEqual(cut("日本語日本語", 7), "日本語…")
        self.assertEqual(len(view.one_line("x" * 500, 40)), 40)

    def test_outcomes_from_the_result_blocks(self):
        from nagent_actions import ActionOutcome
        from nagent_protocol import parse_response as parse
        from nagent_protocol_blocks import result_block
        shell, read, write = parse('<nagent-shell>pytest -q</nagent-shell><nagent-read path="a.py"/>'
                                   '<nagent-write path="/tmp/x">hello</nagent-write>').actions
        block = result_block("nagent-shell-result", "exit_code: 0\nstdout:\n1\n2\n3\nstderr:\n")
        self.assertEqual(view.action_result(shell, ActionOutcome(block), 1.23)["outcome"],
                         "exit 0 · 1.2 s · 3 lines")
        refused = result_block("nagent-shell-result",
                               "exit_code: none\nrefused: shell commands are disabled\n")
        result = view.action_result(shell, ActionOutcome(refused), 0.0)
        self.assertFalse(result["ok"])
        self.assertEqual(result["outcome"], "refused: shell commands are disabled")
        block = result_block("nagent-read-result", "x" * 4100, {"path": "a.py", "bytes": "4100"})
        self.assertEqual(view.action_result(read, ActionOutcome(block), 0.0)["outcome"], "4.1 kB")
        error = result_block("nagent-write-result", "error: outside the temp roots: /etc/x",
                             {"path": "/etc/x", "status": "error"})
        result = view.action_result(write, ActionOutcome(error, failed=True), 0.0)
        self.assertEqual((result["ok"], result["outcome"]), (False, "outside the temp roots: /etc/x"))
        self.assertEqual(view.action_summary(write), "/tmp/x (5 B)")


class EventSinkTest(HermeticTestCase):
    def test_json_lines_and_action_log(self):
        buffer, log = io.StringIO(), ActionLog()
        clock = iter([0.0, 0.5, 1.25]).__next__
        events = Events([JsonLines(buffer), log], clock=clock)
        events.emit("run_start", conversation="c", provider="openai", model="m", invocation="user")
        events.emit("action_end", index=1, kind="shell", summary="ls", ok=True, outcome="exit 0",
                    seconds=0.1)
        lines = [json.loads(line) for line in buffer.getvalue().splitlines()]
        self.assertEqual([line["t"] for line in lines], [0.5, 1.25])
        self.assertEqual(set(lines[0]) - {"type", "t"}, set(EVENT_FIELDS["run_start"]))
        self.assertEqual(log.as_dict(), {"provider": "openai", "model": "m", "actions": [
            {"kind": "shell", "summary": "ls", "ok": True, "outcome": "exit 0"}],
            "changed_files": []})
        self.assertTrue(events.wants_deltas)
        self.assertFalse(Events([log]).wants_deltas)


if __name__ == "__main__":
    unittest.main()
