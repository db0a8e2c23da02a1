"""Checkpoints and window rebuilds (nagent_checkpoint, nagent_window_rebuild, nagent_window): the checkpoint text and its cadence from
the data on disk, user edits surviving, the deterministic rebuild (golden), every user prompt
kept verbatim, nothing lost (archive + side files), the window chain in --status and
--list-conversations, and `nagent --compact`.

Golden files live in tests/golden/window/; regenerate with NAGENT_REGEN_GOLDEN=1."""
import hashlib
import json
import os
import re

from base import TESTS, HermeticTestCase
from test_cache_requests import InProcessCase

import nagent_checkpoint as ck
import nagent_window as win
import nagent_window_rebuild as rb
from nagent_config import resolve_settings
from nagent_conversation import ConversationWriter, Record, read_records, window_chain
from nagent_stats_format import decode_stats
from nagent_errors import ConfigError

GOLDEN = os.path.join(TESTS, "golden", "window")
NOW = "2026-01-02T03:04:05Z"
CHECKPOINT_REPLY = ("Here is the checkpoint.\n\n## Goal\nAudit the logs.\n\n"
                    "## Decisions\n- Read whole files.\n\n"
                    "## Current state\nSome files read.\n\n## Next steps\n- Read the rest.\n\n"
                    "## Open questions\n- None.\n\n## User notes\nthe model must not write this\n")


def rec(seq, kind, body, **attrs):
    return Record(seq, kind, body, tuple(sorted(attrs.items())))


def shell_result(text, code=0):
    return f"<nagent-shell-result>\nexit_code: {code}\nstdout:\n{text}</nagent-shell-result>"


def sample_window():
    """A first window with every record kind a rebuild meets."""
    big = "".join(f"error line {n}: disk quota exceeded on /var/tmp\n" for n in range(60))
    items = [
        ("context", "<initial_context>\nstatic rules", {"part": "static"}),
        ("context", "session: cwd /work\n</initial_context>", {"part": "session"}),
        ("meta", '{"invocation": "user"}', {}),
        ("prompt", "Fix the build.\n  Keep  this   spacing.", {"source": "argv"}),
        ("stats", '{"conversation": {}}', {}),
        ("reply", "<nagent-shell>make</nagent-shell>", {"valid": "true"}),
        ("result", shell_result(big, 2), {"action": "shell"}),
        ("reply", "prose", {"valid": "false"}),
        ("system", "<system>Invalid nagent response format.</system>", {}),
        ("reply", "<nagent-next>Continue with the tests</nagent-next>", {"valid": "true"}),
        ("prompt", "Continue with the tests", {"source": "next"}),
        ("reply", '<nagent-read path="log.txt"/>', {"valid": "true"}),
        ("result", '<nagent-read-result path="log.txt">\n' + big + "</nagent-read-result>",
         {"action": "read"}),
        ("reply", "<nagent-response>Quota problem.</nagent-response>", {"valid": "true"}),
        ("interrupt", "The user interrupted the previous run (Ctrl-C).", {}),
        ("prompt", "Second task: clean /var/tmp\n(piped)", {"source": "stdin"}),
        ("error", "Error: 529 overloaded — retrying", {"status": "529"}),
        ("reply", "<nagent-shell>du -sh /var/tmp</nagent-shell>", {"valid": "true"}),
        ("result", shell_result("4.0G\t/var/tmp\n"), {"action": "shell"}),
        ("reply", "<nagent-shell>rm -rf /var/tmp/cache</nagent-shell>", {"valid": "true"}),
        ("result", shell_result("removed\n" * 200, 0), {"action": "shell"}),
        ("stats", '{"conversation": {}}', {}),
    ]
    return [rec(seq, kind, body, **attrs) for seq, (kind, body, attrs) in enumerate(items, start=1)]


SETTINGS = rb.WindowSettings(checkpoint_every_bytes=1000, window_max_bytes=8000, tail_bytes=700,
                              side_threshold=1024)
ARCHIVE = "/home/u/.nagent/conversations/archive/t-20260102T030405Z"
SIDE_DIR = "/home/u/.nagent/conversations/t.d"


