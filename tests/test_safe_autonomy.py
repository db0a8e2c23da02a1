"""Issue 23 end to end: bin/nagent against the fake vendor in a real git project.

- the destructive-command guard: every form of the issue refused headless (the result says how
  to allow it), and asked about on a real terminal (answered n, typeahead never approves);
  a deny rule's refusal reads `✗ denied by rule NAME (FILE)` on screen and in the result;
- the confirm prompt's `a` (allow the prefix for the session, saved to the config after a second
  yes) and `e` (a reason the model reads), through a pty with typeahead;
- plan mode: a write, `sed -i` and `git commit` are refused and the project (its .git too) is
  byte for byte the same, with bwrap (the project bound read-only) and without (read-only
  commands only); `--mode build` later tells the model the mode changed;
- `nagent --config` lists the rules and their files, the project's included;
- `--mode` is never taken for `--model` (no abbreviations).
"""
import json
import os
import shutil
import sys

from base import BIN
from project_fixture import ProjectFixture
from ptys import answer_on_pty
from test_attacks import snapshot
from test_loop import NagentRunCase

import nagent_main
import nagent_main_file_edit
import nagent_main_llm_text
from nagent_errors import UsageError

HAVE_BWRAP = shutil.which("bwrap") is not None
MODIFIED = "tracked, with work not committed yet\n"


def shells(*commands):
    return "".join(f"<nagent-shell>\n{command}\n</nagent-shell>\n" for command in commands)


class ProjectRun(NagentRunCase, ProjectFixture):
    CONFIG = {"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}}

    def setUp(self):
        super().setUp()
        self.init_git()
        self.write_file("tracked.txt", "tracked one\n")
        self.git("add", "-A")
        self.git("commit", "-qm", "start")
        self.write_file("tracked.txt", MODIFIED)
        self.write_file("untracked.txt", "not yet added\n")
        self.keep = os.path.join(self.home, "keep-me")
        self.write_file(os.path.join(self.keep, "data.txt"), "precious\n")
        self.keep_mode = os.stat(self.keep).st_mode

    def detached(self, *args, env=None):
        """bin/nagent in a new session: no controlling terminal, so nothing can be asked."""
        proc = self.run_tool("nagent", *args, env=env or self.env, timeout=180, detach=True)
        self.assertNotIn("Traceback", proc.stderr)
        return proc

    def on_pty(self, name, answers, typeahead=b"", prompts=(b"[y/N/a/e] ", b"[y/N/e] ")):
        argv = [sys.executable, os.path.join(BIN, "nagent"), "--conversation", name, "go"]
        code, seen, asked = answer_on_pty(argv, self.env, self.cwd, answers, typeahead=typeahead,
                                          prompt=prompts)
        return code, seen.decode("utf-8", "replace"), asked

    def results(self, name):
        return [r.body for r in self.kinds(self.named_path(name), "result")]


class DestructiveGuard(ProjectRun):
    def forms(self):
        return ["git reset --hard", "git clean -fd", "git checkout -- .", "git restore .",
                "git push --force origin trunk", "git push -f", f"rm -rf {self.keep}",
                "find . -name '*.txt' -delete", "dd if=/dev/zero of=disk.img count=1",
                "mkfs.ext4 disk.img", f"chmod -R 700 {self.keep}", f"chown -R nobody {self.keep}",
                "echo gone > tracked.txt"]

    def assert_untouched(self):
        with open(os.path.join(self.cwd, "tracked.txt")) as handle:
            self.assertEqual(handle.read(), MODIFIED)
        self.assertTrue(os.path.exists(os.path.join(self.cwd, "untracked.txt")))
        self.assertTrue(os.path.exists(os.path.join(self.keep, "data.txt")))
        self.assertEqual(os.stat(self.keep).st_mode, self.keep_mode)
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "disk.img")))

    def test_each_destructive_form_is_refused_headless(self):
        self.write_config(dict(self.CONFIG, permissions=[
            {"name": "no-curl", "decision": "deny", "shell": "curl *"}]))
        forms = self.forms()
        self.fake.reply(shells(*forms, "curl http://example.invalid"))
        self.fake.reply("<nagent-response>stopped</nagent-response>")
        proc = self.detached("-v", "--json", "--conversation", "guard", "clean up")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        results = self.results("guard")
        self.assertEqual(len(results), len(forms) + 1)
        for form, body in zip(forms, results):
            with self.subTest(form=form):
                self.assertIn("exit_code: none", body)
                self.assertIn("✗ denied by the destructive-command guard", body)
                self.assertIn("no terminal to ask; to allow it add {\"decision\": \"allow\"", body)
        rule_line = f"✗ denied by rule no-curl ({self.config_path})"
        self.assertIn(rule_line + "\n", results[-1])
        self.assertIn("  " + rule_line, proc.stderr)          # the same line on screen
        self.assert_untouched()

    def test_each_destructive_form_asks_on_a_terminal(self):
        forms = self.forms()
        self.fake.reply(shells(*forms))
        self.fake.reply("<nagent-response>stopped</nagent-response>")
        code, transcript, asked = self.on_pty("guard-tty", [b"n\n"] * len(forms),
                                              typeahead=b"y\ny\ny\n")
        self.assertEqual(code, 0, transcript)
        self.assertEqual(asked, len(forms), transcript)
        self.assertEqual(transcript.count("asked by: the destructive-command guard"), len(forms))
        for form in forms:
            self.assertIn(f"    {form}\n", transcript.replace("\r\n", "\n"))
        self.assert_untouched()


