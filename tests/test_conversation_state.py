"""Where nagent keeps what it knows about a conversation, and the lifecycle commands that move it.

Issue 10 items 6 (names cannot collide with nagent's own files: everything about NAME lives in
NAME.d/, names are an allowlist, the file-edit index lives outside conversations/, the listing
shows each conversation once), 7 (lifecycle commands check everything before changing anything;
a checkpoint belongs to its conversation and moves with it) and 11 (--save-conversation --force).
Everything user-facing runs through the real bin/nagent."""
import os

from test_loop import NagentRunCase

import nagent_conversation_layout as layout
from nagent_conversation import ConversationWriter, read_records

CHECKPOINT = ('<!-- nagent-checkpoint written="2026-11-22T03:04:05Z" covers_bytes="10" window="1" -->\n'
              "# nagent checkpoint\n\n## Goal\n{goal}\n\n## User notes\nmine\n")


def slurp(path):
    with open(path, "rb") as handle:
        return handle.read()


class StateCase(NagentRunCase):
    def setUp(self):
        super().setUp()
        self.folder = os.path.join(self.home, ".nagent", "conversations")
        self.current = layout.default_conversation_path(self.env, pid="77")

    def make(self, path, prompts=("first",), checkpoint=None):
        with ConversationWriter(path) as writer:
            writer.append("context", "ctx", {"part": "static"})
            for prompt in prompts:
                writer.append("prompt", prompt, {"source": "argv"})
                writer.append("reply", f"<nagent-response>{prompt} done</nagent-response>",
                              {"valid": True})
        if checkpoint is not None:
            with open(layout.checkpoint_path(path), "w", encoding="utf-8") as handle:
                handle.write(CHECKPOINT.format(goal=checkpoint))
        return slurp(path)

    def named(self, name):
        return os.path.join(self.folder, name)

    def run_ok(self, *args):
        proc = self.nagent(*args)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertNotIn("Traceback", proc.stderr)
        return proc

    def archived(self):
        folder = os.path.join(self.folder, "archive")
        return sorted(n for n in os.listdir(folder) if not n.endswith(".d")) if os.path.isdir(folder) else []

    def checkpoint_of(self, path):
        target = layout.checkpoint_path(path)
        return slurp(target).decode() if os.path.exists(target) else None


class NameCollisionTest(StateCase):
    def test_a_conversation_named_like_a_checkpoint_survives_compact(self):
        other = self.named("foo.checkpoint.md")
        kept = self.make(other, prompts=("mine, not a checkpoint",))
        self.make(self.named("foo"), prompts=("foo's task",))
        self.fake.reply("## Goal\nfoo's goal\n\n## Decisions\n-\n\n## Current state\n-\n\n"
                        "## Next steps\n-\n\n## Open questions\n-\n")
        self.run_ok("--conversation", "foo", "--compact")
        self.assertEqual(slurp(other), kept)
        self.assertIn("foo's goal", self.checkpoint_of(self.named("foo")))
        self.assertIsNone(self.checkpoint_of(other))

    def test_a_conversation_named_like_the_file_index_leaves_the_index_alone(self):
        self.fake.reply("<nagent-response>noted</nagent-response>")
        self.run_ok("--conversation", "file-index-555.json", "x")
        conversation = slurp(self.named("file-index-555.json"))
        target = self.write_file("a.py", "x = 1\n")
        self.fake.reply("<nagent-response>looked</nagent-response>")
        proc = self.run_ok("--file-edit", target, "--pid", "555", "look at it")
        self.assertNotIn("corrupt", proc.stderr)
        self.assertEqual(slurp(self.named("file-index-555.json")), conversation)
        data = self.json_of(self.nagent("--list-file-edits", "--pid", "555", "--json"))
        self.assertEqual([f["path"] for f in data["files"]], [os.path.realpath(target)])
        self.assertIsNone(data["warning"])

    def test_names_are_an_allowlist_that_cannot_reach_state(self):
        for bad in ("x.d", "archive", "a b", "ü", ".hidden", "-x", "../x", "a/b"):
            proc = self.nagent(f"--conversation={bad}", "hello")
            self.assertCleanError(proc, 2, "invalid conversation name")
            proc = self.nagent(f"--save-conversation={bad}")
            self.assertCleanError(proc, 2, "invalid conversation name")
        self.assertFalse(os.path.exists(self.folder))

    def test_each_conversation_is_listed_once_and_state_never(self):
        self.make(self.current, checkpoint="current goal")
        with open(self.current, "ab") as handle:
            handle.write(b'<nagent-record seq="9" kind="reply" time="x">\ntorn')
        with ConversationWriter(self.current):
            pass  # moves the torn tail into latest-*.d/
        layout.side_dir(self.current)
        self.run_ok("--pid", "77", "--save-conversation", "kept")
        self.make(self.named("other"))
        self.run_ok("--conversation", "other", "--clear")
        self.make(self.named("data.json"))  # a name like nagent's old index files is still listed
        # Old-layout leftovers beside a conversation are never conversations themselves.
        for junk, text in (("kept.lock", ""), ("kept.torn-20260101T000000Z", '<nagent-record seq="1"'),
                           ("kept.checkpoint.md", CHECKPOINT.format(goal="old")),
                           ("file-index-77.json", '{"version": 1, "by_file_id": {}}')):
            with open(self.named(junk), "w", encoding="utf-8") as handle:
                handle.write(text)
        os.link(self.named("kept"), self.named(".kept.tmp-1"))
        data = self.json_of(self.nagent("--list-conversations", "--json"))
        names = [item["name"] for item in data["conversations"]]
        self.assertEqual(sorted(names), sorted([os.path.basename(self.current), "kept", "data.json"]
                                               + self.archived()))
        self.assertEqual(len(names), len(set(os.path.realpath(item["path"])
                                             for item in data["conversations"])))

    def test_old_layout_checkpoint_is_adopted_by_the_next_run(self):
        path = self.named("legacy")
        self.make(path)
        with open(path + ".checkpoint.md", "w", encoding="utf-8") as handle:
            handle.write(CHECKPOINT.format(goal="legacy goal"))
        self.fake.reply("<nagent-response>ok</nagent-response>")
        self.run_ok("--conversation", "legacy", "go on")
        self.assertFalse(os.path.exists(path + ".checkpoint.md"))
        self.assertIn("legacy goal", self.checkpoint_of(path))


