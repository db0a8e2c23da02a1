"""nagent_fork: a child forked from the driver uses nothing of the driver's running state
(issue 25, children that start warm).

Each test forks a small function with nagent_fork.fork_call, as nagent_agents forks a tool, and
reads what the child saw from its stdout file:
- descriptors: a connection socket the parent holds is not the child's (the child's copy is
  /dev/null: the peer sees the parent close it at once, and the child can send nothing on it);
  the conversation lock's flock stays the parent's even when the child unlocks its copy;
  an inheritable descriptor stays, as through exec;
- streams: output the parent's stdout object still buffered is not written by the child;
- signals: a handler the parent set from Python (SIGWINCH, SIGUSR1, SIGTERM) is not the child's;
  a mask the parent held (nagent_agents blocks the ending signals while it cuts children off)
  is not the child's;
- threads and locks: a thread of the parent holding a lock (the logging lock, the live view's
  RLock, the terminal guard, the stderr object's own buffer lock while blocked on a full pipe)
  does not deadlock a child that logs, prints and takes the terminal guard;
- the parent's death sends SIGTERM to the child;
- warm_start_possible() is False from another thread and while another thread imports a
  module (a fork would copy its module lock, held forever), True again after.
"""
import fcntl
import termios
import io
import json
import logging
import os
import signal
import socket
import sys
import tempfile
import threading
import time

from base import HermeticTestCase

import nagent_fork
import nagent_terminal_lock
from nagent_fork import fork_call, warm_start_possible

WAIT = 60


def wait_until_full(read_end):
    """Until a pipe holds a pipe's worth of bytes (its writer is then blocked)."""

    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        size = int.from_bytes(fcntl.ioctl(read_end, termios.FIONREAD, b"\0" * 4), "little")
        if size >= 65536:
            return
        time.sleep(0.01)


class ForkCase(HermeticTestCase):
    def fork(self, fn):
        """Run `fn` in a fork; its JSON-printable return is what the child reports."""
        files = (tempfile.TemporaryFile(), tempfile.TemporaryFile(), tempfile.TemporaryFile())
        self.addCleanup(lambda: [handle.close() for handle in files])

        def body():
            print(json.dumps(fn()))
            return 0

        proc = fork_call(body, ["test-child"], dict(self.env), self.cwd, files)
        self.assertEqual(proc.wait(WAIT), 0, self.read(files[2]))
        return json.loads(self.read(files[1]))

    def read(self, handle):
        handle.seek(0)
        return handle.read().decode("utf-8", "replace")


class Descriptors(ForkCase):
    def test_the_parents_connection_is_not_the_childs(self):
        ours, peer = socket.socketpair()
        self.addCleanup(peer.close)
        ready_r, ready_w = os.pipe()
        os.set_inheritable(ready_w, True)
        files = tuple(tempfile.TemporaryFile() for _ in range(3))
        self.addCleanup(lambda: [handle.close() for handle in files])

        def body():
            target = os.readlink(f"/proc/self/fd/{ours.fileno()}")
            try:
                ours.send(b"from the child")
                sent = True
            except OSError:
                sent = False
            os.write(ready_w, json.dumps([target, sent]).encode() + b"\n")
            time.sleep(WAIT)     # still alive while the parent closes its socket
            return 0

        proc = fork_call(body, ["test-child"], dict(self.env), self.cwd, files)
        self.addCleanup(proc.kill)
        os.close(ready_w)
        with os.fdopen(ready_r) as ready:
            target, sent = json.loads(ready.readline())
        self.assertEqual(target, os.devnull)
        self.assertFalse(sent)
        ours.close()
        peer.settimeout(WAIT)
        self.assertEqual(peer.recv(100), b"", "the peer saw no end while the child lived")

    def test_the_child_cannot_release_the_parents_flock(self):
        lock_path = os.path.join(self.tmp, "lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.addCleanup(os.close, fd)
        fcntl.flock(fd, fcntl.LOCK_EX)

        def body():
            try:
                fcntl.flock(fd, fcntl.LOCK_UN)   # what a stale Writer.close() would do
            except OSError:
                pass
            return os.readlink(f"/proc/self/fd/{fd}")

        self.assertEqual(self.fork(body), os.devnull)
        other = os.open(lock_path, os.O_RDWR)
        self.addCleanup(os.close, other)
        with self.assertRaises(BlockingIOError):
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)

    def test_an_inheritable_descriptor_stays_as_through_exec(self):
        read_end, write_end = os.pipe()
        self.addCleanup(os.close, read_end)
        self.addCleanup(os.close, write_end)
        os.set_inheritable(write_end, True)
        self.assertEqual(self.fork(lambda: os.write(write_end, b"x")), 1)
        self.assertEqual(os.read(read_end, 1), b"x")


