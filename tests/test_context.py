"""Tests for tool discovery (nagent_discovery) and the initial context (nagent_context)."""
import datetime
import hashlib
import json
import os
import subprocess
import sys
import textwrap

from base import HELPERS, BIN, HermeticTestCase

import nagent_context
import nagent_discovery
from nagent_context import (InitialContext, build_initial_context, create_initial_text,
                            describe_file_target, language_for, load_root_context)
from nagent_discovery import NO_DESCRIPTION, discover_tools, install_bin_dir
from nagent_errors import InputError, UsageError

TOOLS = [{"name": "nagent-b", "description": "second tool"},
         {"name": "nagent-a", "description": "first tool"}]


def make_script(directory, name, body, mode=0o755):
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("#!/bin/sh\n" + body)
    os.chmod(path, mode)
    return path


class DiscoveryTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.bin = os.path.join(self.tmp, "fakebin")
        self.log = os.path.join(self.tmp, "runs.log")
        self.cache = os.path.join(self.home, ".nagent", "cache", "tool-descriptions.json")

    def tool(self, name, description, directory=None, extra=""):
        body = f'echo {name} >> "{self.log}"\n{extra}echo "{description}"\n'
        return make_script(directory or self.bin, name, body)

    def runs(self):
        if not os.path.exists(self.log):
            return []
        with open(self.log, encoding="utf-8") as handle:
            return handle.read().split()

    def test_install_bin_dir_is_the_repo_bin(self):
        self.assertEqual(install_bin_dir(), os.path.realpath(BIN))

    def test_lists_executables_sorted_with_descriptions(self):
        self.tool("zeta", "last one")
        self.tool("alpha", "first one")
        make_script(self.bin, "not-executable", "echo no\n", mode=0o644)
        self.tool(".hidden", "hidden")
        self.tool("old.pyc", "bytecode")
        self.tool("backup~", "backup")
        self.tool("inner", "helper module", directory=os.path.join(self.bin, "helpers"))
        tools = discover_tools([self.bin], self.cache)
        self.assertEqual(tools, [{"name": "alpha", "description": "first one"},
                                 {"name": "zeta", "description": "last one"}])
        self.assertEqual(sorted(self.runs()), ["alpha", "zeta"])

    def test_second_call_spawns_nothing(self):
        for name in ("one", "two", "three"):
            self.tool(name, f"tool {name}")
        first = discover_tools([self.bin], self.cache)
        self.assertEqual(len(self.runs()), 3)
        second = discover_tools([self.bin], self.cache)
        self.assertEqual(first, second)
        self.assertEqual(len(self.runs()), 3)

    def test_size_change_reruns_only_that_tool(self):
        self.tool("one", "old text")
        self.tool("two", "steady")
        discover_tools([self.bin], self.cache)
        self.tool("one", "new and longer text")
        tools = discover_tools([self.bin], self.cache)
        self.assertEqual(tools[0], {"name": "one", "description": "new and longer text"})
        runs = self.runs()
        self.assertEqual(sorted(runs[:2]), ["one", "two"])
        self.assertEqual(runs[2:], ["one"])

    def test_mtime_change_reruns(self):
        path = self.tool("one", "text")
        discover_tools([self.bin], self.cache)
        info = os.stat(path)
        os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns + 5_000_000_000))
        discover_tools([self.bin], self.cache)
        self.assertEqual(self.runs(), ["one", "one"])

    def test_cache_is_keyed_by_realpath_and_drops_stale_entries(self):
        keep = self.tool("keep", "kept")
        gone = self.tool("gone", "removed later")
        discover_tools([self.bin], self.cache)
        os.unlink(gone)
        discover_tools([self.bin], self.cache)
        with open(self.cache, encoding="utf-8") as handle:
            entries = json.load(handle)["entries"]
        self.assertEqual(list(entries), [os.path.realpath(keep)])
        self.assertEqual(entries[os.path.realpath(keep)]["size"], os.path.getsize(keep))

    def test_corrupt_cache_is_ignored_and_rewritten(self):
        self.tool("one", "text")
        os.makedirs(os.path.dirname(self.cache))
        for garbage in ("{not json", "[1, 2]", '{"version": 1, "entries": 3}'):
            with open(self.cache, "w", encoding="utf-8") as handle:
                handle.write(garbage)
            self.assertEqual(discover_tools([self.bin], self.cache),
                             [{"name": "one", "description": "text"}])
            with open(self.cache, encoding="utf-8") as handle:
                self.assertIn(os.path.realpath(os.path.join(self.bin, "one")),
                              json.load(handle)["entries"])
        self.assertEqual(len(self.runs()), 3)
        self.assertEqual([name for name in os.listdir(os.path.dirname(self.cache))],
                         ["tool-descriptions.json"])

    def test_unwritable_cache_location_still_discovers(self):
        self.tool("one", "text")
        blocker = self.write_file("blocker", "a file, not a dir")
        tools = discover_tools([self.bin], os.path.join(blocker, "cache.json"))
        self.assertEqual(tools, [{"name": "one", "description": "text"}])

    def test_failures_timeouts_and_long_output(self):
        make_script(self.bin, "fails", "echo partial\nexit 3\n")
        make_script(self.bin, "silent", "exit 0\n")
        make_script(self.bin, "hangs", "sleep 30\n")
        make_script(self.bin, "long", 'echo "   $(printf "x%.0s" $(seq 300))   "\necho second\n')
        make_script(self.bin, "blank-first", "echo\necho '  the real line  '\n")
        tools = {item["name"]: item["description"]
                 for item in discover_tools([self.bin], self.cache, timeout=0.5)}
        self.assertEqual(tools["fails"], NO_DESCRIPTION)
        self.assertEqual(tools["silent"], NO_DESCRIPTION)
        self.assertEqual(tools["hangs"], NO_DESCRIPTION)
        self.assertEqual(tools["long"], "x" * 200)
        self.assertEqual(tools["blank-first"], "the real line")

    def test_many_tools_run_concurrently_and_all_are_described(self):
        for index in range(12):
            self.tool(f"tool{index:02d}", f"number {index}")
        tools = discover_tools([self.bin], self.cache)
        self.assertEqual([item["description"] for item in tools],
                         [f"number {index}" for index in range(12)])

    def test_first_dir_wins_and_missing_dirs_are_skipped(self):
        user_bin = os.path.join(self.tmp, "userbin")
        self.tool("shared", "from install")
        self.tool("shared", "from user", directory=user_bin)
        self.tool("mine", "user only", directory=user_bin)
        tools = discover_tools([self.bin, os.path.join(self.tmp, "absent"), user_bin],
                               self.cache)
        self.assertEqual(tools, [{"name": "mine", "description": "user only"},
                                 {"name": "shared", "description": "from install"}])

    def test_never_runs_code_outside_the_given_dirs(self):
        marker = os.path.join(self.tmp, "PWNED")
        evil = f'touch "{marker}"\necho evil\n'
        make_script(os.path.join(self.cwd, "bin"), "nagent-evil", evil)
        make_script(self.cwd, "nagent-evil2", evil)
        outside = make_script(os.path.join(self.tmp, "elsewhere"), "target", evil)
        self.tool("good", "fine")
        os.symlink(outside, os.path.join(self.bin, "linked-out"))
        os.symlink(os.path.join(self.bin, "good"), os.path.join(self.bin, "linked-in"))
        self.env["PATH"] = os.pathsep.join([".", "bin", self.env.get("PATH", "")])
        with self.patched_environ():
            tools = discover_tools([self.bin], self.cache)
        self.assertEqual([item["name"] for item in tools], ["good", "linked-in"])
        self.assertFalse(os.path.exists(marker))
        for directory in nagent_discovery.default_bin_dirs(self.env):
            self.assertFalse(directory.startswith(self.cwd), directory)

    def test_descriptions_run_without_provider_keys(self):
        make_script(self.bin, "keys", 'echo "key=${OPENAI_API_KEY:-none} path=$PATH"\n')
        self.env["OPENAI_API_KEY"] = "sk-test-secret-value"
        self.env["PATH"] = ".:" + self.env.get("PATH", "")
        with self.patched_environ():
            tools = discover_tools([self.bin], self.cache)
        self.assertTrue(tools[0]["description"].startswith("key=none path=/"), tools)
        self.assertNotIn("sk-test", tools[0]["description"])


