"""Keeping a project's snapshot store bounded: pruning old snapshots, and git gc.

Data contract:
- `prune(store, limits, now) -> number of journal entries dropped`, under the caller's store
  lock: an entry goes when it is older than `limits.keep_days`, or belongs to a turn before the
  project's last `limits.keep_turns` turns (turns in the order they started, every
  conversation counted; a rewind counts as the turn it followed). The newest entry always
  stays: the next snapshot compares with it. The kept entries' trees get a fresh chain of
  commits (HEAD at the newest), so what was dropped is no longer reachable, and the journal is
  rewritten whole (atomically). The archive of rewound files is never pruned.
- `gc_due(store) -> bool`: many packs (one per snapshot that copied files) or many loose
  objects (git's own estimate: one fan-out directory times 256).
- `maintain(store, limits, now, detach=True) -> dict` (the run's end calls it, under the
  lock): prunes at most once a day (the `maintained` stamp's mtime), and starts `git gc`
  (prune grace one hour, so objects a snapshot is writing meanwhile survive) when something
  was pruned or gc is due: detached, so no run waits for it; `detach=False` waits.
"""
import os
import subprocess

from nagent_shadow_git import EMPTY_TREE, set_head, shadow_args, write_commit
from nagent_snapshot_store import read_journal, rewrite_journal

DAY = 86400.0
PACK_LIMIT = 50
LOOSE_LIMIT = 6700


def _turn_order(entries):
    order = []
    seen = set()
    for entry in entries:
        token = entry.get("turn_id") or ""
        if token and entry.get("kind") != "rewind" and token not in seen:
            seen.add(token)
            order.append(token)
    return order


def prune(store, limits, now):
    entries = read_journal(store)
    if not entries:
        return 0
    keep_turns = set(_turn_order(entries)[-limits.keep_turns:])
    cutoff = now - limits.keep_days * DAY
    kept = [entry for entry in entries
            if entry.get("time", 0) >= cutoff and (entry.get("turn_id") or "") in keep_turns | {""}]
    if entries[-1] not in kept:
        kept.append(entries[-1])
    dropped = len(entries) - len(kept)
    if not dropped:
        return 0
    parent = None
    for entry in kept:
        tree = entry.get("tree") or EMPTY_TREE
        if tree != EMPTY_TREE or parent:
            parent = write_commit(store.git.git_dir, tree, parent)
        entry["commit"] = parent
    if parent:
        set_head(store.git.git_dir, parent)
    rewrite_journal(store, kept)
    return dropped


def gc_due(store):
    objects = os.path.join(store.git.git_dir, "objects")
    try:
        packs = sum(1 for name in os.listdir(os.path.join(objects, "pack"))
                    if name.endswith(".pack"))
    except OSError:
        packs = 0
    try:
        loose = len(os.listdir(os.path.join(objects, "17"))) * 256
    except OSError:
        loose = 0
    return packs > PACK_LIMIT or loose > LOOSE_LIMIT


def start_gc(store, detach=True):
    if not detach:
        return store.git.run("gc", "--quiet", "--prune=1.hour.ago")
    subprocess.Popen(shadow_args("gc", "--quiet", "--prune=1.hour.ago"), env=store.git.env, cwd=store.root, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                     start_new_session=True)
    return None


def maintain(store, limits, now, detach=True):
    stamp = os.path.join(store.path, "maintained")
    try:
        due = now - os.stat(stamp).st_mtime >= DAY
    except FileNotFoundError:
        due = True
    pruned = 0
    if due:
        pruned = prune(store, limits, now)
        with open(stamp, "w", encoding="ascii"):
            pass
    collect = pruned > 0 or gc_due(store)
    if collect:
        start_gc(store, detach)
    return {"pruned": pruned, "gc": collect}
