"""Discovery hook, no tests: the whole suite's modules run in worker processes (tests/pool.py).

Its name sorts before every other test module, so `python3 -m unittest discover -s tests` loads
it first and hands its loader to pool.install; `-p "test_x.py"` never loads it (one module runs
in-process, as it always did), nor does NAGENT_TEST_WORKERS=1 pool anything.
"""
import pool


def load_tests(loader, tests, pattern):
    pool.install(loader)
    return tests
