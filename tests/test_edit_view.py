"""Issue 20, what the user sees, in process: a file change on the live view (✎ line, a coloured
height-capped diff on a terminal, none of it escape-coded with NO_COLOR, the file's text made
safe), the run's closing line with its files, --json's changed_files; failures that say why
(a command's first stderr line, an action hook's reason, a response hook's first lines).
"""
import io
import unittest

import base  # noqa: F401  (bin/helpers on sys.path)
from nagent_action_base import ActionOutcome
from nagent_action_view import action_result
from nagent_display import DIFF_HEIGHT, Display
from nagent_events import ActionLog
from nagent_file_change import unified_diff
from nagent_hooks import HookRun, refusal_view
from nagent_protocol import parse_response
from nagent_protocol_blocks import result_block


def change_event(path, before, after):
    diff, added, removed = unified_diff(before, after, path)
    return {"type": "file_change", "index": 1, "path": path, "added": added, "removed": removed,
            "diff": diff, "truncated": False, "sha256_before": "a", "sha256_after": "b"}


def shown(events, **options):
    stream = io.StringIO()
    display = Display(stream, **options)
    for event in events:
        display.handle(event)
    display.close()
    return stream.getvalue()


class FileChangeViewTest(unittest.TestCase):
    EVENTS = [change_event("src/foo.py", b"a = 1\nb = 2\n", b"a = 1\nb = 3\nc = 4\n"),
              change_event("big.py", b"".join(b"%d\n" % n for n in range(100)),
                           b"".join(b"%d!\n" % n for n in range(100))),
              change_event("src/foo.py", b"x\x1b[2J\n", b"y\n"),
              {"type": "run_end", "exit_code": 0, "calls": 2,
               "totals": {"model_calls": 2, "input_tokens": 100, "output_tokens": 5}}]

    def test_change_lines_diff_and_closing_line(self):
        text = shown(self.EVENTS, diffs=True, color=True)
        self.assertIn("✎ src/foo.py +2 −1", text)
        self.assertIn("\x1b[32m+b = 3\x1b[0m", text)         # + green
        self.assertIn("\x1b[31m-b = 2\x1b[0m", text)         # − red
        self.assertIn("\x1b[36m@@ -1,2 +1,3 @@\x1b[0m", text)
        self.assertIn(f"… {201 - DIFF_HEIGHT} more lines", text)   # capped height
        self.assertNotIn("\x1b[2J", text)                    # the file cannot drive the terminal
        self.assertIn("-x\\x1b[2J", text)
        self.assertIn("2 files changed, +103 −102", text)   # the run's sum, per distinct file

    def test_no_color_and_no_terminal(self):
        plain = shown(self.EVENTS, diffs=True, color=False)
        self.assertNotIn("\x1b", plain)
        self.assertIn("    +b = 3", plain)
        off_terminal = shown(self.EVENTS, diffs=False, color=False)
        self.assertIn("✎ src/foo.py +2 −1", off_terminal)
        self.assertNotIn("+b = 3", off_terminal)

    def test_json_lists_changed_files(self):
        log = ActionLog()
        for event in self.EVENTS:
            log.handle(event)
        self.assertEqual(log.as_dict()["changed_files"], [
            {"path": "src/foo.py", "added": 3, "removed": 2, "changes": 2},
            {"path": "big.py", "added": 100, "removed": 100, "changes": 1}])


class FailureViewTest(unittest.TestCase):
    def view(self, reply, block, **outcome):
        action = parse_response(reply).actions[0]
        return action_result(action, ActionOutcome(block, **outcome), 0.1)

    def test_a_failed_command_says_why(self):
        body = "exit_code: 4\nstdout:\nstderr:\nError: missing API key for openai: set OPENAI_API_KEY\n"
        view = self.view("<nagent-shell>nagent-file-edit --file a.py x</nagent-shell>",
                         result_block("nagent-shell-result", body), failed=True,
                         why="Error: missing API key for openai: set OPENAI_API_KEY")
        self.assertFalse(view["ok"])
        self.assertTrue(view["outcome"].startswith(
            "exit 4 · missing API key for openai: set OPENAI_API_KEY · 0.1 s"), view)

    def test_an_action_hook_refusal_says_its_reason_never_exit_none(self):
        block = result_block("nagent-shell-result", "refused by the action hook: no rm -rf here\n"
                             "second line", {"status": "refused"})
        view = self.view("<nagent-shell>rm -rf /</nagent-shell>", block, failed=True)
        self.assertEqual(view["outcome"], "refused: no rm -rf here")
        replace = self.view('<nagent-replace path="a"><old>a</old><new>b</new></nagent-replace>',
                            result_block("nagent-replace-result", "refused by the action hook: "
                                         "read-only", {"path": "a", "status": "refused"}))
        self.assertEqual((replace["ok"], replace["outcome"]), (False, "refused: read-only"))

    def test_a_failed_edit_session_says_why(self):
        block = result_block("nagent-file-edit-result", "exit_code: 5\nerror: the provider call "
                             "failed: HTTP 500\ndiff: none (the file is unchanged)",
                             {"path": "a.py", "status": "error"})
        view = self.view('<nagent-file-edit path="a.py">x</nagent-file-edit>', block,
                         failed=True, child={"model_calls": 1, "input_tokens": 10})
        self.assertEqual(view["outcome"],
                         "exit 5 · the provider call failed: HTTP 500 · 1 call · 10 tokens")

    def test_a_response_hook_refusal_shows_its_first_lines(self):
        run = HookRun("response", "make test", 2, False, "FAIL: test_add\nAssertionError: 1 != 2\n",
                      "make: *** [test] Error 1\n", 0.5, None, 120)
        note = refusal_view(run)
        self.assertEqual(note.split("\n")[0],
                         "the response hook did not accept the answer (exit 2)")
        text = shown([{"type": "note", "text": note}])
        self.assertIn("! the response hook did not accept the answer (exit 2)", text)
        self.assertIn("    FAIL: test_add", text)
        self.assertIn("    make: *** [test] Error 1", text)


if __name__ == "__main__":
    unittest.main()
