"""Conversation identity, prompt forms and every lifecycle flag of bin/nagent, end to end.

Prompt runs go against the fake vendor; lifecycle flags that call no model run against a
conversation file written in-process, so most of these subprocesses cost ~0.1 s."""
import json
import os
import pty
import subprocess
import sys

from base import BIN
from test_loop import NagentRunCase

from nagent_conversation import ConversationWriter

STATS = {"conversation": {"turns": 2, "current_input": 300, "input_tokens": 500, "output_tokens": 40,
                          "cache_read_tokens": 200, "cache_write_tokens": 100, "reasoning_tokens": 0,
                          "cost_usd": 0.01, "estimated": False, "cache_read_share": 0.4}}


class ConversationIdentityTest(NagentRunCase):
    def test_default_file_wrappers_stdin_forms_and_torn_tail(self):
        self.fake.reply("<nagent-response>first answer</nagent-response>")
        first = self.nagent("argv prompt")
        self.assertEqual((first.returncode, first.stdout), (0, "first answer\n"), first.stderr)
        path = self.default_path()
        self.assertTrue(os.path.isfile(path))
        before = self.read_bytes(path)
        torn = b'<nagent-record seq="99" kind="reply" time="2026-01-01T00:00:00Z">\nhalf a rep'
        with open(path, "ab") as handle:
            handle.write(torn)

        # Through a wrapper shell, prompt on stdin: same session, so the same file.
        self.fake.reply("<nagent-response>second answer</nagent-response>")
        wrapped = subprocess.run(["sh", "-c", f'"{sys.executable}" "{BIN}/nagent"'], input="stdin prompt\n",
                                 capture_output=True, text=True, env=self.env, cwd=self.cwd, timeout=120)
        self.assertEqual((wrapped.returncode, wrapped.stdout), (0, "second answer\n"), wrapped.stderr)
        after = self.read_bytes(path)
        self.assertTrue(after.startswith(before))
        state = path + ".d"  # torn tails are kept in the conversation's own state dir
        torn_files = [n for n in os.listdir(state) if n.startswith("torn-")]
        self.assertEqual(len(torn_files), 1)
        self.assertEqual(self.read_bytes(os.path.join(state, torn_files[0])), torn)
        records = self.records(path)
        self.assertEqual([(r.attr("source"), r.body) for r in records if r.kind == "prompt"],
                         [("argv", "argv prompt"), ("stdin", "stdin prompt\n")])
        self.assertTrue(any(r.kind == "system" and "killed mid-write" in r.body for r in records))

        # Another conversation (--pid) in another cwd: argv words then stdin after "-".
        other_cwd = os.path.join(self.tmp, "elsewhere")
        os.makedirs(other_cwd)
        self.fake.reply("<nagent-response>third answer</nagent-response>")
        third = self.nagent("--pid", "other-77", "lead", "words", "-", input="tail text", cwd=other_cwd)
        self.assertEqual(third.returncode, 0, third.stderr)
        other = self.default_path("other-77")
        self.assertEqual([(r.attr("source"), r.body) for r in self.records(other) if r.kind == "prompt"],
                         [("argv+stdin", "lead words\n\ntail text")])
        self.assertEqual(self.read_bytes(path), after)

        requests = self.generation_requests()
        self.assertEqual(len(requests), 3)
        self.assertIn("argv prompt", self.request_text(requests[1]))  # continuation
        self.assertIn("first answer", self.request_text(requests[1]))
        self.assertNotIn("half a rep", self.request_text(requests[1]))
        self.assertPrefixChain(requests[:2])
        # The static start of the initial context is byte-identical across conversations.
        first_user = "".join(self.messages(requests[0])[0][1])
        other_user = "".join(self.messages(requests[2])[0][1])
        self.assertTrue(first_user.startswith("<initial_context>"))
        static_end = first_user.index("date (UTC)")
        self.assertGreater(static_end, 2000)
        self.assertEqual(first_user[:static_end], other_user[:static_end])
        self.assertNotIn(other_cwd, first_user[:static_end])
        self.assertIn(other_cwd, other_user[static_end:])  # session facts name the cwd

    def test_paths_selected_by_default_pid_and_conversation(self):
        status = self.json_of(self.nagent("--status", "--json"))
        self.assertEqual(status["conversation"], self.default_path())
        self.assertFalse(status["exists"])
        self.assertEqual(self.json_of(self.nagent("--status", "--json", "--pid", "abc"))["conversation"],
                         self.default_path("abc"))
        self.assertEqual(self.json_of(self.nagent("--status", "--json", "--conversation", "proj"))
                         ["conversation"], self.named_path("proj"))
        env = dict(self.env, BASHPID="5150")
        self.assertEqual(self.json_of(self.nagent("--status", "--json", env=env))["conversation"],
                         self.default_path("5150"))

    def test_prompt_errors_are_usage_errors(self):
        self.assertOneError(self.nagent(input=""), 2, "empty prompt")
        self.assertOneError(self.nagent("--conversation", "x", input=" \n"), 2, "empty prompt")
        leader, follower = pty.openpty()
        self.addCleanup(os.close, leader)
        with open(follower, "rb", closefd=True) as tty:
            proc = subprocess.run([sys.executable, os.path.join(BIN, "nagent")], stdin=tty,
                                  capture_output=True, text=True, env=self.env, cwd=self.cwd, timeout=60)
        self.assertOneError(proc, 2, "no prompt")
        self.assertOneError(self.nagent("--status", "--clear"), 2, "one lifecycle flag")
        self.assertOneError(self.nagent("--status", "a prompt"), 2, "takes no prompt")
        self.assertEqual(self.generation_requests(), [])

    def test_a_bad_pid_is_one_usage_error_for_every_command(self):
        # Each command that selects a conversation or a file-edit index takes --pid by one rule.
        self.write_file("t.py", "x = 1\n")
        commands = [("nagent", "hi"), ("nagent", "--status"), ("nagent", "--clear"),
                    ("nagent", "--list-file-edits"), ("nagent", "--list-file-edits", "--json"),
                    ("nagent", "--file-edit", "t.py", "hi"),
                    ("nagent", "--file-edit", "t.py", "--status"),
                    ("nagent", "--file-edit", "t.py", "--clear"),
                    ("nagent-file-edit", "--file", "t.py", "--clear"),
                    ("nagent-file-edit", "--file", "t.py", "edit it")]
        for number, command in enumerate(commands):
            # An empty --pid (a script's unset "$VAR") is an error too, never this shell's id.
            bad = ("../x", "a b", "-x", "")[number % 4]
            proc = self.run_tool(command[0], *command[1:], f"--pid={bad}", input="")
            if "--json" in command:
                self.assertEqual(proc.returncode, 2, proc.stderr)
                self.assertEqual(json.loads(proc.stdout)["error"]["error"], "invalid pid", command)
            else:
                self.assertOneError(proc, 2, f"invalid pid: {bad or repr(bad)}")
        self.assertFalse(os.path.exists(os.path.join(self.home, ".nagent")))
        self.assertEqual(self.generation_requests(), [])

    def test_commands_without_pid_take_this_shells_id_from_the_environment(self):
        # A prompt, --clear and --list-file-edits on a file all name one per-shell index.
        target = self.write_file("t.py", "x = 1\n")
        screen = dict(self.env, STY="4242.pts-9", WINDOW="1")
        cleared = self.json_of(self.run_tool("nagent-file-edit", "--file", "t.py", "--clear",
                                             "--json", env=screen))
        listed = self.json_of(self.nagent("--list-file-edits", "--json", env=screen))
        self.assertEqual(listed["pid"], "screen-4242.pts-9-1")
        self.assertEqual([(f["path"], f["conversation"]) for f in listed["files"]],
                         [(os.path.realpath(target), os.path.basename(cleared["conversation"]))])
        status = self.json_of(self.nagent("--file-edit", "t.py", "--status", "--json", env=screen))
        self.assertEqual(status["conversation"], cleared["conversation"])
        other = self.json_of(self.nagent("--list-file-edits", "--json", env=dict(self.env, BASHPID="5150")))
        self.assertEqual((other["pid"], other["files"]), ("5150", []))

    def test_unsafe_conversation_names_are_rejected(self):
        for args in (("--conversation", "../escape", "hi"), ("--conversation", "a/b", "hi"),
                     ("--conversation", "/tmp/abs", "hi"), ("--conversation", "..", "hi"),
                     ("--save-conversation", "../up"), ("--load-conversation", "/etc/passwd"),
                     ("--branch-conversation", "x/y")):
            proc = self.nagent(*args)
            self.assertOneError(proc, 2, "invalid conversation name")
        self.assertFalse(os.path.exists(os.path.join(self.home, ".nagent", "escape")))
        self.assertEqual(self.generation_requests(), [])


