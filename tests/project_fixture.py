"""A git repository fixture for the project tests (issue 13), mixed into a HermeticTestCase.

`make_project()` turns the test's cwd into a git work tree (branch "trunk", one commit) with:
AGENTS.md (including @docs/style.md), CLAUDE.md, docs/style.md, .nagent/context.md,
sub/AGENTS.md (the nested, directory layer), sub/deeper/ (a working directory below it),
.nagent/skills/{deploy,broken}/SKILL.md, and .nagent/bin/proj-tool, an executable that touches
`self.marker` whenever it runs (so a test proves whether it ran). The user side gets
~/.nagent/context.md and ~/.nagent/skills/{deploy,notes}/SKILL.md.
"""
import os
import subprocess

AGENTS = "ROOT-AGENTS: tabs, not spaces.\nStyle: see @docs/style.md.\n"
CLAUDE = "CLAUDE-ONLY: this file is read only when there is no AGENTS.md.\n"
STYLE = "STYLE-GUIDE: short functions.\nBack to @../AGENTS.md (a cycle, read once).\n"
PROJECT_NAGENT = "PROJECT-NAGENT-CONTEXT: run make test.\n"
SUB_AGENTS = "SUB-AGENTS: this package is generated code.\n"
USER_CONTEXT = "USER-CONTEXT: answer briefly.\n"
DEPLOY_SKILL = ("---\nname: deploy\ndescription: Deploy the project to staging\nrequires:\n"
                "  bins: [sh]\n  env: [DEPLOY_TOKEN]\n---\nPROJECT-DEPLOY-BODY: run ./deploy.sh\n")
USER_DEPLOY_SKILL = ("---\nname: deploy\ndescription: The user's own deploy (shadowed)\n---\n"
                     "USER-DEPLOY-BODY\n")
NOTES_SKILL = "---\nname: notes\ndescription: Keep meeting notes\n---\nNOTES-BODY\n"
BROKEN_SKILL = "---\nname: [unclosed\ndescription: broken\n---\nBROKEN-BODY\n"


class ProjectFixture:
    def git(self, *args, cwd=None):
        cmd = ["git", "-c", "user.email=t@example.com", "-c", "user.name=Tester", *args]
        return subprocess.run(cmd, cwd=cwd or self.cwd, env=self.env, check=True,
                              capture_output=True, text=True, timeout=30).stdout

    def init_git(self, directory=None):
        if "GIT_CONFIG_GLOBAL" not in self.env:
            self.env["GIT_CONFIG_GLOBAL"] = self.write_file(os.path.join(self.tmp, "gitconfig"), "")
            self.env["GIT_CONFIG_NOSYSTEM"] = "1"
        self.git("init", "-q", cwd=directory)
        self.git("symbolic-ref", "HEAD", "refs/heads/trunk", cwd=directory)

    def project_tool(self, name="proj-tool", description="the project's own tool"):
        path = self.write_file(f".nagent/bin/{name}",
                               f'#!/bin/sh\ntouch "{self.marker}"\necho "{description}"\n')
        os.chmod(path, 0o755)
        return path

    def make_project(self, commit=True):
        self.marker = os.path.join(self.tmp, "PROJECT-TOOL-RAN")
        self.init_git()
        self.write_file("AGENTS.md", AGENTS)
        self.write_file("CLAUDE.md", CLAUDE)
        self.write_file("docs/style.md", STYLE)
        self.write_file(".nagent/context.md", PROJECT_NAGENT)
        self.write_file("sub/AGENTS.md", SUB_AGENTS)
        os.makedirs(os.path.join(self.cwd, "sub", "deeper"), exist_ok=True)
        self.write_file(".nagent/skills/deploy/SKILL.md", DEPLOY_SKILL)
        self.write_file(".nagent/skills/broken/SKILL.md", BROKEN_SKILL)
        self.project_tool()
        user = os.path.join(self.home, ".nagent")
        self.write_file(os.path.join(user, "context.md"), USER_CONTEXT)
        self.write_file(os.path.join(user, "skills", "deploy", "SKILL.md"), USER_DEPLOY_SKILL)
        self.write_file(os.path.join(user, "skills", "notes", "SKILL.md"), NOTES_SKILL)
        if commit:
            self.git("add", "-A")
            self.git("commit", "-q", "-m", "fixture")
        return self.cwd

    @property
    def deeper(self):
        return os.path.join(self.cwd, "sub", "deeper")
