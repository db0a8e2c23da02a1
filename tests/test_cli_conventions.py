"""CLI conventions of every executable (issue 12): --version from one place, a help text for
every flag, internal flags hidden but working, providers listed in --help; the executables
table agrees with bin/ and pyproject.toml; and an installed layout (modules in site-packages,
console scripts in a venv's bin/) runs nagent end to end, including the processes nagent starts
itself (a sub-agent, the split tool, tool discovery)."""
import argparse
import importlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib

from base import BIN, HELPERS, REPO, HermeticTestCase
from fakes import FakeVendorTestCase

import nagent_install
from nagent_install import TOOLS, VERSION
from nagent_providers import BUILTIN_PROVIDERS

INTERNAL_FLAGS = ("--invocation", "--parent-conversation", "--depth", "--budget")


def bin_executables():
    return sorted(name for name in os.listdir(BIN) if os.path.isfile(os.path.join(BIN, name))
                  and os.access(os.path.join(BIN, name), os.X_OK))


def pyproject():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)


class ConventionsTest(HermeticTestCase):
    def test_every_tool_prints_the_one_version(self):
        for name in TOOLS:
            proc = self.run_tool(name, "--version")
            self.assertEqual((proc.returncode, proc.stdout, proc.stderr),
                             (0, f"{name} {VERSION}\n", ""), name)
        # Through argparse too (a flag before it), not only the early path.
        proc = self.run_tool("nagent-file-patch", "--json", "--version")
        self.assertEqual((proc.returncode, proc.stdout), (0, f"nagent-file-patch {VERSION}\n"))
        # pyproject reads the version from the same constant.
        dynamic = pyproject()["tool"]["setuptools"]["dynamic"]["version"]
        self.assertEqual(dynamic, {"attr": "nagent_install.VERSION"})
        self.assertIn("version", pyproject()["project"]["dynamic"])

    def test_every_tool_with_json_reports_each_error_as_a_json_object(self):
        # A usage error (argparse, before any tool code) and a runtime error (a missing file):
        # with --json, stdout is one JSON error object and stderr still has the one Error: line.
        missing = os.path.join(self.cwd, "missing.txt")
        cases = {
            "nagent": (["--json", "--no-such-flag"], ["--json", "--file-edit", missing, "go"]),
            "nagent-llm-text": (["--json", "--no-such-flag"], ["--json", "--provider", "nope", "hi"]),
            "nagent-llm-upload": (["--json", "--no-such-flag"], ["--json", "--file", missing, "--prompt", "x"]),
            "nagent-file-split": (["--json", "--no-such-flag"], ["--json", "--file", missing, "--output", "out"]),
            "nagent-file-patch": (["--json", "--no-such-flag"], ["--json", "--index", missing]),
            "nagent-file-edit": (["--json", "--no-such-flag"], ["--json", "--file", missing, "go"]),
            "nagent-file-summarize": (["--json", "--no-such-flag"], ["--json", "--file", missing]),
            "nagent-mcp": (["--json", "--no-such-flag"], ["--json", "call", "nope", "echo"]),
            "nagent-batch": (["--json", "--no-such-flag"], ["--json", missing]),
        }
        self.assertEqual(sorted(cases), sorted(TOOLS))
        for name, runs in cases.items():
            for args in runs:
                with self.subTest(tool=name, args=args):
                    proc = self.run_tool(name, *args, input="")
                    self.assertCleanError(proc)
                    data = json.loads(proc.stdout)
                    error = data["error"] if isinstance(data["error"], dict) else data  # nagent's run document
                    self.assertEqual(error["exit_code"], proc.returncode, proc.stdout)
                    self.assertIn(error["error"], proc.stderr)

    def test_every_flag_has_a_help_text(self):
        for name, module in TOOLS.items():
            parser = importlib.import_module(module).build_parser()
            for action in parser._actions:
                flag = action.option_strings[-1] if action.option_strings else action.dest
                if action.help == argparse.SUPPRESS:
                    self.assertIn(flag, INTERNAL_FLAGS, f"{name} hides {flag}")
                    continue
                self.assertTrue(action.help and action.help.strip(), f"{name} {flag} has no help text")

    def test_internal_flags_hidden_from_help_but_accepted(self):
        proc = self.run_tool("nagent", "--help")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        for flag in INTERNAL_FLAGS:
            self.assertNotIn(flag, proc.stdout)
        import nagent_main
        args = nagent_main.build_parser().parse_args(
            ["--invocation", "delegated", "--parent-conversation", "/x", "--depth", "2", "task"])
        self.assertEqual((args.invocation, args.parent_conversation, args.depth, args.prompt),
                         ("delegated", "/x", 2, ["task"]))

    def test_providers_listed_in_help_from_the_table(self):
        for tool in ("nagent", "nagent-llm-text", "nagent-file-edit"):
            text = " ".join(self.run_tool(tool, "--help").stdout.split())
            for row in BUILTIN_PROVIDERS:
                for name in (row.name,) + tuple(row.aliases):
                    self.assertRegex(text, rf"\b{re.escape(name)}\b", f"{tool} --help lacks {name}")

    def test_split_help_without_the_splitters_still_tells_the_truth(self):
        from nagent_file_split_lib import DEFAULT_TARGET_BYTES, split_types
        from nagent_main_file_split import TARGET_BYTES_HELP
        self.assertTrue(TARGET_BYTES_HELP.endswith(f"default {DEFAULT_TARGET_BYTES}"))
        proc = self.run_tool("nagent-file-split", "--output", self.tmp, "--file", "x.py", "--type", "nope")
        self.assertCleanError(proc, 2, "unknown split type")
        for kind in split_types():
            self.assertIn(kind, proc.stderr)

    def test_usage_errors_keep_one_paren_group(self):
        proc = self.run_tool("nagent", "--shell-approval", "maybe", "hi")
        self.assertCleanError(proc, 2)
        line = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")][0]
        self.assertIn("choose from", line)
        self.assertNotRegex(line, r"\([^)]*\(", line)

    def test_executables_table_matches_bin_and_pyproject(self):
        self.assertEqual(sorted(TOOLS), bin_executables())
        scripts = pyproject()["project"]["scripts"]
        self.assertEqual(scripts, {name: f"{module}:run" for name, module in TOOLS.items()})
        for name, module in TOOLS.items():
            self.assertTrue(callable(importlib.import_module(module).run), module)
            with open(os.path.join(BIN, name), encoding="utf-8") as handle:
                code = [line for line in handle.read().splitlines()
                        if line.strip() and not line.startswith(("#", '"""'))]
            self.assertLessEqual(len(code), 6, f"bin/{name} is not a thin shim")
            self.assertIn(f"from {module} import", "\n".join(code))

    def test_no_model_commands_import_no_sdk_and_no_yaml(self):
        """Start-up: commands that call no model import no provider SDK (nor its HTTP stack) and
        no yaml; the conversation commands also skip dataclasses (which imports inspect)."""
        from concurrent.futures import ThreadPoolExecutor
        commands = [("nagent", arg) for arg in ("--help", "--version", "--description", "--status",
                                               "--config", "--list-conversations", "--list-file-edits")]
        commands += [(name, arg) for name in TOOLS if name != "nagent" for arg in ("--help", "--version")]
        heavy = ("openai", "anthropic", "google.genai", "httpx", "pydantic", "yaml", "mcp")

        def imported(command):
            proc = subprocess.run([sys.executable, "-X", "importtime", os.path.join(BIN, command[0]),
                                   command[1]], capture_output=True, text=True, env=self.env, cwd=self.cwd)
            return command, proc, {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines()
                                   if line.startswith("import time:")}

        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(imported, commands))
        for (tool, arg), proc, modules in results:
            self.assertEqual(proc.returncode, 0, (tool, arg, proc.stderr[-400:]))
            self.assertIn("nagent_cli", modules)  # -X importtime did report
            for name in heavy:
                self.assertFalse({m for m in modules if m == name or m.startswith(name + ".")},
                                 f"{tool} {arg} imports {name}")
            if tool == "nagent" and arg in ("--status", "--config", "--list-conversations", "--version"):
                self.assertNotIn("dataclasses", modules, f"{tool} {arg} imports dataclasses")
            if tool == "nagent-file-split":
                self.assertNotIn("nagent_splitters", modules, f"{tool} {arg} loads the splitters")

    def test_a_checkout_runs_its_own_bin_files(self):
        self.assertEqual(nagent_install.checkout_bin_dir(), os.path.realpath(BIN))
        self.assertEqual(nagent_install.tool_argv("nagent-file-split"),
                         [sys.executable, os.path.join(os.path.realpath(BIN), "nagent-file-split")])


