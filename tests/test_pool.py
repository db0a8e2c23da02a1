"""tests/pool.py: the suite run by worker processes reports exactly what one process reports.

A small suite in a temp dir (a pass, a failure with a docstring, an error, a skip, failing and
passing subtests, an expected failure, an unexpected success, a broken setUpClass, output from
the test and from a child) is run by `python3 -m unittest discover` pooled and with
NAGENT_TEST_WORKERS=1; the two outputs must be the same but for the "Ran N tests in Xs" line,
verbose and not, with -k. A worker that dies mid-test is an error naming the test, the rest of
its class is reported not run, and the tests after it still run.
"""
import os
import re
import subprocess
import sys
import textwrap

from base import TESTS, HermeticTestCase

HOOK = f"""
import sys
sys.path.insert(0, {TESTS!r})
import pool


def load_tests(loader, tests, pattern):
    pool.install(loader)
    return tests
"""

SAMPLE = '''
import os
import unittest


class A(unittest.TestCase):
    def test_ok(self):
        print("printed by test_ok")

    def test_fail(self):
        """Doc line of test_fail."""
        self.assertEqual(1, 2)

    def test_error(self):
        raise ValueError("boom")

    @unittest.skip("because")
    def test_skip(self):
        pass

    def test_sub(self):
        for i in range(3):
            with self.subTest(i=i):
                self.assertLess(i, 2)

    @unittest.expectedFailure
    def test_xfail(self):
        self.assertTrue(False)

    @unittest.expectedFailure
    def test_xpass(self):
        pass


class B(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        raise RuntimeError("class setup broke")

    def test_never(self):
        pass


class C(unittest.TestCase):
    def test_stderr(self):
        os.system("echo from-a-child >&2")
'''

CRASH = '''
import os
import unittest


class Crash(unittest.TestCase):
    def test_1_ok(self):
        pass

    def test_2_crash(self):
        print("about to die", flush=True)
        os._exit(3)

    def test_3_never(self):
        pass


class Later(unittest.TestCase):
    def test_later(self):
        pass
'''


class PoolTest(HermeticTestCase):
    def suite_dir(self, **modules):
        root = os.path.join(self.tmp, "suite")
        os.makedirs(root)
        for name, text in dict(test__pool=HOOK, **modules).items():
            with open(os.path.join(root, f"{name}.py"), "w", encoding="utf-8") as handle:
                handle.write(textwrap.dedent(text))
        return root

    def discover(self, root, *flags, workers=None):
        env = dict(self.env, **({"NAGENT_TEST_WORKERS": str(workers)} if workers else {}))
        proc = subprocess.run([sys.executable, "-m", "unittest", "discover", "-s", root, *flags],
                              capture_output=True, text=True, env=env, cwd=self.cwd, timeout=120)
        return (proc.returncode, proc.stdout,
                re.sub(r"Ran (\d+ tests?) in [0-9.]+s", r"Ran \1", proc.stderr))

    def test_pooled_output_is_the_one_process_output(self):
        root = self.suite_dir(test_a=SAMPLE, test_b=SAMPLE.replace("boom", "bang"))
        for flags in (["-v"], [], ["-v", "-k", "stderr"], ["-b", "-f"]):
            with self.subTest(flags=flags):
                pooled = self.discover(root, *flags, workers=2)
                alone = self.discover(root, *flags, workers=1)
                self.assertEqual(pooled, alone)
        code, stdout, output = self.discover(root, "-v")
        self.assertEqual((code, stdout), (1, "printed by test_ok\n" * 2))
        for line in ("test_ok (test_a.A.test_ok) ... ok",
                     "  test_sub (test_a.A.test_sub) (i=2) ... FAIL",
                     "ERROR: setUpClass (test_b.B)", "FAIL: test_fail (test_b.A.test_fail)\n"
                     "Doc line of test_fail.", 'raise ValueError("bang")',
                     "test_stderr (test_b.C.test_stderr) ... from-a-child\nok",
                     "FAILED (failures=4, errors=4, skipped=2, expected failures=2, "
                     "unexpected successes=2)"):
            self.assertIn(line, output)

    def test_a_dead_worker_is_reported_and_the_rest_runs(self):
        root = self.suite_dir(test_a=CRASH, test_b=SAMPLE)
        code, stdout, output = self.discover(root, "-v")
        self.assertEqual((code, stdout), (1, "printed by test_ok\n"))
        self.assertIn("test_2_crash (test_a.Crash.test_2_crash) ... ERROR", output)
        self.assertRegex(output, r"ERROR: test_2_crash \(test_a.Crash.test_2_crash\)\n-+\n"
                                 r"the test worker \(pid \d+\) ended with status 3 while running "
                                 r"test_a.Crash\n--- its last output ---\nabout to die\n")
        self.assertRegex(output, r"ERROR: test_a.Crash \(not run: its worker died\)\n-+\n"
                                 r"test_a.Crash.test_3_never\n")
        self.assertIn("test_later (test_a.Later.test_later) ... ok", output)
        self.assertIn("test_ok (test_b.A.test_ok) ... ok", output)
        self.assertIn("Ran 11 tests", output)

    def test_one_module_alone_runs_in_process(self):
        root = self.suite_dir(test_a=SAMPLE.replace(
            "raise ValueError", 'print(f"pid={os.getpid()}"); raise ValueError'))
        runner = ("import os, runpy, sys; print(f'pid={os.getpid()}'); "
                  "sys.argv = ['unittest', 'discover', '-s', sys.argv[1], '-p', 'test_a.py']; "
                  "runpy.run_module('unittest', run_name='__main__')")
        proc = subprocess.run([sys.executable, "-c", runner, root], capture_output=True, text=True,
                              env=self.env, cwd=self.cwd, timeout=120)
        pids = re.findall(r"pid=(\d+)", proc.stdout)
        self.assertEqual(len(pids), 2, proc)
        self.assertEqual(pids[0], pids[1])   # the test ran in the process unittest started in
