"""Issue 24: the interactive session, driven through a pseudo-terminal as a person types, and the
conversations that follow the project (-c, --resume, the continuing? hint) across "terminals"
(another BASHPID or STY) and projects.

The session test is one real bin/nagent on a pty against the fake vendor: a prompt and its
streamed answer, /status, a bracketed paste and Alt-Enter and trailing-backslash lines as one
prompt each, a line typed during a run delivered once at the next turn boundary (through an
approval question it must not answer), a sub-agent's approval question answered through the
session, /changes, /rewind, /mode plan and build, /model, /save, /help, Ctrl-C in a run and at
the prompt, up-arrow history, /cost, Ctrl-D.
"""
import json
import os
import sys

from base import BIN, HermeticTestCase
from project_fixture import ProjectFixture
from ptys import PtySession
from test_loop import NagentRunCase

import nagent_line_editing as editing
import nagent_project_conversations as projects
import nagent_slash
from nagent_errors import UsageError
from nagent_typeahead import LineBuffer

PROMPT = "› "


def answer(text):
    return f"<nagent-response>\n{text}\n</nagent-response>"


class SessionOnATerminal(NagentRunCase):
    CONFIG = {"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0},
              "shell": {"approval": "confirm"}}

    def session(self, *args):
        env = dict(self.env, TERM="xterm", NO_COLOR="1")
        env.pop("NAGENT_NO_SPINNER")   # the status line shows what is typed during a run
        session = PtySession([sys.executable, os.path.join(BIN, "nagent"), *args], env, self.cwd)
        self.addCleanup(session.close)
        return session

    def prompts(self, path):
        return [(r.attr("source"), r.body) for r in self.kinds(path, "prompt")]

    def test_a_person_at_the_prompt(self):
        path = self.named_path("talk")
        s = self.session("--conversation", "talk")
        first = s.expect(PROMPT)
        self.assertIn("talk · gpt-5.5 · $0.0000 › ", first)

        # A prompt, its answer streamed, the closing line, the cost on the next prompt.
        self.fake.reply(answer("Hello from the fake."), chunk=5, gap=0.01)
        s.type("say hello\r")
        shown = s.expect(PROMPT)
        self.assertIn("Hello from the fake.", shown)
        self.assertIn("● 1 model call · ", shown)
        self.assertRegex(shown, r"talk · gpt-5\.5 · \$0\.\d{4} › $")
        self.assertNotIn("$0.0000 › ", shown)

        s.type("/status\r")
        shown = s.expect(PROMPT)
        self.assertIn(f"conversation: {path}", shown)
        self.assertIn("prompts: 1", shown)

        # A paste arrives whole; Alt-Enter and a trailing backslash add lines to one prompt.
        self.fake.reply(answer("pasted"))
        s.type("\x1b[200~first line\rsecond line\x1b[201~\r")
        s.expect(PROMPT)
        self.fake.reply(answer("joined"))
        s.type("one\x1b\rtwo \\\r")
        s.expect("  … ")
        s.type("three\r")
        s.expect(PROMPT)
        self.assertEqual(self.prompts(path)[-2:], [("interactive", "first line\nsecond line"),
                                                   ("interactive", "one\ntwo \nthree")])

        # Typed during a run: queued, then delivered at the next turn boundary, once; the
        # approval question in between gets its own answer.
        self.fake.reply("<nagent-shell>echo approved-run</nagent-shell>", delay=1.5)
        self.fake.reply(answer("checked"))
        calls = len(self.generation_requests())
        s.type("run the check\r")
        self.wait_for_requests(calls + 1)
        s.type("also check the README\r")
        s.expect("✉ message queued: also check the README")
        s.expect("Run it? [y/N")
        s.type("y\r")
        shown = s.expect(PROMPT)
        self.assertIn("✉ message delivered: also check the README", shown)
        self.assertIn("checked", shown)
        inbox = [body for source, body in self.prompts(path) if source == "inbox"]
        self.assertEqual(inbox, ["also check the README"])
        last = self.request_text(self.generation_requests()[-1])
        self.assertEqual(last.count("also check the README"), 1)
        self.assertIn("approved-run", self.kinds(path, "result")[-1].body)

        # A sub-agent's approval question, from another process on the same terminal, gets its
        # answer; the session's reader of typed text does not take it as a message.
        self.fake.reply("<nagent-agent>touch the marker</nagent-agent>")
        self.fake.reply("<nagent-shell>touch sub-agent-ran</nagent-shell>")
        self.fake.reply(answer("touched"))
        self.fake.reply(answer("the sub-agent is done"))
        s.type("delegate it\r")
        s.expect("Run it? [y/N")
        s.type("y\r")
        shown = s.expect(PROMPT)
        self.assertIn("the sub-agent is done", shown)
        self.assertNotIn("✉", shown)
        marker = os.path.join(self.cwd, "sub-agent-ran")
        self.assertTrue(os.path.exists(marker))

        # /changes and /rewind are --changes and --rewind: the turn's file, then put back.
        s.type("/changes\r")
        self.assertIn("sub-agent-ran", s.expect(PROMPT))
        s.type("/rewind\r")
        self.assertIn("↺ rewound turn", s.expect(PROMPT))
        self.assertFalse(os.path.exists(marker))

        # /mode plan holds for the next prompts (the prompt says so): a command that would
        # change the project does not; /mode shows it, /mode build ends it.
        s.type("/mode plan\r")
        self.assertIn("talk · gpt-5.5 · plan · $", s.expect(PROMPT))
        self.fake.reply("<nagent-shell>touch planned</nagent-shell>")
        self.fake.reply(answer("the plan"))
        s.type("plan it\r")
        s.expect("Run it? [y/N")
        s.type("y\r")
        self.assertIn("the plan", s.expect(PROMPT))
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "planned")))
        # bwrap holds the project read-only; without it, plan mode refuses the command
        self.assertNotIn("exit_code: 0", self.kinds(path, "result")[-1].body)
        s.type("/mode\r")
        self.assertIn("mode: plan", s.expect(PROMPT))
        s.type("/mode build\r")
        self.assertIn("talk · gpt-5.5 · $", s.expect(PROMPT))

        # Session flags: /model holds for the next entries; /save and /help run at once.
        s.type("/model gpt-5-mini\r")
        self.assertIn("talk · gpt-5-mini · $", s.expect(PROMPT))
        s.type("/save keep\r")
        self.assertIn(f"saved as {self.named_path('keep')}", s.expect(PROMPT))
        s.type("/help\r")
        self.assertIn("/rewind [N]", s.expect(PROMPT))

        # Ctrl-C in a run: back at the prompt, the interruption recorded, the text typed and not
        # sent (shown on the status line) back in the prompt.
        self.fake.reply(answer("too late"), delay=20)
        calls = len(self.generation_requests())
        s.type("wait forever\r")
        self.wait_for_requests(calls + 1)
        s.type("half typed")
        s.expect("⌨ half typed")
        s.type("\x03")
        shown = s.expect(PROMPT + "half typed")
        self.assertIn("Error: interrupted", shown)
        records = self.records(path)
        self.assertEqual(records[-1].kind, "interrupt")
        self.assertIn(("interactive", "wait forever"), self.prompts(path))
        self.assertEqual(self.generation_requests()[-1]["json"]["model"], "gpt-5-mini")
        s.wait_reading()
        s.type("\x15")   # ^U: readline clears the line

        # Up-arrow recalls the last entry; Ctrl-C at the prompt clears the line.
        s.type("\x1b[A")
        s.expect("wait forever")
        s.wait_reading()
        s.type("\x03")
        s.expect(PROMPT)
        s.type("/cost\r")
        shown = s.expect(PROMPT)
        self.assertRegex(shown, r"cost: \$0\.\d{4}")
        self.assertNotIn("Error", shown)

        s.type("\x04")
        self.assertEqual(s.finish(), 0, s.screen.decode("utf-8", "replace")[-2000:])
        with open(os.path.join(self.home, ".nagent", "history"), encoding="utf-8") as handle:
            history = handle.read().splitlines()
        self.assertIn("first line\\nsecond line", history)
        self.assertIn("/status", history)
        self.assertNotIn("also check the README", history)   # a message, not an entry
        self.assertEqual(os.stat(os.path.join(self.home, ".nagent", "history")).st_mode & 0o777, 0o600)