CONSOLE_SCRIPT = """#!{python}
# -*- coding: utf-8 -*-
import re
import sys
from {module} import run
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(run())
"""


class InstalledLayoutTest(FakeVendorTestCase):
    """A copy laid out as pip installs it: modules in a venv's site-packages, console scripts
    (written as pip writes them) in its bin/, and no bin/ directory of a checkout anywhere."""

    def make_install(self):
        venv = os.path.join(self.tmp, "venv")
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", venv],
                       check=True, capture_output=True)
        python = os.path.join(venv, "bin", "python")
        site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              check=True, capture_output=True, text=True).stdout.strip()
        # The SDKs the running suite has, wherever they are: --system-site-packages would give
        # the BASE interpreter's packages, not those of a venv the suite runs in (issue 21).
        with open(os.path.join(site, "suite-packages.pth"), "w", encoding="utf-8") as handle:
            handle.write("".join(path + "\n" for path in sys.path
                                 if os.path.basename(path) in ("site-packages", "dist-packages")))
        for name in os.listdir(HELPERS):
            if name.endswith(".py"):
                shutil.copy(os.path.join(HELPERS, name), os.path.join(site, name))
        # The install runs on the suite's own SDKs, whether the suite runs in a venv or not.
        where = "import importlib.util as u; print(u.find_spec('google.genai').origin)"
        seen = subprocess.run([python, "-c", where], check=True, capture_output=True, text=True)
        self.assertEqual(seen.stdout.strip(), importlib.util.find_spec("google.genai").origin)
        for name, module in TOOLS.items():
            path = os.path.join(venv, "bin", name)
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(CONSOLE_SCRIPT.format(python=python, module=module))
            os.chmod(path, 0o755)
        return venv, site

    def test_installed_copy_runs_agent_split_and_discovery(self):
        venv, site = self.make_install()
        scripts = os.path.join(venv, "bin")
        self.write_config({"provider": "google", "retry": {"base_delay": 0, "max_delay": 0}})
        env = dict(self.env, PATH=os.pathsep.join(["/usr/bin", "/bin"]))
        version = subprocess.run([os.path.join(scripts, "nagent"), "--version"], env=env,
                                 capture_output=True, text=True)
        self.assertEqual((version.returncode, version.stdout), (0, f"nagent {VERSION}\n"), version.stderr)

        big = self.write_file("big.py", "".join(f"def f{i}():\n    return {i}\n\n" for i in range(4000)))
        self.assertGreater(os.path.getsize(big), 64 * 1024)
        self.fake.reply("<nagent-file-read path=\"big.py\"/>\n<nagent-agent>child task</nagent-agent>\n"
                        "<nagent-shell>command -v nagent-file-split python3"
                        "</nagent-shell>")
        self.fake.reply("<nagent-response>child done</nagent-response>")
        self.fake.reply("<nagent-response>all done</nagent-response>")
        proc = subprocess.run([os.path.join(scripts, "nagent"), "--json", "--pid", "77", "go"],
                              env=env, cwd=self.cwd, capture_output=True, text=True, timeout=120)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(json.loads(proc.stdout)["response"], "all done")
        conversation = os.path.join(self.home, ".nagent", "conversations",
                                    [n for n in os.listdir(os.path.join(self.home, ".nagent", "conversations"))
                                     if n.startswith("latest-")][0])
        with open(conversation, encoding="utf-8") as handle:
            text = handle.read()
        # The split tool ran as the installed module: the read result points at its segments.
        self.assertIn("<nagent-file-read-result", text)
        self.assertIn("0001-big.py", text)
        self.assertNotIn("failed", text.split("<nagent-file-read-result", 1)[1].split("</nagent-file-read-result>")[0])
        # The sub-agent ran through the installed nagent.
        self.assertIn("child done", text)
        self.assertRegex(text, r"exit_code: 0\noutput:\nchild done")
        # Discovery described the installed tools, and only them from that directory.
        context = text.split("</nagent-record>", 1)[0]
        self.assertIn("nagent-file-split", context)
        self.assertIn("structure-aware", context)
        listed = re.findall(r"(?m)^- (\S+) — ", context)
        self.assertEqual(sorted(listed), sorted(TOOLS), "only the install's own tools, never its python or pip")
        # Shell actions find the installed tools on PATH, but not the venv's python first.
        shell = text.rsplit("<nagent-shell-result>", 1)[1].split("</nagent-shell-result>")[0]
        self.assertIn(os.path.join(scripts, "nagent-file-split"), shell)
        self.assertIn("/usr/bin/python3", shell)
        # Installed with pipx, a missing optional SDK is added with pipx inject (issue 21).
        with open(os.path.join(venv, "pipx_metadata.json"), "w", encoding="utf-8") as handle:
            handle.write('{"main_package": {"package": "nagent"}}\n')
        shadow = os.path.join(self.tmp, "shadow", "mcp")
        os.makedirs(shadow)
        with open(os.path.join(shadow, "__init__.py"), "w", encoding="utf-8") as handle:
            handle.write("raise ImportError('No module named mcp (shadowed for the test)')\n")
        self.write_config({"mcp_servers": {"t": {"command": "true"}}})
        hint = subprocess.run([os.path.join(scripts, "nagent-mcp"), "call", "t", "echo"],
                              env=dict(env, PYTHONPATH=os.path.dirname(shadow)), cwd=self.cwd,
                              stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
        self.assertCleanError(hint, 4, "the MCP SDK is not installed")
        self.assertIn("(pipx inject nagent 'mcp>=2')", hint.stderr)