class CheckpointTextTest(HermeticTestCase):
    def test_window_settings_default_from_the_context_window_and_config(self):
        cases = [("anthropic", {}, 200_000 * 2), ("openai", {}, 400_000 * 2),
                 ("anthropic", {"window_max_bytes": 5000, "window_tail_bytes": 100,
                                "side_threshold_bytes": 7, "checkpoint_every_bytes": 9}, 5000)]
        for provider, extra, expected in cases:
            self.write_config(dict({"provider": provider}, **extra))
            w = rb.window_settings(resolve_settings({}, self.env))
            self.assertEqual(w.window_max_bytes, expected)
            if extra:
                self.assertEqual((w.tail_bytes, w.side_threshold, w.checkpoint_every_bytes), (100, 7, 9))
        self.write_config({"provider": "corp", "providers": {"corp": {"base_url": "http://x/v1",
                                                                     "model": "m"}}})
        self.assertEqual(rb.window_settings(resolve_settings({}, self.env)).window_max_bytes, 400_000)
        for bad in ("big", -1, True):
            self.write_config({"provider": "anthropic", "window_max_bytes": bad})
            with self.assertRaises(ConfigError):
                rb.window_settings(resolve_settings({}, self.env))

    def test_compose_keeps_schema_drops_preamble_and_keeps_user_notes_verbatim(self):
        first = ck.compose_checkpoint(CHECKPOINT_REPLY, "", 1234, 1, NOW)
        self.assertTrue(first.startswith(f'<!-- nagent-checkpoint written="{NOW}" covers_bytes="1234" '
                                         'window="1" -->\n# nagent checkpoint\n\n## Goal\n'))
        self.assertNotIn("Here is the checkpoint", first)
        self.assertNotIn("the model must not write this", first)
        for name in ck.SCHEMA:
            self.assertIn(f"## {name}\n", first)
        self.assertEqual(ck.parse_checkpoint_meta(first),
                         {"written": NOW, "covers_bytes": 1234, "window": 1})
        edited = first + "- prefer make -j4   (my note, odd  spacing)\n"
        fenced = "```markdown\n## Goal\nNew goal.\n```"
        second = ck.compose_checkpoint(fenced, edited, 5678, 2, NOW)
        self.assertIn("## Goal\nNew goal.\n", second)
        self.assertNotIn("```", second)
        self.assertTrue(second.endswith("- prefer make -j4   (my note, odd  spacing)\n"))
        self.assertEqual(ck.user_notes(second), ck.user_notes(edited))

    def test_schema_check(self):
        good = ck.strip_to_schema(CHECKPOINT_REPLY)
        self.assertIsNone(ck.schema_problem(good))
        self.assertIsNone(ck.file_schema_problem(ck.compose_checkpoint(CHECKPOINT_REPLY, "", 1, 1, NOW)))
        lower = ck.strip_to_schema(CHECKPOINT_REPLY.replace("## Current state", "##  current STATE"))
        self.assertIn("## Current state\n", lower)  # canonical spelling
        self.assertIsNone(ck.schema_problem(lower))
        cases = {GARBAGE: "missing section(s) Goal",
                 CHECKPOINT_REPLY.replace("## Decisions", "## Choices"): "missing section(s) Decisions",
                 CHECKPOINT_REPLY.replace("## Open questions\n- None.", "## Open questions\n- None.\n"
                                          "## Goal\nagain"): "out of order or repeated",
                 "".join(f"## {name}\n" for name in ck.SCHEMA): "every section is empty"}
        for text, problem in cases.items():
            with self.subTest(text=text[:40]):
                self.assertIn(problem, ck.schema_problem(ck.strip_to_schema(text)) or "None")
        self.assertIsNone(ck.schema_problem(ck.strip_to_schema(CHECKPOINT_REPLY + "## Random\nx")))
        extra = CHECKPOINT_REPLY.replace("## User notes\nthe model must not write this\n", "## Extra\nx\n")
        self.assertEqual(ck.schema_problem(ck.strip_to_schema(extra)), "unexpected section(s) Extra")
        self.assertEqual(ck.file_schema_problem("just text"), "no nagent-checkpoint header line")

    def test_due_and_stale_rules(self):
        self.assertTrue(ck.checkpoint_due(5000, None, 5000))
        self.assertFalse(ck.checkpoint_due(4999, None, 5000))
        self.assertFalse(ck.checkpoint_due(9999, {"covers_bytes": 5000}, 5000))
        self.assertTrue(ck.checkpoint_due(10000, {"covers_bytes": 5000}, 5000))
        self.assertFalse(ck.checkpoint_due(10**9, None, 0))  # disabled
        self.assertFalse(ck.is_stale({"covers_bytes": 10, "window": 1}, 100, 1))
        self.assertTrue(ck.is_stale({"covers_bytes": 1000, "window": 1}, 100, 1))  # file shrank
        self.assertTrue(ck.is_stale({"covers_bytes": 10, "window": 3}, 100, 2))
        self.assertFalse(ck.is_stale({"covers_bytes": 10**6, "window": 1}, 100, 2))
        self.assertFalse(ck.is_stale({"covers_bytes": 0, "window": 0}, 100, 1))  # no header

    def test_transcript_starts_at_the_covered_offset_and_excerpts_results(self):
        path = os.path.join(self.tmp, "conv")
        with ConversationWriter(path) as writer:
            writer.append("prompt", "old prompt", {"source": "argv"})
            covered = os.path.getsize(path)
            writer.append("prompt", "new prompt", {"source": "argv"})
            writer.append("result", shell_result("x" * 10_000), {"action": "shell"})
            writer.append("stats", "{}")
            records = writer.records()
        text = ck.transcript_since(records, covered, 100_000)
        self.assertNotIn("old prompt", text)
        self.assertIn("[prompt #2]\nnew prompt", text)
        self.assertIn("characters omitted", text)
        self.assertLess(len(text), 3000)
        self.assertNotIn("[stats", text)
        self.assertEqual(ck.transcript_since(records, 0, 50), text[-50:])

    def test_write_checkpoint_feeds_previous_and_user_edits_to_the_one_call(self):
        path = os.path.join(self.tmp, "conv")
        with ConversationWriter(path) as writer:
            writer.append("prompt", "Audit the logs.", {"source": "argv"})
            records = writer.records()
        prompts = []

        def fake_generate(prompt):
            prompts.append(prompt)
            return type("R", (), {"text": CHECKPOINT_REPLY})()

        text, _, problem = ck.write_checkpoint(path, records, 111, fake_generate, NOW, window=1)
        self.assertIsNone(problem)
        self.assertIn("<previous_checkpoint>\n(none yet)\n</previous_checkpoint>", prompts[0])
        self.assertIn("Audit the logs.", prompts[0])
        cp = ck.checkpoint_path(path)
        self.assertEqual(oct(os.stat(cp).st_mode & 0o777), oct(0o600))
        os.chmod(cp, 0o640)
        edited = text.replace("Audit the logs.", "Audit the logs, then the configs (user edit).")
        edited += "remember: never touch prod\n"
        with open(cp, "w", encoding="utf-8") as handle:
            handle.write(edited)
        text2, _, _ = ck.write_checkpoint(path, records, 222, fake_generate, NOW, window=1)
        self.assertIn("then the configs (user edit)", prompts[1])  # the model sees every edit
        self.assertIn("<new_conversation_part>\n\n</new_conversation_part>", prompts[1])  # covered
        self.assertTrue(text2.endswith("remember: never touch prod\n"))
        self.assertEqual(oct(os.stat(cp).st_mode & 0o777), oct(0o640))  # mode kept