class TypedKeys(HermeticTestCase):
    def test_line_buffer(self):
        keys = LineBuffer()
        self.assertEqual(keys.feed(b"helo\x7flo\x1b[D"), [])
        self.assertEqual(keys.draft, "hello")
        self.assertEqual(keys.feed(b" world\r"), ["hello world"])
        self.assertEqual(keys.feed(b"\x1b[200~a\r\nb\rc"), [])          # a paste in two parts
        self.assertEqual(keys.feed(b"\x1b[201~\r"), ["a\nb\nc"])
        self.assertEqual(keys.feed(b"x y\x17\x1bOAz\xc3"), [])          # ^W, SS3 arrow, half a char
        self.assertEqual(keys.feed(b"\xa9\x15\r  \r"), [])               # é, then ^U, blank lines
        self.assertEqual(keys.feed(b"\x07\x1b"), [])
        self.assertEqual(keys.feed(b"[1;5Cok\n"), ["ok"])

    def test_history_entries_round_trip(self):
        for text in ("plain", "two\nlines", "back\\slash\\n", "cr\rend\\"):
            self.assertEqual(editing.decode_entry(editing.encode_entry(text)), text)
            self.assertNotIn("\n", editing.encode_entry(text))

    def test_slash_commands_map_onto_flags(self):
        cases = {"/status": ("run", ["--status"]), "/rewind": ("run", ["--rewind"]),
                 "/rewind 3": ("run", ["--rewind", "--turn", "3"]),
                 "/changes": ("run", ["--changes"]), "/changes 2": ("run", ["--changes", "--turn", "2"]),
                 "/branch 2": ("run", ["--branch-conversation", "--turn", "2"]),
                 "/save keep --force": ("run", ["--save-conversation", "keep", "--force"]),
                 "/load keep": ("run", ["--load-conversation", "keep"]),
                 "/model gpt-5": ("set", ["--model", "gpt-5"]), "/mode": ("show", ["--mode"]),
                 "/mode plan": ("set", ["--mode", "plan"]), "/cost": ("cost", ["--status"]),
                 "/new fix it": ("new", ["fix", "it"])}
        for entry, expected in cases.items():
            self.assertEqual(tuple(nagent_slash.plan(*nagent_slash.parse(entry))), expected, entry)
        for prompt in ("/etc/hosts looks odd", "//usr is full", "/ spaced", "plain"):
            self.assertIsNone(nagent_slash.parse(prompt), prompt)
        self.assertEqual(nagent_slash.prompt_text("//usr is full"), "/usr is full")
        for bad in ("/rewind x", "/rewind 0", "/changes --last", "/save", "/save a b", "/mode fast", "/status now",
                    "/bogus"):
            with self.assertRaises(UsageError, msg=bad):
                nagent_slash.plan(*nagent_slash.parse(bad))


