"""Per-file edit sessions end to end: bin/nagent-file-edit and bin/nagent against the fake vendor,
with a scripted model that reads what the driver sent and answers with nagent tags.

Model-calling runs execute the real bin/ mains in-process (the provider SDK is imported once per
test process, so the suite stays fast); the shims themselves, piped stdin and concurrency run as
real subprocesses. The project lives outside every temp root (/dev/shm when it exists), so the
file-edit write boundary is exercised for real rather than granted by "/tmp is writable".
Also home of the scripted-model harness (Script, request_text, last_block, FileEditCase) that
test_edit_conversation imports.
"""
import importlib.machinery
import importlib.util
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import unittest
from contextlib import redirect_stderr, redirect_stdout

from base import BIN, REPO
from fakes import FakeVendorTestCase, ReplySpec

PID = "4242"
_TOOLS = {}
_WARM_CACHE = {}


def request_text(record, skip_role=None):
    """Every string of a recorded request body, joined: the conversation as the model saw it
    (without the messages of `skip_role`, e.g. "assistant": the model's own)."""
    parts = []

    def walk(value):
        if isinstance(value, str):
            parts.append(value)
        elif isinstance(value, dict) and (skip_role is None or value.get("role") != skip_role):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)
    walk(record.get("json"))
    return "\n".join(parts)


def last_block(text, tag):
    """(opening tag line, body) of the last <tag ...>\\nbody</tag> block in `text`."""
    start = text.rfind(f"<{tag}")
    if start < 0:
        raise AssertionError(f"no <{tag}> in the request")
    head_end = text.index(">\n", start)
    end = text.index(f"</{tag}>", head_end)
    return text[start:head_end + 1], text[head_end + 2:end]


def split_facts(text):
    """(index path, [segment paths]) from a file-edit initial context that started from a split."""
    index = re.search(r"^- split index: (.+)$", text, re.M).group(1)
    listing = text.split("- split segments:", 1)[1]
    return index, re.findall(r"^  - (/\S+)(?: \(lines [^)]*\))?$", listing, re.M)


def write_reply(path, content):
    return f'<nagent-write path="{path}">\n{content}</nagent-write>'


class Script:
    """The model: one step per call, each a reply string or fn(request text) -> reply string.
    A failing step is recorded (the fake server must not see the exception) and ends the run."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.seen = []
        self.failures = []
        self._lock = threading.Lock()

    def __call__(self, record):
        text = request_text(record)
        with self._lock:
            self.seen.append(text)
            if not self.steps:
                self.failures.append("model called more often than scripted")
                return "<nagent-response>unscripted call</nagent-response>"
            step = self.steps.pop(0)
        try:
            return step(text) if callable(step) else step
        except Exception as error:  # noqa: BLE001 - reported by check()
            self.failures.append(f"{type(error).__name__}: {error}")
            return "<nagent-response>script failed</nagent-response>"

    def check(self, test):
        test.assertEqual(self.failures, [])
        test.assertEqual(self.steps, [], "scripted steps left unused")


def load_tool(name):
    """A bin/ executable loaded as a module (once per process), for in-process runs of main()."""
    if name not in _TOOLS:
        loader = importlib.machinery.SourceFileLoader("bin_" + name.replace("-", "_"),
                                                      os.path.join(BIN, name))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
        loader.exec_module(module)
        _TOOLS[name] = module
    return _TOOLS[name]


def outside_temp_dir():
    """A fresh directory that is not under /tmp, /var/tmp or $TMPDIR."""
    from nagent_write_policy import temp_roots
    for parent in ("/dev/shm", REPO):
        real = os.path.realpath(parent)
        if os.path.isdir(real) and os.access(real, os.W_OK) and \
                not any(real == root or real.startswith(root + "/") for root in temp_roots()):
            return os.path.realpath(tempfile.mkdtemp(prefix=".nagent-project-", dir=real))
    raise unittest.SkipTest("no writable directory outside the temp roots")


def warm_tool_cache(home):
    """Tool descriptions are discovered once per process and their cache file is copied into every
    later test's HOME: that saves each test the `--description` subprocesses."""
    from nagent_discovery import default_bin_dirs, default_cache_path, discover_tools
    env = {"HOME": home}
    path = default_cache_path(env)
    if "data" in _WARM_CACHE:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(_WARM_CACHE["data"])
        return
    discover_tools(default_bin_dirs(env), path)
    if os.path.exists(path):
        with open(path, "rb") as handle:
            _WARM_CACHE["data"] = handle.read()