class RebuildRecordsTest(HermeticTestCase):
    def rebuild(self, records=None, checkpoint="# checkpoint\n\n## Goal\nAudit.\n"):
        return rb.rebuild_records(records or sample_window(), checkpoint, ARCHIVE, 2, SETTINGS, SIDE_DIR)

    def test_golden_rebuild_output(self):
        new_records, side_files = self.rebuild()
        data = rb.encode_window(new_records, NOW).decode("utf-8")
        manifest = [{"path": path, "bytes": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}
                    for path, raw in side_files]
        golden_text = os.path.join(GOLDEN, "rebuild.txt")
        golden_side = os.path.join(GOLDEN, "side_files.json")
        if os.environ.get("NAGENT_REGEN_GOLDEN") == "1":
            os.makedirs(GOLDEN, exist_ok=True)
            with open(golden_text, "w", encoding="utf-8", newline="") as handle:
                handle.write(data)
            with open(golden_side, "w", encoding="utf-8") as handle:
                json.dump(manifest, handle, indent=1)
                handle.write("\n")
        with open(golden_text, encoding="utf-8", newline="") as handle:
            self.assertEqual(data, handle.read())
        with open(golden_side, encoding="utf-8") as handle:
            self.assertEqual(manifest, json.load(handle))
        self.assertEqual(self.rebuild(), (new_records, side_files))  # deterministic

    def test_keeps_every_user_prompt_verbatim_and_the_context(self):
        old = sample_window()
        new_records, _ = self.rebuild(old)
        user_prompts = [r.body for r in old if r.kind == "prompt" and r.attr("source") != "next"]
        carried = [body for kind, body, _ in new_records if kind == "prompt"]
        for prompt in user_prompts:
            self.assertEqual(carried.count(prompt), 1, prompt)
        self.assertEqual(new_records[:3], [(r.kind, r.body, dict(r.attrs)) for r in old[:3]])
        meta = json.loads(new_records[3][1])
        self.assertEqual(meta, {"window": 2, "previous_window": ARCHIVE})
        self.assertIn("## Goal\nAudit.", new_records[4][1])
        self.assertNotIn("error", [kind for kind, _, _ in new_records])
        self.assertNotIn("stats", [kind for kind, _, _ in new_records])

    def test_tail_is_raw_and_large_results_become_pointers(self):
        old = sample_window()
        new_records, side_files = self.rebuild(old)
        tail = [(kind, body, attrs) for kind, body, attrs in new_records
                if attrs and attrs.get("carried") == "tail"]
        self.assertEqual(tail[-1][2]["moved"], side_files[-1][0])
        by_seq = {r.seq: r for r in old}
        sent = [r for r in old if r.kind in rb.SENT_KINDS]
        self.assertEqual([body for _, body, a in tail if "moved" not in a],
                         [r.body for r in sent[-len(tail):] if len(r.body) <= SETTINGS.side_threshold])
        pointer = tail[-1][1]
        original = by_seq[21].body
        self.assertEqual(side_files[-1], (f"{SIDE_DIR}/t-20260102T030405Z-record-21.txt", original.encode()))
        self.assertRegex(pointer, rf"^<nagent-shell-result>\n\[result body moved to {re.escape(SIDE_DIR)}/"
                                  rf"t-20260102T030405Z-record-21.txt: {len(original.encode())} bytes; "
                                  r"exit_code: 0; .*\]\n</nagent-shell-result>$")
        read_pointer = rb.pointer_for(by_seq[13], "/s")
        self.assertTrue(read_pointer.startswith('<nagent-read-result path="log.txt">\n[result body moved'))
        self.assertNotIn("exit_code", read_pointer)  # only shell results have one
        self.assertIn("exit_code: 2", rb.pointer_for(by_seq[7], "/s"))

    def test_tail_always_holds_the_newest_turn_even_when_it_is_huge(self):
        records = sample_window()[:6] + [rec(7, "result", shell_result("y" * 50_000), action="shell")]
        start = rb.tail_start([r for r in records if r.kind in rb.SENT_KINDS], 100, 1024)
        new_records, side_files = self.rebuild(records)
        self.assertEqual(new_records[-2][1], "<nagent-shell>make</nagent-shell>")
        self.assertIn("result body moved", new_records[-1][1])
        self.assertEqual(len(side_files), 1)
        self.assertEqual(start, 1)  # the reply, not past the end

    def test_hand_typed_notes_before_the_tail_are_carried_like_prompts(self):
        old = sample_window()
        note = rec(0, "note", "My note typed by hand: the CI box is slow, use -j2.")
        marker = rec(90, "system", "<system>The run for the prompt above failed.</system>", run="failed")
        records = old[:4] + [note, marker] + old[4:]
        new_records, _ = self.rebuild(records)
        kinds = [(kind, body) for kind, body, _ in new_records]
        self.assertEqual(kinds.count(("note", note.body)), 1)
        at = kinds.index(("note", note.body))
        self.assertEqual(kinds[at - 1], ("prompt", "Fix the build.\n  Keep  this   spacing."))
        self.assertEqual(new_records[at + 1], ("system", marker.body, {"run": "failed", "carried": "true"}))
        self.assertEqual(new_records[at][2].get("carried"), "true")  # before the tail, not in it
        data = rb.encode_window(new_records, NOW)
        from nagent_conversation import parse_records
        back = parse_records(data)[0]
        self.assertIn(("note", note.body), [(r.kind, r.body) for r in back])

    def test_window_growth_and_current_window(self):
        new_records, _ = self.rebuild()
        path = os.path.join(self.tmp, "w")
        with open(path, "wb") as handle:
            handle.write(rb.encode_window(new_records, NOW))
        size = os.path.getsize(path)
        with ConversationWriter(path) as writer:
            self.assertEqual(rb.window_growth(writer.records(), size), 0)
            writer.append("prompt", "p" * 100, {"source": "argv"})
            grown = os.path.getsize(path)
            self.assertEqual(rb.window_growth(writer.records(), grown), grown - size)
            self.assertEqual(rb.current_window(writer.records()), 2)
        self.assertEqual(rb.current_window(sample_window()), 1)
        self.assertEqual(rb.window_growth(sample_window(), 5000), 5000)


