"""Issue 13 end to end: bin/nagent in a git repository against the fake vendor. The request
carries the layers in order, byte for byte the same across conversations, with size cuts;
--status and --config name the context files; an untrusted .nagent/bin never runs;
nagent --trust; nagent --list-skills."""
import os

from project_fixture import ProjectFixture
from test_loop import NagentRunCase

REPLY = "<nagent-response>ok</nagent-response>"


class ProjectRunTest(ProjectFixture, NagentRunCase):
    def first_request_parts(self, index):
        return [part for _, part in self.flat(self.generation_requests()[index])]

    def test_request_layers_in_order_stable_across_conversations_and_cut(self):
        self.make_project()
        self.write_config(dict(self.CONFIG, context={"max_bytes": 4096}))
        self.write_file("sub/AGENTS.md", "SUB-AGENTS big\n" + "z" * 9000 + "\n")
        for name in ("one", "two"):
            self.fake.reply(REPLY)
            proc = self.nagent("--conversation", name, "hello", cwd=self.deeper)
            self.assertEqual(proc.returncode, 0, proc.stderr)
        self.fake.reply(REPLY)
        proc = self.nagent("--conversation", "plain", "hello", cwd=self.tmpdir)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        one, two, plain = (self.first_request_parts(i) for i in range(3))
        self.assertEqual(one, two)                 # byte for byte, across conversations
        text = "\n".join(one)
        static = text[:text.index("Session facts:")]
        self.assertIn("Tools on PATH:", static)
        self.assertTrue("\n".join(plain).startswith(static))  # the static part: the same everywhere
        places = [text.index(needle) for needle in (
            "- project root: " + self.cwd, "- git branch: trunk", "USER-CONTEXT",
            "ROOT-AGENTS", "STYLE-GUIDE", "PROJECT-NAGENT-CONTEXT", "SUB-AGENTS big",
            "Skills", "- deploy")]
        self.assertEqual(places, sorted(places))
        self.assertIn(f"{self.cwd}/sub/AGENTS.md is 9016 bytes", text)
        self.assertNotIn("z" * 5000, text)
        self.assertIn("project root: none", "\n".join(plain))

    def test_status_and_config_name_the_context_files(self):
        self.make_project()
        self.fake.reply(REPLY)
        self.assertEqual(self.nagent("hello", cwd=self.deeper).returncode, 0)
        proc = self.nagent("--status", "--json", cwd=self.deeper)
        data = self.json_of(proc)
        paths = [item["path"] for item in data["context_files"]]
        self.assertEqual(paths, [os.path.join(self.home, ".nagent", "context.md"),
                                 f"{self.cwd}/AGENTS.md", f"{self.cwd}/docs/style.md",
                                 f"{self.cwd}/.nagent/context.md", f"{self.cwd}/sub/AGENTS.md"])
        text = self.nagent("--status", cwd=self.deeper).stdout
        self.assertIn(f"{self.cwd}/sub/AGENTS.md", text)
        proc = self.nagent("--config", "--json", cwd=self.deeper)
        context = self.json_of(proc)["context"]
        self.assertEqual(context["project_root"], self.cwd)
        self.assertEqual([item["path"] for item in context["files"]], paths)
        self.assertEqual(context["project_tools"]["state"], "untrusted")
        text = self.nagent("--config", cwd=self.deeper).stdout
        self.assertIn(f"{self.cwd}/AGENTS.md (project)", text)
        self.assertFalse(os.path.exists(self.marker))

    def test_untrusted_project_tools_never_run_and_trust_asks_again_on_change(self):
        self.make_project()
        self.fake.reply(REPLY)
        proc = self.nagent("--conversation", "a", "hello")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertFalse(os.path.exists(self.marker))
        self.assertIn("nagent --trust", proc.stderr)
        self.assertIn("not trusted", self.request_text(self.generation_requests()[0]))

        proc = self.nagent("--trust", cwd=self.deeper)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(self.cwd, proc.stdout)
        self.assertIn("proj-tool", proc.stdout)
        self.assertFalse(os.path.exists(self.marker))

        self.fake.reply(REPLY)
        proc = self.nagent("--conversation", "b", "hello")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(os.path.exists(self.marker))
        self.assertNotIn("nagent --trust", proc.stderr)
        self.assertIn(f"{self.cwd}/.nagent/bin/proj-tool — the project's own tool",
                      self.request_text(self.generation_requests()[1]))

        os.remove(self.marker)
        self.project_tool(description="swapped by a pull")
        self.fake.reply(REPLY)
        proc = self.nagent("--conversation", "c", "hello")
        self.assertFalse(os.path.exists(self.marker))
        self.assertIn("nagent --trust", proc.stderr)
        self.assertIn("changed", proc.stderr)

        proc = self.nagent("--trust", cwd=self.tmpdir)
        self.assertOneError(proc, 2, "not inside a git work tree")

    def test_list_skills(self):
        self.make_project()
        proc = self.nagent("--list-skills", "--json")
        data = self.json_of(proc)
        by_name = {item["name"]: item for item in data["skills"]}
        self.assertEqual(sorted(by_name), ["broken", "deploy", "notes"])
        self.assertEqual(by_name["deploy"]["source"], "project")
        self.assertIs(by_name["deploy"]["requirements_met"], False)
        self.assertEqual(by_name["deploy"]["missing"], ["env DEPLOY_TOKEN"])
        self.assertTrue(by_name["broken"]["problems"])
        self.assertIs(data["enabled"], True)
        text = self.nagent("--list-skills").stdout
        self.assertIn(f"{self.cwd}/.nagent/skills/deploy/SKILL.md", text)
        self.assertIn("shadows", text)
        self.write_config(dict(self.CONFIG, skills=False))
        data = self.json_of(self.nagent("--list-skills", "--json"))
        self.assertIs(data["enabled"], False)
        self.fake.reply(REPLY)
        self.nagent("hello")
        self.assertNotIn("- deploy", self.request_text(self.generation_requests()[-1]))