class FileEditCase(FakeVendorTestCase):
    def setUp(self):
        super().setUp()
        self.write_config({"provider": "openai", "retry": {"base_delay": 0}})
        project = outside_temp_dir()
        self.addCleanup(shutil.rmtree, project, True)
        self.cwd = project
        os.chdir(project)
        warm_tool_cache(self.home)

    def script(self, *steps):
        script = Script(*steps)
        self.fake.reply_fn(script)
        return script

    def tool(self, name, *args, input=None, inprocess=True):
        """Run bin/<name> with args: in-process through its main(), or as a subprocess."""
        if not inprocess:
            proc = self.run_tool(name, *args, input=input)
        else:
            out, err, saved_stdin = io.StringIO(), io.StringIO(), sys.stdin
            sys.stdin = io.StringIO(input or "")
            try:
                with self.patched_environ(), redirect_stdout(out), redirect_stderr(err):
                    from nagent_cli import run_main
                    code = run_main(load_tool(name).main, list(args))
            finally:
                sys.stdin = saved_stdin
            proc = subprocess.CompletedProcess([name, *args], code, out.getvalue(), err.getvalue())
        self.assertNotIn("Traceback", proc.stderr)
        return proc

    def file_edit(self, path, *words, pid=PID, input=None, tool="nagent-file-edit", inprocess=True):
        flag = "--file" if tool == "nagent-file-edit" else "--file-edit"
        return self.tool(tool, flag, path, "--pid", pid, "--json", *words, input=input, inprocess=inprocess)

    def ok(self, proc):
        self.assertEqual(proc.returncode, 0, proc.stderr + proc.stdout)
        return json.loads(proc.stdout)

    def list_edits(self, pid=PID):
        return self.ok(self.tool("nagent", "--list-file-edits", "--json", "--pid", pid, inprocess=False))

    def index_path(self, pid=PID):
        return os.path.join(self.home, ".nagent", "file-edits", f"index-{pid}.json")


