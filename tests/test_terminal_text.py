"""Text a model, a file or a server controls reaches the terminal only through
nagent_terminal_text: one table over the shared rule, then each printing site (MCP listing and
tool errors, skills, --ps, discovery descriptions, context paths, parse-error snippets, split
listings, error lines, the live view, the approval prompt), end to end where it is cheap."""
import json
import os
import sys
import time
import unittest

from base import HermeticTestCase
from test_mcp_servers import McpCase, needs_sdk, stdio_entry

import nagent_terminal_text as tt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mcp_server import HOSTILE_DESCRIPTION, HOSTILE_NAME  # noqa: E402

# What an attacker puts in a string: ESC (CSI), the one-byte C1 CSI, CR (overwrite the line),
# BEL, DEL, NEL, a bidi override and isolate, a zero-width space, a tag character.
NASTY = "a\x1b[2J\x9b2J\r\x07\x7f\x85\u202e\u2066\u200b\U000e0001b"
NASTY_ESCAPED = "a\\x1b[2J\\x9b2J\\x0d\\x07\\x7f\\x85\\u202e\\u2066\\u200b\\U000e0001b"


def unsafe_chars(text, allowed="\n"):
    return [ch for ch in text if not ch.isprintable() and ch not in allowed]


class SharedRule(unittest.TestCase):
    def test_escape_table(self):
        table = [
            ("plain text", "", "plain text"),
            ("日本語 ünïcödé", "", "日本語 ünïcödé"),
            ("\x1b[31mred", "", "\\x1b[31mred"),
            ("\x9b2J", "", "\\x9b2J"),
            ("\x00\x1f\x7f\x80\x9f", "", "\\x00\\x1f\\x7f\\x80\\x9f"),
            ("over\rwrite", "", "over\\x0dwrite"),
            ("\u202egnp.exe", "", "\\u202egnp.exe"),
            ("\u200e\u200f\u202a\u202b\u202c\u202d\u2066\u2067\u2068\u2069", "",
             "\\u200e\\u200f\\u202a\\u202b\\u202c\\u202d\\u2066\\u2067\\u2068\\u2069"),
            ("soft\u00adhyphen\ufeff", "", "soft\\xadhyphen\\ufeff"),
            ("tag\U000e0041", "", "tag\\U000e0041"),
            ("line\u2028sep", "", "line\\u2028sep"),
            ("a\tb\nc", "", "a\\x09b\\x0ac"),
            ("a\tb\nc", "\t", "a\tb\\x0ac"),
            ("a\tb\nc\x1b", "\n\t", "a\tb\nc\\x1b"),
            (NASTY, "", NASTY_ESCAPED),
        ]
        for text, keep, expected in table:
            with self.subTest(text=text, keep=keep):
                shown = tt.escape(text, keep)
                self.assertEqual(shown, expected)
                self.assertEqual(unsafe_chars(shown, keep), [])

    def test_one_line_table(self):
        table = [
            ("  two  spaces\tand tab  ", {}, "two spaces and tab"),
            ("first\nsecond\r\nthird", {}, "first second third"),
            ("ls\n\x1b[2J", {"newline": " ⏎ "}, "ls ⏎ \\x1b[2J"),
            ("no\u00a0break\u3000space", {}, "no break space"),
            ("cr\ronly", {}, "cr\\x0donly"),
            (NASTY, {}, NASTY_ESCAPED),
            (None, {}, ""),
            (42, {}, "42"),
            ("x" * 50, {"limit": 10}, "x" * 9 + "…"),
            ("word " * 10, {"limit": 11}, "word word…"),
            ("日本語日本語", {"limit": 7}, "日本語…"),
        ]
        for text, options, expected in table:
            with self.subTest(text=text, options=options):
                line = tt.one_line(text, **options)
                self.assertEqual(line, expected)
                self.assertEqual(unsafe_chars(line, ""), [])

    def test_every_code_point_below_0x3000_comes_out_safe(self):
        text = "".join(chr(code) for code in range(0x3000) if not 0xD800 <= code < 0xE000)
        self.assertEqual(unsafe_chars(tt.escape(text), ""), [])
        self.assertEqual(unsafe_chars(tt.one_line(text, newline=" ⏎ "), ""), [])


