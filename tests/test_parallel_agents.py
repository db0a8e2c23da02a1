"""Issue 14: consecutive <nagent-agent> tags run concurrently.

- Four children run at once (a barrier in the fake only opens when all four calls are in
  flight), finish in reverse order, and their results are appended in tag order; each child has
  its own conversation; the children's tokens add into the parent's run and conversation totals
  (the --json totals and the last stats record).
- `--max-parallel-agents 2`: never more than two children's calls in flight; 0 is refused.
- A failing child and a timed-out child do not cancel their siblings.
- Ctrl-C mid-batch (SIGINT to the process group, as a terminal sends it) ends every child's
  whole tree: no child nagent and no shell command is left in the process table; the interrupt
  record names the children it cut off, and each gets a result saying so.
- The action hook sees every agent action of a batch; a refused one does not start.
- On a terminal (a pseudo-terminal here) the live view draws a table of the running children,
  one line each with its current action (made safe for the terminal) and elapsed time; off a
  cursor-capable terminal (TERM=dumb) it does not.
The children are real `nagent` processes against the shared fake; the fake tells the parent's
requests from the children's by the parent's prompt, and the children apart by their tasks.
"""
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

from base import BIN, HermeticTestCase, startup_seconds
from fakes import Fault, ReplySpec
from test_loop import NagentRunCase
from test_processes import wait_for
from test_live_tty import final_lines, run_on_terminal
from test_shell import sleepers

from nagent_display import Display
from nagent_stats_format import decode_stats

PARENT = "PARENT-PROMPT-7731"
USAGE = {"input": 100, "cache_read": 0, "cache_write": 0, "output": 10, "reasoning": 0}


def child_usage(number):
    return {"input": 1000 * number, "cache_read": 0, "cache_write": 0, "output": 10 * number,
            "reasoning": 0}


def agents(*tasks):
    return "".join(f"<nagent-agent>\n{task}\n</nagent-agent>\n" for task in tasks)


def own_processes(marker):
    """Live pids (not zombies) whose command line contains `marker`."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                if handle.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    continue
            with open(f"/proc/{name}/cmdline", "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(name))
        except (OSError, IndexError):
            pass
    return found


class ParallelCase(NagentRunCase):
    """Harness: a reply function routing the parent's calls and each child's by task."""

    def route(self, parent_replies, child):
        """`parent_replies`: the parent's replies in order; `child(task, record)` -> a reply."""
        parent_calls = []

        def reply(record):
            text = json.dumps(record.get("json"))
            if PARENT in text:
                parent_calls.append(record)
                return parent_replies[min(len(parent_calls), len(parent_replies)) - 1]
            task = re.search(r"task-[A-Z]", text)
            return child(task.group(0) if task else "?", record)

        self.fake.reply_fn(reply)
        return parent_calls

    def agent_results(self, path):
        return [record.body for record in self.kinds(path, "result")
                if record.attr("action") == "agent"]


class ConcurrentChildren(ParallelCase):
    def test_four_children_at_once_results_in_tag_order_and_totals(self):
        barrier = threading.Barrier(4, timeout=60)
        broken, finished = [], []
        hold = {"task-A": 0.6, "task-B": 0.4, "task-C": 0.2, "task-D": 0.0}

        def child(task, _record):
            try:
                barrier.wait()     # opens only when all four children's calls are in flight
            except threading.BrokenBarrierError:
                broken.append(task)
            time.sleep(hold[task])     # A, the first tag, finishes last
            finished.append(task)
            number = "ABCD".index(task[-1]) + 1
            return ReplySpec(f"<nagent-response>answer {task}</nagent-response>",
                             usage=child_usage(number))

        self.route([ReplySpec(agents("task-A", "task-B", "task-C", "task-D"), usage=USAGE),
                    ReplySpec("<nagent-response>parent done</nagent-response>", usage=USAGE)],
                   child)
        proc = self.nagent("--json", "--conversation", "parent", PARENT)
        data = self.json_of(proc)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(broken, [], "the children did not run concurrently")
        self.assertEqual(finished[-1], "task-A")
        results = self.agent_results(self.named_path("parent"))
        self.assertEqual([re.search(r"answer (task-[A-D])", body).group(1) for body in results],
                         ["task-A", "task-B", "task-C", "task-D"])
        names = [re.search(r'conversation="([^"]+)"', body).group(1) for body in results]
        self.assertEqual(len(set(names)), 4)
        for name, task in zip(names, "ABCD"):
            prompts = self.kinds(self.named_path(name), "prompt")
            self.assertEqual(prompts[0].body.strip(), f"task-{task}")
        self.assertEqual(data["totals"]["input_tokens"], 200 + 10000)
        self.assertEqual(data["totals"]["output_tokens"], 20 + 100)
        self.assertEqual(data["conversation_totals"]["input_tokens"], 200 + 10000)
        stats = self.kinds(self.named_path("parent"), "stats")[-1].body
        self.assertIn("in=10200", stats)

    def test_parallel_limit_flag(self):
        in_flight, peak, lock = [0], [0], threading.Lock()
        barrier = threading.Barrier(2, timeout=60)

        def child(task, _record):
            with lock:
                in_flight[0] += 1
                peak[0] = max(peak[0], in_flight[0])
            try:
                if task != "task-C":
                    barrier.wait()
                time.sleep(0.3)
            finally:
                with lock:
                    in_flight[0] -= 1
            return ReplySpec(f"<nagent-response>answer {task}</nagent-response>", usage=USAGE)

        self.route([ReplySpec(agents("task-A", "task-B", "task-C"), usage=USAGE),
                    ReplySpec("<nagent-response>parent done</nagent-response>", usage=USAGE)],
                   child)
        proc = self.nagent("--max-parallel-agents", "2", "--conversation", "limited", PARENT)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(peak[0], 2)
        self.assertEqual(len(self.agent_results(self.named_path("limited"))), 3)
        refused = self.nagent("--max-parallel-agents", "0", "x")
        self.assertCleanError(refused, 2, "--max-parallel-agents must be a whole number >= 1")