class EditSessionTests(FileEditCase):
    def test_session_reads_and_rewrites_its_target(self):
        target = self.write_file("src/calc.py", "def answer():\n    return 41\n")

        def first(text):
            self.assertIn("per-file edit session", text)
            self.assertIn(f"- path: {target}", text)
            self.assertIn("- language: Python", text)
            self.assertIn("replacing the WHOLE file", text)
            import hashlib
            with open(target, "rb") as handle:
                self.assertIn(hashlib.sha256(handle.read()).hexdigest(), text)
            self.assertIn("make it 42", text)
            return '<nagent-read path="src/calc.py"/>'

        def second(text):
            _head, body = last_block(text, "nagent-read-result")
            return write_reply("src/calc.py", body.replace("41", "42"))

        def third(text):
            head, body = last_block(text, "nagent-write-result")
            self.assertIn('status="ok"', head)
            self.assertIn("replaced", body)
            return "<nagent-response>\nanswer() now returns 42\n</nagent-response>"

        script = self.script(first, second, third)
        data = self.ok(self.file_edit("src/calc.py", "make it 42", inprocess=False))
        script.check(self)
        self.assertEqual(data["response"], "answer() now returns 42")
        with open(target, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "def answer():\n    return 42\n")
        self.assertTrue(os.path.basename(data["conversation"]).startswith("file-calc-"))
        with open(data["conversation"], encoding="utf-8") as handle:
            log = handle.read()
        self.assertIn('"file_edit"', log)  # the meta record names the target

    def test_piped_instruction_and_lower_level_flag(self):
        self.write_file("notes.md", "# Notes\n")
        script = self.script(lambda text: self.assertIn("add a title line", text)
                             or "<nagent-response>nothing to do</nagent-response>",
                             lambda text: self.assertIn("second instruction", text)
                             or "<nagent-response>ok</nagent-response>")
        first = self.ok(self.file_edit("notes.md", input="add a title line\n", inprocess=False))
        second = self.ok(self.file_edit("notes.md", "second instruction", tool="nagent"))
        script.check(self)
        self.assertEqual(first["conversation"], second["conversation"])

    def test_context_carries_recent_git_history_of_the_target(self):
        self.write_file("lib.py", "V = 1\n")
        git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
        for command in (["init", "-q"], ["add", "lib.py"], ["commit", "-q", "-m", "Add lib module"]):
            subprocess.run(git + command, cwd=self.cwd, env=self.env, check=True, capture_output=True)
        script = self.script(lambda text: self.assertIn("  - Add lib module", text)
                             or "<nagent-response>seen</nagent-response>")
        self.ok(self.file_edit("lib.py", "look"))
        script.check(self)

    def test_write_outside_the_target_is_refused_and_changes_nothing(self):
        target = self.write_file("a.py", "A = 1\n")
        other = self.write_file("b.py", "B = 1\n")
        alias = os.path.join(self.tmpdir, "alias.py")
        os.symlink(other, alias)
        hardlink = os.path.join(self.cwd, "hard.py")  # a second name for b.py
        os.link(other, hardlink)
        scratch = os.path.join(self.tmpdir, "scratch.txt")
        attempts = [other, f"../{os.path.basename(self.cwd)}/b.py", "c.py", "A.PY", alias, hardlink,
                    os.path.join(self.cwd, "sub", "d.py")]

        def check(text):
            blocks = re.findall(r'<nagent-write-result path="([^"]*)" status="(\w+)">\n(.*?)\n'
                                r'</nagent-write-result>', text, re.S)
            self.assertEqual(len(blocks), len(attempts) + 1, text[-3000:])
            for path, status, body in blocks[:-1]:
                self.assertEqual(status, "error", path)
                self.assertIn("write refused", body)
            self.assertEqual(blocks[-1][1], "ok")
            return "<nagent-response>b.py is not mine to change</nagent-response>"

        script = self.script("\n".join(write_reply(path, "HACKED = 1\n") for path in attempts)
                             + "\n" + write_reply(scratch, "notes\n"), check)
        self.ok(self.file_edit("a.py", "also change b.py"))
        script.check(self)
        for path, content in ((target, "A = 1\n"), (other, "B = 1\n")):
            with open(path, encoding="utf-8") as handle:
                self.assertEqual(handle.read(), content)
        self.assertEqual(sorted(os.listdir(self.cwd)), ["a.py", "b.py", "hard.py"])
        self.assertTrue(os.path.islink(alias))
        with open(scratch, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), "notes\n")

    def test_large_target_goes_through_split_segment_write_and_patch(self):
        body = "".join(f'def func_{i:04d}(value):\n    """Add {i}."""\n    return value + {i}\n\n\n'
                       for i in range(1200))
        target = self.write_file("big.py", body)
        self.assertGreater(len(body.encode()), 64 * 1024)
        state = {}

        def start(text):
            state["index"], segments = split_facts(text)
            self.assertGreater(len(segments), 1)
            state["segment"] = segments[0]
            return f'<nagent-read path="{segments[0]}"/>'

        def write_segment(text):
            _head, segment = last_block(text, "nagent-read-result")
            self.assertIn("def func_0000(value):", segment)
            return write_reply(state["segment"], segment.replace("return value + 0\n",
                                                                 "return value  # edited\n", 1))

        def patch(text):
            head, _body = last_block(text, "nagent-write-result")
            self.assertIn('status="ok"', head)
            return f'<nagent-file-patch index="{state["index"]}"/>'

        def done(text):
            self.assertIn('status="applied"', last_block(text, "nagent-file-patch-result")[0])
            return "<nagent-response>func_0000 edited</nagent-response>"

        script = self.script(start, write_segment, patch, done)
        self.ok(self.file_edit("big.py", "make func_0000 return its argument"))
        script.check(self)
        with open(target, encoding="utf-8") as handle:
            self.assertEqual(handle.read(), body.replace("return value + 0\n", "return value  # edited\n", 1))

    def test_missing_file_or_directory_is_a_clean_error(self):
        os.mkdir(os.path.join(self.cwd, "pkg"))
        for tool in ("nagent-file-edit", "nagent"):
            proc = self.file_edit("nope.py", "edit it", tool=tool)
            self.assertCleanError(proc, code=6, contains="file not found: nope.py")
            proc = self.file_edit("pkg", "edit it", tool=tool)
            self.assertCleanError(proc, code=6, contains="is a directory: pkg")
        proc = self.tool("nagent-file-edit", "--file", "nope.py", "--clear", "--pid", PID, inprocess=False)
        self.assertCleanError(proc, code=6, contains="file not found")
        self.assertEqual(self.fake.requests, [])
        self.assertFalse(os.path.exists(self.index_path()))

    def test_main_context_sends_project_edits_through_the_edit_tags(self):
        # Issue 20: not through nagent-file-edit in <nagent-shell> (no key there, no bwrap way).
        script = self.script(lambda text: self.assertIn('<nagent-replace path="PATH">', text)
                             or self.assertIn('<nagent-file-edit path="PATH">', text)
                             or self.assertIn("never run nagent-file-edit or nagent from "
                                              "<nagent-shell>", text)
                             or "<nagent-response>understood</nagent-response>")
        self.ok(self.tool("nagent", "--pid", PID, "--json", "hello"))
        script.check(self)