class ConfirmAnswers(ProjectRun):
    def test_always_and_explain_through_a_pty_with_typeahead(self):
        self.write_config(dict(self.CONFIG, shell={"approval": "confirm"}))
        self.fake.reply(shells("git status"))
        self.fake.reply(shells("git status --short", "touch made-by-model"))
        self.fake.reply("<nagent-response>done</nagent-response>")
        code, transcript, asked = self.on_pty(
            "answers", [b"a\n", b"y\n", b"e\n", b"please use make instead\n"],
            typeahead=b"y\ny\na\n",
            prompts=(b"[y/N/a/e] ", b"[y/N] ", b"(the model reads this): "))
        self.assertEqual(code, 0, transcript)
        self.assertEqual(asked, 4, transcript)
        self.assertIn("a always allow `git status *` this session", transcript)
        self.assertIn(f"Also save `git status *` to {self.config_path} for every session?",
                      transcript)
        results = self.results("answers")
        self.assertIn("exit_code: 0", results[0])
        self.assertIn("exit_code: 0", results[1])              # allowed for the session: not asked
        self.assertIn("✗ denied by the user: please use make instead", results[2])
        self.assertFalse(os.path.exists(os.path.join(self.cwd, "made-by-model")))
        last = self.generation_requests()[-1]
        self.assertIn("✗ denied by the user: please use make instead", self.request_text(last))
        with open(self.config_path) as handle:
            saved = json.load(handle)["permissions"]
        self.assertEqual([(r["decision"], r["shell"]) for r in saved], [("allow", "git status *")])
        self.assertTrue(os.path.exists(self.config_path + ".bak"))
        # the saved rule is in effect for the next run: git status runs without a question
        self.fake.reply(shells("git status -s"))
        self.fake.reply("<nagent-response>done</nagent-response>")
        proc = self.detached("--json", "--conversation", "answers-2", "again")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("exit_code: 0", self.results("answers-2")[0])


class PlanMode(ProjectRun):
    def plan_reply(self):
        scratch = os.path.join(self.tmpdir, "scratch.txt")
        return (f'<nagent-write path="{os.path.join(self.cwd, "new-file.txt")}">x</nagent-write>\n'
                f'<nagent-write path="{scratch}">scratch is fine</nagent-write>\n'
                + shells("sed -i s/tracked/changed/ tracked.txt", "git add -A && git commit -qm sneaky",
                         "git log --oneline")
                + '<nagent-file-edit path="tracked.txt">change it</nagent-file-edit>\n'
                + '<nagent-replace path="tracked.txt"><old>tracked</old><new>changed</new>'
                  '</nagent-replace>\n')

    def run_plan(self, env=None):
        self.fake.reply(self.plan_reply())
        self.fake.reply("<nagent-response>PLAN: 1. change tracked.txt</nagent-response>")
        before = snapshot(self.cwd)
        proc = self.detached("--json", "--mode", "plan", "--conversation", "plan", "make a plan",
                             env=env)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["response"], "PLAN: 1. change tracked.txt")
        self.assertEqual(snapshot(self.cwd), before)     # byte for byte, .git included
        results = self.results("plan")
        self.assertIn("✗ denied by plan mode", results[0])
        self.assertIn("created", results[1])
        self.assertIn("exit_code: 0", results[4])           # git log: read-only
        for body in results[5:7]:                            # <nagent-file-edit>, <nagent-replace>
            self.assertIn("✗ denied by plan mode", body)
        prompts = self.kinds(self.named_path("plan"), "prompt")
        self.assertEqual(prompts[-1].attr("mode"), "plan")
        context = "".join(r.body for r in self.kinds(self.named_path("plan"), "context"))
        self.assertIn("- mode: plan: read, run read-only commands and plan", context)
        return results, context

    def test_plan_mode_in_bwrap_changes_nothing(self):
        if not HAVE_BWRAP:
            self.skipTest("bwrap is not installed")
        results, context = self.run_plan()
        self.assertIn("bwrap sandbox where the project is read-only", context)
        for body in results[2:4]:
            self.assertNotIn("exit_code: 0", body)           # read-only file system
        # build mode later: the model is told the mode changed
        self.fake.reply("<nagent-response>done</nagent-response>")
        proc = self.detached("--json", "--mode", "build", "--conversation", "plan", "go ahead")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn("The session is now in build mode",
                      self.request_text(self.generation_requests()[-1]))

    def test_plan_mode_without_bwrap_runs_only_read_only_commands(self):
        tools = os.path.join(self.tmp, "tools")
        os.makedirs(tools)
        for name in ("git", "sed", "touch", "ls", "cat"):
            os.symlink(shutil.which(name), os.path.join(tools, name))
        results, context = self.run_plan(env=dict(self.env, PATH=tools))
        self.assertIn("Only read-only shell commands run", context)
        for body in results[2:4]:
            self.assertIn("✗ denied by plan mode", body)


