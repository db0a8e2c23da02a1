"""Seeded fuzzing of nagent_protocol.parse_response (random.Random, no hypothesis).

Data contract: `fuzz_texts(seed, count)` yields `count` replies made by mutating the golden corpus
(byte flips, truncation, duplication, tag-name typos, splices, inserted driver blocks, random unicode,
CRLF swaps) and by random tag soup; `valid_reply(rng)` builds a well-formed reply together with the
actions it must parse to. benchmarks/parser.py reuses both. The tests check invariants only, never time.
"""
import os
import random
import unittest

from base import TESTS, HermeticTestCase

import nagent_protocol as proto

GOLDEN = os.path.join(TESTS, "golden", "protocol")
DRIVER_BLOCKS = ("<system>", "<system>\n", "<nagent-shell-result>", "<nagent-read-result path=\"a\">",
                 "<nagent-x-result>", "<nagent-agent-result conversation=\"c\">", "</system>")
TYPOS = (("nagent-shell", "nagent-shel"), ("nagent-shell", "nagent_shell"), ("nagent-read", "Nagent-read"),
         ("nagent-write", "nagent-writes"), ("nagent-response", "nagent-respons"), ("nagent-", "nagnet-"),
         ("nagent-next", "nagent-exec"), ("path=", "paht="), ("/>", ">"), ("/>", "/"), ('"', "'"),
         ("</nagent-", "<nagent-"), ("<nagent-", "</nagent-"), ("<", "&lt;"), ("think", "thonk"))
SOUP = ("<nagent-shell>", "</nagent-shell>", '<nagent-read path="a"/>', "<nagent-read", ' path="b"',
        "/>", ">", "<", "</", "<nagent-", "</nagent-", "<nagent-write path='p'>", "</nagent-write>",
        "<nagent-response>", "</nagent-response>", "<nagent-next>", "</nagent-next>", "<nagent-agent>",
        "</nagent-agent>", "<nagent-file-patch index=\"i\"/>", "<think>", "</think>", "<thinking>",
        "```", "```xml\n", "\n```", "<system>", "\n<system>", "\n  <nagent-shell-result>", "&amp;",
        "&#x41;", '"', "'", "=", " ", "\n", "\r\n", "\t", "ls -la", "text", "é✓🎉", "\ufeff", "\x00",
        "\u2028", "<nagent-unknown>", "<answer>", "`<system>`")
UNICODE = "aZ09 \t\n\r<>/=\"'&;`é✓🎉\u2028\u0085\ufeff\x00\x7f\ud800日本"
BODY_TOKENS = ("ls", " ", "-la", "\n", "\r\n", "\t", "<", ">", "&amp;", "&", "`<system>`", "x <system>",
               "<nagent-read path=\"q\"/>", "</nagent-", "<b>", "é", "🎉", "```", "echo \"hi\"", "'", "|")
PATH_CHARS = "abc/._- é\"'<>&;#\n"


def corpus():
    texts = []
    for name in sorted(os.listdir(GOLDEN)):
        if name.endswith(".txt"):
            with open(os.path.join(GOLDEN, name), encoding="utf-8", newline="") as handle:
                texts.append(handle.read())
    return texts


