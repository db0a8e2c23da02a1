"""A project's snapshot journal read as one conversation's history: turns, actions, who changed what.

Data contract:
- `Owner(path, tokens, prompts)` is the conversation asking: its path, its turns' `turn_id`s
  and prompt texts in order (`owner_of(path, records)` reads them from its prompt records: a
  turn is a user prompt, nagent_run_records.is_user_prompt). An entry is the owner's when its turn_id is one of its
  turns, or it is a rewind the owner ran (phase "rewind" or its "end", kind "rewind", conv ==
  path, base turn_id one of the owner's or "").
- Attribution: the journal is one sequence for the whole project (every conversation, parallel
  agents included). Between consecutive entries k and k+1 the changes belong to the actions
  open then: an entry of phase "action" or "rewind" opens its action until the next entry of
  the same conversation. No open action: the change was made outside nagent's actions (the
  user, another program, between turns or while the model was thinking). A change made while
  several actions of different conversations were open is attributed to each of them.
- `open_at(entries)` -> for each k, the entries open between k and k+1 ({conv: entry});
  `owned(opened, k, owner)` whether one of the owner's was; `action_span(entries, index)` the
  intervals an action entry was open for.
- `changed_paths(store, entries, indexes)` -> {k: set of paths} for the intervals k in `indexes`
  whose trees or skipped files differ (one `git diff-tree --stdin` for all of them).
- `units(entries, owner)` -> the owner's turns and rewinds in order: Unit(kind "turn" |
  "rewind", number (turn number; for a rewind the turn it was made after), label, first (index
  of its first entry), indexes (its entries)).
- `file_changes(store, tree_a, tree_b) -> [FileChange(path, status, added, deleted)]` (one
  `diff-tree --raw --numstat`; added/deleted None for a binary file) and `patch(store, tree_a,
  tree_b, paths)` the unified diff text (no external diff, no textconv).
"""
import os
from collections import namedtuple

from nagent_run_records import is_user_prompt
from nagent_shadow_git import EMPTY_TREE, parse_stdin_diffs

Owner = namedtuple("Owner", "path tokens prompts")
Unit = namedtuple("Unit", "kind number label first indexes")
FileChange = namedtuple("FileChange", "path status added deleted")
OPENING = ("action", "rewind")
PATHSPEC_LIMIT = 500


def owner_of(path, records):
    prompts = [record for record in records if is_user_prompt(record)]
    return Owner(path, [record.attr("turn_id") or "" for record in prompts],
                 [record.body for record in prompts])


def owns(owner, entry):
    token = entry.get("turn_id") or ""
    if entry.get("kind") == "rewind":
        return entry.get("conv") == owner.path and (not token or token in owner.tokens)
    return bool(token) and token in owner.tokens


def open_at(entries):
    """[{conv: entry}] of the actions open between entry k and k+1."""
    current, result = {}, []
    for entry in entries:
        current[entry.get("conv")] = entry
        result.append({conv: item for conv, item in current.items()
                       if item.get("phase") in OPENING})
    return result


def tree(entry):
    return (entry or {}).get("tree") or EMPTY_TREE


def _skipped_changes(a, b):
    old, new = a.get("skipped") or {}, b.get("skipped") or {}
    return {path for path in set(old) | set(new) if old.get(path) != new.get(path)}


def changed_paths(store, entries, indexes):
    """{k: set(paths)} for the intervals k -> k+1 in `indexes` where anything changed."""
    pairs = {k: (tree(entries[k]), tree(entries[k + 1])) for k in indexes
             if k + 1 < len(entries)}
    wanted = {pair for pair in pairs.values() if pair[0] != pair[1]}
    diffs = {}
    if wanted:
        data = store.git.run("diff-tree", "--stdin", "-r", "-z", "--no-renames", "--name-only",
                             input="".join(f"{a} {b}\n" for a, b in sorted(wanted)).encode())
        diffs = parse_stdin_diffs(data)
    result = {}
    for k, pair in pairs.items():
        paths = set(diffs.get(pair, ())) | _skipped_changes(entries[k], entries[k + 1])
        if paths:
            result[k] = paths
    return result


def units(entries, owner):
    """The owner's turns (in turn order) and rewinds, each with the indexes of its entries."""
    by_token, rewinds = {}, []
    for index, entry in enumerate(entries):
        if not owns(owner, entry):
            continue
        if entry.get("kind") == "rewind":
            if entry.get("phase") == "rewind":
                rewinds.append([index])
            elif rewinds:
                rewinds[-1].append(index)
        else:
            by_token.setdefault(entry.get("turn_id"), []).append(index)
    found = []
    for number, token in enumerate(owner.tokens, start=1):
        if token in by_token:
            indexes = by_token[token]
            found.append(Unit("turn", number, f"turn {number}", indexes[0], indexes))
    for indexes in rewinds:
        entry = entries[indexes[0]]
        token = entry.get("turn_id") or ""
        after = owner.tokens.index(token) + 1 if token in owner.tokens else 0
        found.append(Unit("rewind", after, entry.get("summary") or "rewind", indexes[0],
                          indexes))
    return sorted(found, key=lambda unit: unit.first)


def action_span(entries, index):
    """The intervals k (k -> k+1) while the action of entries[index] was open: up to the next
    entry of its conversation (or the last entry, for one a killed run never closed)."""
    conv = entries[index].get("conv")
    for later in range(index + 1, len(entries)):
        if entries[later].get("conv") == conv:
            return range(index, later)
    return range(index, len(entries) - 1)


def owned(opened, k, owner):
    """True when one of the owner's actions was open between entry k and k+1."""
    return any(owns(owner, entry) for entry in opened[k].values())


def file_changes(store, tree_a, tree_b, paths=None):
    if tree_a == tree_b:
        return []
    fields = store.git.run("diff-tree", "-r", "-z", "--no-renames", "--raw", "--numstat",
                           tree_a, tree_b).split(b"\0")
    status, counts, index = {}, {}, 0
    while index < len(fields):
        field = fields[index]
        if field.startswith(b":") and index + 1 < len(fields):
            status[os.fsdecode(fields[index + 1])] = field.split(b" ")[-1][:1].decode("ascii")
            index += 2
            continue
        if field.count(b"\t") >= 2:
            added, deleted, path = field.split(b"\t", 2)
            counts[os.fsdecode(path)] = (None, None) if added == b"-" else (int(added), int(deleted))
        index += 1
    return [FileChange(path, status[path], *counts.get(path, (None, None)))
            for path in sorted(status) if paths is None or path in paths]


def patch(store, tree_a, tree_b, paths=None):
    if tree_a == tree_b:
        return ""
    args = ["diff-tree", "-p", "-r", "--no-renames", "--no-color", "--no-ext-diff",
            "--no-textconv", tree_a, tree_b]
    if paths is not None and len(paths) <= PATHSPEC_LIMIT:
        args += ["--"] + sorted(paths)
    return store.git.run(*args).decode("utf-8", "replace")