class LifecycleCommandsTest(NagentRunCase):
    def setUp(self):
        super().setUp()
        self.path = self.default_path()
        self.write_conversation(self.path, "first question")

    def write_conversation(self, path, question):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with ConversationWriter(path) as writer:
            writer.append("context", "<initial_context>\nstatic", {"part": "static"})
            writer.append("context", "session\n</initial_context>", {"part": "session"})
            writer.append("prompt", question, {"source": "argv"})
            writer.append("reply", "<nagent-shell>echo hi</nagent-shell>", {"valid": "true"})
            writer.append("result", "<nagent-shell-result>\nexit_code: 0\nstdout:\nhi\n"
                          "</nagent-shell-result>", {"action": "shell"})
            writer.append("reply", "<nagent-response>turn two answer</nagent-response>", {"valid": "true"})
            writer.append("stats", json.dumps(STATS))

    def test_status_text_and_json(self):
        data = self.json_of(self.nagent("--status", "--json"))
        self.assertEqual(data["conversation"], self.path)
        self.assertTrue(data["exists"])
        self.assertEqual(data["size"], os.path.getsize(self.path))
        self.assertEqual((data["model_calls"], data["prompts"]), (2, None))  # an older-format record
        self.assertEqual(data["totals"]["cache_read_tokens"], 200)
        self.assertEqual(data["totals"]["input_tokens"], 500)
        text = self.nagent("--status")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn(self.path, text.stdout)
        self.assertIn("model calls: 2", text.stdout)
        self.assertIn("cache read 200 (40%)", text.stdout)

    def test_clear_archives_instead_of_destroying(self):
        original = self.read_bytes(self.path)
        data = self.json_of(self.nagent("--clear", "--json"))
        self.assertFalse(os.path.exists(self.path))
        self.assertEqual(self.read_bytes(data["archived"]), original)
        self.assertIn(os.path.join(self.conversations, "archive"), data["archived"])
        again = self.nagent("--clear")
        self.assertEqual(again.returncode, 0, again.stderr)
        self.assertIn("nothing to clear", again.stdout)

    def test_save_never_overwrites_and_load_archives_current(self):
        original = self.read_bytes(self.path)
        saved = self.nagent("--save-conversation", "keep")
        self.assertEqual(saved.returncode, 0, saved.stderr)
        self.assertEqual(self.read_bytes(self.named_path("keep")), original)
        self.write_conversation(self.path, "more")  # the current one grows
        again = self.nagent("--save-conversation", "keep")
        self.assertOneError(again, 10, "already exists")
        self.assertEqual(self.read_bytes(self.named_path("keep")), original)

        grown = self.read_bytes(self.path)
        loaded = self.nagent("--load-conversation", "keep")
        self.assertEqual(loaded.returncode, 0, loaded.stderr)
        self.assertEqual(self.read_bytes(self.path), original)
        archived = os.listdir(os.path.join(self.conversations, "archive"))
        self.assertEqual(len(archived), 1)
        self.assertEqual(self.read_bytes(os.path.join(self.conversations, "archive", archived[0])), grown)
        self.assertOneError(self.nagent("--load-conversation", "nope"), 6, "nope")

    def test_branch_with_and_without_turn(self):
        self.write_conversation(self.named_path("source"), "branch me")
        with ConversationWriter(self.named_path("source")) as writer:
            writer.append("prompt", "second question", {"source": "argv"})
            writer.append("reply", "<nagent-response>second</nagent-response>", {"valid": "true"})
        data = self.json_of(self.nagent("--branch-conversation", "source", "--turn", "1", "--json"))
        self.assertEqual(data["conversation"], self.path)
        self.assertIsNotNone(data["archived"])
        records = self.records(self.path)
        # Turn 1: the first user prompt and everything up to the second one.
        self.assertEqual([r.kind for r in records],
                         ["context", "context", "prompt", "reply", "result", "reply", "stats"])
        self.assertEqual([r.seq for r in records], [1, 2, 3, 4, 5, 6, 7])
        self.assertEqual(records[2].body, "branch me")
        self.assertTrue(os.path.exists(self.named_path("source")))
        whole = self.nagent("--branch-conversation")  # from the current one
        self.assertEqual(whole.returncode, 0, whole.stderr)
        self.assertEqual(len(self.records(self.path)), 7)
        self.assertOneError(self.nagent("--branch-conversation", "source", "--turn", "9"), 2, "no such turn")

    def test_list_conversations_text_and_json(self):
        self.write_conversation(self.named_path("named-one"), "named question")
        self.nagent("--save-conversation", "saved-one")
        self.nagent("--clear")
        data = self.json_of(self.nagent("--list-conversations", "--json"))
        by_kind = {}
        for item in data["conversations"]:
            by_kind.setdefault(item["kind"], []).append(item["name"])
        self.assertEqual(sorted(by_kind["saved"]), ["named-one", "saved-one"])
        self.assertEqual(len(by_kind["archived"]), 1)
        self.assertNotIn("latest", by_kind)  # cleared
        text = self.nagent("--list-conversations")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("named-one", text.stdout)
        self.assertIn("named question", text.stdout)

    def test_summarize_and_list_models_call_the_provider(self):
        self.fake.reply("The user asked a first question; the shell said hi.")
        summary, models, text = self.nagent_parallel(
            ("--summarize",), ("--list-models", "--json"), ("--list-models",))
        self.assertEqual(summary.returncode, 0, summary.stderr)
        self.assertEqual(summary.stdout, "The user asked a first question; the shell said hi.\n")
        request = self.request_text(self.generation_requests()[0])
        self.assertIn("first question", request)
        self.assertIn("turn two answer", request)
        data = self.json_of(models)
        self.assertEqual(data["provider"], "google")
        self.assertIn("gemini-2.5-pro", data["models"])
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("gemini-2.5-flash\n", text.stdout)

    def test_missing_conversation_errors_are_clean(self):
        self.nagent("--clear")
        self.assertOneError(self.nagent("--save-conversation", "x"), 6, "no conversation to save")
        self.assertOneError(self.nagent("--summarize"), 6, "no conversation to summarize")
        self.assertOneError(self.nagent("--branch-conversation", "ghost"), 6, "no such conversation")

    def test_list_file_edits_for_a_shell_without_sessions(self):
        data = self.json_of(self.nagent("--list-file-edits", "--json", "--pid", "9"))
        self.assertEqual((data["pid"], data["files"]), ("9", []))
        self.assertEqual(data["index"], os.path.join(self.home, ".nagent", "file-edits", "index-9.json"))
        text = self.nagent("--list-file-edits", "--pid", "9")
        self.assertEqual((text.returncode, text.stdout), (0, "no per-file edit sessions for this shell\n"))


