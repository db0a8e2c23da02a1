"""The README and docs/ against the code (issue 26): every relative link and #anchor resolves;
every flag of every executable's --help is documented in docs/; the README stays short and
shows install, a first run and the test command (the one .ci/run runs) on its first screen;
docs/configuration.md has every config key with its flag, default and range (SCHEMA);
every --help ends with 2-4 examples and its exit codes, which match nagent_errors.EXIT_TABLE,
and so does docs/scripting.md's exit-code table."""
import argparse
import glob
import importlib
import os
import re
import shlex

from base import REPO, HermeticTestCase

from nagent_config_schema import SCHEMA
from nagent_errors import EXIT_CODES, EXIT_TABLE
from nagent_install import TOOLS

README = os.path.join(REPO, "README.md")
DOCS = os.path.join(REPO, "docs")
README_MAX_LINES = 250
FIRST_SCREEN = 25   # lines: what a newcomer sees before scrolling
TEST_COMMAND = "python3 -m unittest discover -s tests -v"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def markdown_files():
    return [README] + sorted(glob.glob(os.path.join(DOCS, "*.md")))


def outside_fences(text):
    """The lines of `text` outside ``` fences (links and headings in code are not Markdown)."""
    inside = False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            inside = not inside
            continue
        if not inside:
            yield line


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path):
    found, seen = set(), {}
    for line in outside_fences(read(path)):
        match = re.match(r"#{1,6} (.*)", line)
        if match:
            base = slug(match.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def parsers():
    return {name: importlib.import_module(module).build_parser() for name, module in TOOLS.items()}


def help_sections(text):
    """{"examples": [lines], "exit codes": [lines]} of a --help text's epilog blocks."""
    sections = {}
    for block in text.split("\n\n"):
        lines = block.strip("\n").splitlines()
        if lines and lines[0] in ("examples:", "exit codes:"):
            sections[lines[0][:-1]] = [line for line in lines[1:] if line.strip()]
    return sections


class LinksTest(HermeticTestCase):
    def test_every_relative_link_and_anchor_resolves(self):
        broken = []
        for path in markdown_files():
            for line in outside_fences(read(path)):
                for target in LINK.findall(line):
                    if re.match(r"[a-z]+:", target):
                        continue   # http:, https:, mailto:
                    file_part, _, anchor = target.partition("#")
                    dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) \
                        if file_part else path
                    where = f"{os.path.relpath(path, REPO)}: {target}"
                    if not os.path.exists(dest):
                        broken.append(f"{where} (no such file)")
                    elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                        broken.append(f"{where} (no such heading)")
        self.assertEqual(broken, [])

    def test_the_checker_sees_a_broken_link(self):
        self.write_file("page.md", "# Top\n\n[ok](#top) [bad](#nowhere) [gone](missing.md)\n"
                                   "```\n[in code](ignored.md)\n```\n")
        path = os.path.join(self.cwd, "page.md")
        self.assertEqual(anchors(path), {"top"})
        targets = [t for line in outside_fences(read(path)) for t in LINK.findall(line)]
        self.assertEqual(targets, ["#top", "#nowhere", "missing.md"])

    def test_every_docs_page_is_linked_from_the_readme_and_says_what_it_gives(self):
        readme = read(README)
        for path in glob.glob(os.path.join(DOCS, "*.md")):
            name = os.path.basename(path)
            if name != "batch.md":   # linked from agents.md and the README's agents row
                self.assertIn(f"(docs/{name})", readme, name)
            lines = [line for line in read(path).splitlines() if line.strip()]
            self.assertTrue(lines[0].startswith("# "), name)


class ReadmeTest(HermeticTestCase):
    def test_readme_is_short(self):
        self.assertLessEqual(len(read(README).splitlines()), README_MAX_LINES)

    def test_first_screen_has_install_a_first_run_and_the_test_command(self):
        screen = "\n".join(read(README).splitlines()[:FIRST_SCREEN])
        self.assertIn("pipx install .", screen)
        self.assertIn("uv tool install .", screen)
        self.assertRegex(screen, r'(?m)^nagent "')
        self.assertIn(TEST_COMMAND, screen)

    def test_ci_runs_the_readmes_test_command(self):
        readme = read(README).splitlines()
        self.assertIn(TEST_COMMAND, readme)           # a line of its own, as in the Test section
        self.assertIn(TEST_COMMAND, read(os.path.join(REPO, ".ci", "run")).splitlines())