def _truncate(rng, text):
    if not text:
        return text
    marks = [i for i, ch in enumerate(text) if ch in "<>\"'=/\n"] or [len(text) // 2]
    style = rng.randrange(4)
    if style == 0:
        at = rng.choice(marks)
    elif style == 1:
        at = min(len(text), rng.choice(marks) + 1 + rng.randrange(8))
    else:
        at = rng.randrange(len(text) + 1)
    return text[:at]


def mutate(rng, text, texts):
    kind = rng.randrange(10)
    if kind == 0 and text:
        data = bytearray(text.encode("utf-8", errors="surrogatepass"))
        for _ in range(1 + rng.randrange(4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return data.decode("utf-8", errors="replace")
    if kind == 1:
        return _truncate(rng, text)
    if kind == 2 and text:
        i = rng.randrange(len(text))
        j = min(len(text), i + rng.randrange(1, 80))
        return text[:j] + text[i:j] * rng.randrange(1, 4) + text[j:]
    if kind == 3:
        old, new = rng.choice(TYPOS)
        return text.replace(old, new, 1) if rng.random() < 0.5 else text.replace(old, new)
    if kind == 4:
        other = rng.choice(texts)
        return text[:rng.randrange(len(text) + 1)] + other[rng.randrange(len(other) + 1):]
    if kind == 5:
        block = rng.choice(DRIVER_BLOCKS)
        lines = text.split("\n")
        at = rng.randrange(len(lines))
        if rng.random() < 0.5:
            lines[at] = rng.choice(("", " ", "\t")) + block + lines[at]
        else:
            cut = rng.randrange(len(lines[at]) + 1)
            lines[at] = lines[at][:cut] + ("x" if cut == 0 else "") + block + lines[at][cut:]
        return "\n".join(lines)
    if kind == 6:
        at = rng.randrange(len(text) + 1)
        noise = "".join(rng.choice(UNICODE) for _ in range(rng.randrange(1, 6)))
        return text[:at] + noise + text[at:]
    if kind == 7:
        return text.replace("\r\n", "\n") if "\r\n" in text else text.replace("\n", "\r\n")
    if kind == 8:
        return mutate(rng, mutate(rng, text, texts), texts)
    return text


def tag_soup(rng):
    return "".join(rng.choice(SOUP) for _ in range(rng.randrange(1, 25)))


def _replace_body(rng, close):
    """Old/new pairs (nagent_replace's rule) with random text and random space between them."""
    def text(least):
        return "".join(rng.choice(BODY_TOKENS) for _ in range(rng.randrange(least, 6)))
    for _ in range(20):
        pairs = [(text(1), text(0)) for _ in range(rng.randrange(1, 3))]
        raw = rng.choice(("", "\n")) + rng.choice(("", "\n", " ")).join(
            f"<old>{old}</old>{rng.choice(('', chr(10), ' '))}<new>{new}</new>"
            for old, new in pairs) + rng.choice(("", "\n"))
        if any(old == new or "</old>" in old or "</new>" in new for old, new in pairs) \
                or close in raw or proto._CUT.search(raw):
            continue
        return raw
    return "<old>a</old><new>b</new>"


def _random_body(rng, kind):
    close = f"</nagent-{kind}>"
    if kind == "replace":
        return _replace_body(rng, close)
    for _ in range(20):
        body = "".join(rng.choice(BODY_TOKENS) for _ in range(rng.randrange(0, 12)))
        if kind in proto.NEEDS_BODY:
            body = rng.choice(("", "\n", "\r\n")) + "cmd " + body + rng.choice(("", "\n", "\r\n"))
        if close in body or proto._CUT.search(body) or f"<nagent-{kind}" in body:
            continue
        if (body + close).find(close) != len(body):
            continue
        return body
    return "plain"


def expected_body(kind, raw):
    def lead(s):
        return s[2:] if s.startswith("\r\n") else s[1:] if s.startswith("\n") else s

    def trail(s):
        return s[:-2] if s.endswith("\r\n") else s[:-1] if s.endswith("\n") else s
    if kind in proto.NEWLINE_TRIMMED:
        return trail(lead(raw))
    return lead(raw)


def _random_path(rng):
    value = "".join(rng.choice(PATH_CHARS) for _ in range(rng.randrange(1, 10)))
    return value if value.strip() else "p" + value


def random_action(rng):
    """(serialized tag, (kind, attrs, body)) for one well-formed action."""
    kind = rng.choice(proto.ACTION_TAGS)
    attrs = ()
    attr_text = ""
    if kind in proto.TAG_ATTRS:
        name = proto.TAG_ATTRS[kind][0]
        value = _random_path(rng)
        attrs = ((name, value),)
        quote = rng.choice("\"'")
        escaped = proto.escape_attr(value)
        if quote == "'":
            escaped = escaped.replace("&quot;", '"').replace("'", "&apos;")
        attr_text = rng.choice((" ", "  ", "\n", " \t")) + name + rng.choice(("=", " = ")) + quote + \
            escaped + quote
    if kind in proto.SELF_CLOSING:
        ending = rng.choice(("/>", " />", "></nagent-%s>" % kind, ">\n</nagent-%s>" % kind))
        return f"<nagent-{kind}{attr_text}{ending}", (kind, attrs, "")
    raw = _random_body(rng, kind)
    return f"<nagent-{kind}{attr_text}>{raw}</nagent-{kind}>", (kind, attrs, expected_body(kind, raw))


def valid_reply(rng):
    """A well-formed reply and the (kind, attrs, body, start, end) list it must parse to."""
    parts, expected, pos = [], [], 0
    wrap = rng.random() < 0.15
    if wrap:
        parts.append("```xml\n")
        pos += len(parts[-1])
    for number in range(rng.randrange(1, 6)):
        # Thinking is tolerated only at the very start of a reply.
        thinking = ("<think>plan</think>\n",) if number == 0 and not wrap else ()
        gap = rng.choice(("", " ", "\n", "\r\n", "\n\n", "\t") + thinking)
        tag, action = random_action(rng)
        copies = 2 if rng.random() < 0.1 else 1
        for copy in range(copies):
            parts.append(gap if not copy or not gap.startswith("<think>") else "\n")
            pos += len(parts[-1])
            parts.append(tag)
            expected.append(action + (pos, pos + len(tag)))
            pos += len(tag)
    if wrap:
        parts.append("\n```\n")
    collapsed = []
    for item in expected:
        if collapsed and collapsed[-1][:3] == item[:3]:
            continue
        collapsed.append(item)
    return "".join(parts), collapsed, len(expected) - len(collapsed)


def fuzz_texts(seed, count):
    rng = random.Random(seed)
    texts = corpus()
    for index in range(count):
        choice = index % 5
        if choice < 3:
            yield mutate(rng, rng.choice(texts), texts)
        elif choice == 3:
            yield tag_soup(rng)
        else:
            yield valid_reply(rng)[0]


class FuzzTest(HermeticTestCase):
    def check(self, text, parse):
        """The invariants every parse must satisfy, for any input."""
        n = len(text)
        if parse.valid:
            self.assertTrue(parse.actions, repr(text))
        else:
            self.assertEqual(parse.actions, (), repr(text))
            self.assertIsInstance(parse.error, str)
            self.assertTrue(parse.error.endswith("."), parse.error)
            self.assertNotIn("\n", parse.error)
            self.assertLess(len(parse.error), 240)
        last_end = 0
        for action in parse.actions:
            self.assertIn(action.kind, proto.ACTION_TAGS)
            self.assertTrue(last_end <= action.start < action.end <= n, repr(text))
            self.assertTrue(text.startswith("<nagent-" + action.kind, action.start), repr(text))
            self.assertEqual(action.attrs, tuple(sorted(action.attrs)))
            last_end = action.end
        if parse.cut_at is None:
            self.assertIsNone(parse.cut_tag)
            self.assertIsNone(proto._CUT.search(text))
            return
        self.assertTrue(0 <= parse.cut_at < n)
        self.assertTrue(text.startswith("<" + parse.cut_tag, parse.cut_at), repr(text))
        line_start = text.rfind("\n", 0, parse.cut_at) + 1
        self.assertEqual(text[line_start:parse.cut_at].strip(" \t"), "")
        self.assertIsNone(proto._CUT.search(text[:line_start]))
        for action in parse.actions:
            self.assertLessEqual(action.end, parse.cut_at, repr(text))
        self.assertTrue(text.startswith(proto.kept_reply(text, parse)))

    def test_fuzz_invariants(self):
        count = 0
        for seed in (1, 2):
            for text in fuzz_texts(seed, 6000):
                parse = proto.parse_response(text)
                self.check(text, parse)
                if count % 17 == 0:
                    self.assertEqual(parse, proto.parse_response(text))
                    proto.clean_user_output(text)
                    proto.trim_partial_tag(text)
                count += 1
        self.assertGreaterEqual(count, 10_000)

    def test_valid_replies_parse_to_what_was_written(self):
        rng = random.Random(7)
        for _ in range(3000):
            text, expected, dropped = valid_reply(rng)
            parse = proto.parse_response(text)
            self.assertTrue(parse.valid, f"{parse.error} in {text!r}")
            got = [(a.kind, a.attrs, a.body, a.start, a.end) for a in parse.actions]
            self.assertEqual(got, expected, repr(text))
            self.assertEqual(parse.duplicates_dropped, dropped)
            self.assertIsNone(parse.cut_at)

    def test_fast_and_slow_open_tag_agree(self):
        rng = random.Random(11)
        pieces = (" ", "\t", "\n", "path", "index", "=", '"', "'", "a", "&amp;", "/", ">", "x y", "é")
        for _ in range(3000):
            text = "<nagent-read" + "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
            fast = proto._OPEN_FAST.match(text, 12)
            if not fast:
                continue
            try:
                slow = proto._open_tag_slow(text, 12, "read", 0)
            except proto._Invalid as exc:
                self.fail(f"slow path rejects what the fast path accepts: {text!r}: {exc}")
            self.assertEqual(proto._open_tag(text, 12, "read", 0), slow, repr(text))

    def test_every_truncation_of_the_corpus(self):
        for text in corpus():
            for at in range(0, len(text) + 1, max(1, len(text) // 60)):
                self.check(text[:at], proto.parse_response(text[:at]))

    def test_ten_megabyte_replies_parse(self):
        # Linearity guard without timing: shapes that would be quadratic with a backtracking regex
        # or a rescan per tag. A regression shows up as this test taking minutes.
        size = 10_000_000
        shapes = {
            "write": '<nagent-write path="/tmp/x">\n' + ("data <b> & x\n" * (size // 13)) + "</nagent-write>",
            "lt soup": "<" * size,
            "open shells": "<nagent-shell>" * (size // 14),
            "indented almost-results": ("  <nagent-" + "a" * 60 + "\n") * (size // 71),
            "unclosed quote": '<nagent-read path="' + "x" * size,
            "cut at end": "<nagent-shell>" + "y\n" * (size // 2) + "<system>",
            "spaces": " " * size + "<nagent-next>x</nagent-next>",
            "thinking": "<think>" + "t" * size + "</think><nagent-next>x</nagent-next>",
        }
        for name, text in shapes.items():
            with self.subTest(shape=name):
                self.assertGreaterEqual(len(text), size - 100)
                self.check(text, proto.parse_response(text))


if __name__ == "__main__":
    unittest.main()
