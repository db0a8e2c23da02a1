"""Tests for bin/helpers/nagent_protocol.py: the golden corpus and the string helpers.

Golden corpus: tests/golden/protocol/NAME.txt is a model reply (read byte-exact, CRLF kept) and
NAME.json its expected parse (Parse.as_dict() plus kept_reply when cut and user_output for each
response). `NAGENT_REGEN_GOLDEN=1 python3 -m unittest test_protocol` rewrites the .json files.
"""
import json
import os
import unittest

from base import TESTS, HermeticTestCase

import nagent_protocol as proto

GOLDEN = os.path.join(TESTS, "golden", "protocol")
MIN_CASES = 25


def golden_names():
    return sorted(name[:-4] for name in os.listdir(GOLDEN) if name.endswith(".txt"))


def read_reply(name):
    with open(os.path.join(GOLDEN, name + ".txt"), encoding="utf-8", newline="") as handle:
        return handle.read()


def expected_view(text):
    parse = proto.parse_response(text)
    data = parse.as_dict()
    if parse.cut_at is not None:
        data["kept_reply"] = proto.kept_reply(text, parse)
    data["user_output"] = [proto.clean_user_output(action.body)
                           for action in parse.actions if action.kind == "response"]
    return data


def write_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as handle:
        handle.write(json.dumps(data, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    os.replace(tmp, path)


class GoldenCorpusTest(HermeticTestCase):
    def test_corpus_is_complete(self):
        names = golden_names()
        self.assertGreaterEqual(len(names), MIN_CASES)
        if os.environ.get("NAGENT_REGEN_GOLDEN") == "1":
            return  # test_golden_cases is about to write the missing .json files
        jsons = sorted(name[:-5] for name in os.listdir(GOLDEN) if name.endswith(".json"))
        self.assertEqual(names, jsons, "every NAME.txt needs a NAME.json and vice versa")

    def test_golden_cases(self):
        regen = os.environ.get("NAGENT_REGEN_GOLDEN") == "1"
        for name in golden_names():
            with self.subTest(case=name):
                got = expected_view(read_reply(name))
                path = os.path.join(GOLDEN, name + ".json")
                if regen:
                    write_json(path, got)
                    continue
                with open(path, encoding="utf-8") as handle:
                    self.assertEqual(got, json.load(handle))

    def test_corpus_covers_the_interesting_shapes(self):
        views = {name: expected_view(read_reply(name)) for name in golden_names()}
        valid = [v for v in views.values() if v["valid"]]
        self.assertTrue(any(len(v["actions"]) >= 3 for v in valid))
        self.assertTrue(any(v["cut_at"] is not None and v["valid"] for v in views.values()))
        self.assertTrue(any(v["cut_at"] is not None and not v["valid"] for v in views.values()))
        self.assertTrue(any(v["duplicates_dropped"] for v in valid))
        self.assertIn("empty reply.", [v["error"] for v in views.values()])


class KeyBehaviourTest(HermeticTestCase):
    """The rules from the contract, one assertion each, independent of the corpus files."""

    def one(self, text):
        parse = proto.parse_response(text)
        self.assertTrue(parse.valid, parse.error)
        self.assertEqual(len(parse.actions), 1)
        return parse.actions[0]

    def test_write_keeps_body_except_first_newline(self):
        action = self.one('<nagent-write path="p">\nabc\n</nagent-write>')
        self.assertEqual(action.body, "abc\n")
        self.assertEqual(action.attr("path"), "p")
        self.assertIsNone(action.attr("nope"))
        self.assertEqual(action.attr("nope", "d"), "d")

    def test_trimmed_bodies_drop_one_newline_each_side(self):
        self.assertEqual(self.one("<nagent-shell>\n\nls\n\n</nagent-shell>").body, "\nls\n")
        self.assertEqual(self.one("<nagent-next>\r\ngo\r\n</nagent-next>").body, "go")
        self.assertEqual(self.one("<nagent-write path='p'>\r\na\r\n</nagent-write>").body, "a\r\n")

    def test_offsets_cover_the_tag(self):
        text = '  <nagent-read path="x"/>  '
        action = self.one(text)
        self.assertEqual(text[action.start:action.end], '<nagent-read path="x"/>')

    def test_details_are_specific(self):
        cases = {
            "": "empty reply.",
            "Let me think…\n<nagent-shell>ls</nagent-shell>": "text outside tags at line 1",
            "\n<nagent-shell>\nls\n": "unclosed <nagent-shell> opened at line 2",
            "<nagent-exec>x</nagent-exec>": "unknown tag <nagent-exec>",
            "<nagent-read/>": "<nagent-read> needs a path attribute",
            "<nagent-file-patch/>": "<nagent-file-patch> needs a index attribute",
            "<nagent-system-result>x": "driver's <nagent-system-result> block",
        }
        for text, detail in cases.items():
            with self.subTest(text=text):
                parse = proto.parse_response(text)
                self.assertFalse(parse.valid)
                self.assertEqual(parse.actions, ())
                self.assertIn(detail, parse.error)
                self.assertNotIn("\n", parse.error)

    def test_cut_drops_actions_closing_after_it(self):
        text = ("<nagent-shell>a</nagent-shell>\n<nagent-shell>b\n\t<system>x</system>\n"
                "</nagent-shell>")
        parse = proto.parse_response(text)
        self.assertTrue(parse.valid)
        self.assertEqual([a.body for a in parse.actions], ["a"])
        self.assertEqual((parse.cut_tag, text[parse.cut_at]), ("system", "<"))
        self.assertEqual(proto.kept_reply(text, parse),
                         "<nagent-shell>a</nagent-shell>\n<nagent-shell>b\n\t")

    def test_cut_with_no_action_before_is_invalid(self):
        parse = proto.parse_response("<nagent-agent-result>\nexit_code: 0\n</nagent-agent-result>")
        self.assertEqual(parse.error, "reply wrote the driver's <nagent-agent-result> block; stop "
                         "before results, the driver appends them.")
        self.assertEqual(parse.cut_at, 0)

    def test_mid_line_mentions_do_not_cut(self):
        for text in ("<nagent-response>see `<system>` and <nagent-shell-result></nagent-response>",
                     "<nagent-response>x <systemd> y\n<systemd>\n</nagent-response>"):
            parse = proto.parse_response(text)
            self.assertTrue(parse.valid, parse.error)
            self.assertIsNone(parse.cut_at)

    def test_duplicates_collapse(self):
        parse = proto.parse_response("<nagent-next>a</nagent-next>" * 4 + "<nagent-next>b</nagent-next>")
        self.assertEqual([a.body for a in parse.actions], ["a", "b"])
        self.assertEqual(parse.duplicates_dropped, 3)


class LeakedThinkingTest(HermeticTestCase):
    """Issue 10 item 5: a thinking block is tolerated only at the very start of a reply, and never
    where its end could be text inside an action body."""

    def assertNoActions(self, text):
        parse = proto.parse_response(text)
        self.assertFalse(parse.valid, [(a.kind, a.body) for a in parse.actions])
        self.assertEqual(parse.actions, ())
        return parse

    def test_close_think_inside_a_write_body_never_runs_the_body(self):
        # The repro: prose, a write whose body holds "</think>" and a shell tag, then a cut.
        body = "Models leak </think>\n<nagent-shell>rm -rf ~/project</nagent-shell>\n"
        for ending in ("<system>done</system>\n</nagent-write>", "", "</nagent-write>"):
            text = ('I will write the notes.\n<nagent-write path="/tmp/notes.md">\n' + body + ending)
            with self.subTest(ending=ending):
                self.assertNoActions(text)
        # The same inside an opened <think> block at the start: a draft body, not thinking's end.
        self.assertNoActions('<think>Draft:\n<nagent-write path="/tmp/n">\nfoo </think>\n'
                             "<nagent-shell>rm -rf ~/project</nagent-shell>\n<system>x</system>")

    def test_thinking_only_at_the_very_start(self):
        self.assertNoActions("<nagent-next>a</nagent-next>\n<think>plan</think>\n"
                             "<nagent-shell>rm -rf ~/project</nagent-shell>")
        self.assertNoActions("```\n<think>plan</think>\n<nagent-next>a</nagent-next>\n```")
        parse = proto.parse_response("<think>a</think>\n<thinking>b</thinking>\n<nagent-next>x</nagent-next>")
        self.assertTrue(parse.valid, parse.error)

    def test_backticked_or_closed_mentions_keep_a_leak_tolerated(self):
        for text in ("I will use `<nagent-shell>` for that.\n</think>\n<nagent-shell>ls</nagent-shell>",
                     "<think>Try <nagent-shell>ls</nagent-shell> first.</think><nagent-shell>ls</nagent-shell>",
                     'Read it: <nagent-read path="a"/>\n</think>\n<nagent-read path="a"/>'):
            with self.subTest(text=text):
                parse = proto.parse_response(text)
                self.assertTrue(parse.valid, parse.error)
                self.assertEqual(len(parse.actions), 1)


class StoppedAtTest(HermeticTestCase):
    """A provider stop at one of STOP_SEQUENCES is a cut at the reply's end (issue 10 item 15)."""

    def test_a_reported_stop_is_a_cut_even_when_the_text_is_whole(self):
        text = "<nagent-shell>ls</nagent-shell>\n"
        parse = proto.parse_response(text, "nagent-shell-result")
        self.assertEqual((parse.valid, parse.cut_at, parse.cut_tag), (True, len(text), "nagent-shell-result"))
        self.assertEqual(proto.kept_reply(text, parse), text)
        self.assertEqual(proto.parse_response("\n", "system").error,
                         "reply wrote the driver's <system> block; stop before results, the driver appends them.")

    def test_a_stop_inside_a_body_drops_only_the_unclosed_action(self):
        text = '<nagent-shell>ls</nagent-shell>\n<nagent-write path="/tmp/x">\nab'
        for stopped in ("system", ""):
            parse = proto.parse_response(text, stopped)
            self.assertEqual([a.kind for a in parse.actions], ["shell"], stopped)
            self.assertEqual(parse.cut_at, len(text))
        self.assertFalse(proto.parse_response(text).valid)
        self.assertTrue(proto.parse_response(text).truncated)
        # An unknown stop (a plain "stop" finish) is a cut only when the text is unfinished.
        whole = proto.parse_response("<nagent-next>a</nagent-next>", "")
        self.assertEqual((whole.valid, whole.cut_at), (True, None))
        alone = proto.parse_response('<nagent-write path="/tmp/x">\nab', "")
        self.assertEqual(alone.error, "unclosed <nagent-write> opened at line 1.")
        self.assertEqual(proto.stop_block("\n\t<system>"), "system")
        self.assertEqual(proto.stop_block("\n<nagent-read-result"), "nagent-read-result")
        self.assertEqual(proto.stop_block("STOP"), "")


class HugeBodyTest(HermeticTestCase):
    def test_megabyte_write_body_is_exact(self):
        body = "".join(f"line {i:07d} <tag> & </nagent-writ {'x' * (i % 50)}\r\n"
                       for i in range(20000))
        self.assertGreater(len(body), 1_000_000)
        text = '<nagent-write path="/tmp/big">\n' + body + "</nagent-write>\n"
        parse = proto.parse_response(text)
        self.assertTrue(parse.valid, parse.error)
        self.assertEqual(parse.actions[0].body, body)

    def test_megabyte_response_and_late_cut(self):
        body = "word " * 250_000
        text = f"<nagent-response>\n{body}\n</nagent-response>\n<nagent-shell>ls</nagent-shell>\n"
        parse = proto.parse_response(text + "<system>late</system>")
        self.assertEqual([a.kind for a in parse.actions], ["response", "shell"])
        self.assertEqual(parse.actions[0].body, body)
        self.assertEqual(parse.cut_at, len(text))

    def test_megabyte_unclosed_body(self):
        parse = proto.parse_response("<nagent-shell>" + "y" * 2_000_000)
        self.assertEqual(parse.error, "unclosed <nagent-shell> opened at line 1.")


class HelperTest(HermeticTestCase):
    def test_correction_text(self):
        self.assertEqual(proto.correction_text("empty reply."),
                         "<system>Invalid nagent response format: empty reply. "
                         "Respond only with valid nagent tags.</system>")

    def test_clean_user_output(self):
        cases = [
            ("<nagent-response>\nhi\n</nagent-response>", "hi"),
            ("```\nhello\n```", "hello"),
            ("```md\n# T\n```\n", "# T"),
            ("  <nagent-response>```py\nx = 1\n```</nagent-response>  ", "x = 1"),
            ("```\n<nagent-response>\nboth\n</nagent-response>\n```", "both"),
            ("````md\n```py\nx\n```\n````", "```py\nx\n```"),
            ("```\na\n```\nmid\n```\nb\n```", "```\na\n```\nmid\n```\nb\n```"),
            ("Use `<nagent-read path=\"x\"/>` to read.", "Use `<nagent-read path=\"x\"/>` to read."),
            ("<nagent-response>a</nagent-response> and <nagent-response>b</nagent-response>",
             "<nagent-response>a</nagent-response> and <nagent-response>b</nagent-response>"),
            ("```\r\ncrlf\r\n```\r\n", "crlf"),
            ("plain\n", "plain\n"),
            ("```\nunclosed", "```\nunclosed"),
        ]
        for text, want in cases:
            with self.subTest(text=text):
                self.assertEqual(proto.clean_user_output(text), want)

    def test_attr_escapes_round_trip(self):
        samples = ['plain', 'a"b', "it's", "<&>", "&amp; literal", "new\nline\r", "ü ✓ 🎉", ""]
        for value in samples:
            escaped = proto.escape_attr(value)
            self.assertNotIn('"', escaped)
            self.assertNotIn("\n", escaped)
            self.assertEqual(proto.unescape_attr(escaped), value)
        self.assertEqual(proto.unescape_attr("&#65;&#x42;&#X43;&apos;&bogus;&#0;&#xD800;"),
                         "ABC'&bogus;&#0;&#xD800;")

    def test_result_block(self):
        self.assertEqual(proto.result_block("nagent-shell-result", "exit_code: 0\nstdout:\nok"),
                         "<nagent-shell-result>\nexit_code: 0\nstdout:\nok\n</nagent-shell-result>")
        block = proto.result_block("nagent-agent-result", "out\n",
                                   {"conversation": 'c"1', "tokens_in": 5})
        self.assertEqual(block, '<nagent-agent-result conversation="c&quot;1" tokens_in="5">\n'
                                "out\n</nagent-agent-result>")
        self.assertEqual(proto.result_block("system", ""), "<system>\n</system>")
        with self.assertRaises(ValueError):
            proto.result_block("bad tag", "x")

    def test_result_blocks_cut_a_reply_that_copies_them(self):
        block = proto.result_block("nagent-read-result", "data", {"path": "a"})
        parse = proto.parse_response('<nagent-read path="a"/>\n' + block)
        self.assertEqual(parse.cut_tag, "nagent-read-result")
        self.assertEqual(len(parse.actions), 1)

    def test_trim_partial_tag(self):
        cases = [("ok <nagent-sh", "ok "), ("ok </nagent-shell", "ok "), ("ok <", "ok "),
                 ("ok <nag", "ok "), ("a < b", "a < b"), ("<nagent-x/>", "<nagent-x/>"),
                 ("no tags", "no tags"), ('x <nagent-write path="a', "x ")]
        for text, want in cases:
            self.assertEqual(proto.trim_partial_tag(text), want, text)

    def test_kept_reply_without_cut_is_the_text(self):
        text = "<nagent-next>go</nagent-next>"
        self.assertEqual(proto.kept_reply(text, proto.parse_response(text)), text)

    def test_grammar_text(self):
        grammar = proto.grammar_text()
        self.assertEqual(grammar, proto.grammar_text())
        for tag in proto.ACTION_TAGS:
            self.assertIn(f"<nagent-{tag}", grammar)
        for tag in proto.RESULT_TAGS:
            self.assertIn(f"<{tag if tag == 'system' else 'nagent-' + tag}", grammar)
        self.assertIn("Never write a result block or <system> yourself", grammar)
        # Every action example in the grammar must itself parse as exactly one valid action.
        examples = grammar.split("Action tags, one example each:")[1].split("Rules:")[0]
        chunks = [line for line in examples.strip().split("\n") if not line.startswith("    ")]
        parse = proto.parse_response("\n".join(chunks))
        self.assertTrue(parse.valid, parse.error)
        self.assertEqual([a.kind for a in parse.actions], list(proto.ACTION_TAGS[1:]) + ["response"])


if __name__ == "__main__":
    unittest.main()
