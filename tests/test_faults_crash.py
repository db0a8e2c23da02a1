"""Crash tests: SIGKILL bin/nagent at random moments of scripted runs (issue 6).

Four workers, each with its own HOME, temp dir and fake vendor, run invocations side by side
and kill each one after a seeded random delay: either 0-1.5 s after the start (start-up,
context records, prompt, SDK import) or 0-0.3 s after the fake received the k-th model call
of the script (model-call windows, shell actions, writes, the split of a >64 KiB file, a
segment write + file-patch, per-file edit sessions updating the file index). Scripts:
  main:      shell (sleep) + write to $TMPDIR -> file-read big file (split) -> segment write +
             file-patch -> response
  file-edit: --file-edit on one of three project files (file index update) -> write target
             -> response
After every kill: the conversation parses (torn-tail recovery included), record seqs run
1..n without gaps, the bytes before the run are an unchanged prefix, every accepted prompt is
there (a prompt record exists, and it must if the fake saw a model call), index.json and the
file index parse as JSON, and every target holds its old or its new content exactly. Then an
in-process invocation (the same code bin/nagent runs) continues the conversation and must
succeed; at the end each worker runs the real bin/nagent once more.
Set NAGENT_FAULTS_REPORT=1 to print the kill figures.
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
from contextlib import contextmanager

from base import BIN, HermeticTestCase, clean_environ
from fakes import FakeVendor, ReplySpec

import nagent_actions
import nagent_conversation
import nagent_conversation_lifecycle as lifecycle
import nagent_file_edit_lib
import nagent_file_split_lib as split_lib

SEED = 20261122
WORKERS = 4
MIN_KILLS = 50
MAX_INVOCATIONS = 110          # a bound, not a target: about 60 are needed for 50 kills
TIME_KILL_MAX = 1.5
AFTER_CALL_KILL_MAX = 0.3
CONFIG = {"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0},
          # no checkpoint or window rebuild: their extra model calls would eat scripted replies
          "checkpoint_every_bytes": 10 ** 12, "window_max_bytes": 10 ** 12, "lock_timeout": 10}
GENERATION = "/v1/responses"


@contextmanager
def environ_as(env):
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def read_or_none(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


class Worker:
    """One HOME + fake vendor; runs one invocation at a time and checks what a kill left."""

    def __init__(self, case, number, root):
        self.case, self.number, self.root = case, number, root
        self.home, self.cwd, self.tmpdir = (os.path.join(root, name) for name in ("home", "work", "tmp"))
        for path in (self.home, self.cwd, self.tmpdir):
            os.makedirs(path)
        self.fake = FakeVendor().start()
        self.script = collections.deque()
        self.script_lock = threading.Lock()
        self.fake.reply_fn(self._next_reply)
        self.env = clean_environ()
        self.env.update(self.fake.env())
        self.env.update(HOME=self.home, TMPDIR=self.tmpdir, NAGENT_NO_SPINNER="1",
                        PYTHONDONTWRITEBYTECODE="1", NAGENT_CONFIG=os.path.join(root, "config.json"))
        with open(self.env["NAGENT_CONFIG"], "w", encoding="utf-8") as handle:
            json.dump(CONFIG, handle)
        self.pid = f"w{number}"
        self.main_path = lifecycle.default_conversation_path(self.env)
        self.index_path = nagent_file_edit_lib.file_index_path(self.pid, self.env)
        self.targets = []
        for j in range(3):
            path = os.path.join(self.cwd, f"fe-{j}.py")
            with open(path, "wb") as handle:
                handle.write(f"# fe-{j} version 0\n".encode())
            self.targets.append(path)
        self.snapshots = {}            # conversation path -> bytes after the last good run
        self.accepted = collections.defaultdict(list)
        self.proc = self.plan = None
        self.invocations = self.kills = 0

    def stop(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.fake.stop()

    # -- scripting -------------------------------------------------------------------
    def _next_reply(self, record):
        with self.script_lock:
            if self.script:
                return self.script.popleft()
        return ReplySpec("<nagent-response>script exhausted</nagent-response>")

    def set_script(self, items):
        with self.script_lock:
            self.script.clear()
            self.script.extend(items)

    def model_calls(self):
        return sum(1 for r in list(self.fake.requests) if r["path"] == GENERATION)

    # -- one invocation --------------------------------------------------------------
    def launch(self, rng, n):
        self.invocations += 1
        plan = self._main_plan(rng, n) if rng.random() < 0.6 else self._file_edit_plan(rng, n)
        plan.prompt = f"task {self.pid}-{n}: run the scripted steps"
        plan.calls_before = self.model_calls()
        plan.conv_before = self.conversation_of(plan)
        plan.bytes_before = read_or_none(plan.conv_before) or b"" if plan.conv_before else b""
        if rng.random() < 0.3:
            plan.kill_mode, plan.kill_at = "time", rng.uniform(0, TIME_KILL_MAX)
        else:
            plan.kill_mode = "after-call"
            plan.kill_call = rng.randint(1, plan.calls)
            plan.kill_at = rng.uniform(0, AFTER_CALL_KILL_MAX)
        self.set_script(plan.script)
        plan.stderr = open(os.path.join(self.root, f"stderr-{n}.txt"), "w+", encoding="utf-8")
        plan.started = time.monotonic()
        plan.call_seen_at = None
        self.plan = plan
        self.proc = subprocess.Popen([sys.executable, os.path.join(BIN, "nagent"), *plan.args, plan.prompt],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=plan.stderr, env=self.env, cwd=self.cwd)

    def _main_plan(self, rng, n):
        big = os.path.join(self.tmpdir, f"big-{n}.txt")
        old_big = "".join(f"{n}:{i:05d} the quick brown fox jumps over the lazy dog\n"
                          for i in range(1700)).encode()
        with open(big, "wb") as handle:
            handle.write(old_big)
        scratch = os.path.join(self.root, f"scratch-{n}")
        os.makedirs(scratch)
        copy = os.path.join(scratch, os.path.basename(big))
        with open(copy, "wb") as handle:
            handle.write(old_big)
        first = split_lib.split_file(copy, os.path.join(scratch, "split"))["segments"][0]
        ctx = types.SimpleNamespace(environ=self.env, conversation=self.main_path)
        split_dir = nagent_actions.split_dir_for(big, ctx)
        new_seg = f"segment rewritten by run {n}\n"
        written = os.path.join(self.tmpdir, f"w-{n}.txt")
        payload = "".join(f"payload {n} line {i}\n" for i in range(300))
        delay = lambda: rng.uniform(0.02, 0.15)  # noqa: E731 - a model-call window
        plan = types.SimpleNamespace(
            kind="main", args=[], calls=4,
            script=[ReplySpec(f"<nagent-shell>sleep 0.05; echo shell-{n}</nagent-shell>\n"
                              f'<nagent-write path="{written}">{payload}</nagent-write>', delay=delay()),
                    ReplySpec(f'<nagent-file-read path="{big}"/>', delay=delay()),
                    ReplySpec(f'<nagent-write path="{os.path.join(split_dir, first["file"])}">{new_seg}'
                              f'</nagent-write>\n<nagent-file-patch index="{split_dir}/index.json"/>',
                              delay=delay()),
                    ReplySpec(f"<nagent-response>done {n}</nagent-response>", delay=delay())],
            response=f"done {n}",
            files={big: (old_big, new_seg.encode() + old_big[first["end_byte"]:]),
                   written: (None, payload.encode()),
                   os.path.join(split_dir, first["file"]): (None, old_big[:first["end_byte"]],
                                                             new_seg.encode())},
            json_files=[os.path.join(split_dir, "index.json"), self.index_path])
        return plan

    def _file_edit_plan(self, rng, n):
        target = rng.choice(self.targets)
        with open(target, "rb") as handle:
            old = handle.read()
        new = f"# {os.path.basename(target)} version {n}\n" * 3
        delay = lambda: rng.uniform(0.02, 0.15)  # noqa: E731
        return types.SimpleNamespace(
            kind="file-edit", args=["--file-edit", target, "--pid", self.pid], calls=2, target=target,
            script=[ReplySpec(f'<nagent-write path="{target}">{new}</nagent-write>', delay=delay()),
                    ReplySpec(f"<nagent-response>edited {n}</nagent-response>", delay=delay())],
            response=f"edited {n}", files={target: (old, new.encode())}, json_files=[self.index_path])

    def conversation_of(self, plan):
        if plan.kind == "main":
            return self.main_path
        data = read_or_none(self.index_path)
        if data is None:
            return None
        for record in json.loads(data)["by_file_id"].values():
            if record["path"] == os.path.realpath(plan.target):
                return lifecycle.conversation_path(record["conversation"], self.env)
        return None

    def kill_due(self, now):
        plan = self.plan
        if plan.kill_mode == "time":
            return now - plan.started >= plan.kill_at
        if plan.call_seen_at is None:
            if self.model_calls() - plan.calls_before >= plan.kill_call:
                plan.call_seen_at = now
            return False
        return now - plan.call_seen_at >= plan.kill_at

    def poll(self, now):
        """True when the current invocation ended (exited, or killed here)."""
        if self.proc.poll() is not None:
            return True
        if self.kill_due(now):
            self.proc.kill()
            self.proc.wait()
            return True
        return False

    # -- checks ----------------------------------------------------------------------
    def check(self):
        case, plan = self.case, self.plan
        proc, self.proc = self.proc, None
        plan.stderr.seek(0)
        err = plan.stderr.read()
        plan.stderr.close()
        where = f"{self.pid} invocation {plan.prompt!r} ({plan.kind}, {plan.kill_mode})"
        case.assertNotIn("Traceback", err, where)
        killed = proc.returncode == -9
        if killed:
            self.kills += 1
        else:
            case.assertEqual(proc.returncode, 0, f"{where}: {err}")
        for path in plan.json_files:
            data = read_or_none(path)
            if data is not None:
                json.loads(data)  # raises on a half-written file
                if path.endswith("index.json"):
                    split_lib.load_index(path)
        for path, (old, *new) in plan.files.items():
            data = read_or_none(path)
            case.assertIn(data, [old, *new], f"{where}: {path} is neither old nor new")
            if not killed:
                case.assertEqual(data, new[-1], f"{where}: {path}")
        conv = self.conversation_of(plan)
        saw_call = self.model_calls() > plan.calls_before
        if conv is None:
            case.assertFalse(saw_call, f"{where}: a model call without a conversation")
            return killed, False
        if plan.conv_before is not None:
            case.assertEqual(conv, plan.conv_before, where)
        data = read_or_none(conv) or b""
        case.assertTrue(data.startswith(plan.bytes_before), f"{where}: earlier bytes changed")
        records, torn = nagent_conversation.parse_records(data, source=conv)
        if torn:
            case.assertTrue(torn.startswith(nagent_conversation.HEADER_MARK[:len(torn)]), torn[:80])
        case.assertEqual([r.kind for r in records if r.kind == "note"], [], where)
        case.assertEqual([r.seq for r in records], list(range(1, len(records) + 1)), where)
        prompts = [r.body for r in records if r.kind == "prompt"]
        accepted = plan.prompt in prompts
        if saw_call:
            case.assertTrue(accepted, f"{where}: the model was called but the prompt is missing")
        for earlier in self.accepted[conv]:
            case.assertIn(earlier, prompts, where)
        if accepted:
            self.accepted[conv].append(plan.prompt)
        return killed, bool(torn)

    def follow_up(self, n):
        """The next invocation continues the conversation (in-process: no SDK import per run)."""
        import nagent_loop
        import nagent_session
        plan = self.plan
        options = {"file_edit": plan.target, "pid": self.pid} if plan.kind == "file-edit" else {}
        prompt = f"follow-up {self.pid}-{n}"
        self.set_script([ReplySpec(f"<nagent-response>continued {n}</nagent-response>")])
        with environ_as(self.env):
            session = nagent_session.build_session(options, dict(self.env), self.cwd)
            before = read_or_none(session.path) or b""
            outcome = nagent_loop.run_agent_loop(session, prompt, "argv")
        where = f"{self.pid} follow-up {n}"
        self.case.assertEqual((outcome.exit_code, outcome.response), (0, f"continued {n}"),
                              f"{where}: {outcome.error}")
        data = read_or_none(session.path)
        records, torn = nagent_conversation.parse_records(data)
        self.case.assertEqual(torn, b"", where)
        # A torn tail is cut away (and kept in a .torn- file); everything before it stays.
        recovered = nagent_conversation.parse_records(before)
        self.case.assertTrue(data.startswith(before[:len(before) - len(recovered[1])]), where)
        self.case.assertEqual([r.seq for r in records], list(range(1, len(records) + 1)), where)
        prompts = [r.body for r in records if r.kind == "prompt"]
        for earlier in self.accepted[session.path]:
            self.case.assertIn(earlier, prompts, where)
        self.case.assertEqual(prompts[-1], prompt)
        self.accepted[session.path].append(prompt)
        self.snapshots[session.path] = data


class CrashTest(HermeticTestCase):
    def test_sigkill_at_random_moments_loses_nothing(self):
        rng = random.Random(SEED)
        workers = [Worker(self, number, os.path.join(self.tmp, f"w{number}")) for number in range(WORKERS)]
        for worker in workers:
            self.addCleanup(worker.stop)
        started = time.monotonic()
        launched = kills = torn_tails = 0
        figures = collections.Counter()
        active = []
        while True:
            while len(active) < WORKERS and kills + sum(1 for _ in active) < MIN_KILLS + 2 \
                    and launched < MAX_INVOCATIONS:
                worker = next(w for w in workers if w not in active)
                launched += 1
                worker.launch(rng, launched)
                active.append(worker)
            if not active:
                break
            now = time.monotonic()
            for worker in list(active):
                if not worker.poll(now):
                    continue
                active.remove(worker)
                calls = worker.model_calls() - worker.plan.calls_before
                killed, torn = worker.check()
                kills += killed
                torn_tails += torn
                figures[(worker.plan.kind, "killed" if killed else "completed",
                         f"after {min(calls, 9)} calls")] += 1
                figures["seconds alive"] += round(now - worker.plan.started)
                follow = time.monotonic()
                worker.follow_up(launched)
                figures["seconds in follow-ups"] += round(time.monotonic() - follow)
            time.sleep(0.005)
        self.assertGreaterEqual(kills, MIN_KILLS, f"only {kills} kills in {launched} invocations")
        # Each worker's real bin/nagent continues its conversation after all that.
        procs = []
        for worker in workers:
            worker.set_script([ReplySpec("<nagent-response>final ok</nagent-response>")])
            procs.append(subprocess.Popen([sys.executable, os.path.join(BIN, "nagent"), "final prompt"],
                                          stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True, env=worker.env,
                                          cwd=worker.cwd))
        for worker, proc in zip(workers, procs):
            out, err = proc.communicate(timeout=120)
            self.assertEqual((proc.returncode, out), (0, "final ok\n"), err)
            self.assertNotIn("Traceback", err)
            records = nagent_conversation.read_records(worker.main_path)
            prompts = [r.body for r in records if r.kind == "prompt"]
            self.assertEqual(prompts[-1], "final prompt")
            for earlier in worker.accepted[worker.main_path]:
                self.assertIn(earlier, prompts)
        if os.environ.get("NAGENT_FAULTS_REPORT"):
            sys.stderr.write(f"\n{launched} invocations, {kills} kills, {torn_tails} torn tails, "
                             f"{time.monotonic() - started:.1f} s\n")
            for key, count in sorted(figures.items(), key=str):
                sys.stderr.write(f"  {key if isinstance(key, str) else ' / '.join(key)}: {count}\n")
