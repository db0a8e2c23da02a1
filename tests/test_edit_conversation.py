"""`nagent --edit-conversation`: a per-file edit session on an encoded copy, validated, then
swapped in (the old file archived); every failure leaves the conversation byte-identical."""
import os
import random
import re
import shutil
from unittest import mock

from base import HermeticTestCase
import nagent_conversation_edit
import nagent_write_policy
from nagent_errors import InputError
from nagent_write_policy import scratch_root
from nagent_conversation import ConversationWriter, conversation_lock, parse_records
from nagent_conversation_edit import decode_copy, encode_copy
from test_file_edit import PID, FileEditCase, last_block, split_facts, write_reply

COPY_RE = re.compile(r"Edit the nagent conversation file (\S+) as instructed")
SHELL_RESULT_RE = re.compile(r'<nagent-record seq="\d+" kind="result" [^\n]*action="shell"[^\n]*>\n.*?\n'
                             r'</nagent-record>\n', re.S)

SHELL_OUTPUT = "stdout:\nnoisy-output"


def copy_path(text):
    return COPY_RE.search(text).group(1)


class EncodingTests(HermeticTestCase):
    def test_round_trip_and_neutralised_tags(self):
        tokens = ["<", "&", "amp;", "lt;", "&lt;", "&amp;", "<nagent-", "</nagent-write>", "<system>",
                  "\n", "nagent-record ", "<nagent-record seq=\"1\">", "/", "x", "\\", "é", "\r\n",
                  "<nagent-shell-result>", "</system>", "&&", "<<"]
        rng = random.Random(5)
        samples = ["", "plain", "&lt;nagent-x", "&amp;lt;", "<nagent-record x>\n</nagent-record>\n"]
        samples += ["".join(rng.choice(tokens) for _ in range(rng.randint(1, 30))) for _ in range(3000)]
        for text in samples:
            encoded = encode_copy(text)
            self.assertEqual(decode_copy(encoded), text)
            self.assertNotIn("</nagent-write>", encoded)
            self.assertNotRegex(encoded, r"(?m)^<(nagent-[a-z-]*-result|system)")
        framing = '<nagent-record seq="3" kind="reply" time="t">\nbody\n</nagent-record>\n'
        self.assertEqual(encode_copy(framing), framing)


