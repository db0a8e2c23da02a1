"""Crash tests: SIGKILL bin/nagent at random moments of scripted runs (issue 6).

Four workers, each with its own HOME, temp dir and fake vendor, run invocations side by side;
a seeded random.Random picks each invocation's script and kill moment: 0-1.5 s after the start
(start-up, context records, prompt, SDK import) or 0-0.3 s after the fake received the k-th
model call (model-call windows, shell actions, writes, a split, a patch, index updates):
  main:      shell (sleep) + write to $TMPDIR -> file-read of a >64 KiB file (split) ->
             segment write + file-patch -> response
  file-edit: --file-edit on one of three project files (file index update) -> write the
             target -> response
After every kill: the conversation parses (a torn tail is reported apart), record seqs run
1..n, the bytes before the run are an unchanged prefix, every accepted prompt is there (a
prompt record exists; it must when the fake saw a model call), index.json and the file index
parse as JSON, and every target holds its old or its new content exactly. Then the next
invocation must continue the conversation and succeed. Set NAGENT_FAULTS_REPORT=1 to print
the kill figures.

A fresh bin/nagent spends about a second importing the SDK before its first model call, so 50+
fresh kills and their follow-ups would cost minutes of CPU: most invocations are children of
the suite's zygote (tests/zygote.py), separate processes running the bin/nagent file with the SDK
already imported. FRESH_SHARE of the killed invocations, and each worker's last run, start a
fresh `python3 bin/nagent`.
"""
import collections
import json
import os
import random
import subprocess
import sys
import threading
import time
import types

from base import HermeticTestCase, clean_environ
from fakes import FakeVendor, ReplySpec
from test_concurrency import NAGENT
import zygote as zygotes
from test_file_edit import last_block, request_text

import nagent_conversation
import nagent_conversation_lifecycle as lifecycle
import nagent_file_edit_lib
import nagent_file_split_lib as split_lib
import nagent_split_registry

SEED = 20261122
WORKERS = 4
MIN_KILLS = 50
MAX_INVOCATIONS = 110          # a bound, not a target: about 60 are needed for 50 kills
TIME_KILL_MAX = 1.5            # a fresh process: start-up + ~1 s of SDK import + the script
FORKED_TIME_KILL_MAX = 0.6     # a zygote child has the SDK already: the script alone
AFTER_CALL_KILL_MAX = 0.3
FRESH_SHARE = 0.12
CONFIG = {"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}, "lock_timeout": 10,
          # no checkpoint or window rebuild: their extra model calls would eat scripted replies
          "checkpoint_every_bytes": 10 ** 12, "window_max_bytes": 10 ** 12}