class ConversationsFollowTheProject(ProjectFixture, NagentRunCase):
    CONFIG = {"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}}

    def setUp(self):
        super().setUp()
        self.project_a = os.path.join(self.cwd, "a")
        self.project_b = os.path.join(self.cwd, "b")
        for project in (self.project_a, self.project_b):
            os.makedirs(os.path.join(project, "src"))
            self.init_git(project)

    def run_in(self, where, *args, shell=None):
        env = dict(self.env, **(shell or {}))
        self.fake.reply(answer("ok"))
        proc = self.run_tool("nagent", *args, env=env, cwd=where)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        return proc

    def test_continue_and_resume_follow_the_project_whatever_the_terminal(self):
        a_sub = os.path.join(self.project_a, "src")
        self.run_in(self.project_a, "start in a", shell={"BASHPID": "111"})
        self.run_in(self.project_b, "start in b", shell={"BASHPID": "222"})
        # Another terminal (a screen window), below the root of a: -c continues a's.
        self.run_in(a_sub, "-c", "more for a", shell={"STY": "4242.pts-1", "WINDOW": "0"})
        self.run_in(self.project_b, "--continue", "more for b", shell={"BASHPID": "333"})
        a_path, b_path = self.default_path("111"), self.default_path("222")
        self.assertEqual([r.body for r in self.kinds(a_path, "prompt")], ["start in a", "more for a"])
        self.assertEqual([r.body for r in self.kinds(b_path, "prompt")], ["start in b", "more for b"])
        for shell in ("screen-4242.pts-1-0", "333"):
            self.assertFalse(os.path.exists(self.default_path(shell)))

        listed = self.json_of(self.run_tool("nagent", "--resume", "--json", cwd=a_sub))
        self.assertEqual(listed["root"], os.path.realpath(self.project_a))
        self.assertEqual([(c["name"], c["turns"], c["first_prompt"]) for c in listed["conversations"]],
                         [(os.path.basename(a_path), 2, "start in a")])
        self.assertGreater(listed["conversations"][0]["cost_usd"], 0)

        # Shell 111 clears and starts anew in b: the name now belongs to b's project, and a's -c
        # never picks it, whatever a's index still says; a planted index entry changes nothing.
        self.assertEqual(self.run_tool("nagent", "--clear", env=dict(self.env, BASHPID="111")).returncode, 0)
        self.run_in(self.project_b, "b again, from 111", shell={"BASHPID": "111"})
        folder = projects.index_dir(os.path.realpath(self.project_a), self.env)
        with open(os.path.join(folder, os.path.basename(b_path)), "w", encoding="utf-8") as handle:
            json.dump({"root": os.path.realpath(self.project_a), "id": "0" * 32, "started": ""}, handle)
        proc = self.run_in(self.project_a, "-c", "a after the clear", shell={"BASHPID": "555"})
        self.assertIn("nothing to continue", proc.stderr)
        self.assertEqual(self.kinds(self.default_path("555"), "prompt")[0].body, "a after the clear")
        self.assertEqual([r.body for r in self.kinds(a_path, "prompt")], ["b again, from 111"])
        listed = self.json_of(self.run_tool("nagent", "--resume", "--json", cwd=self.project_b))
        self.assertEqual([c["name"] for c in listed["conversations"]],
                         [os.path.basename(a_path), os.path.basename(b_path)])
        self.assertEqual(sorted(os.listdir(folder)), [os.path.basename(self.default_path("555"))])

    def test_resume_on_a_terminal_picks_one_and_opens_a_session_on_it(self):
        self.run_in(self.project_a, "older", shell={"BASHPID": "111"})
        self.run_in(self.project_a, "newer", shell={"BASHPID": "222"})
        env = dict(self.env, TERM="xterm", NO_COLOR="1", BASHPID="333")
        s = PtySession([sys.executable, os.path.join(BIN, "nagent"), "--resume"], env,
                       self.project_a)
        self.addCleanup(s.close)
        listing = s.expect("resume which? [1-2, Enter: 1, q: none] ")
        self.assertLess(listing.index("newer"), listing.index("older"))
        s.type("2\r")
        self.assertIn(os.path.basename(self.default_path("111")) + " · gpt-5.5 · $", s.expect(PROMPT))
        s.type("\x04")
        self.assertEqual(s.finish(), 0)

    def test_a_new_shell_gets_one_hint_and_resume_takes_a_name(self):
        self.run_in(self.project_a, "first", shell={"BASHPID": "111"})
        hinted = self.run_in(self.project_a, "-v", "fresh", shell={"BASHPID": "222"})
        hint = [line for line in hinted.stderr.splitlines() if line.startswith("continuing? nagent -c")]
        self.assertEqual(len(hint), 1, hinted.stderr)
        self.assertIn(os.path.basename(self.default_path("111")), hint[0])
        again = self.run_in(self.project_a, "-v", "again", shell={"BASHPID": "222"})
        self.assertNotIn("continuing?", again.stderr)
        elsewhere = self.run_in(self.project_b, "-v", "other project", shell={"BASHPID": "333"})
        self.assertNotIn("continuing?", elsewhere.stderr)
        name = os.path.basename(self.default_path("111"))
        self.run_in(self.project_b, "--resume", name, "by name", shell={"BASHPID": "444"})
        self.assertEqual([r.body for r in self.kinds(self.default_path("111"), "prompt")],
                         ["first", "by name"])
        for args, code in ((["--resume", "no-such"], 6), (["-c", "--conversation", "x", "p"], 2),
                           (["-c", "--resume", "p"], 2)):
            self.assertCleanError(self.run_tool("nagent", *args, cwd=self.project_a), code=code)