class EditConversationTests(FileEditCase):
    def setUp(self):
        super().setUp()
        self.notes = os.path.join(self.tmpdir, "notes.txt")
        script = self.script(write_reply(self.notes, "kept note\n")
                             + "\n<nagent-shell>echo noisy-output</nagent-shell>",
                             "<nagent-response>\nset up done\n</nagent-response>")
        data = self.ok(self.tool("nagent", "--pid", PID, "--json", "set things up"))
        script.check(self)
        self.conversation = data["conversation"]
        self.original = self.read_bytes(self.conversation)
        self.assertIn(SHELL_OUTPUT.encode(), self.original)
        self.archive_dir = os.path.join(os.path.dirname(self.conversation), "archive")

    def read_bytes(self, path):
        with open(path, "rb") as handle:
            return handle.read()

    def edit(self, *steps, instruction="drop the shell output", inprocess=True):
        script = self.script(*steps)
        proc = self.tool("nagent", "--pid", PID, "--json", "--edit-conversation", instruction,
                         inprocess=inprocess)
        script.check(self)
        return proc

    def read_copy(self, text):
        return f'<nagent-read path="{copy_path(text)}"/>'

    def rewrite(self, change):
        def step(text):
            _head, body = last_block(text, "nagent-read-result")
            return write_reply(copy_path(text), change(body))
        return step

    def assertUntouched(self):
        self.assertEqual(self.read_bytes(self.conversation), self.original)
        self.assertFalse(os.path.exists(self.archive_dir))

    def test_edit_drops_a_record_and_archives_the_old_file(self):
        seen = {}

        def drop_shell_result(body):
            seen["copy"] = body
            edited, count = SHELL_RESULT_RE.subn("", body)
            self.assertEqual(count, 1)
            return edited

        proc = self.edit(self.read_copy, self.rewrite(drop_shell_result),
                         "<nagent-response>dropped the shell result</nagent-response>", inprocess=False)
        data = self.ok(proc)
        self.assertEqual(data["status"], "edited")
        self.assertEqual(data["response"], "dropped the shell result")
        self.assertEqual(data["records_after"], data["records_before"] - 1)
        self.assertEqual(self.read_bytes(data["archived"]), self.original)
        self.assertIn("&lt;/nagent-write>", seen["copy"])  # the copy travelled encoded
        edited = self.read_bytes(self.conversation)
        self.assertNotIn(b'action="shell"', edited)
        self.assertIn(b"<nagent-shell>echo noisy-output</nagent-shell>", edited)  # the reply stays
        self.assertIn(f'<nagent-write path="{self.notes}">\nkept note\n</nagent-write>'.encode(), edited)
        records, torn = parse_records(edited)
        self.assertEqual(torn, b"")
        self.assertEqual([r.seq for r in records], list(range(1, len(records) + 1)))
        before = parse_records(self.original)[0]
        self.assertEqual([(r.attrs, r.body) for r in records if r.kind == "context"],
                         [(r.attrs, r.body) for r in before if r.kind == "context"])
        self.assertTrue(os.path.isfile(data["edit_session"]))
        # The conversation goes on from the edited file.
        script = self.script(lambda text: self.assertNotIn(SHELL_OUTPUT, text)
                             or self.assertIn("set up done", text) or "<nagent-response>ok</nagent-response>")
        self.ok(self.tool("nagent", "--pid", PID, "--json", "what next?"))
        script.check(self)

    def test_invalid_edits_leave_the_conversation_untouched(self):
        breakers = {
            "context": lambda body: re.sub(r'<nagent-record seq="\d+" kind="context".*?</nagent-record>\n',
                                           "", body, flags=re.S),
            "header": lambda body: body.replace('<nagent-record seq="3" ', '<nagent-record ', 1),
            "outside": lambda body: body + "stray text\n",
            "kind": lambda body: body.replace('kind="prompt"', 'kind="bogus"', 1),
        }
        for name, breaker in breakers.items():
            with self.subTest(name):
                proc = self.edit(self.read_copy, self.rewrite(breaker),
                                 "<nagent-response>done</nagent-response>")
                self.assertCleanError(proc, code=6, contains="edited conversation is invalid")
                copy = re.search(r"\): (\S+/conversation\.txt)", proc.stderr).group(1)
                self.assertTrue(os.path.isfile(copy))
                self.assertUntouched()

    def test_no_change_archives_nothing(self):
        data = self.ok(self.edit("<nagent-response>nothing to drop</nagent-response>"))
        self.assertEqual((data["status"], data["archived"]), ("unchanged", None))
        self.assertUntouched()

    def test_conversation_is_not_locked_during_the_session_and_a_change_is_not_overwritten(self):
        def append_meanwhile(text):
            with ConversationWriter(self.conversation, lock_timeout=0) as writer:
                writer.append("system", "<system>appended during the edit</system>")
            return self.read_copy(text)

        proc = self.edit(append_meanwhile, self.rewrite(lambda body: SHELL_RESULT_RE.sub("", body)),
                         "<nagent-response>done</nagent-response>")
        self.assertCleanError(proc, code=10, contains="conversation changed while it was being edited")
        now = self.read_bytes(self.conversation)
        self.assertTrue(now.startswith(self.original))
        self.assertIn(b"appended during the edit", now)
        self.assertFalse(os.path.exists(self.archive_dir))

    def test_busy_missing_and_failed_sessions(self):
        with conversation_lock(self.conversation):
            proc = self.edit()
        self.assertCleanError(proc, code=7, contains="conversation is busy")
        self.assertEqual(len(self.fake.requests), 2)  # only the set-up run called the model
        proc = self.tool("nagent", "--pid", "999", "--edit-conversation", "x")
        self.assertCleanError(proc, code=6, contains="no conversation to edit")
        proc = self.edit(*["this is not a nagent tag"] * 4)
        self.assertCleanError(proc, code=8, contains="conversation edit session failed")
        self.assertIn("conversation.txt", proc.stderr)
        self.assertUntouched()

    def test_large_conversation_is_edited_through_its_split(self):
        big = "".join(f"BIGLINE {i:05d} {'x' * 60}\n" for i in range(1200))
        self.script(write_reply(self.notes, big), "<nagent-response>wrote it</nagent-response>")
        self.ok(self.tool("nagent", "--pid", PID, "--json", "write a big note"))
        self.original = self.read_bytes(self.conversation)
        self.assertGreater(len(self.original), 64 * 1024)
        state = {}

        def start(text):
            state["index"], segments = split_facts(text)
            state["segment"] = segments[-1]
            return f'<nagent-read path="{segments[-1]}"/>'

        def write_segment(text):
            _head, segment = last_block(text, "nagent-read-result")
            self.assertIn("BIGLINE 01199", segment)
            return write_reply(state["segment"], segment.replace("BIGLINE 01199", "SHORTENED", 1))

        def done(text):
            self.assertIn('status="applied"', last_block(text, "nagent-file-patch-result")[0])
            return "<nagent-response>shortened</nagent-response>"

        patch = '<nagent-file-patch index="{index}"/>'  # filled once start() found the index
        data = self.ok(self.edit(start, write_segment, lambda text: patch.format(**state), done,
                                 instruction="shorten the last big line"))
        self.assertEqual(data["status"], "edited")
        edited = self.read_bytes(self.conversation)
        self.assertIn(b"SHORTENED", edited)
        self.assertNotIn(b"BIGLINE 01199", edited)
        self.assertEqual(self.read_bytes(data["archived"]), self.original)
        self.assertEqual(data["records_after"], data["records_before"])


class WorkingCopyPlaceTests(HermeticTestCase):
    """The copy goes where every scratch directory goes (nagent_write_policy.scratch_root)."""

    def place(self, environ, cwd=None):
        copy = nagent_conversation_edit.working_copy("conv", b"", environ, cwd or self.cwd)
        self.addCleanup(shutil.rmtree, os.path.dirname(copy), True)
        return os.path.dirname(os.path.dirname(copy))

    def test_tmpdir_that_is_a_temp_root_else_the_first_root(self):
        private = os.path.join(self.tmp, "private")
        os.mkdir(private)
        self.assertEqual(self.place(dict(self.env, TMPDIR=private)), os.path.realpath(private))
        # An ancestor of the edit's working directory is no temp root, wherever the process is.
        project = os.path.join(private, "project")
        os.mkdir(project)
        environ = dict(self.env, TMPDIR=private)
        self.assertEqual(self.place(environ, project), scratch_root(environ, project))
        self.assertNotEqual(self.place(environ, project), os.path.realpath(private))

    def test_no_temp_root_is_a_clear_error(self):
        environ = {key: value for key, value in self.env.items() if key != "TMPDIR"}
        missing = (os.path.join(self.tmp, "gone1"), os.path.join(self.tmp, "gone2"))
        with mock.patch.object(nagent_write_policy, "FIXED_TEMP_ROOTS", missing):
            with self.assertRaises(InputError) as caught:
                nagent_conversation_edit.working_copy("conv", b"", environ, self.cwd)
        self.assertIn("no temp directory", str(caught.exception))