class RootContextTest(HermeticTestCase):
    def setUp(self):
        super().setUp()
        self.root = os.path.join(self.home, ".nagent")

    def put(self, relpath, content):
        return self.write_file(os.path.join(self.root, relpath), content)

    def test_nothing_configured(self):
        self.assertEqual(load_root_context(self.env), ("", []))

    def test_markdown_verbatim(self):
        self.put("context.md", "# Me\nPrefer small diffs.\n")
        text, problems = load_root_context(self.env)
        self.assertIn("# Me\nPrefer small diffs.", text)
        self.assertEqual(problems, [])

    def test_yaml_list_with_relative_home_and_absolute_paths(self):
        self.put("docs/a.md", "alpha doc")
        self.write_file(os.path.join(self.home, "notes.txt"), "home note")
        absolute = self.write_file(os.path.join(self.tmp, "abs.txt"), "absolute doc")
        self.put("context.yaml", f"- docs/a.md\n- ~/notes.txt\n- {absolute}\n")
        text, problems = load_root_context(self.env)
        self.assertEqual(problems, [])
        self.assertLess(text.index("alpha doc"), text.index("home note"))
        self.assertLess(text.index("home note"), text.index("absolute doc"))

    def test_paths_mapping_and_markdown_together(self):
        self.put("context.md", "from markdown")
        self.put("extra.md", "from yaml")
        self.put("context.yaml", "paths:\n  - extra.md\n")
        text, problems = load_root_context(self.env)
        self.assertEqual(problems, [])
        self.assertLess(text.index("from markdown"), text.index("from yaml"))

    def test_recursive_lists_cycles_and_duplicates(self):
        self.put("context.yaml", "- sub/one.yaml\n- shared.md\n")
        self.put("sub/one.yaml", "- two.yaml\n- ../shared.md\n")
        self.put("sub/two.yaml", "paths: [one.yaml, ../context.yaml, deep.md]\n")
        self.put("sub/deep.md", "deep doc")
        self.put("shared.md", "shared doc")
        text, problems = load_root_context(self.env)
        self.assertEqual(problems, [])
        self.assertEqual(text.count("deep doc"), 1)
        self.assertEqual(text.count("shared doc"), 1)
        self.assertLess(text.index("deep doc"), text.index("shared doc"))

    def test_directory_entries_sorted_and_not_recursive(self):
        self.put("dir/b.md", "bee")
        self.put("dir/a.txt", "ay")
        self.put("dir/.secret", "hidden")
        self.put("dir/nested/c.md", "nested")
        self.put("context.yaml", "- dir\n")
        text, problems = load_root_context(self.env)
        self.assertEqual(problems, [])
        self.assertLess(text.index("ay"), text.index("bee"))
        self.assertNotIn("hidden", text)
        self.assertNotIn("nested", text)

    def test_missing_and_malformed_entries_are_reported_not_fatal(self):
        self.put("good.md", "good doc")
        self.put("bad.yaml", "key: [unclosed\n")
        self.put("scalar.yaml", "just a string\n")
        self.put("context.yaml", "- nowhere.md\n- good.md\n- 42\n- bad.yaml\n- scalar.yaml\n")
        text, problems = load_root_context(self.env)
        self.assertIn("good doc", text)
        joined = "\n".join(problems)
        self.assertIn("missing: " + os.path.join(self.root, "nowhere.md"), joined)
        self.assertIn("not a path", joined)
        self.assertIn("malformed context list: " + os.path.join(self.root, "bad.yaml"), joined)
        self.assertIn("malformed context list: " + os.path.join(self.root, "scalar.yaml"), joined)
        self.assertEqual(len(problems), 4)

    def test_total_size_is_capped(self):
        self.put("big.md", "x" * (200 * 1024))
        self.put("bigger.md", "y" * (200 * 1024))
        self.put("after.md", "never seen")
        self.put("context.yaml", "- big.md\n- bigger.md\n- after.md\n")
        text, problems = load_root_context(self.env)
        self.assertIn("x" * (200 * 1024), text)
        self.assertIn("y" * (56 * 1024), text)
        self.assertNotIn("y" * (56 * 1024 + 1), text)
        self.assertNotIn("never seen", text)
        self.assertEqual(len(problems), 1)
        self.assertIn("256 KiB", problems[0])

    def test_cheap_imports(self):
        self.put("context.md", "plain")
        code = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {HELPERS!r})
            import nagent_context
            nagent_context.load_root_context()
            heavy = [m for m in ("yaml", "openai", "anthropic", "google.genai") if m in sys.modules]
            print(heavy)
        """)
        proc = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.stdout.strip(), "[]", proc.stderr)


class InitialContextTest(HermeticTestCase):
    def target(self, **extra):
        path = self.write_file("src/mod.py", "print('hi')\n")
        data = describe_file_target(path, self.env)
        data.update(extra)
        return data

    def test_static_is_identical_across_cwd_time_env_and_pid(self):
        other_env = dict(self.env, USER="someone-else", HOME=self.tmpdir, SHELL="/bin/zsh",
                         TMPDIR="/var/tmp/x")
        first = build_initial_context(environ=self.env, cwd=self.cwd, now=0, tools=TOOLS)
        second = build_initial_context(environ=other_env, cwd="/srv/other", now=2e9,
                                       tools=list(reversed(TOOLS)))
        self.assertEqual(first.static, second.static)
        self.assertNotEqual(first.session, second.session)
        code = textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {HELPERS!r})
            from nagent_context import build_initial_context
            tools = {TOOLS!r}
            for mode in ("main", "file-edit"):
                target = {{"target": "/x", "size": 1, "sha256": "0", "language": "text",
                          "git_log": []}}
                ctx = build_initial_context(mode, tools=tools, file_edit=target)
                sys.stdout.write(ctx.static)
        """)
        outputs = set()
        for cwd in (self.cwd, self.tmpdir):
            env = dict(self.env, HOME=cwd, USER=os.path.basename(cwd))
            proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd,
                                  capture_output=True, text=True, timeout=60)
            self.assertEqual(proc.returncode, 0, proc.stderr)
            outputs.add(proc.stdout)
        self.assertEqual(len(outputs), 1)
        self.assertIn(first.static, outputs.pop())

    def test_static_holds_no_session_values(self):
        now = datetime.datetime(2026, 11, 20, 12, 30, tzinfo=datetime.timezone.utc)
        self.env["USER"] = "tester-name"
        for mode in ("main", "file-edit"):
            ctx = build_initial_context(mode, environ=self.env, cwd=self.cwd, now=now,
                                        tools=TOOLS, file_edit=self.target())
            for value in (self.cwd, self.home, self.tmp, "tester-name", os.uname().nodename,
                          "2026", str(os.getpid()), "mod.py"):
                self.assertNotIn(value, ctx.static, (mode, value))
            self.assertLess(len(ctx.static.encode()), 8000)

    def test_static_content_main(self):
        from nagent_protocol import grammar_text
        static = build_initial_context(environ=self.env, tools=TOOLS).static
        self.assertIn(grammar_text().strip(), static)
        for needle in ('<nagent-replace path="PATH">', '<nagent-file-edit path="PATH">',
                       "never run nagent-file-edit or nagent from <nagent-shell>", "<nagent-shell>",
                       "/tmp, /var/tmp or $TMPDIR",
                       "64 KiB", "<nagent-file-read>", "<nagent-agent>", "stdin closed",
                       "without provider API keys", "Tools on PATH:"):
            self.assertIn(needle, static)
        self.assertLess(static.index("- nagent-a — first tool"),
                        static.index("- nagent-b — second tool"))

    def test_static_content_file_edit_differs(self):
        main = build_initial_context(environ=self.env, tools=TOOLS).static
        edit = build_initial_context("file-edit", environ=self.env, tools=TOOLS,
                                     file_edit=self.target()).static
        self.assertNotEqual(main, edit)
        for needle in ("WHOLE file", 'index="INDEX"', "Nothing else in the project"):
            self.assertIn(needle, edit)
            self.assertNotIn(needle, main)
        self.assertIn("(none found)", build_initial_context(environ=self.env, tools=[]).static)

    def test_session_facts(self):
        self.write_file(os.path.join(self.home, ".nagent", "context.md"), "ROOT NOTE")
        self.write_file(os.path.join(self.home, ".nagent", "context.yaml"), "- missing.md\n")
        self.env.update(USER="tester", SHELL="/bin/testsh")
        ctx = build_initial_context(environ=self.env, cwd="/some/where",
                                    now=datetime.datetime(2026, 11, 20, 23, 59,
                                                          tzinfo=datetime.timezone.utc),
                                    tools=TOOLS)
        for needle in ("2026-11-20", "/some/where", "user: tester", os.uname().nodename,
                       os.uname().release, "%d.%d.%d" % sys.version_info[:3], "/bin/testsh",
                       self.tmpdir, "ROOT NOTE", "missing: "):
            self.assertIn(needle, ctx.session)
        self.assertNotIn("Edit target", ctx.session)

    def test_file_edit_session_has_target_facts(self):
        target = self.target(split_index="/tmp/split/index.json",
                             split_segments=[{"file": "seg-001.py", "first_line": 1,
                                              "last_line": 40, "bytes": 900},
                                             {"file": "seg-002.py", "first_line": 41,
                                              "last_line": 60, "bytes": 300}])
        ctx = build_initial_context("file-edit", environ=self.env, tools=TOOLS,
                                    file_edit=target)
        for needle in (target["target"], "size: 12 bytes", target["sha256"], "language: Python",
                       "git history: none", "split index: /tmp/split/index.json",
                       "seg-001.py (lines 1-40, 900 bytes)", "seg-002.py (lines 41-60"):
            self.assertIn(needle, ctx.session)

    def test_create_initial_text_wraps_static_first(self):
        ctx = InitialContext(static="STATIC\n", session="SESSION\n")
        self.assertEqual(create_initial_text(ctx),
                         "<initial_context>\nSTATIC\n\nSESSION\n</initial_context>\n")
        real = build_initial_context(environ=self.env, tools=TOOLS)
        self.assertTrue(create_initial_text(real).startswith("<initial_context>\n" + real.static))

    def test_bad_arguments(self):
        with self.assertRaises(UsageError):
            build_initial_context("other", environ=self.env, tools=TOOLS)
        with self.assertRaises(UsageError):
            build_initial_context("file-edit", environ=self.env, tools=TOOLS)

    def test_default_discovery_uses_install_and_user_bin_only(self):
        marker = os.path.join(self.tmp, "PWNED")
        make_script(os.path.join(self.cwd, "bin"), "nagent", f'touch "{marker}"\necho evil\n')
        make_script(os.path.join(self.home, ".nagent", "bin"), "zz-user-tool",
                    "echo my own helper\n")
        with self.patched_environ():
            ctx = build_initial_context(environ=self.env, cwd=self.cwd)
        self.assertIn("- zz-user-tool — my own helper", ctx.static)
        self.assertFalse(os.path.exists(marker))
        cache = os.path.join(self.home, ".nagent", "cache", "tool-descriptions.json")
        self.assertTrue(os.path.isfile(cache))