class ValidateBeforeChangeTest(StateCase):
    def test_branch_with_a_bad_turn_changes_nothing(self):
        before = self.make(self.current, prompts=("one", "two"), checkpoint="goal")
        for args in (["--branch-conversation", "--turn", "99"], ["--branch-conversation", "--turn", "0"]):
            proc = self.nagent("--pid", "77", *args)
            self.assertCleanError(proc, 2, "turn")
            self.assertEqual(slurp(self.current), before)
            self.assertEqual(self.archived(), [])
            self.assertIn("goal", self.checkpoint_of(self.current))
        proc = self.nagent("--pid", "77", "--branch-conversation", "ghost", "--turn", "1")
        self.assertCleanError(proc, 6, "no such conversation")
        self.assertEqual((slurp(self.current), self.archived()), (before, []))

    def test_branch_of_the_current_conversation_archives_it_whole(self):
        before = self.make(self.current, prompts=("one", "two"), checkpoint="goal")
        data = self.json_of(self.nagent("--pid", "77", "--branch-conversation", "--turn", "1", "--json"))
        self.assertEqual(slurp(data["archived"]), before)
        self.assertIn("goal", self.checkpoint_of(data["archived"]))
        self.assertEqual([r.body for r in read_records(self.current) if r.kind == "prompt"], ["one"])
        # A branch cut at a turn drops the turns its checkpoint describes: no checkpoint.
        self.assertIsNone(self.checkpoint_of(self.current))
        self.make(self.named("whole"), checkpoint="whole goal")
        self.run_ok("--pid", "77", "--branch-conversation", "whole")
        self.assertIn("whole goal", self.checkpoint_of(self.current))


    def test_clearing_a_busy_file_edit_conversation_leaves_the_index_alone(self):
        import nagent_file_edit_lib as file_edit
        target = self.write_file("a.py", "x = 1\n")
        record = file_edit.resolve_file_edit(target, "88", self.env)
        path = self.named(record["conversation"])
        self.make(path)
        index = slurp(layout.file_index_path("88", self.env))
        with ConversationWriter(path):  # a run holds it
            proc = self.nagent("--file-edit", target, "--pid", "88", "--clear")
        self.assertCleanError(proc, 7, "busy")
        self.assertEqual(slurp(layout.file_index_path("88", self.env)), index)
        self.assertTrue(os.path.exists(path))


class CheckpointMovesTest(StateCase):
    def test_load_clear_and_save_carry_each_checkpoint_with_its_conversation(self):
        current = self.make(self.current, checkpoint="current goal")
        self.make(self.named("plain"))                        # no checkpoint of its own
        data = self.json_of(self.nagent("--pid", "77", "--load-conversation", "plain", "--json"))
        self.assertIsNone(self.checkpoint_of(self.current))  # the old one left with its records
        self.assertEqual(slurp(data["archived"]), current)
        self.assertIn("current goal", self.checkpoint_of(data["archived"]))

        self.make(self.named("planned"), checkpoint="planned goal")
        self.run_ok("--pid", "77", "--load-conversation", "planned")
        self.assertIn("planned goal", self.checkpoint_of(self.current))
        self.assertIn("planned goal", self.checkpoint_of(self.named("planned")))  # a copy

        self.run_ok("--pid", "77", "--save-conversation", "snapshot")
        self.assertIn("planned goal", self.checkpoint_of(self.named("snapshot")))

        data = self.json_of(self.nagent("--pid", "77", "--clear", "--json"))
        self.assertIsNone(self.checkpoint_of(self.current))
        self.assertIn("planned goal", self.checkpoint_of(data["archived"]))


class SaveForceTest(StateCase):
    def test_save_over_an_existing_name_needs_force_and_keeps_the_old_copy(self):
        first = self.make(self.current, prompts=("first",), checkpoint="first goal")
        self.run_ok("--pid", "77", "--save-conversation", "keep")
        self.make(self.current, prompts=("second",))
        second = slurp(self.current)
        proc = self.nagent("--pid", "77", "--save-conversation", "keep")
        self.assertCleanError(proc, 10, "--force")
        self.assertEqual(slurp(self.named("keep")), first)
        data = self.json_of(self.nagent("--pid", "77", "--save-conversation", "keep", "--force",
                                        "--json"))
        self.assertEqual(slurp(self.named("keep")), second)
        self.assertEqual(slurp(data["archived"]), first)         # nothing lost
        self.assertIn("first goal", self.checkpoint_of(data["archived"]))
        self.assertIn("first goal", self.checkpoint_of(self.current))
        self.assertIn("first goal", self.checkpoint_of(self.named("keep")))

    def test_force_belongs_to_save_only(self):
        self.make(self.current)
        for args in (["--force", "hello"], ["--force", "--clear"]):
            proc = self.nagent("--pid", "77", *args)
            self.assertCleanError(proc, 2, "--force only applies to --save-conversation")
        self.assertTrue(os.path.exists(self.current))