class FileIndexTests(FileEditCase):
    def respond(self, times=1):
        return self.script(*["<nagent-response>done</nagent-response>"] * times)

    def test_rename_and_editor_replace_keep_the_conversation(self):
        # Each session rewrites the file (a new inode), then the file is renamed or saved by an
        # editor through a new file: every later session must still find the same conversation.
        self.write_file("old.py", "X = 1\n")
        remembers = lambda text: self.assertIn("first visit", text)  # noqa: E731
        script = self.script(write_reply("old.py", "X = 2\n"), "<nagent-response>done</nagent-response>",
                             lambda text: remembers(text) or write_reply("new.py", "X = 3\n"),
                             "<nagent-response>done</nagent-response>",
                             lambda text: remembers(text) or "<nagent-response>done</nagent-response>")
        first = self.ok(self.file_edit("old.py", "first visit"))
        os.rename(os.path.join(self.cwd, "old.py"), os.path.join(self.cwd, "new.py"))
        second = self.ok(self.file_edit("new.py", "after rename"))
        replacement = self.write_file("new.py.swp", "X = 4\n")
        os.replace(replacement, os.path.join(self.cwd, "new.py"))
        third = self.ok(self.file_edit("new.py", "after save"))
        script.check(self)
        self.assertEqual(first["conversation"], second["conversation"])
        self.assertEqual(first["conversation"], third["conversation"])
        files = self.list_edits()["files"]
        self.assertEqual(len(files), 1)
        self.assertEqual(files[0]["path"], os.path.join(self.cwd, "new.py"))
        self.assertTrue(files[0]["exists"])

    def test_clear_starts_afresh_and_archives(self):
        self.write_file("a.py", "A = 1\n")
        script = self.script("<nagent-response>one</nagent-response>",
                             lambda text: self.assertNotIn("before clear", text)
                             or "<nagent-response>two</nagent-response>")
        first = self.ok(self.file_edit("a.py", "before clear"))
        cleared = self.ok(self.tool("nagent-file-edit", "--file", "a.py", "--clear", "--pid", PID, "--json",
                                    inprocess=False))
        self.assertFalse(os.path.exists(first["conversation"]))
        self.assertTrue(os.path.isfile(cleared["archived"]))
        with open(cleared["archived"], encoding="utf-8") as handle:
            self.assertIn("before clear", handle.read())
        self.assertNotEqual(cleared["conversation"], first["conversation"])
        second = self.ok(self.file_edit("a.py", "after clear"))
        script.check(self)
        self.assertEqual(second["conversation"], cleared["conversation"])
        proc = self.tool("nagent-file-edit", "--file", "a.py", "--clear", "now", "--pid", PID)
        self.assertCleanError(proc, code=2, contains="--clear takes no instruction")

    def test_list_file_edits(self):
        self.write_file("a.py", "A = 1\n")
        self.write_file("b.txt", "B\n")
        self.respond(2)
        first = self.ok(self.file_edit("a.py", "x"))
        second = self.ok(self.file_edit("b.txt", "y"))
        listing = self.list_edits()
        self.assertEqual(listing["index"], self.index_path())
        by_path = {item["path"]: item for item in listing["files"]}
        self.assertEqual(set(by_path), {os.path.join(self.cwd, "a.py"), os.path.join(self.cwd, "b.txt")})
        item = by_path[os.path.join(self.cwd, "b.txt")]
        self.assertEqual(item["conversation"], os.path.basename(second["conversation"]))
        self.assertRegex(item["file_id"], r"^\d+:\d+$")
        self.assertTrue(item["last_used"])
        self.assertEqual(listing["files"][0]["conversation"], os.path.basename(second["conversation"]))
        self.assertNotEqual(first["conversation"], second["conversation"])
        human = self.tool("nagent", "--list-file-edits", "--pid", PID)
        self.assertEqual(human.returncode, 0, human.stderr)
        self.assertIn(os.path.join(self.cwd, "a.py"), human.stdout)
        other = self.ok(self.tool("nagent", "--list-file-edits", "--json", "--pid", "999"))
        self.assertEqual(other["files"], [])

    def test_corrupt_index_is_reported_and_rebuilt(self):
        self.write_file("a.py", "A = 1\n")
        os.makedirs(os.path.dirname(self.index_path()))
        with open(self.index_path(), "w", encoding="utf-8") as handle:
            handle.write("{not json")
        listing = self.list_edits()
        self.assertEqual(listing["files"], [])
        self.assertIn("file index was corrupt", listing["warning"])
        human = self.tool("nagent", "--list-file-edits", "--pid", PID)
        self.assertIn("warning: file index was corrupt", human.stdout)
        self.respond(1)
        self.ok(self.file_edit("a.py", "x"))
        self.assertTrue(os.path.exists(self.index_path() + ".corrupt"))
        self.assertEqual(len(self.list_edits()["files"]), 1)

    def test_concurrent_sessions_on_two_files_share_one_index(self):
        names = ["one.py", "two.py", "three.py"]
        for name in names:
            self.write_file(name, f"# {name}\n")
        self.fake.reply_fn(lambda record: ReplySpec("<nagent-response>done</nagent-response>", delay=0.3))
        procs = [subprocess.Popen([sys.executable, os.path.join(BIN, "nagent-file-edit"), "--file", name,
                                   "--pid", PID, "--json", "edit"], cwd=self.cwd, env=self.env,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for name in names]
        outputs = [proc.communicate(timeout=120) for proc in procs]
        for proc, (out, err) in zip(procs, outputs):
            self.assertEqual(proc.returncode, 0, err)
        conversations = {json.loads(out)["conversation"] for out, _err in outputs}
        self.assertEqual(len(conversations), 3)
        with open(self.index_path(), encoding="utf-8") as handle:
            index = json.load(handle)
        self.assertEqual(sorted(r["path"] for r in index["by_file_id"].values()),
                         sorted(os.path.join(self.cwd, name) for name in names))
        self.assertEqual({os.path.basename(c) for c in conversations},
                         {r["conversation"] for r in index["by_file_id"].values()})
