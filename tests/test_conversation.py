"""Tests for nagent_conversation: framing round trips, torn-tail recovery, locking, hand-edit
tolerance and the tail-only status summary."""
import io
import json
import os
import random
import re
import subprocess
import sys
import threading
import unittest
from unittest import mock

from base import HELPERS, HermeticTestCase

import nagent_conversation as conv
from nagent_conversation import (ConversationWriter, Record, encode_record, last_stats,
                                 parse_records, read_records, read_tail_summary)
from nagent_errors import BusyError, InputError

PIECES = ["<nagent-record", "</nagent-record", "</nagent-record>", "\\", "\\\\", "\r\n", "\r",
          "\n", "\n", "ü", "日本", "x", " ", "</nagent-read-result>", "</initial_context>", "<",
          "&", '"', "\t", "seq=\"1\"", ">"]
T = "2026-11-22T03:04:05Z"


def random_text(rng, max_pieces=14):
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(0, max_pieces)))


def slurp(path):
    with open(path, "rb") as handle:
        return handle.read()


class FramingTest(HermeticTestCase):
    def test_exact_layout(self):
        data = encode_record(12, "result", "line one\nline two", {"action": "shell"}, T)
        self.assertEqual(data, b'<nagent-record seq="12" kind="result" time="2026-11-22T03:04:05Z"'
                               b' action="shell">\nline one\nline two\n</nagent-record>\n')
        self.assertEqual(encode_record(1, "system", "", time=T),
                         b'<nagent-record seq="1" kind="system" time="' + T.encode()
                         + b'">\n\n</nagent-record>\n')

    def test_attribute_escaping(self):
        data = encode_record(1, "reply", "b", {"z": 'a&b<c>"d\ne\rf\tg', "valid": False}, T)
        header = data.split(b"\n", 1)[0].decode()
        self.assertIn('z="a&amp;b&lt;c&gt;&quot;d&#10;e&#13;f&#9;g"', header)
        self.assertIn('valid="false"', header)
        record = parse_records(data)[0][0]
        self.assertEqual(record.attr("z"), 'a&b<c>"d\ne\rf\tg')
        self.assertEqual(record.attrs, (("valid", "false"), ("z", 'a&b<c>"d\ne\rf\tg')))
        self.assertIsNone(record.attr("missing"))
        self.assertEqual(record.attr("missing", "d"), "d")

    def test_framing_lines_in_bodies_are_escaped(self):
        body = "<nagent-record seq=\"9\" kind=\"x\">\n</nagent-record>\n\\</nagent-record>\nok"
        data = encode_record(1, "result", body, time=T)
        lines = data.split(b"\n")
        self.assertEqual([l for l in lines if l.startswith(b"<nagent-record")], [lines[0]])
        self.assertEqual([l for l in lines if l.startswith(b"</nagent-record")],
                         [b"</nagent-record>"])
        self.assertIn(b"\n\\\\</nagent-record>\n", data)
        self.assertEqual(parse_records(data)[0][0].body, body)

    def test_random_round_trips(self):
        rng = random.Random(20261122)
        for _ in range(1500):
            bodies = [random_text(rng) for _ in range(rng.randint(1, 4))]
            attrs = {"a": random_text(rng, 4), "b": "x"}
            data = b"".join(encode_record(i + 1, rng.choice(conv.KINDS), body, attrs, T)
                            for i, body in enumerate(bodies))
            records, torn = parse_records(data)
            self.assertEqual(torn, b"")
            self.assertEqual([r.body for r in records], bodies)
            self.assertEqual([r.seq for r in records], list(range(1, len(bodies) + 1)))
            self.assertTrue(all(r.attr("a") == attrs["a"] and r.time == T for r in records))

    def test_edge_bodies_byte_exact(self):
        for body in ["", "\n", "\n\n", "no final newline", "final newline\n", "crlf\r\nend\r\n",
                     "\r", "ünïcödé ✓ 日本語", "\\<nagent-record", "\\\\</nagent-record>x",
                     "   <nagent-record indented is not framing"]:
            data = encode_record(3, "prompt", body, time=T)
            record = parse_records(data)[0][0]
            self.assertEqual(record.body, body)
            if "nagent-record" not in body:
                self.assertIn(b">\n" + body.encode("utf-8") + b"\n</nagent-record>\n", data)

    def test_offsets_point_at_headers(self):
        data = b"".join(encode_record(i, "system", "é" * i, time=T) for i in range(1, 6))
        for record in parse_records(data)[0]:
            header = b'<nagent-record seq="%d"' % record.seq
            self.assertTrue(data[record.offset:].startswith(header))

    def test_bad_input_to_encoder(self):
        for seq, kind, attrs in [(0, "x", None), ("1", "x", None), (1, "bad kind", None),
                                 (1, "x", {"seq": 2}), (1, "x", {"bad name": 1})]:
            with self.assertRaises(ValueError):
                encode_record(seq, kind, "", attrs)


class TornTailTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.path = os.path.join(self.home, ".nagent", "conversations", "c")
        self.prefix = (encode_record(1, "prompt", "hello", {"source": "argv"}, T)
                       + b"a note typed by hand\n"
                       + encode_record(2, "reply", "<nagent-response>hi</nagent-response>", time=T))
        self.last = encode_record(3, "result", "out\n</nagent-record>\n<nagent-record x>\nü",
                                  {"action": "shell"}, T)

    def test_parse_every_truncation(self):
        for cut in range(len(self.last) + 1):
            records, torn = parse_records(self.prefix + self.last[:cut])
            kinds = [r.kind for r in records]
            if cut >= len(self.last) - 1:  # complete, maybe without the final newline
                self.assertEqual((kinds, torn), (["prompt", "note", "reply", "result"], b""), cut)
            else:
                self.assertEqual((kinds, torn), (["prompt", "note", "reply"], self.last[:cut]), cut)

    def test_writer_recovers_every_truncation(self):
        os.makedirs(os.path.dirname(self.path))
        for cut in range(len(self.last) + 1):
            with open(self.path, "wb") as handle:
                handle.write(self.prefix + self.last[:cut])
            state = self.path + ".d"
            for name in os.listdir(state) if os.path.isdir(state) else ():
                if name.startswith("torn-"):
                    os.unlink(os.path.join(state, name))
            with ConversationWriter(self.path) as writer:
                complete = cut >= len(self.last) - 1
                if complete or cut == 0:
                    self.assertIsNone(writer.torn, cut)
                else:
                    self.assertEqual(slurp(writer.torn), self.last[:cut], cut)
                    self.assertEqual(writer.torn_size, cut)
                    # Torn tails live in the conversation's own state dir, out of a name's reach.
                    self.assertEqual(os.path.dirname(writer.torn), state)
                    self.assertTrue(os.path.basename(writer.torn).startswith("torn-"))
                    self.assertEqual(slurp(self.path), self.prefix)
                self.assertEqual(writer.next_seq, 4 if complete else 3)
                record = writer.append("system", "recovered")
                self.assertEqual(record.seq, 4 if complete else 3)
                records = read_records(self.path)
                self.assertEqual(records, writer.records())
                self.assertEqual(records[-1], record)
                self.assertEqual([r.kind for r in records],
                                 ["prompt", "note", "reply"] + (["result"] if complete else [])
                                 + ["system"])
                self.assertEqual(slurp(self.path)[record.offset:record.offset + 14],
                                 b"<nagent-record")

    def test_torn_first_record_and_short_prefix(self):
        for content in [b"<", b"<nagent-rec", encode_record(1, "prompt", "x")[:40]]:
            with open(self.write_file("t", ""), "wb") as handle:
                handle.write(content)
            with ConversationWriter(os.path.join(self.cwd, "t")) as writer:
                self.assertEqual(slurp(writer.torn), content)
                self.assertEqual(writer.next_seq, 1)
                writer.append("prompt", "again")
            self.assertEqual([r.body for r in read_records(os.path.join(self.cwd, "t"))],
                             ["again"])
            for name in os.listdir(os.path.join(self.cwd, "t.d")):
                if name.startswith("torn-"):
                    os.unlink(os.path.join(self.cwd, "t.d", name))

    def test_note_without_final_newline_is_kept(self):
        path = self.write_file("n", "")
        with open(path, "wb") as handle:
            handle.write(encode_record(1, "prompt", "p") + b"typed text, no newline")
        with ConversationWriter(path) as writer:
            self.assertIsNone(writer.torn)
            record = writer.append("reply", "r")
        records = read_records(path)
        self.assertEqual([(r.kind, r.body) for r in records],
                         [("prompt", "p"), ("note", "typed text, no newline"), ("reply", "r")])
        self.assertEqual(records[-1].offset, record.offset)


class WriterTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.path = os.path.join(self.home, ".nagent", "conversations", "latest-h-1")

    def test_missing_dir_and_file_and_empty(self):
        self.assertEqual(read_records(self.path), [])
        with ConversationWriter(self.path) as writer:
            self.assertEqual((writer.next_seq, writer.torn, writer.records()), (1, None, []))
            self.assertEqual(os.stat(self.path).st_mode & 0o777, 0o600)
        self.assertEqual(read_records(self.path), [])

    def test_append_is_one_write_and_never_rewrites(self):
        with ConversationWriter(self.path) as writer:
            writer.append("context", "ctx", {"part": "static"})
            before = slurp(self.path)
            real_write = os.write
            with mock.patch.object(os, "write", side_effect=real_write) as spy:
                record = writer.append("result", "x" * 100000, {"action": "read"})
            self.assertEqual(spy.call_count, 1)
            after = slurp(self.path)
            self.assertTrue(after.startswith(before))
            self.assertEqual(record.offset, len(before))
            self.assertEqual(record.attrs, (("action", "read"),))
            writer.sync()
        self.assertEqual([r.seq for r in read_records(self.path)], [1, 2])

    def test_records_cache_tracks_changes(self):
        with ConversationWriter(self.path) as writer:
            first = writer.append("prompt", "a", {"source": "argv"})
            self.assertEqual(writer.records(), [first])
            second = writer.append("reply", "b", {"valid": True})
            self.assertEqual(writer.records(), [first, second])
            self.assertEqual(writer.records(), read_records(self.path))
            with open(self.path, "ab") as handle:  # a hand edit while running
                handle.write(b"hand note\n")
            self.assertEqual([r.kind for r in writer.records()], ["prompt", "reply", "note"])
            third = writer.append("system", "c")
            self.assertEqual(writer.records()[-1], third)
            self.assertEqual(third.seq, 3)

    def test_sequence_continues_across_runs(self):
        for expected in (1, 2, 3):
            with ConversationWriter(self.path) as writer:
                self.assertEqual(writer.append("prompt", str(expected)).seq, expected)

    def test_closed_writer(self):
        writer = ConversationWriter(self.path)
        writer.close()
        writer.close()
        with self.assertRaises(ValueError):
            writer.append("system", "x")


class LockTest(HermeticTestCase):
    HOLDER = ("import sys; sys.path.insert(0, sys.argv[1]); import nagent_conversation as c; "
              "w = c.ConversationWriter(sys.argv[2]); print('locked', flush=True); "
              "sys.stdin.read(); w.append('system', 'child'); w.close()")

    def start_holder(self, path):
        child = subprocess.Popen([sys.executable, "-c", self.HOLDER, HELPERS, path],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                 env=self.env)
        self.addCleanup(child.stdout.close)
        self.addCleanup(child.wait, 30)
        self.addCleanup(lambda: child.stdin.closed or child.stdin.close())
        self.assertEqual(child.stdout.readline().strip(), "locked")
        return child

    def test_second_process_is_busy_then_gets_the_lock(self):
        path = os.path.join(self.cwd, "conv")
        child = self.start_holder(path)
        with self.assertRaises(BusyError) as caught:
            ConversationWriter(path, lock_timeout=0.2)
        error = caught.exception
        self.assertEqual(error.exit_code, 7)
        self.assertEqual(error.line(), f"Error: conversation is busy: {path} (another nagent run "
                                       "is using it; wait or use --conversation NAME)")
        # A waiting writer gets the lock once the holder finishes (no timing asserted).
        threading.Timer(0.2, child.stdin.close).start()
        with ConversationWriter(path, lock_timeout=60) as writer:
            self.assertEqual(child.wait(30), 0)
            self.assertEqual(writer.append("system", "parent").seq, 2)
        self.assertEqual([r.body for r in read_records(path)], ["child", "parent"])

    def test_same_process_second_writer_is_busy(self):
        path = os.path.join(self.cwd, "conv")
        with ConversationWriter(path):
            with self.assertRaises(BusyError):
                ConversationWriter(path, lock_timeout=0)
        ConversationWriter(path, lock_timeout=0).close()