class Streams(ForkCase):
    def test_the_parents_pending_output_never_lands_in_the_childs(self):
        # The parent's stdout: a buffered stream over fd 1 that only sys.stdout refers to,
        # holding unflushed text (fd 1 is a pipe meanwhile, then the runner's again).
        read_end, write_end = os.pipe()
        self.addCleanup(os.close, read_end)
        runner_fd1, saved = os.dup(1), sys.stdout
        os.dup2(write_end, 1)
        os.close(write_end)
        sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False), 1 << 16))
        sys.stdout.write("PARENT-PENDING-OUTPUT")
        try:
            files = tuple(tempfile.TemporaryFile() for _ in range(3))
            self.addCleanup(lambda: [handle.close() for handle in files])
            proc = fork_call(lambda: print("child output") or 0, ["test-child"], dict(self.env),
                             self.cwd, files)
            self.assertEqual(proc.wait(WAIT), 0, self.read(files[2]))
        finally:
            sys.stdout = saved   # the test's wrapper goes, flushing into the pipe
            os.dup2(runner_fd1, 1)
            os.close(runner_fd1)
        self.assertEqual(self.read(files[1]), "child output\n")


class Signals(ForkCase):
    def test_python_handlers_and_the_mask_are_not_inherited(self):
        def handler(*_args):
            pass

        signums = (signal.SIGWINCH, signal.SIGUSR1, signal.SIGTERM, signal.SIGCHLD)
        old = {signum: signal.signal(signum, handler) for signum in signums}
        held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGHUP})
        try:
            seen = self.fork(lambda: {
                "handlers": [signal.getsignal(signum) == signal.SIG_DFL for signum in signums],
                "int": signal.getsignal(signal.SIGINT) is signal.default_int_handler,
                "pipe": signal.getsignal(signal.SIGPIPE) == signal.SIG_IGN,
                "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, ()))})
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            for signum, previous in old.items():
                signal.signal(signum, previous)
        self.assertEqual(seen, {"handlers": [True] * len(signums), "int": True, "pipe": True,
                                "mask": []})


class Threads(ForkCase):
    def test_locks_other_threads_hold_do_not_deadlock_the_child(self):
        guard = threading.RLock()          # a live view's lock, held by its drawing thread
        handler = logging.StreamHandler(io.StringIO())
        holding, release = threading.Event(), threading.Event()

        def holder():
            # The live view's lock, the terminal guard, and a logging handler's lock (caught
            # mid-emit) held by a thread that the fork leaves behind.
            with guard, nagent_terminal_lock._GUARD[0]:
                handler.acquire()
                try:
                    holding.set()
                    release.wait(WAIT)
                finally:
                    handler.release()

        thread = threading.Thread(target=holder, daemon=True)
        thread.start()
        self.addCleanup(thread.join, WAIT)
        self.addCleanup(release.set)
        holding.wait(WAIT)

        # And the parent's stderr object blocked writing to a full pipe (its buffer lock held).
        read_end, write_end = os.pipe()
        blocked = io.TextIOWrapper(io.BufferedWriter(io.FileIO(write_end, "w")), line_buffering=True)

        def write_until_broken():
            try:
                blocked.write("x" * (1 << 20) + "\n")
            except OSError:
                pass

        writer = threading.Thread(target=write_until_broken, daemon=True)
        saved, sys.stderr = sys.stderr, blocked
        try:
            writer.start()
            wait_until_full(read_end)
            seen = self.fork(lambda: self.child_uses_them(handler))
        finally:
            sys.stderr = saved
            release.set()
            os.close(read_end)   # the blocked writer gets EPIPE and ends
            writer.join(WAIT)
            try:
                blocked.close()
            except OSError:
                pass
        self.assertEqual(seen, {"logged": True, "guard": True, "threads": 1})

    @staticmethod
    def child_uses_them(handler):
        logger = logging.getLogger("nagent-fork-test")
        logger.addHandler(handler)
        logger.warning("a warning from the child")
        print("and a line on stderr", file=sys.stderr)
        got = nagent_terminal_lock._GUARD[0].acquire(timeout=5)
        return {"logged": True, "guard": got, "threads": threading.active_count()}


class Lifetime(ForkCase):
    def test_the_child_ends_with_its_parent(self):
        files = tuple(tempfile.TemporaryFile() for _ in range(3))
        self.addCleanup(lambda: [handle.close() for handle in files])
        read_end, write_end = os.pipe()
        os.set_inheritable(write_end, True)
        # The middle process forks the child, reports its pid, and is killed.
        middle = os.fork()
        if middle == 0:
            try:
                os.close(read_end)
                child = fork_call(lambda: time.sleep(WAIT) or 0, ["sleeper"], dict(self.env),
                                  self.cwd, files)
                os.write(write_end, f"{child.pid}\n".encode())
                time.sleep(WAIT)
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end) as report:
            child = int(report.readline())
        os.kill(middle, signal.SIGKILL)
        os.waitpid(middle, 0)
        deadline = time.monotonic() + WAIT
        while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
            with open(f"/proc/{child}/stat", "rb") as handle:
                if handle.read().rsplit(b")", 1)[1].split()[0] in (b"Z", b"X"):
                    break
            time.sleep(0.02)
        self.assertLess(time.monotonic(), deadline, "the child outlived its parent")


class WarmStartPossible(HermeticTestCase):
    def test_only_from_the_main_thread_and_never_during_another_threads_import(self):
        self.assertTrue(warm_start_possible())
        got = []
        thread = threading.Thread(target=lambda: got.append(warm_start_possible()))
        thread.start()
        thread.join(WAIT)
        self.assertEqual(got, [False])

        # Another thread inside an import: its module lock would stay held in a fork.
        module = os.path.join(self.tmp, "slow_import_for_fork_test.py")
        with open(module, "w", encoding="utf-8") as handle:
            handle.write("import fork_gate\nfork_gate.entered.set()\nfork_gate.release.wait(60)\n")
        gate = type(sys)("fork_gate")
        gate.entered, gate.release = threading.Event(), threading.Event()
        sys.modules["fork_gate"] = gate
        sys.path.insert(0, self.tmp)
        self.addCleanup(sys.path.remove, self.tmp)
        self.addCleanup(sys.modules.pop, "fork_gate", None)
        self.addCleanup(sys.modules.pop, "slow_import_for_fork_test", None)
        importer = threading.Thread(target=__import__, args=("slow_import_for_fork_test",))
        importer.start()
        try:
            gate.entered.wait(WAIT)
            self.assertFalse(warm_start_possible())
        finally:
            gate.release.set()
            importer.join(WAIT)
        self.assertTrue(warm_start_possible())

    def test_a_tool_forked_by_name_runs_its_main(self):
        files = tuple(tempfile.TemporaryFile() for _ in range(3))
        self.addCleanup(lambda: [handle.close() for handle in files])
        proc = nagent_fork.fork_tool("nagent", ["--description"], dict(self.env), self.cwd, files)
        self.assertEqual(proc.wait(WAIT), 0)
        files[1].seek(0)
        self.assertIn(b"agent loop", files[1].read())