class Script:
    """The fake model: checkpoint calls get a checkpoint; loop calls take the next action."""

    def __init__(self, actions, path):
        self.actions, self.path = list(actions), path
        self.checkpoint_sizes, self.loop_sizes, self.checkpoint_prompts = [], [], []

    def __call__(self, record):
        if b"<previous_checkpoint>" in record["body"] and b"<initial_context>" not in record["body"]:
            self.checkpoint_sizes.append(os.path.getsize(self.path))
            self.checkpoint_prompts.append(record["body"].decode("utf-8"))
            return CHECKPOINT_REPLY
        self.loop_sizes.append(os.path.getsize(self.path))
        return self.actions.pop(0) if self.actions else "<nagent-response>done</nagent-response>"


class CheckpointScript(Script):
    """Checkpoint calls take the next of `checkpoints` (the last one repeats)."""

    def __init__(self, actions, path, checkpoints):
        super().__init__(actions, path)
        self.checkpoints = list(checkpoints)

    def __call__(self, record):
        reply = super().__call__(record)
        if reply is CHECKPOINT_REPLY:
            return self.checkpoints.pop(0) if len(self.checkpoints) > 1 else self.checkpoints[0]
        return reply


GARBAGE = "<start_of_turn>model\nThe the the conversation conversation is is about about\n" * 5