class FailingSiblings(ParallelCase):
    def setUp(self):
        super().setUp()
        # Sibling A must finish within the timeout that ends C: three children start at once,
        # each a fresh interpreter importing the SDK, on two shared cores. A fixed 4 s failed
        # on a loaded machine, and so did 3 start-ups measured once early in the suite.
        self.timeout = max(4, round(4 * startup_seconds() + 2))
        self.write_config(dict(self.CONFIG, agent_timeout=self.timeout, max_attempts=1))

    def test_a_failing_and_a_timed_out_child_leave_their_sibling_alone(self):
        def child(task, _record):
            if task == "task-B":
                return Fault(400)      # the child's model call is rejected: it exits 5
            if task == "task-C":
                return ReplySpec("<nagent-response>too late</nagent-response>", delay=120)
            return ReplySpec("<nagent-response>answer task-A</nagent-response>",
                             usage=child_usage(1))

        self.route([ReplySpec(agents("task-A", "task-B", "task-C"), usage=USAGE),
                    ReplySpec("<nagent-response>parent done</nagent-response>", usage=USAGE)],
                   child)
        proc = self.nagent("--json", "--conversation", "siblings", PARENT)
        data = self.json_of(proc)
        self.assertEqual((proc.returncode, data["response"]), (0, "parent done"), proc.stderr)
        first, second, third = self.agent_results(self.named_path("siblings"))
        self.assertIn("exit_code: 0", first)
        self.assertIn("answer task-A", first)
        self.assertIn("exit_code: 5", second)
        self.assertIn('status="error"', third)
        self.assertIn(f"timed out after {self.timeout} s", third)
        name = re.search(r'conversation="([^"]+)"', third).group(1)
        self.assertEqual(own_processes(name), [])
        # C's call was in flight when it was ended: what it may be billed for is counted, as
        # an estimate, in its conversation and the parent's totals (B's 400 is not billed).
        late = decode_stats(self.kinds(self.named_path(name), "stats")[-1].body)["conversation"]
        self.assertEqual((late["model_calls"], late["estimated"]), (1, True))
        self.assertEqual(data["totals"]["input_tokens"], 200 + 1000 + late["input_tokens"])


class InterruptedBatch(ParallelCase):
    def test_ctrl_c_mid_batch_ends_every_child_tree(self):
        markers = {"task-A": "41.731", "task-B": "41.732", "task-C": "41.733"}

        calls = []

        def child(task, _record):
            calls.append(task)
            if calls.count(task) > 1:
                return ReplySpec("<nagent-response>should not get here</nagent-response>")
            return ReplySpec(f"<nagent-shell>\nsleep {markers[task]}\n</nagent-shell>",
                             usage=child_usage(1))

        self.route([ReplySpec(agents(*markers), usage=USAGE)], child)
        # Its own session: SIGINT to the group is what a terminal's Ctrl-C does.
        proc = subprocess.Popen([sys.executable, os.path.join(BIN, "nagent"), "--pid", "93117",
                                 "--conversation", "cut", PARENT], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env, cwd=self.cwd, start_new_session=True)
        self.addCleanup(lambda: proc.poll() is None and os.killpg(proc.pid, signal.SIGKILL))
        self.assertTrue(wait_for(lambda: all(sleepers(m) for m in markers.values()), 60),
                        "the children's commands never all started")
        os.killpg(proc.pid, signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 130, err)
        self.assertNotIn("Traceback", err)
        for marker in markers.values():
            self.assertEqual(sleepers(marker), [])
        self.assertEqual(own_processes("93117"), [])   # no child nagent left (a fork has the parent's command line)
        records = self.records(self.named_path("cut"))
        self.assertEqual(records[-1].kind, "interrupt")
        results = self.agent_results(self.named_path("cut"))
        names = [re.search(r'conversation="([^"]+)"', body).group(1) for body in results]
        self.assertEqual(len(names), 3)
        self.assertTrue(all("cut off" in body for body in results), results)
        self.assertEqual(records[-1].attr("cut_off").split(), names)
        for name in names:
            self.assertIn(name, records[-1].body)
            self.assertEqual(self.records(self.named_path(name))[-1].kind, "interrupt")
        self.assertEqual(os.listdir(os.path.join(self.home, ".nagent", "run")), [])
        self.assertIn("in=3100", self.kinds(self.named_path("cut"), "stats")[-1].body)