class HandEditTest(HermeticTestCase):
    def test_edited_body_notes_stray_and_missing_footers(self):
        text = ('<nagent-record seq="1" kind="prompt" time="t">\n'
                'a body made much longer by hand\n\n'
                '</nagent-record>\n'
                '\n'
                'A paragraph typed between records.\n'
                '</nagent-record>\n'
                '<nagent-record seq="2" kind="reply" time="t">\r\n'
                'footer deleted\n'
                '<nagent-record seq="3" kind="result" action="x">\n'
                'crlf footer\n'
                '</nagent-record>\r\n'
                '\n\n')
        path = self.write_file("c", text)
        records = read_records(path)
        self.assertEqual([(r.seq, r.kind, r.body) for r in records], [
            (1, "prompt", "a body made much longer by hand\n"),
            (0, "note", "A paragraph typed between records.\n</nagent-record>"),
            (2, "reply", "footer deleted"),
            (3, "result", "crlf footer")])
        self.assertEqual(records[3].attr("action"), "x")
        with ConversationWriter(path) as writer:
            self.assertIsNone(writer.torn)
            self.assertEqual(writer.append("system", "ok").seq, 4)

    def test_unparsable_header_names_the_line(self):
        for header in ['<nagent-record seq="x" kind="prompt">', '<nagent-record kind="prompt">',
                       '<nagent-record seq="2" kind="prompt" broken>',
                       '<nagent-record seq="2" kind="pro mpt">', '<nagent-recordjunk']:
            path = self.write_file("c", encode_record(1, "prompt", "a\nb").decode()
                                   + "note\n" + header + "\nbody\n</nagent-record>\n")
            with self.assertRaises(InputError) as caught:
                read_records(path)
            self.assertEqual(caught.exception.line(),
                             f"Error: unparsable conversation record header: {path}: line 6 "
                             "(repair the line or run nagent --clear)")
            with self.assertRaises(InputError) as caught:
                ConversationWriter(path)
            self.assertIn("line 6", caught.exception.line())
            conv.release_lock(conv.acquire_lock(path, timeout=0))  # the lock was released

    def test_invalid_utf8_is_tolerated(self):
        path = self.write_file("c", b"<nagent-record seq=\"1\" kind=\"prompt\">\n\xff\xfe ok\n"
                                    b"</nagent-record>\n", mode="wb")
        self.assertEqual(read_records(path)[0].body, "\ufffd\ufffd ok")


class TailSummaryTest(HermeticTestCase):
    def test_header_scan_across_chunk_boundaries(self):
        rng = random.Random(7)
        data = b"".join(encode_record(i, "system", random_text(rng, 6), time=T)
                        + (b"note\n" if i % 3 == 0 else b"") for i in range(1, 30))
        expected = sorted((m.start() for m in re.finditer(rb"(?m)^<nagent-record", data)),
                          reverse=True)
        for chunk in (1, 2, 3, 5, 14, 15, 16, 64, 10000):
            found = list(conv.iter_header_offsets(io.BytesIO(data), len(data), chunk))
            self.assertEqual(found, expected, chunk)

    def test_missing_empty_and_no_stats(self):
        path = os.path.join(self.cwd, "c")
        empty = {"path": path, "size": 0, "records": 0, "last_seq": 0, "stats": None,
                 "last_time": None, "prompts_after": 0}
        self.assertEqual(read_tail_summary(path), empty)
        self.write_file("c", "")
        self.assertEqual(read_tail_summary(path), empty)
        with ConversationWriter(path) as writer:
            writer.append("prompt", "p")
            last = writer.append("reply", "r")
        summary = read_tail_summary(path)
        self.assertEqual((summary["records"], summary["last_seq"], summary["stats"]), (2, 2, None))
        self.assertEqual(summary["last_time"], last.time)

    def test_big_file_reads_last_stats(self):
        path = os.path.join(self.cwd, "big")
        block = ("x" * 1023 + "\n") * 1024
        with open(path, "wb") as handle:
            handle.write(encode_record(1, "context", "ctx", {"part": "static"}, T))
            handle.write(encode_record(2, "stats", json.dumps({"cost": 1}), time=T))
            seq = 3
            for _ in range(48):
                handle.write(encode_record(seq, "result", block, {"action": "read"}, T))
                seq += 1
            handle.write(encode_record(seq, "stats", json.dumps({"run": {"input_tokens": 5}}), time=T))
            handle.write(encode_record(seq + 1, "reply", block[:100], time="2026-11-22T09:00:00Z"))
            handle.write(encode_record(seq + 2, "result", "torn")[:30])
        size = os.path.getsize(path)
        self.assertGreater(size, 50 * 1000 * 1000)
        summary = read_tail_summary(path)
        self.assertEqual(summary["stats"]["run"]["input_tokens"], 5)
        self.assertEqual(dict(summary, stats=None), {
            "path": path, "size": size, "records": seq + 1, "last_seq": seq + 1,
            "stats": None, "last_time": "2026-11-22T09:00:00Z", "prompts_after": 0})

    def test_last_record_is_stats_and_bad_stats_skipped(self):
        path = os.path.join(self.cwd, "c")
        with ConversationWriter(path) as writer:
            writer.append("stats", '{"run": {"input_tokens": 1}}')
            writer.append("prompt", "p")
            writer.append("stats", "not json")
            writer.append("stats", '{"run": {"input_tokens": 3}}')
        self.assertEqual(read_tail_summary(path)["stats"]["run"]["input_tokens"], 3)
        self.assertEqual(last_stats(read_records(path))["run"]["input_tokens"], 3)
        self.assertEqual(last_stats(read_records(path)[:3])["run"]["input_tokens"], 1)
        self.assertIsNone(last_stats([Record(1, "prompt", "{}")]))


if __name__ == "__main__":
    unittest.main()