class WindowLoopTest(InProcessCase):
    def script(self, actions, name="t"):
        script = Script(actions, self.path(name))
        self.fake.reply_fn(script)
        return script

    def make_logs(self, count, size):
        for index in range(count):
            lines = "".join(f"{index}:{n} event ok\n" for n in range(size // 12))
            self.write_file(f"logs/{index}.txt", lines)

    def test_checkpoint_cadence_follows_the_file_on_disk_and_user_edits_survive(self):
        self.configure(checkpoint_every_bytes=6000, window_max_bytes=0)
        self.make_logs(8, 2500)
        script = self.script([f"<nagent-shell>cat logs/{i}.txt</nagent-shell>" for i in range(6)]
                             + ["<nagent-response>one</nagent-response>"])
        self.assertEqual(self.run_prompt("Audit the logs.").exit_code, 0)
        cp = ck.checkpoint_path(self.path())
        text, meta = ck.read_checkpoint(self.path())
        self.assertGreaterEqual(len(script.checkpoint_sizes), 2)
        self.assertEqual(meta["covers_bytes"], script.checkpoint_sizes[-1])
        for before, after in zip(script.checkpoint_sizes, script.checkpoint_sizes[1:]):
            self.assertGreaterEqual(after - before, 6000)
        covers = 0
        for size in script.loop_sizes:  # no loop call went out with a checkpoint overdue
            covers = max([c for c in script.checkpoint_sizes if c <= size] or [0])
            self.assertLess(size - covers, 6000 + 400)  # + the checkpoint call's stats record
        # The cadence reads the header on disk: covering the whole file postpones the next one.
        size = os.path.getsize(self.path())
        edited = re.sub(r'covers_bytes="\d+"', f'covers_bytes="{size}"', text, count=1)
        edited = edited.replace("Audit the logs.", "Audit the logs (user-edited goal).")
        with open(cp, "w", encoding="utf-8") as handle:
            handle.write(edited + "my own note, kept verbatim\n")
        count = len(script.checkpoint_sizes)
        script.actions = ["<nagent-response>two</nagent-response>"]
        self.run_prompt("Short question.")
        self.assertEqual(len(script.checkpoint_sizes), count)
        # Pretending it covers nothing makes the next turn refresh it, keeping the edits.
        with open(cp, encoding="utf-8") as handle:
            current = handle.read()
        with open(cp, "w", encoding="utf-8") as handle:
            handle.write(re.sub(r'covers_bytes="\d+"', 'covers_bytes="0"', current, count=1))
        script.actions = ["<nagent-response>three</nagent-response>"]
        self.run_prompt("Another question.")
        self.assertEqual(len(script.checkpoint_sizes), count + 1)
        self.assertIn("(user-edited goal)", script.checkpoint_prompts[-1])
        refreshed, meta = ck.read_checkpoint(self.path())
        self.assertTrue(refreshed.endswith("my own note, kept verbatim\n"))
        self.assertEqual(meta["covers_bytes"], script.checkpoint_sizes[-1])

    def test_long_session_rebuilds_bounded_windows_and_loses_nothing(self):
        limit = 24_000
        self.configure(window_max_bytes=limit, window_tail_bytes=5000, side_threshold_bytes=1500,
                       checkpoint_every_bytes=10_000)
        self.make_logs(14, 4000)
        prompts = ["First: audit logs 0-4.", "Second: audit logs 5-9.\nwith two lines", "Third: the rest."]
        actions = []
        for batch in range(3):
            actions += [f"<nagent-shell>cat logs/{batch * 5 + i}.txt</nagent-shell>" for i in range(4)]
            actions.append(f'<nagent-read path="logs/{batch * 5 + 4}.txt"/>')
            actions.append(f"<nagent-response>batch {batch} done</nagent-response>")
        self.script(actions)
        for prompt in prompts:
            outcome = self.run_prompt(prompt)
            self.assertEqual(outcome.exit_code, 0, outcome.error)
        path = self.path()
        stats = decode_stats([r for r in read_records(path) if r.kind == "stats"][-1].body)
        stats["windows"] = window_chain(stats)
        chain = stats["windows"] + [path]
        self.assertGreaterEqual(len(chain), 3, "expected at least two rebuilds")
        for number, window_path in enumerate(chain, start=1):
            records = read_records(window_path)
            self.assertEqual(rb.current_window(records), number)
            # Checked before each call: a window ends at most one turn (a ~4.6 KB result, the
            # reply, stats records of that call and of a checkpoint call) past the limit.
            self.assertLess(os.path.getsize(window_path), limit + 9000)
            if number > 1:
                meta = [json.loads(r.body) for r in records if r.kind == "meta" and "window" in r.body]
                self.assertEqual(meta, [{"window": number, "previous_window": chain[number - 2]}])
                self.assert_lossless(read_records(chain[number - 2]), records)
        final = read_records(path)
        for prompt in prompts:
            self.assertEqual([r.body for r in final if r.kind == "prompt"].count(prompt), 1, prompt)
        self.assertEqual(outcome.conversation_stats.model_calls, len(self.generation_requests("anthropic")))

        status = self.run_tool("nagent", "--status", "--conversation", "t")
        for number, archived in enumerate(stats["windows"], start=1):
            self.assertIn(f"previous window {number}: {archived}", status.stdout)
        self.assertIn(f"window: {len(chain)}", status.stdout)
        listing = json.loads(self.run_tool("nagent", "--list-conversations", "--json").stdout)
        marked = {item["path"]: item for item in listing["conversations"] if item.get("window_of")}
        self.assertEqual(sorted(marked), sorted(stats["windows"]))
        self.assertEqual([marked[p]["window"] for p in stats["windows"]], list(range(1, len(chain))))
        text = self.run_tool("nagent", "--list-conversations").stdout
        self.assertIn("window 1 of t", text)

    def assert_lossless(self, old, new):
        """Carried records are byte-identical to the old window's, or point to a side file that is."""
        sent = [r for r in old if r.kind in rb.SENT_KINDS]
        tail = [r for r in new if r.attr("carried") == "tail"]
        self.assertTrue(tail)
        for source, carried in zip(sent[-len(tail):], tail):
            self.assertEqual(source.kind, carried.kind)
            if carried.body != source.body:  # moved by this rebuild (a pointer is carried as is)
                with open(carried.attr("moved"), "rb") as handle:
                    self.assertEqual(handle.read(), source.body.encode("utf-8"))
                self.assertIn(f"{len(source.body.encode())} bytes", carried.body)
        contexts = [r.body for r in old if r.kind == "context"]
        self.assertEqual([r.body for r in new if r.kind == "context"], contexts)

    def test_rebuild_archives_every_byte_first_and_keeps_the_mode(self):
        self.make_logs(1, 3000)
        script = self.script(["<nagent-shell>cat logs/0.txt</nagent-shell>",
                              "<nagent-response>done</nagent-response>"])
        self.configure(side_threshold_bytes=1000, window_tail_bytes=100)
        self.assertEqual(self.run_prompt("Read the log.").exit_code, 0)
        path = self.path()
        os.chmod(path, 0o600)
        before = self.read(path)
        import nagent_run
        with self.patched_environ(), ConversationWriter(path) as writer:
            run = nagent_run.Run(self.session(), writer)
            info = win.rebuild_window(run, NOW, reason="requested")
        archived = self.read(info["archived"])
        self.assertTrue(archived.startswith(before))  # + the checkpoint call's stats record
        self.assertEqual(read_records(info["archived"])[-1].kind, "stats")
        self.assertEqual(len(script.checkpoint_sizes), 1)
        self.assertEqual(oct(os.stat(path).st_mode & 0o777), oct(0o600))
        self.assertEqual(info["window"], 2)
        new = read_records(path)
        self.assert_lossless(read_records(info["archived"]), new)
        self.assertEqual(new[-1].kind, "stats")
        stats = decode_stats(new[-1].body)
        self.assertEqual((stats["window"], stats["previous"]), (2, info["archived"]))
        self.assertEqual(window_chain(stats), [info["archived"]])
        _, meta = ck.read_checkpoint(path)
        self.assertEqual((meta["window"], meta["covers_bytes"]), (2, os.path.getsize(path)))
        for side in info["side_files"]:
            self.assertTrue(side.startswith(path + ".d" + os.sep))

    def test_a_garbage_checkpoint_is_rejected_the_previous_kept_and_the_failure_noted(self):
        self.configure(checkpoint_every_bytes=5000, window_max_bytes=0)
        self.make_logs(6, 2500)
        script = CheckpointScript([f"<nagent-shell>cat logs/{i}.txt</nagent-shell>" for i in range(6)]
                                  + ["<nagent-response>one</nagent-response>"], self.path(),
                                  [CHECKPOINT_REPLY, GARBAGE, "## Goal\nonly a goal\n"])
        self.fake.reply_fn(script)
        self.assertEqual(self.run_prompt("Audit the logs.").exit_code, 0)
        self.assertGreaterEqual(len(script.checkpoint_sizes), 2)
        text, meta = ck.read_checkpoint(self.path())
        self.assertIn("## Goal\nAudit the logs.", text)  # the first (good) checkpoint
        self.assertNotIn("the the", text.lower())
        self.assertNotIn("only a goal", text)
        self.assertEqual(meta["covers_bytes"], script.checkpoint_sizes[0])
        notes = [r for r in read_records(self.path()) if r.kind == "error" and "checkpoint" in r.body]
        self.assertEqual(len(notes), len(script.checkpoint_sizes) - 1)
        self.assertIn("missing section(s) Goal, Decisions", notes[0].body)
        self.assertIn("missing section(s) Decisions", notes[-1].body)
        # A rejected attempt waits another checkpoint_every_bytes, like a written one.
        for before, after in zip(script.checkpoint_sizes, script.checkpoint_sizes[1:]):
            self.assertGreaterEqual(after - before, 5000)

    def test_a_rebuild_whose_checkpoint_is_garbage_carries_the_previous_good_one(self):
        self.configure(side_threshold_bytes=1000, window_tail_bytes=100, checkpoint_every_bytes=2000,
                       window_max_bytes=0)
        self.make_logs(1, 3000)
        script = CheckpointScript(["<nagent-shell>cat logs/0.txt</nagent-shell>",
                                   "<nagent-response>done</nagent-response>"], self.path(),
                                  [CHECKPOINT_REPLY])
        self.fake.reply_fn(script)
        self.assertEqual(self.run_prompt("Read the log.").exit_code, 0)
        import nagent_run
        self.assertTrue(script.checkpoint_sizes)  # good ones, during the run
        script.checkpoints = [GARBAGE]
        for expected in ("## Goal\nAudit the logs.", "No checkpoint is available"):
            if expected.startswith("No"):  # no usable checkpoint at all: a pointer to the archive
                with open(ck.checkpoint_path(self.path()), "w", encoding="utf-8") as handle:
                    handle.write("scribbles, not a checkpoint\n")
            with self.patched_environ(), ConversationWriter(self.path()) as writer:
                info = win.rebuild_window(nagent_run.Run(self.session(), writer), NOW)
            carried = [r.body for r in read_records(self.path()) if r.attr("carried") == "checkpoint"]
            self.assertEqual(len(carried), 1)
            self.assertIn(expected, carried[0])
            self.assertNotIn("the the", carried[0].lower())
            archived = [r for r in read_records(info["archived"]) if r.kind == "error"]
            self.assertTrue(any("checkpoint rejected" in r.body for r in archived), archived)

    def test_carried_prompts_over_the_limit_do_not_rebuild_every_turn(self):
        self.configure(window_max_bytes=20_000, checkpoint_every_bytes=0)
        script = self.script(["<nagent-shell>echo a</nagent-shell>", "<nagent-shell>echo b</nagent-shell>",
                              "<nagent-shell>echo c</nagent-shell>", "<nagent-response>ok</nagent-response>"])
        prompt = "Here is a big spec:\n" + "requirement line\n" * 1500  # ~25 KB, over the limit
        self.assertEqual(self.run_prompt(prompt).exit_code, 0)
        self.assertEqual(len(script.checkpoint_sizes), 1)  # one rebuild, not one per turn
        final = read_records(self.path())
        self.assertEqual([r.body for r in final if r.kind == "prompt"], [prompt])

    def test_a_checkpoint_left_by_a_cleared_conversation_is_archived_not_reused(self):
        self.configure(checkpoint_every_bytes=1000, window_max_bytes=0)
        cp = ck.checkpoint_path(self.path())
        os.makedirs(os.path.dirname(cp), exist_ok=True)
        stale = ck.compose_checkpoint("## Goal\nOld unrelated goal.\n", "", 10**7, 1, NOW)
        with open(cp, "w", encoding="utf-8") as handle:
            handle.write(stale)
        script = self.script(["<nagent-response>hi</nagent-response>"])
        self.assertEqual(self.run_prompt("A new task.").exit_code, 0)
        self.assertNotIn("Old unrelated goal", script.checkpoint_prompts[0])
        archive = os.path.join(os.path.dirname(cp), "archive")
        kept = [name for name in os.listdir(archive) if name.startswith(os.path.basename(cp) + "-")]
        self.assertEqual(len(kept), 1)
        self.assertEqual(self.read(os.path.join(archive, kept[0])).decode(), stale)

    @staticmethod
    def read(path):
        with open(path, "rb") as handle:
            return handle.read()


class CompactCommandTest(InProcessCase):
    PROVIDER = "google"  # the cheapest SDK to import in the subprocess

    def test_compact_flag_starts_a_new_window(self):
        script = Script(["<nagent-shell>echo hello</nagent-shell>",
                         "<nagent-response>done</nagent-response>"], self.path())
        self.fake.reply_fn(script)
        self.assertEqual(self.run_prompt("Say hello.").exit_code, 0)
        before = read_records(self.path())
        proc = self.run_tool("nagent", "--compact", "--json", "--conversation", "t")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        data = json.loads(proc.stdout)
        self.assertEqual((data["window"], data["reason"]), (2, "requested"))
        self.assertEqual([r.body for r in read_records(data["archived"])][:len(before)],
                         [r.body for r in before])
        after = read_records(self.path())
        self.assertEqual([r.body for r in after if r.kind == "prompt"], ["Say hello."])
        self.assertEqual(rb.current_window(after), 2)
        self.assertEqual(len(script.checkpoint_sizes), 1)
        self.assertEqual(data["totals"]["model_calls"], 3)  # two loop calls + the checkpoint call
        missing = self.run_tool("nagent", "--compact", "--conversation", "nothing-here")
        self.assertCleanError(missing, contains="no conversation to compact")


class ModuleLayoutTest(HermeticTestCase):
    """The window code is split by concern and imports point one way: the loop uses the window
    keeper, never the reverse (issue 10: the loop<->window cycle)."""
    MODULES = ("nagent_loop", "nagent_run", "nagent_run_records", "nagent_window",
               "nagent_window_rebuild", "nagent_checkpoint", "nagent_compact", "nagent_requests",
               "nagent_protocol", "nagent_protocol_blocks", "nagent_protocol_text",
               "nagent_protocol_grammar", "nagent_file_summarize_lib")

    @staticmethod
    def imports(name):
        import ast
        from base import HELPERS
        with open(os.path.join(HELPERS, name + ".py"), encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        found = set()
        for node in ast.walk(tree):  # function-local imports count too
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                found.add(node.module)
        return {module for module in found if module.startswith("nagent_")}

    def test_no_import_cycle_through_the_loop_or_window_modules(self):
        from base import HELPERS
        known = {name[:-3] for name in os.listdir(HELPERS) if name.endswith(".py")}
        graph = {name: self.imports(name) & known for name in known}
        for start in self.MODULES:
            seen, stack = set(), [start]
            while stack:
                for nxt in graph[stack.pop()]:
                    self.assertNotEqual(nxt, start, f"{start} imports itself back through {stack}")
                    if nxt not in seen:
                        seen.add(nxt)
                        stack.append(nxt)

    def test_each_module_stays_small(self):
        from base import HELPERS
        for name in self.MODULES:
            with open(os.path.join(HELPERS, name + ".py"), encoding="utf-8") as handle:
                self.assertLess(len(handle.read().splitlines()), 500, name)
