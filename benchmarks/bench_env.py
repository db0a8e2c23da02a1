"""A throwaway workspace for a benchmark run: temp root with home/, work/ and a config file.

Data contract: `make_workspace(prefix, config) -> (root, home, work, config_path)`; the caller
removes `root` when done (shutil.rmtree). No timing or printing here.
"""
import json
import os
import tempfile


def make_workspace(prefix, config):
    root = os.path.realpath(tempfile.mkdtemp(prefix=prefix))
    home, work = os.path.join(root, "home"), os.path.join(root, "work")
    os.makedirs(home)
    os.makedirs(work)
    config_path = os.path.join(root, "config.json")
    with open(config_path, "w", encoding="utf-8") as handle:
        json.dump(config, handle)
    return root, home, work, config_path