class HookedBatch(ParallelCase):
    def test_the_action_hook_sees_each_agent_and_a_refused_one_never_starts(self):
        log = os.path.join(self.tmp, "hook.log")
        hook = os.path.join(self.tmp, "hook.py")
        with open(hook, "w", encoding="utf-8") as handle:
            handle.write("import json, sys\n"
                         "data = json.load(sys.stdin)\n"
                         f"open({log!r}, 'a').write(data['task'] + '\\n')\n"
                         "sys.exit(2 if 'task-B' in data['task'] else 0)\n")
        self.write_config(dict(self.CONFIG, hooks={"action": f"{sys.executable} {hook}"}))
        started = []

        def child(task, _record):
            started.append(task)
            return ReplySpec(f"<nagent-response>answer {task}</nagent-response>", usage=USAGE)

        self.route([ReplySpec(agents("task-A", "task-B"), usage=USAGE),
                    ReplySpec("<nagent-response>parent done</nagent-response>", usage=USAGE)],
                   child)
        proc = self.nagent("--conversation", "hooked", PARENT)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        with open(log, encoding="utf-8") as handle:
            self.assertEqual(handle.read().split(), ["task-A", "task-B"])
        self.assertEqual(started, ["task-A"])
        first, second = self.agent_results(self.named_path("hooked"))
        self.assertIn("answer task-A", first)
        self.assertIn("refused by the action hook", second)
        hooks = self.kinds(self.named_path("hooked"), "hook")
        self.assertEqual(len(hooks), 2)


class AgentTable(ParallelCase):
    def setUp(self):
        super().setUp()
        self.env.pop("NAGENT_NO_SPINNER", None)
        self.env["TERM"] = "xterm"
        self.env["NO_COLOR"] = "1"

    def script(self):
        def child(task, _record):
            if task in self.seen:
                return ReplySpec(f"<nagent-response>answer {task}</nagent-response>", usage=USAGE)
            self.seen.append(task)
            return ReplySpec(f"<nagent-shell>\nsleep 0.{'AB'.index(task[-1]) + 8}\n</nagent-shell>",
                             usage=USAGE)

        self.seen = []
        self.route([ReplySpec(agents("task-A", "task-B"), usage=USAGE),
                    ReplySpec("<nagent-response>parent done</nagent-response>", usage=USAGE)],
                   child)

    def test_a_table_of_running_children_on_a_terminal(self):
        self.script()
        code, stdout, screen = run_on_terminal(["--conversation", "table", PARENT], self.env, self.cwd)
        self.assertEqual((code, stdout), (0, "parent done\n"), screen)
        rows = re.findall(r"#(\d+) +(agent-[0-9a-f]{8}) +(shell: sleep 0\.[89]) +(\d+\.\d) s", screen)
        self.assertEqual({row[2] for row in rows}, {"shell: sleep 0.8", "shell: sleep 0.9"}, screen)
        self.assertEqual({row[0] for row in rows}, {"1", "2"})
        elapsed = [float(row[3]) for row in rows if row[2] == "shell: sleep 0.9"]
        self.assertGreater(max(elapsed), min(elapsed))       # the elapsed time moves
        self.assertIn("agents · 2 of 2 running", screen)
        self.assertIn("\x1b[1A\x1b[2K", screen)              # redrawn in place
        lines = final_lines(re.sub(r"\x1b\[1A\x1b\[2K", "", screen))
        done = [line for line in lines if line.startswith("  ✓ ")]
        self.assertEqual(len(done), 2, lines)
        self.assertTrue(lines[-1].startswith("● "), lines)


class AgentTableUnit(HermeticTestCase):
    """In-process: the display's table follows agents events; no cursor, no table."""

    def events(self, display):
        display.handle({"type": "run_start", "provider": "google", "model": "m"})
        display.handle({"type": "action_start", "index": 1, "kind": "agent", "summary": '"a"'})
        display.handle({"type": "agents", "total": 2, "running": [
            {"index": 1, "conversation": "agent-0123456789abcdef-7", "pid": 1,
             "action": "shell: ls\x1b[31m", "elapsed": 1.5, "calls": 1}]})
        display.handle({"type": "agents", "total": 2, "running": []})
        display.close()

    def test_table_only_with_cursor_movement(self):
        for cursor in (True, False):
            stream = io.StringIO()
            self.events(Display(stream, animate=True, cursor=cursor))
            text = stream.getvalue()
            self.assertIn("agents · 1 of 2 running", text)
            self.assertEqual("#1   agent-01234567  shell: ls\\x1b[31m" in text, cursor, text)
            self.assertEqual("\x1b" in text, cursor, text)