class ConfigAndFlags(ProjectRun):
    def test_config_lists_rules_and_their_files(self):
        self.write_config(dict(self.CONFIG, permissions=[
            {"name": "diff", "decision": "allow", "shell": "git diff *", "read_only": True}]))
        self.write_file(".nagent/permissions", json.dumps([{"decision": "deny", "shell": "curl *"}]))
        proc = self.run_tool("nagent", "--config")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertRegex(proc.stdout, r'permissions\[0\] +allow shell "git diff \*" \(diff, read-only\) +'
                         + self.config_path)
        project_file = os.path.join(os.path.realpath(self.cwd), ".nagent", "permissions")
        self.assertRegex(proc.stdout, r'permissions\[0\] +deny shell "curl \*" +' + project_file)
        data = json.loads(self.run_tool("nagent", "--config", "--json").stdout)
        self.assertEqual([r["source"] for r in data["permissions"]], [self.config_path, project_file])
        self.write_file(".nagent/permissions", json.dumps([{"decision": "allow", "shell": "rm *"}]))
        proc = self.run_tool("nagent", "--conversation", "x", "hello")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("can only deny or confirm", proc.stderr)
        self.assertEqual(self.generation_requests(), [])

    def test_nagent_mcp_itself_refuses_a_denied_tool(self):
        self.write_config(dict(self.CONFIG, permissions=[
            {"name": "no-deletes", "decision": "deny", "mcp": "github/delete_*"}]))
        proc = self.run_tool("nagent-mcp", "call", "github", "delete_repo", "--args", "{}")
        self.assertEqual(proc.returncode, 10, proc.stderr)
        self.assertIn(f"Error: denied by rule no-deletes ({self.config_path}): github/delete_repo",
                      proc.stderr)

    def test_a_failing_example_is_a_config_error_naming_the_rule(self):
        self.write_config(dict(self.CONFIG, permissions=[
            {"name": "tests", "decision": "allow", "shell": "pytest *",
             "examples": {"no_match": ["pytest -x"]}}]))
        proc = self.run_tool("nagent", "--conversation", "x", "hello")
        self.assertEqual(proc.returncode, 3, proc.stderr)
        self.assertIn("Error: rule permissions[0] (tests) matches its example: 'pytest -x' in "
                      + self.config_path, proc.stderr)

    def test_mode_is_never_read_as_model(self):
        for build in (nagent_main.build_parser, nagent_main_file_edit.build_parser,
                      nagent_main_llm_text.build_parser):
            parser = build()
            with self.subTest(parser=parser.prog):
                with self.assertRaises(UsageError):
                    parser.parse_args(["--mod", "plan", "x"])
                if parser.prog == "nagent-llm-text":
                    with self.assertRaises(UsageError):
                        parser.parse_args(["--mode", "plan", "x"])
                else:
                    self.assertEqual(parser.parse_args(["--mode", "plan", "--file", "f", "x"]
                                                       if "file" in parser.prog else
                                                       ["--mode", "plan", "x"]).mode, "plan")
