"""A throwaway workspace for a benchmark run: temp root with home/, work/ and a config file.

Data contract: `make_workspace(prefix, config) -> (root, home, work, config_path)`; the caller
removes `root` when done (shutil.rmtree). `median_ms(fn, runs, warm=True)` is the median wall
time of `runs` calls of `fn` in ms, after one unmeasured call when `warm`. No printing here.
"""
import json
import os
import statistics
import tempfile
import time


def median_ms(fn, runs, warm=True):
    if warm:
        fn()   # page cache, first exec
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def make_workspace(prefix, config):
    root = os.path.realpath(tempfile.mkdtemp(prefix=prefix))
    home, work = os.path.join(root, "home"), os.path.join(root, "work")
    os.makedirs(home)
    os.makedirs(work)
    config_path = os.path.join(root, "config.json")
    with open(config_path, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    return root, home, work, config_path
