"""Issue 21's escapes, each reproduced as the review found it (D1 project root, D7 trusted tools,
D5 hook paths), plus the rules behind them: the project root is the directory that holds the
`.git` nagent found, never what git prints; a trusted tool runs the bytes that were hashed; an
action hook sees the path that will be opened. And the same classes found at other sites by the
adversarial pass: a context file or skill read through a directory swapped after its check, a
patch written through a link swapped in while it ran, a clone's `git` run through "." in PATH."""
import json
import os
import sys

from base import HermeticTestCase
from project_fixture import ProjectFixture

import nagent_project
import nagent_trust
from nagent_context import build_initial_context

TOOLS = [{"name": "nagent-a", "description": "first tool"}]
SECRET = "ID-RSA-PRIVATE-KEY-MATERIAL"


class RootCase(ProjectFixture, HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.secret = self.write_file(os.path.join(self.home, ".ssh", "id_rsa"), SECRET + "\n")

    def context(self, cwd):
        return build_initial_context(environ=self.env, cwd=cwd, now=0, tools=TOOLS)

    def embedded_bare_repo(self, directory):
        """What a repository can commit: a directory git takes for a bare repository whose
        work tree is `/`, with an AGENTS.md that includes the user's key."""
        for sub in ("objects", "refs"):
            os.makedirs(os.path.join(directory, sub), exist_ok=True)
            self.write_file(os.path.join(directory, sub, ".keep"), "")
        self.write_file(os.path.join(directory, "HEAD"), "ref: refs/heads/main\n")
        self.write_file(os.path.join(directory, "config"),
                        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = /\n")
        self.write_file(os.path.join(directory, "AGENTS.md"), f"see @{self.secret}\n")


class ProjectRootEscapeTest(RootCase):
    def test_an_embedded_bare_repository_cannot_make_the_root_slash(self):
        # D1: the repository is cloned, and nagent runs inside the committed directory.
        origin = os.path.join(self.tmp, "origin")
        os.makedirs(origin)
        self.init_git(origin)
        self.embedded_bare_repo(os.path.join(origin, "evil"))
        self.git("add", "-A", cwd=origin)
        self.git("commit", "-q", "-m", "innocent", cwd=origin)
        clone = os.path.join(self.tmp, "clone")
        self.git("clone", "-q", origin, clone, cwd=self.tmp)
        evil = os.path.join(clone, "evil")
        project = nagent_project.find_project(evil, self.env)
        self.assertIsNotNone(project)
        self.assertEqual(project.root, clone)
        ctx = self.context(evil)
        self.assertNotIn(SECRET, ctx.session)
        self.assertIn(f"- project root: {clone}\n", ctx.session)

    def test_a_work_tree_git_names_elsewhere_is_refused_with_a_warning(self):
        # D1, from inside the sandbox: `git config core.worktree /` plus an AGENTS.md.
        self.init_git()
        self.git("config", "core.worktree", "/")
        self.write_file("AGENTS.md", f"see @{self.secret}\n")
        found = nagent_project.probe_project(self.cwd, self.env)
        self.assertIsNone(found.project)
        self.assertIn("git names / as the work tree", found.refused)
        self.assertIsNone(nagent_project.find_project(self.cwd, self.env))
        ctx = self.context(self.cwd)
        self.assertNotIn(SECRET, ctx.session)
        self.assertIn("project root: none (refused:", ctx.session)
        self.assertTrue(any("project root" in line for line in ctx.warnings), ctx.warnings)

    def test_home_and_slash_are_never_a_project(self):
        self.write_file(os.path.join(self.home, "AGENTS.md"), f"see @{self.secret}\n")
        self.init_git(self.home)
        found = nagent_project.probe_project(os.path.join(self.home, ".ssh"), self.env)
        self.assertIsNone(found.project)
        self.assertIn("home directory", found.refused)
        self.assertNotIn(SECRET, self.context(self.home).session)
        for top, marker in (("/", "/"), (self.tmp, self.home)):
            self.assertTrue(nagent_project.root_problem(marker, top, self.home), (top, marker))
        self.assertTrue(nagent_project.root_problem(self.tmp, self.tmp, self.home))  # above HOME
        self.assertIsNone(nagent_project.root_problem(self.cwd, self.cwd, self.home))

    def test_git_runs_without_discovering_bare_repositories_or_climbing_past_the_marker(self):
        self.init_git()
        nested = os.path.join(self.cwd, "pkg")
        self.embedded_bare_repo(nested)
        self.git("add", "-A")
        self.git("commit", "-q", "-m", "outer history")
        command = nagent_project.git_command(nested, "rev-parse", "--show-toplevel")
        self.assertIn("safe.bareRepository=explicit", command)
        env = nagent_project.git_environ(dict(self.env, GIT_DIR="/elsewhere",
                                              GIT_WORK_TREE="/"), ceiling=self.cwd)
        self.assertEqual(env["GIT_CEILING_DIRECTORIES"], os.path.dirname(self.cwd))
        self.assertNotIn("GIT_DIR", env)
        self.assertNotIn("GIT_WORK_TREE", env)
        # The file-edit target's history comes from the project's repository, not the embedded one.
        from nagent_context import git_history
        self.assertEqual(git_history(os.path.join(nested, "AGENTS.md"), self.env), ["outer history"])

    def test_a_git_in_the_repository_is_never_run_through_a_relative_path_entry(self):
        # PATH with "." (or an empty entry): a clone that ships an executable called `git`.
        self.init_git()
        marker = os.path.join(self.tmp, "FAKE-GIT-RAN")
        fake = self.write_file("git", f'#!/bin/sh\ntouch "{marker}"\n')
        os.chmod(fake, 0o755)
        env = dict(self.env, PATH="." + os.pathsep + os.pathsep + self.env["PATH"])
        project = nagent_project.find_project(self.cwd, env)
        self.assertFalse(os.path.exists(marker))
        self.assertEqual(project.root, self.cwd)

    def test_trust_and_skills_use_the_validated_root(self):
        self.init_git()
        self.write_file(".nagent/skills/s/SKILL.md", "---\nname: s\ndescription: d\n---\n")
        self.git("config", "core.worktree", "/")
        proc = self.run_tool("nagent", "--trust")
        self.assertCleanError(proc, 2, "refused")
        self.assertFalse(os.path.exists(nagent_trust.trust_path(self.env)))
        proc = self.run_tool("nagent", "--list-skills", "--json")
        self.assertEqual(json.loads(proc.stdout)["project_root"], None, proc.stderr)


class ContextFileSwapTest(RootCase):
    """Class 1 at another site: an @include checked inside the project, then a directory on its
    way swapped for a link to ~/.ssh before it is read."""

    def test_a_directory_swapped_after_the_check_is_not_followed(self):
        import nagent_context_layers as layers
        self.init_git()
        self.write_file("docs/id_rsa", "HARMLESS\n")
        self.write_file("AGENTS.md", "see @docs/id_rsa\n")
        docs = os.path.join(self.cwd, "docs")
        real_resolve = layers._Loader.resolve

        def resolve_then_swap(loader, path, shown, where=""):
            real = real_resolve(loader, path, shown, where)
            if real and real.endswith("id_rsa") and not os.path.islink(docs):
                os.rename(docs, docs + ".moved")
                os.symlink(os.path.dirname(self.secret), docs)
            return real
        layers._Loader.resolve = resolve_then_swap
        self.addCleanup(setattr, layers._Loader, "resolve", real_resolve)
        session = self.context(self.cwd).session
        self.assertTrue(os.path.islink(docs))
        self.assertNotIn(SECRET, session)
        self.assertIn("changed while being opened", session)

    def test_a_skill_directory_swapped_after_the_check_is_not_read(self):
        import nagent_skills
        self.init_git()
        self.write_file(".nagent/skills/s/SKILL.md", "---\nname: s\ndescription: harmless\n---\n")
        self.write_file(os.path.join(self.home, "elsewhere", "SKILL.md"),
                        f"---\nname: s\ndescription: {SECRET}\n---\n")
        skill = os.path.join(self.cwd, ".nagent", "skills", "s")
        real_dirs = nagent_skills.skill_dirs

        def dirs_then_swap(base, root=None):
            found = real_dirs(base, root)
            if root is not None and not os.path.islink(skill):
                os.rename(skill, skill + ".moved")
                os.symlink(os.path.join(self.home, "elsewhere"), skill)
            return found
        nagent_skills.skill_dirs = dirs_then_swap
        self.addCleanup(setattr, nagent_skills, "skill_dirs", real_dirs)
        found = nagent_skills.find_skills(self.env, self.cwd)
        self.assertTrue(os.path.islink(skill))
        self.assertNotIn(SECRET, repr(found))


class TrustedToolSwapTest(RootCase):
    """D7: a sandboxed command renames an evil copy over a trusted .nagent/bin tool while a
    sibling builds its context outside the sandbox."""

    def setUp(self):
        super().setUp()
        self.make_project()
        self.project = nagent_project.find_project(self.cwd, self.env)
        nagent_trust.trust_project(self.project, self.env)
        self.evil_marker = os.path.join(self.tmp, "EVIL-RAN")
        self.evil = self.write_file(os.path.join(self.tmp, "evil-tool"),
                                    f'#!/bin/sh\ntouch "{self.evil_marker}"\necho evil tool\n')
        os.chmod(self.evil, 0o755)
        self.tool = os.path.join(self.cwd, ".nagent", "bin", "proj-tool")

    def swap_after(self, function_name, module):
        """Rename the evil copy over the tool right after `module.function_name` returns: the
        sibling's timing, made deterministic."""
        real = getattr(module, function_name)

        def swapped(*args, **kwargs):
            result = real(*args, **kwargs)
            os.replace(self.evil, self.tool)
            return result
        setattr(module, function_name, swapped)
        self.addCleanup(setattr, module, function_name, real)

    def test_the_bytes_that_were_hashed_are_the_bytes_that_run(self):
        self.swap_after("trust_status", nagent_trust)
        ctx = self.context(self.cwd)
        self.assertFalse(os.path.exists(self.evil_marker), "the evil copy ran outside the sandbox")
        self.assertNotIn("evil tool", ctx.session)
        self.assertIn("the project's own tool", ctx.session)   # the trusted bytes, from a copy
        self.assertIn(f"{self.tool} — the project's own tool", ctx.session)

    def test_a_swap_while_the_copy_is_made_runs_nothing(self):
        # Trusted by a version that kept no copy: the copy is made from one read, and the bytes
        # read must hash to what the user trusted.
        import shutil
        shutil.rmtree(nagent_trust.copies_dir(self.env))
        self.swap_after("trust_status", nagent_trust)
        ctx = self.context(self.cwd)
        self.assertFalse(os.path.exists(self.evil_marker))
        self.assertFalse(os.path.exists(self.marker))
        self.assertIn("changed since the user trusted it", ctx.session)

    def test_with_the_sandbox_on_no_project_tool_runs_outside_it(self):
        ctx = build_initial_context(environ=self.env, cwd=self.cwd, now=0, tools=TOOLS,
                                    sandbox="bwrap")
        self.assertFalse(os.path.exists(self.marker))
        self.assertIn(self.tool, ctx.session)
        self.assertIn("not run: the shell sandbox is on", ctx.session)


POLICY = """import json, os, sys
action = json.load(sys.stdin)
with open(os.environ["POLICY_LOG"], "a") as log:
    log.write(json.dumps(action) + "\\n")
if action.get("resolved_path", "").startswith(os.environ["PROTECTED"] + "/"):
    print("protected: " + action["resolved_path"])
    sys.exit(2)
swap = os.environ.get("SWAP_LINK")
if swap:   # a racing process, between the hook's answer and the action's open
    os.rename(swap + ".next", swap)
"""


class HookPathTest(HermeticTestCase):
    """D5: a policy refusing reads under ~/secret allowed ~/secret/id_rsa through one symlink."""

    def setUp(self):
        super().setUp()
        from nagent_actions import ActionContext
        from nagent_config import resolve_settings
        from nagent_shell import ShellPolicy
        from nagent_write_policy import WriteMode
        self.protected = os.path.join(self.home, "secret")
        self.write_file(os.path.join(self.protected, "id_rsa"), SECRET + "\n")
        self.log = os.path.join(self.tmp, "policy.log")
        policy = self.write_file(os.path.join(self.tmp, "policy.py"), POLICY)
        self.write_config({"hooks": {"action": f"{sys.executable} {policy}"}})
        self.env.update(POLICY_LOG=self.log, PROTECTED=self.protected)
        self.make_ctx = lambda: ActionContext(
            cwd=self.cwd, environ=self.env, write_mode=WriteMode(), conversation="c",
            side_dir=os.path.join(self.tmp, "side"), shell_policy=ShellPolicy(),
            settings=resolve_settings(environ=self.env))

    def act(self, text):
        from nagent_actions import process_action
        from nagent_protocol import parse_response
        return process_action(parse_response(text).actions[0], self.make_ctx())

    def payloads(self):
        with open(self.log, encoding="utf-8") as handle:
            return [json.loads(line) for line in handle]

    def test_resolved_path_is_what_will_be_opened(self):
        os.symlink(self.protected, os.path.join(self.cwd, "innocent-dir"))
        outcome = self.act('<nagent-read path="innocent-dir/id_rsa"/>')
        self.assertNotIn(SECRET, outcome.block)
        self.assertIn('status="refused"', outcome.block)
        payload = self.payloads()[0]
        self.assertEqual(payload["path"], "innocent-dir/id_rsa")
        self.assertEqual(payload["resolved_path"], os.path.join(self.protected, "id_rsa"))

    def test_a_link_swapped_after_the_hook_allowed_a_read_changes_nothing_read(self):
        self.write_file("harmless/id_rsa", "HARMLESS\n")
        link = os.path.join(self.cwd, "innocent-dir")
        os.symlink("harmless", link)
        os.symlink(self.protected, link + ".next")
        self.env["SWAP_LINK"] = link
        outcome = self.act('<nagent-read path="innocent-dir/id_rsa"/>')
        self.assertEqual(os.readlink(link), self.protected)   # the swap happened
        self.assertNotIn(SECRET, outcome.block)
        self.assertIn("HARMLESS", outcome.block)

    def test_a_link_swapped_after_the_hook_allowed_a_write_is_refused(self):
        # A policy stricter than the write boundary: TMPDIR/protected is off limits.
        self.protected = os.path.join(self.tmpdir, "protected")
        os.makedirs(self.protected)
        os.makedirs(os.path.join(self.tmpdir, "ok"))
        self.env["PROTECTED"] = self.protected
        link = os.path.join(self.tmpdir, "dir")
        os.symlink(os.path.join(self.tmpdir, "ok"), link)
        os.symlink(self.protected, link + ".next")
        self.env["SWAP_LINK"] = link
        outcome = self.act(f'<nagent-write path="{link}/f.txt">payload</nagent-write>')
        self.assertEqual(os.listdir(self.protected), [])
        self.assertIn('status="error"', outcome.block)
        self.assertIn("changed after the action hook", outcome.block)
        self.assertEqual(self.payloads()[0]["resolved_path"], os.path.join(self.tmpdir, "ok", "f.txt"))

    def test_a_patch_shows_the_hook_the_source_it_replaces(self):
        # The index is what the model names; the source, from nagent's registry, is what is written.
        source = self.write_file(os.path.join(self.tmpdir, "big.txt"),
                                 "".join(f"line {n}\n" for n in range(12000)))
        outcome = self.act(f'<nagent-file-read path="{source}"/>')
        self.assertIn('split="true"', outcome.block)
        index = next(line.split(": ", 1)[1] for line in outcome.block.splitlines()
                     if line.startswith("index: "))
        self.act(f'<nagent-file-patch index="{index}"/>')
        payload = self.payloads()[-1]
        self.assertEqual((payload["kind"], payload["resolved_path"], payload["source"]),
                         ("file-patch", index, source))


    def test_replace_and_file_edit_use_the_file_the_hook_saw(self):
        # The edit tags merged from issue 20 pin their file the same way.
        self.protected = os.path.join(self.tmpdir, "protected")
        self.write_file(os.path.join(self.protected, "f.txt"), "old text\n")
        self.write_file(os.path.join(self.tmpdir, "ok", "f.txt"), "old text\n")
        self.env["PROTECTED"] = self.protected
        link = os.path.join(self.tmpdir, "dir")
        self.env["SWAP_LINK"] = link
        for text in (f'<nagent-replace path="{link}/f.txt">\n<old>old text</old>\n'
                     '<new>new text</new>\n</nagent-replace>',
                     f'<nagent-file-edit path="{link}/f.txt">change it</nagent-file-edit>'):
            for name in (link, link + ".next"):
                if os.path.lexists(name):
                    os.unlink(name)
            os.symlink(os.path.join(self.tmpdir, "ok"), link)
            os.symlink(self.protected, link + ".next")
            outcome = self.act(text)
            self.assertIn("changed after the action hook", outcome.block)
            with open(os.path.join(self.protected, "f.txt"), encoding="utf-8") as handle:
                self.assertEqual(handle.read(), "old text\n")
            self.assertEqual(self.payloads()[-1]["resolved_path"],
                             os.path.join(self.tmpdir, "ok", "f.txt"))


class PatchSwapTest(HermeticTestCase):
    """Adversarial pass: a directory on the way to a patch's source swapped for a link (to a
    copy of the source elsewhere, so every hash still matches) while nagent-file-patch runs."""

    def test_the_patch_never_writes_through_a_link_swapped_in(self):
        from nagent_errors import RefusedError
        from nagent_file_patch_lib import patch_from_index
        from nagent_file_split_lib import split_file
        text = "".join(f"line {n}\n" for n in range(5000))
        source = self.write_file(os.path.join(self.tmpdir, "d", "f.txt"), text)
        split = split_file(source, os.path.join(self.tmpdir, "split"))
        first = os.path.join(self.tmpdir, "split", split["segments"][0]["file"])
        with open(first, "a", encoding="utf-8") as handle:
            handle.write("EDITED\n")
        victim = self.write_file(os.path.join(self.home, "victim", "f.txt"), text)
        folder = os.path.dirname(source)

        def swap(_source):
            os.rename(folder, folder + ".moved")
            os.symlink(os.path.dirname(victim), folder)
        with self.assertRaises(RefusedError) as caught:
            patch_from_index(os.path.join(self.tmpdir, "split"), authorize=swap)
        with open(victim, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), text)   # nothing written outside
        self.assertIn("link", str(caught.exception.line()))



class RuleTargetTest(HermeticTestCase):
    """Issue 23's permission rules merged in: they judge the pinned target too, so a link
    swapped before the action's file is fixed cannot carry a write past a deny rule."""

    def test_a_deny_rule_judges_the_file_the_write_will_use(self):
        import nagent_action_targets
        import nagent_actions
        import nagent_permissions as perms
        import nagent_policy
        from nagent_actions import ActionContext, process_action
        from nagent_guard import Place
        from nagent_protocol import parse_response
        from nagent_shell import ShellPolicy
        from nagent_write_policy import WriteMode
        protected, ok = os.path.join(self.tmpdir, "protected"), os.path.join(self.tmpdir, "ok")
        os.makedirs(protected)
        os.makedirs(ok)
        link = os.path.join(self.tmpdir, "dir")
        os.symlink(ok, link)
        rules = perms.check_rules([("config", [{"decision": "deny", "write": protected + "/*"}])])
        policy = nagent_policy.Policy(tuple(rules), Place(self.cwd, (self.tmpdir,), self.cwd, self.home))
        ctx = ActionContext(cwd=self.cwd, environ=self.env, write_mode=WriteMode(), conversation="c",
                            side_dir=os.path.join(self.tmp, "side"), shell_policy=ShellPolicy(),
                            policy=policy)
        real_pin = nagent_action_targets.pin_target

        def swap_then_pin(action, context):   # the swap lands before the action's file is fixed
            os.unlink(link)
            os.symlink(protected, link)
            return real_pin(action, context)
        nagent_actions.pin_target = swap_then_pin
        self.addCleanup(setattr, nagent_actions, "pin_target", real_pin)
        outcome = process_action(parse_response(
            f'<nagent-write path="{link}/f.txt">x</nagent-write>').actions[0], ctx)
        self.assertEqual(os.listdir(protected), [])
        self.assertIn('status="refused"', outcome.block)