class FileEditQueriesTest(NagentRunCase):
    """A query about a per-file edit session (--status, --summarize, --save-conversation) only
    looks the file up in the per-file index: it never adds, re-keys or touches a record."""

    def state(self):
        root, found = os.path.join(self.home, ".nagent"), {}
        for folder, _dirs, files in os.walk(root):
            for name in files:
                path = os.path.join(folder, name)
                found[os.path.relpath(path, root)] = (os.stat(path).st_mtime_ns, self.read_bytes(path))
        return found

    def query(self, *args):
        return self.nagent("--pid", "77", "--file-edit", "target.py", *args)

    def test_queries_about_a_file_without_a_session_change_nothing(self):
        self.write_file("target.py", "x = 1\n")
        before = self.state()
        status = self.json_of(self.query("--status", "--json"))
        self.assertEqual((status["conversation"], status["exists"]), (None, False))
        text = self.query("--status")
        self.assertEqual(text.returncode, 0, text.stderr)
        self.assertIn("conversation: none yet for target.py (no per-file edit session)", text.stdout)
        self.assertOneError(self.query("--summarize"), 6, "no conversation to summarize")
        self.assertOneError(self.query("--save-conversation", "kept"), 6, "no conversation to save")
        self.assertEqual(self.state(), before)
        self.assertFalse(os.path.exists(os.path.join(self.home, ".nagent", "file-edits")))
        self.assertEqual(self.generation_requests(), [])

    def test_a_query_finds_the_session_by_the_rule_without_updating_it(self):
        import nagent_file_edit_lib as file_edit
        target = self.write_file("target.py", "x = 1\n")
        record = file_edit.resolve_file_edit(target, "77", self.env)
        conversation = os.path.join(self.home, ".nagent", "conversations", record["conversation"])
        with ConversationWriter(conversation) as writer:
            writer.append("prompt", "edit it", {"source": "argv"})
        replacement = self.write_file("target.py.swp", "x = 2\n")
        os.replace(replacement, target)  # an editor's save: a new inode at the same path
        before = self.state()
        status = self.json_of(self.query("--status", "--json"))
        self.assertEqual((status["conversation"], status["exists"]), (conversation, True))
        self.assertEqual(self.state(), before)