class FlagsDocumentedTest(HermeticTestCase):
    def test_every_help_flag_appears_in_docs(self):
        docs = "\n".join(read(path) for path in glob.glob(os.path.join(DOCS, "*.md")))
        missing = []
        for name, parser in parsers().items():
            for action in parser._actions:
                if action.help == argparse.SUPPRESS:
                    continue
                for flag in action.option_strings:
                    if flag.startswith("--") and flag != "--help" and \
                            not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", docs):
                        missing.append(f"{name} {flag}")
        self.assertEqual(missing, [])


class ConfigurationDocumentedTest(HermeticTestCase):
    @staticmethod
    def shown(value):
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float) and value.is_integer():
            return str(int(value))
        if value == ():
            return "[]"
        return str(value)

    def test_every_key_has_its_row_with_flag_default_and_range(self):
        rows = [line for line in read(os.path.join(DOCS, "configuration.md")).splitlines()
                if line.startswith("| `")]
        problems = []
        for key in SCHEMA:
            row = next((row for row in rows if f"`{key.name}`" in row.split("|")[1]
                        or f"`{key.name}." in row.split("|")[1]), None)   # `providers.NAME`
            if row is None:
                problems.append(f"{key.name}: no row")
                continue
            if key.flag and f"`{key.flag}`" not in row:
                problems.append(f"{key.name}: no {key.flag}")
            for alias in key.aliases:
                if f"`{alias}`" not in row:
                    problems.append(f"{key.name}: other spelling {alias} missing")
            if key.default not in (None, {}) and not callable(key.default) and \
                    not re.search(rf"(?<![\w.]){re.escape(self.shown(key.default))}(?![\w.])",
                                  row.split("|")[4]):
                problems.append(f"{key.name}: default {self.shown(key.default)} missing")
            if key.minimum is not None:
                bound = self.shown(float(key.minimum))
                if f"{'>' if key.above else '>='} {bound}" not in row:
                    problems.append(f"{key.name}: range {key.requirement()} missing")
            for choice in key.choices:
                if f"`{choice}`" not in row:
                    problems.append(f"{key.name}: choice {choice} missing")
        self.assertEqual(problems, [])


class HelpEndingTest(HermeticTestCase):
    def test_every_help_ends_with_examples_then_exit_codes_from_the_table(self):
        meanings = {code: meaning for _, code, meaning in EXIT_TABLE}
        for name, parser in parsers().items():
            text = parser.format_help()
            sections = help_sections(text)
            self.assertIn("examples", sections, name)
            self.assertTrue(2 <= len(sections["examples"]) <= 4, (name, sections["examples"]))
            for line in sections["examples"]:
                self.assertRegex(line, rf"^\s+(\S.*\| )?{re.escape(name)} ", name)
                # The example's own command line parses: no flag in it is misspelt or gone.
                words = shlex.split(line.split(" | ")[0] if line.strip().startswith(name)
                                    else line.split(" | ")[1], comments=True)
                parser.parse_args(words[1:])
            self.assertTrue(text.rstrip().endswith(sections["exit codes"][-1]), name)
            shown = {}
            for line in sections["exit codes"]:
                code, meaning = re.match(r"\s+(\d+)  (.*)$", line).groups()
                shown[int(code)] = meaning
            self.assertTrue(shown, name)
            for code, meaning in shown.items():
                self.assertEqual(meaning, meanings.get(code), f"{name} exit {code}")
            self.assertIn(0, shown, name)
            self.assertIn(2, shown, name)
        everything = help_sections(parsers()["nagent"].format_help())["exit codes"]
        self.assertEqual(len(everything), len(EXIT_CODES))

    def test_docs_exit_code_table_matches_the_code(self):
        text = read(os.path.join(DOCS, "scripting.md"))
        section = text[text.index("## Exit codes"):]
        codes = {int(code) for code in re.findall(r"(?m)^\| (\d+) \|", section)}
        self.assertEqual(codes, set(EXIT_CODES.values()))