class DescribeFileTargetTest(HermeticTestCase):
    def git(self, *args):
        cmd = ["git", "-c", "user.email=t@example.com", "-c", "user.name=Tester", *args]
        subprocess.run(cmd, cwd=self.cwd, env=self.env, check=True, capture_output=True,
                       timeout=30)

    def setUp(self):
        super().setUp()
        self.env["GIT_CONFIG_GLOBAL"] = self.write_file(os.path.join(self.tmp, "gitconfig"), "")
        self.env["GIT_CONFIG_NOSYSTEM"] = "1"

    def test_inside_a_git_work_tree(self):
        self.git("init", "-q")
        path = self.write_file("pkg/mod.py", "a = 1\n")
        self.write_file("other.txt", "x\n")
        self.git("add", ".")
        self.git("commit", "-q", "-m", "first commit")
        self.write_file("pkg/mod.py", "a = 2\n")
        self.git("commit", "-q", "-am", "second: change a")
        self.write_file("other.txt", "y\n")
        self.git("commit", "-q", "-am", "unrelated")
        facts = describe_file_target("pkg/mod.py", self.env)
        self.assertEqual(facts, {
            "target": path, "size": 6, "sha256": hashlib.sha256(b"a = 2\n").hexdigest(),
            "language": "Python", "git_log": ["second: change a", "first commit"],
            "split_index": None, "split_segments": []})

    def test_history_is_capped_at_five(self):
        self.git("init", "-q")
        for index in range(7):
            self.write_file("f.md", f"v{index}\n")
            self.git("add", ".")
            self.git("commit", "-q", "-m", f"commit {index}")
        facts = describe_file_target("f.md", self.env)
        self.assertEqual(facts["git_log"], [f"commit {index}" for index in (6, 5, 4, 3, 2)])
        self.assertEqual(facts["language"], "Markdown")

    def test_outside_a_work_tree_and_broken_git(self):
        path = self.write_file("plain.rs", "fn main() {}\n")
        self.assertEqual(describe_file_target(path, self.env)["git_log"], [])
        self.git("init", "-q")
        no_git = dict(self.env, PATH=os.path.join(self.tmp, "empty"))
        self.assertEqual(describe_file_target(path, no_git)["git_log"], [])

    def test_missing_target(self):
        with self.assertRaises(InputError):
            describe_file_target("nope.py", self.env)
        with self.assertRaises(InputError):
            describe_file_target(self.cwd, self.env)

    def test_language_by_name(self):
        self.assertEqual(language_for("/x/Makefile"), "Makefile")
        self.assertEqual(language_for("a.TSX"), "TypeScript")
        self.assertEqual(language_for("notes.unknownext"), "text")
        self.assertEqual(nagent_context.language_for("x.yml"), "YAML")