def read_or_none(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


class Worker:
    """One HOME + fake vendor: an invocation, its checks, then a follow-up and its checks."""

    def __init__(self, case, number, root, zygote):
        self.case, self.root, self.zygote = case, root, zygote
        self.home, self.cwd, self.tmpdir = (os.path.join(root, name) for name in ("home", "work", "tmp"))
        for path in (self.home, self.cwd, self.tmpdir):
            os.makedirs(path)
        self.fake = FakeVendor().start()
        self.script, self.script_lock = collections.deque(), threading.Lock()
        self.fake.reply_fn(self._next_reply)
        self.env = clean_environ()
        self.env.update(self.fake.env())
        self.env.update(HOME=self.home, TMPDIR=self.tmpdir, NAGENT_NO_SPINNER="1",
                        NAGENT_CONFIG=os.path.join(root, "config.json"))
        with open(self.env["NAGENT_CONFIG"], "w", encoding="utf-8") as handle:
            json.dump(CONFIG, handle)
        self.pid = f"w{number}"
        self.main_path = lifecycle.default_conversation_path(self.env)
        self.index_path = nagent_file_edit_lib.file_index_path(self.pid, self.env)
        self.targets = [os.path.join(self.cwd, f"fe-{j}.py") for j in range(3)]
        for path in self.targets:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(f"# {os.path.basename(path)} version 0\n")
        self.accepted = collections.defaultdict(list)   # conversation -> accepted prompts
        self.proc = self.plan = self.phase = None

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.fake.stop()

    def _next_reply(self, record):
        with self.script_lock:
            item = self.script.popleft() if self.script else "<nagent-response>unscripted</nagent-response>"
        return item(record) if callable(item) else item

    def set_script(self, items):
        with self.script_lock:
            self.script.clear()
            self.script.extend(items)

    def model_calls(self):
        return sum(1 for r in list(self.fake.requests) if r["path"] == "/v1/responses")

    def start(self, args, script, fresh=False):
        self.set_script(script)
        out, err = (os.path.join(self.root, name) for name in ("stdout.txt", "stderr.txt"))
        if fresh:
            with open(out, "wb") as stdout, open(err, "wb") as stderr:
                self.proc = subprocess.Popen([sys.executable, NAGENT, *args], stdin=subprocess.DEVNULL,
                                             stdout=stdout, stderr=stderr, env=self.env, cwd=self.cwd)
        else:
            self.proc = self.zygote.spawn(NAGENT, args, self.env, self.cwd, out, err)

    def output(self):
        return tuple(read_or_none(os.path.join(self.root, name)).decode("utf-8", "replace")
                     for name in ("stdout.txt", "stderr.txt"))

    # -- the invocation that gets killed ---------------------------------------------
    def launch(self, rng, n):
        plan = self._main_plan(rng, n) if rng.random() < 0.6 else self._file_edit_plan(rng, n)
        plan.n, plan.prompt = n, f"task {self.pid}-{n}: run the scripted steps"
        plan.calls_before, plan.conv_before = self.model_calls(), self.conversation_of(plan)
        plan.bytes_before = (read_or_none(plan.conv_before) or b"") if plan.conv_before else b""
        plan.fresh = rng.random() < FRESH_SHARE
        plan.kill_mode = "time" if plan.fresh or rng.random() < 0.3 else "after-call"
        plan.kill_call = rng.randint(1, len(plan.script))
        plan.kill_at = rng.uniform(0, AFTER_CALL_KILL_MAX if plan.kill_mode == "after-call" else
                                   TIME_KILL_MAX if plan.fresh else FORKED_TIME_KILL_MAX)
        plan.started, plan.call_seen_at = time.monotonic(), None
        self.plan, self.phase = plan, "run"
        self.start([*plan.args, plan.prompt], plan.script, plan.fresh)

    def _main_plan(self, rng, n):
        big = os.path.join(self.tmpdir, f"big-{n}.txt")
        old = "".join(f"{n}:{i:05d} the quick brown fox jumps over the lazy dog\n" for i in range(1700))
        scratch = os.path.join(self.root, f"scratch-{n}")
        os.makedirs(scratch)
        for path in (big, os.path.join(scratch, os.path.basename(big))):
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(old)
        old = old.encode()
        # The same bytes split the same way: the split the run will make, known in advance.
        first = split_lib.split_file(os.path.join(scratch, os.path.basename(big)),
                                     os.path.join(scratch, "split"))["segments"][0]
        new_segment = f"segment rewritten by run {n}\n"
        written = os.path.join(self.tmpdir, f"w-{n}.txt")
        payload = "".join(f"payload {n} line {i}\n" for i in range(300))
        delays = [rng.uniform(0.02, 0.15) for _ in range(4)]

        def edit_the_split(record):
            # The split lives in a private directory nagent names: the model reads it off the result.
            _head, body = last_block(request_text(record), "nagent-file-read-result")
            index = body.split("index: ", 1)[1].split("\n", 1)[0]
            segment = body.split("\n- ", 1)[1].split(": lines", 1)[0]
            return ReplySpec(f'<nagent-write path="{segment}">{new_segment}</nagent-write>\n'
                             f'<nagent-file-patch index="{index}"/>', delay=delays[2])

        script = [ReplySpec(f"<nagent-shell>sleep 0.05; echo shell-{n}</nagent-shell>\n"
                            f'<nagent-write path="{written}">{payload}</nagent-write>', delay=delays[0]),
                  ReplySpec(f'<nagent-file-read path="{big}"/>', delay=delays[1]), edit_the_split,
                  ReplySpec(f"<nagent-response>done {n}</nagent-response>", delay=delays[3])]
        return types.SimpleNamespace(
            kind="main", args=[], response=f"done {n}\n", script=script, big=big,
            first_segment=(old[:first["end_byte"]], new_segment.encode()),
            files={big: (old, new_segment.encode() + old[first["end_byte"]:]),
                   written: (None, payload.encode())},
            json_files=[self.index_path])

    def split_files(self, plan):
        """The split nagent made in the run, from its own registry: ({segment: (old, new)}, [index])."""
        if plan.kind != "main":
            return {}, []
        registry = nagent_split_registry.load(lifecycle.side_dir(self.main_path))
        splits = nagent_split_registry.splits_of(registry, os.path.realpath(plan.big))
        if not splits:
            return {}, []
        entry = splits[-1]
        segment = os.path.join(entry["directory"], entry["segments"][0]["file"])
        return {segment: plan.first_segment}, [entry["index"]]

    def _file_edit_plan(self, rng, n):
        target = rng.choice(self.targets)
        with open(target, "rb") as handle:
            old = handle.read()
        new = f"# {os.path.basename(target)} version {n}\n" * 3
        texts = [f'<nagent-write path="{target}">{new}</nagent-write>',
                 f"<nagent-response>edited {n}</nagent-response>"]
        return types.SimpleNamespace(
            kind="file-edit", args=["--file-edit", target, "--pid", self.pid], target=target,
            response=f"edited {n}\n",
            script=[ReplySpec(text, delay=rng.uniform(0.02, 0.15)) for text in texts],
            files={target: (old, new.encode())}, json_files=[self.index_path])

    def conversation_of(self, plan):
        if plan.kind == "main":
            return self.main_path
        data = read_or_none(self.index_path)
        for record in (json.loads(data)["by_file_id"].values() if data else ()):
            if record["path"] == os.path.realpath(plan.target):
                return lifecycle.conversation_path(record["conversation"], self.env)
        return None

    def kill_due(self, now):
        plan = self.plan
        if plan.kill_mode == "after-call" and plan.call_seen_at is None:
            if self.model_calls() - plan.calls_before >= plan.kill_call:
                plan.call_seen_at = now
            return False
        return now - (plan.started if plan.kill_mode == "time" else plan.call_seen_at) >= plan.kill_at

    def step(self, now, figures):
        """Advance this worker; True when it is idle again."""
        if self.proc.poll() is None:
            if self.phase == "run" and self.kill_due(now):
                self.proc.kill()
                self.proc.wait()
            else:
                return False
        if self.phase == "run":
            self.check_killed(figures)
            self.phase = "follow"
            self.follow_before = read_or_none(self.conversation_of(self.plan) or os.devnull)
            self.start([*self.plan.args, f"follow-up {self.pid}-{self.plan.n}"],
                       [ReplySpec(f"<nagent-response>continued {self.plan.n}</nagent-response>")])
            return False
        self.check_follow_up()
        self.proc = self.phase = None
        return True

    # -- checks ----------------------------------------------------------------------
    def check_killed(self, figures):
        case, plan = self.case, self.plan
        out, err = self.output()
        where = f"{self.pid} {plan.prompt!r} ({plan.kind}, {plan.kill_mode})"
        case.assertNotIn("Traceback", err, where)
        killed = self.proc.returncode == -9
        if not killed:
            case.assertEqual((self.proc.returncode, out), (0, plan.response), f"{where}: {err}")
        split_files, split_json = self.split_files(plan)
        for path in plan.json_files + split_json:
            if read_or_none(path) is not None:
                json.loads(read_or_none(path))  # raises on a half-written file
                if path.endswith("index.json"):
                    split_lib.load_index(path)
        for path, (old, *new) in {**plan.files, **split_files}.items():
            case.assertIn(read_or_none(path), [old, *new], f"{where}: {path} is neither old nor new")
            if not killed:
                case.assertEqual(read_or_none(path), new[-1], f"{where}: {path}")
        calls = self.model_calls() - plan.calls_before
        figures[(plan.kind, "fresh" if plan.fresh else "forked", "killed" if killed else "completed",
                 f"after {calls} model calls")] += 1
        figures["kills"] += killed
        conv = self.conversation_of(plan)
        if conv is None:
            case.assertEqual(calls, 0, f"{where}: a model call without a conversation")
            return
        if plan.conv_before is not None:
            case.assertEqual(conv, plan.conv_before, where)
        data = read_or_none(conv) or b""
        case.assertTrue(data.startswith(plan.bytes_before), f"{where}: earlier bytes changed")
        records, torn = nagent_conversation.parse_records(data, source=conv)
        if torn:
            figures["torn tails"] += 1
            case.assertTrue(torn.startswith(nagent_conversation.HEADER_MARK[:len(torn)]), torn[:80])
        self.assertWhole(records, conv, where)
        prompts = [r.body for r in records if r.kind == "prompt"]
        if calls:
            case.assertIn(plan.prompt, prompts, f"{where}: the model was called, the prompt is missing")
        if plan.prompt in prompts:
            self.accepted[conv].append(plan.prompt)

    def assertWhole(self, records, conv, where):
        self.case.assertEqual([r.seq for r in records], list(range(1, len(records) + 1)), where)
        prompts = [r.body for r in records if r.kind == "prompt"]
        for earlier in self.accepted[conv]:
            self.case.assertIn(earlier, prompts, f"{where}: an accepted prompt was lost")

    def check_follow_up(self):
        case, plan = self.case, self.plan
        out, err = self.output()
        where = f"{self.pid} follow-up {plan.n}"
        case.assertEqual((self.proc.returncode, out), (0, f"continued {plan.n}\n"), f"{where}: {err}")
        case.assertNotIn("Traceback", err, where)
        conv = self.conversation_of(plan)
        data = read_or_none(conv)
        records, torn = nagent_conversation.parse_records(data)
        case.assertEqual(torn, b"", where)
        before = self.follow_before or b""
        # A torn tail was cut away (kept in NAME.d/torn-*); every complete record stays.
        kept = len(before) - len(nagent_conversation.parse_records(before)[1])
        case.assertTrue(data.startswith(before[:kept]), where)
        self.assertWhole(records, conv, where)
        prompt = f"follow-up {self.pid}-{plan.n}"
        case.assertEqual([r.body for r in records if r.kind == "prompt"][-1], prompt, where)
        self.accepted[conv].append(prompt)


class CrashTest(HermeticTestCase):
    def test_sigkill_at_random_moments_loses_nothing(self):
        rng = random.Random(SEED)
        zygote = zygotes.shared()
        workers = [Worker(self, number, os.path.join(self.tmp, f"w{number}"), zygote)
                   for number in range(WORKERS)]
        for worker in workers:
            self.addCleanup(worker.stop)
        started, launched, figures = time.monotonic(), 0, collections.Counter()
        while True:
            running = [w for w in workers if w.proc is not None]
            in_flight = sum(1 for w in running if w.phase == "run")
            for worker in workers:
                if worker.proc is None and figures["kills"] + in_flight < MIN_KILLS + 2 \
                        and launched < MAX_INVOCATIONS:
                    launched += 1
                    in_flight += 1
                    worker.launch(rng, launched)
            if not any(w.proc is not None for w in workers):
                break
            now = time.monotonic()
            for worker in workers:
                if worker.proc is not None:
                    worker.step(now, figures)
            time.sleep(0.005)
        self.assertGreaterEqual(figures["kills"], MIN_KILLS, f"{launched} invocations: {figures}")
        # Each worker's fresh bin/nagent continues its main conversation after all that.
        for worker in workers:
            worker.start(["final prompt"], [ReplySpec("<nagent-response>final ok</nagent-response>")],
                         fresh=True)
        for worker in workers:
            worker.proc.wait(timeout=120)
            out, err = worker.output()
            self.assertEqual((worker.proc.returncode, out), (0, "final ok\n"), err)
            self.assertNotIn("Traceback", err)
            records = nagent_conversation.read_records(worker.main_path)
            worker.accepted[worker.main_path].append("final prompt")
            worker.assertWhole(records, worker.main_path, f"{worker.pid} final")
            self.assertEqual([r.body for r in records if r.kind == "prompt"][-1], "final prompt")
        if os.environ.get("NAGENT_FAULTS_REPORT"):
            sys.stderr.write(f"\n{launched} invocations in {time.monotonic() - started:.1f} s\n")
            for key, count in sorted(figures.items(), key=str):
                sys.stderr.write(f"  {key if isinstance(key, str) else ' / '.join(key)}: {count}\n")