class SitesInProcess(HermeticTestCase):
    def test_live_view_line(self):
        import nagent_action_view as view
        from nagent_protocol import parse_response
        action = parse_response(f"<nagent-shell>\necho {NASTY}\n</nagent-shell>\n").actions[0]
        self.assertEqual(view.action_summary(action), f"echo {NASTY_ESCAPED}")

    def test_approval_prompt(self):
        import nagent_approval
        text = nagent_approval.prompt_text(f"echo {NASTY}\n\tnext")
        self.assertIn(f"    echo {NASTY_ESCAPED}\n    \tnext\n", text)
        self.assertEqual(unsafe_chars(text, "\n\t"), [])

    def test_discovery_description(self):
        import nagent_discovery
        raw = "\n  x\x1b[2J\x9b2J\u202e\u2066\x07\x7f y  \nsecond"
        self.assertEqual(nagent_discovery.clean_description(raw),
                         "x\\x1b[2J\\x9b2J\\u202e\\u2066\\x07\\x7f y")

    def test_context_problem_lines(self):
        from nagent_context_layers import Layer, render_layers
        text = render_layers([Layer("project", "", (), (f"missing /p/{NASTY}\n",))])
        self.assertTrue(text.endswith(f"\n- missing /p/{NASTY_ESCAPED}\\x0a"), text)

    def test_parse_error_snippet(self):
        from nagent_protocol import parse_response
        parsed = parse_response(f"{NASTY}\n<nagent-response>\nx\n</nagent-response>\n")
        self.assertFalse(parsed.valid)
        self.assertIn("a\\x1b[2J\\x9b2J", parsed.error)
        self.assertEqual(unsafe_chars(parsed.error, ""), [])

    def test_split_listing_construct_label(self):
        from nagent_file_tools import segment_line
        line = segment_line("/d", {"file": "s1.py", "first_line": 1, "last_line": 9, "bytes": 90,
                                   "inside": f"def f():  # {NASTY}"})
        self.assertTrue(line.endswith(f"; inside: def f():  # {NASTY_ESCAPED}"), line)

    def test_error_line(self):
        from nagent_errors import NagentError
        line = NagentError("bad thing", f"v{NASTY}\nnext", "fix it").line()
        # line breaks (\n, \r, NEL) become spaces, as before; the rest is escaped
        shown = NASTY_ESCAPED.replace("\\x0d", " ").replace("\\x85", " ")
        self.assertEqual(line, f"Error: bad thing: v{shown} next (fix it)")

    def test_mcp_tool_entry_and_listing(self):
        import nagent_mcp_render as render
        entry = render.tool_entry({"name": HOSTILE_NAME, "description": HOSTILE_DESCRIPTION,
                                   "inputSchema": {"type": "object", "properties": {
                                       f"p{NASTY}": {"enum": ["x\u202ey"]}}}})
        text = render.list_text([{"name": "srv", "tools": [entry], "error": None},
                                 {"name": "down", "tools": [], "error": f"exited: {NASTY}"}])
        self.assertEqual(unsafe_chars(text), [])
        self.assertIn(f"down: error: exited: {NASTY_ESCAPED}", text)
        self.assertIn('x\\u202ey', text)


class SitesEndToEnd(McpCase):
    def test_skills_listing(self):
        self.write_file(os.path.join(self.home, ".nagent", "skills", "evil", "SKILL.md"),
                        "---\nname: \"evil\\e[2J\"\ndescription: \"Clears\\e[2J\\x9b2J\\u202e\\r"
                        "\\x07 it\"\n---\nbody\n")
        proc = self.run_tool("nagent", "--list-skills")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(unsafe_chars(proc.stdout), [], proc.stdout)
        self.assertIn("evil\\x1b[2J", proc.stdout)
        self.assertIn("Clears\\x1b[2J\\x9b2J\\u202e\\x0d\\x07 it", proc.stdout)

    def test_ps_listing(self):
        import nagent_instances as instances
        from nagent_conversation_lock import conversation_lock
        from nagent_pids import start_ticks
        folder = instances.run_dir(self.env)
        os.makedirs(folder, exist_ok=True)
        record = {"pid": os.getpid(), "start_ticks": start_ticks(os.getpid()),
                  "started_at": time.time(),
                  "conversation": os.path.join(self.tmp, f"conv{NASTY}"),
                  "action": f"shell: {NASTY}"}
        with open(os.path.join(folder, f"{os.getpid()}.json"), "w", encoding="utf-8") as handle:
            json.dump(record, handle)
        with conversation_lock(record["conversation"]):   # a run file counts while its lock is held
            proc = self.run_tool("nagent", "--ps")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(unsafe_chars(proc.stdout), [], proc.stdout)
        self.assertIn("shell: a\\x1b[2J", proc.stdout)
        self.assertIn(f"conv{NASTY_ESCAPED}", proc.stdout)

    @needs_sdk
    def test_mcp_list_and_tool_error_from_a_hostile_server(self):
        self.write_config({"mcp_servers": {"bad": stdio_entry("--hostile")}})
        listing, failed = self.mcp_parallel(
            ("--list", "bad"),
            ("call", "bad", "fail", "--args", json.dumps({"message": f"boom{NASTY}"})))
        self.assertEqual(listing.returncode, 0, listing.stderr)
        self.assertEqual(unsafe_chars(listing.stdout), [], listing.stdout)
        self.assertIn("evil\\x1b[2J\\x9b2J\\u202e\\x0d\\x07(mode: ", listing.stdout)
        self.assertIn("— Clears\\x1b[2J\\x9b2J\\u202e\\x0d\\x07the screen\\u2066 and\\x85 more",
                      listing.stdout)
        self.assertIn('"a\\u202eb"|"c\\x9bd"', listing.stdout)
        self.assertEqual(failed.returncode, 1, failed.stderr)
        self.assertEqual(unsafe_chars(failed.stderr), [], failed.stderr)
        self.assertIn("booma\\x1b[2J\\x9b2J \\x07\\x7f \\u202e", failed.stderr)



class StatusEraseTest(unittest.TestCase):
    def test_reaches_past_the_line_for_an_echoed_control_key_within_the_terminal(self):
        self.assertEqual(tt.status_erase(15, 120), "\r" + " " * 17 + "\r")
        self.assertEqual(tt.status_erase(119, 120), "\r" + " " * 119 + "\r")   # no wrap
        self.assertEqual(tt.status_erase(60, 20), "\r" + " " * 60 + "\r")     # never less
        self.assertNotIn("\x1b", tt.status_erase(10, 80))


if __name__ == "__main__":
    unittest.main()
