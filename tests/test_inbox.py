"""Issue 14: the inbox. `nagent --send TARGET "message"` (TARGET a conversation name or a running
nagent's pid) needs no lock; a running instance appends the message as a prompt record with
source="inbox" at its next turn boundary (never inside a model call or an action) and its next
request carries it; with nothing running the message waits and is appended at the start of the
next run; each message is appended exactly once, also with many senders at once and after a run
killed between claiming and removing a message.
"""
import json
import os
import subprocess
import sys
import threading

from base import BIN, HermeticTestCase
from test_loop import NagentRunCase
from test_processes import wait_for

import nagent_inbox as inbox
from nagent_conversation import ConversationWriter, read_records

CHANGELOG = "also update the changelog"


class InboxRuns(NagentRunCase):
    def inbox_records(self, path):
        return [record for record in self.records(path)
                if record.kind == "prompt" and record.attr("source") == "inbox"]

    def test_message_sent_during_a_run_reaches_the_next_request_once(self):
        started, go = os.path.join(self.cwd, "started"), os.path.join(self.cwd, "go")
        self.fake.reply(f"<nagent-shell>\ntouch {started}; while [ ! -e {go} ]; do sleep 0.02; done\n"
                        "</nagent-shell>")
        self.fake.reply("<nagent-response>done, changelog too</nagent-response>")
        proc = self.start_nagent("--conversation", "busy", "fix the bug")
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.assertTrue(wait_for(lambda: os.path.exists(started), 60))
        # What --ps prints, --send takes: the name, the pid, and the path --ps --json shows.
        shown = json.loads(self.nagent("--ps", "--json").stdout)["instances"][0]
        by_name = self.nagent("--send", shown["name"], CHANGELOG)
        self.assertEqual(by_name.returncode, 0, by_name.stderr)
        self.assertIn(f"sent to pid {proc.pid}", by_name.stdout)
        by_pid = self.nagent("--send", str(shown["pid"]), "--json", "and bump the version")
        data = json.loads(by_pid.stdout)
        self.assertEqual((data["running"], data["queued"]), (proc.pid, False))
        self.assertTrue(data["conversation"].endswith("/busy"))
        by_path = self.nagent("--send", shown["conversation"], "and the docs")
        self.assertIn(f"sent to pid {proc.pid}", by_path.stdout, by_path.stderr)
        with open(go, "w"):
            pass
        out, err = proc.communicate(timeout=60)
        self.assertEqual(proc.returncode, 0, err)
        first, second = self.generation_requests()
        self.assertNotIn(CHANGELOG, self.request_text(first))
        text = self.request_text(second)
        self.assertEqual(text.count(CHANGELOG), 1)
        self.assertEqual(text.count("and bump the version"), 1)
        self.assertEqual(text.count("and the docs"), 1)
        self.assertLess(text.index("nagent-shell-result"), text.index(CHANGELOG))
        self.assertLess(text.index(CHANGELOG), text.index("and bump the version"))
        self.assertIn("sent with nagent --send", text)
        records = self.records(self.named_path("busy"))
        kinds = [(record.kind, record.attr("source")) for record in records]
        at = kinds.index(("prompt", "inbox"))
        self.assertEqual(kinds[at - 1][0], "result")     # after the action's result, not inside
        messages = self.inbox_records(self.named_path("busy"))
        self.assertEqual([m.body for m in messages], [CHANGELOG, "and bump the version", "and the docs"])
        self.assertEqual(os.listdir(inbox.inbox_dir(self.named_path("busy"))), ["claimed"])
        self.assertEqual(os.listdir(inbox.claimed_dir(self.named_path("busy"))), [])

    def test_message_between_runs_waits_for_the_start_of_the_next(self):
        self.fake.reply("<nagent-response>one</nagent-response>")
        self.assertEqual(self.nagent("--conversation", "idle", "first").returncode, 0)
        path = self.named_path("idle")
        size = os.path.getsize(path)
        sent = self.nagent("--send", "idle", CHANGELOG)
        self.assertEqual(sent.returncode, 0, sent.stderr)
        self.assertIn("queued for idle", sent.stdout)
        self.assertEqual(os.path.getsize(path), size)
        status = self.nagent("--status", "--conversation", "idle").stdout
        self.assertIn("inbox: 1 message waiting for the next run", status)
        self.fake.reply("<nagent-response>two</nagent-response>")
        self.fake.reply("<nagent-response>three</nagent-response>")
        self.assertEqual(self.nagent("--conversation", "idle", "second").returncode, 0)
        self.assertEqual(self.nagent("--conversation", "idle", "third").returncode, 0)
        requests = self.generation_requests()
        second = self.request_text(requests[1])
        self.assertLess(second.index("second"), second.index(CHANGELOG))
        self.assertEqual(self.request_text(requests[2]).count(CHANGELOG), 1)
        self.assertEqual([m.body for m in self.inbox_records(path)], [CHANGELOG])
        self.assertEqual(json.loads(self.nagent("--status", "--json", "--conversation", "idle")
                                    .stdout)["prompts"], 3)   # a message is not a turn

    def test_concurrent_senders_each_delivered_once(self):
        path = self.named_path("many")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
        env = dict(self.env)

        def sender(number):
            for item in range(5):
                inbox.send(path, f"msg {number}.{item}", env)

        threads = [threading.Thread(target=sender, args=(n,)) for n in range(6)]
        procs = [subprocess.Popen([sys.executable, os.path.join(BIN, "nagent"), "--send", "many",
                                   f"cli {n}"], env=self.env, cwd=self.cwd,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for n in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for proc in procs:
            _out, err = proc.communicate(timeout=60)
            self.assertEqual(proc.returncode, 0, err)
        self.fake.reply("<nagent-response>read them</nagent-response>")
        self.assertEqual(self.nagent("--conversation", "many", "go").returncode, 0)
        bodies = [m.body for m in self.inbox_records(path)]
        expected = [f"msg {n}.{i}" for n in range(6) for i in range(5)] + ["cli 0", "cli 1"]
        self.assertEqual(sorted(bodies), sorted(expected))
        for number in range(6):
            mine = [body for body in bodies if body.startswith(f"msg {number}.")]
            self.assertEqual(mine, [f"msg {number}.{i}" for i in range(5)])
        text = self.request_text(self.generation_requests()[0])
        for body in expected:
            self.assertIn(body, text)

    def test_send_refusals(self):
        missing = self.nagent("--send", "nowhere", "x")
        self.assertCleanError(missing, 6, "no running nagent and no conversation of that name")
        os.makedirs(self.conversations, exist_ok=True)
        open(self.named_path("exists"), "w").close()
        too_big = self.nagent("--send", "exists", "-", input="y" * (inbox.MAX_MESSAGE_BYTES + 1))
        self.assertCleanError(too_big, 6, "message too large")
        self.assertEqual(inbox.waiting(self.named_path("exists")), 0)
        bad = self.nagent("--send", "../x", "hi")
        self.assertCleanError(bad, 2, "not a running pid or a conversation name")
        for elsewhere in ("/etc/passwd", os.path.join(self.conversations, "archive", "exists"),
                          os.path.join(self.conversations, "exists.d", "lock")):
            outside = self.nagent("--send", elsewhere, "hi")
            self.assertCleanError(outside, 2, "not a running pid or a conversation name")
        empty = self.nagent("--send", "exists", "  ")
        self.assertCleanError(empty, 2)


class InboxRecovery(HermeticTestCase):
    """In-process: a run killed after claiming a message never loses or repeats it."""

    def test_claimed_leftovers(self):
        path = os.path.join(self.home, "conv")
        first = inbox.send(path, "already appended", self.env)
        second = inbox.send(path, "claimed, never appended", self.env)
        third = inbox.send(path, "still waiting", self.env)
        with ConversationWriter(path) as writer:
            taken = inbox.take(path, writer.records)    # claimed; then the run is "killed":
            self.assertEqual([name for name, _ in taken], [first, second, third])
            writer.append("prompt", "already appended", {"source": "inbox", "inbox": first})
        os.rename(os.path.join(inbox.claimed_dir(path), third),
                  os.path.join(inbox.inbox_dir(path), third))   # as if never claimed
        with ConversationWriter(path) as writer:
            again = inbox.take(path, writer.records)
        self.assertEqual(again, [(second, "claimed, never appended"), (third, "still waiting")])
        self.assertNotIn(first, os.listdir(inbox.claimed_dir(path)))
        self.assertEqual(len(read_records(path)), 1)

    def test_links_and_fifos_in_the_inbox_are_dropped_unread(self):
        path = os.path.join(self.home, "conv")
        real = inbox.send(path, "a real message", self.env)
        secret = self.write_file("secret.txt", "the user's private key")
        folder = inbox.inbox_dir(path)
        os.symlink(secret, os.path.join(folder, "msg-00000000000000000001-1-00000000000000aa"))
        os.mkfifo(os.path.join(folder, "msg-00000000000000000002-1-00000000000000bb"))
        with ConversationWriter(path) as writer:
            self.assertEqual(inbox.take(path, writer.records), [(real, "a real message")])
        self.assertEqual(os.listdir(inbox.claimed_dir(path)), [real])
        self.assertEqual(sorted(os.listdir(folder)), ["claimed"])
