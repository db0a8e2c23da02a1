"""Rewinding a project's files to a snapshot: the plan, carrying it out, finishing one cut short.

Data contract:
- `make_plan(store, entries, target, owner, force) -> plan dict`. `entries` is the journal with
  the current state as its last entry (an unrecorded pre-rewind snapshot), `target` the index of
  the snapshot to go back to. Only paths the owner's actions changed since the target (see
  nagent_snapshot_history: attribution) are touched. A path whose last change was someone
  else's (the user between turns, another conversation, the turns a branched conversation
  dropped) is a conflict: what stands there now is their work. Without `force` the plan has
  `conflicts` and nothing may run; with it, that file's current version is kept in the
  archive first. (Someone else's change that ours overwrote later stays in the store: the
  snapshot before our change holds it.) Ops, in order: ["archive", path] (the file did not exist at the target: moved into the
  archive, never deleted), ["restore", path, mode, sha, expected_sha|None, keep] (written from
  the store; `expected_sha` is what the current file should be, anything else is copied to the
  archive before it is replaced), ["unrestorable", path, why] (over the size cap: its contents
  were never copied). Symlinks are restored as links; modes (executable or not) as recorded.
- `execute(store, plan) -> counts` {restored, archived, kept, unrestorable, blocked, paths} carries
  the ops out through directory descriptors opened from the root with O_NOFOLLOW, so no link
  (one already there or one swapped in) leads a write outside the project; a file is replaced
  by renaming a new file over it in its directory. It is idempotent: a restored file is skipped,
  an archived one is gone. A directory that still holds files is never removed ("blocked").
- `run_rewind(store, scope, limits, owner, target, label, force, dry_run, base_turn_id)` does
  everything under the caller's store lock: the pre-rewind snapshot, the plan, the plan file
  (rewind.json, written before anything changes), the pre entry, the ops, the "end" snapshot,
  and removes the plan file. `finish_pending(store, scope, limits)` completes a plan a killed
  rewind left (None when there is none); every command that locks the store calls it first.
- `note_text(result)` is the `<system>` note a rewind leaves in the conversation; the file
  names in it go through nagent_protocol_blocks.frame_data (the one framing rule).
"""
import errno
import os
import stat
import threading
import time

from nagent_errors import RefusedError
from nagent_paths import within
from nagent_protocol_blocks import frame_data
from nagent_shadow_git import blob_sha, parse_raw_diff
from nagent_snapshot_history import changed_paths, open_at, owned, tree
from nagent_snapshot_store import (append_journal, read_journal, read_plan, remove_plan,
                                   write_plan)
from nagent_snapshots import take_snapshot
from nagent_terminal_text import counted

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
SHOWN = 20
HASHED_BYTES = 64 << 20


class RewindConflict(RefusedError):
    def __init__(self, paths):
        shown = ", ".join(repr(p) if not p.isprintable() else p for p in paths[:SHOWN])
        more = f" and {len(paths) - SHOWN} more" if len(paths) > SHOWN else ""
        super().__init__("files changed since by someone other than the agent", shown + more,
                         "nothing was changed; --force keeps a copy of each in the archive and "
                         "rewinds them too")
        self.paths = paths


# -- the plan -------------------------------------------------------------------------------
def make_plan(store, entries, target, owner, force):
    current = len(entries) - 1
    opened = open_at(entries)
    ours, last_mine = set(), {}
    for k, paths in sorted(changed_paths(store, entries, range(target, current)).items()):
        mine = owned(opened, k, owner)
        if mine:
            ours.update(paths)
        for path in paths:
            last_mine[path] = mine
    # Someone else's work is what stands now: the last change to the file was not ours.
    conflicts = sorted(path for path in ours if not last_mine[path])
    then, now = entries[target], entries[current]
    diff = {}
    if ours and tree(then) != tree(now):
        diff = {item.path: item for item in parse_raw_diff(store.git.run(
            "diff-tree", "-r", "-z", "--no-renames", tree(then), tree(now)))}
    big_then, big_now = then.get("skipped") or {}, now.get("skipped") or {}
    ops = []
    for path in sorted(ours):
        item = diff.get(path)
        had = item is not None and item.old_mode != "000000"
        if path in big_now:
            if path in big_then:
                if big_then[path] != big_now[path]:
                    ops.append(["unrestorable", path, "over the size cap then and now"])
            elif had:
                ops.append(["restore", path, item.old_mode, item.old_sha, None, True])
            elif item is None:
                ops.append(["archive", path])
        elif path in big_then:
            ops.append(["unrestorable", path, "over the size cap when snapshotted"])
        elif item is None:
            continue   # changed and changed back
        elif not had:
            ops.append(["archive", path])
        elif item.old_mode != "160000":
            expected = item.new_sha if item.new_mode != "000000" else None
            ops.append(["restore", path, item.old_mode, item.old_sha, expected,
                        path in conflicts])
    return {"target": then["id"], "target_tree": tree(then), "ops": ops,
            "conflicts": conflicts if not force else [], "kept": conflicts if force else []}


# -- carrying it out ----------------------------------------------------------------------
def _parts(path):
    parts = path.split("/")
    if not parts or any(part in ("", ".", "..", ".git") for part in parts):
        raise ValueError(f"not a project path: {path!r}")
    return parts


def _open_parent(root_fd, path, create):
    """(fd of the parent directory, name), walking from the root without following links;
    None when a parent is missing and not `create`d, or is not a directory (a link, a file:
    then the path is not in the project)."""
    parts = _parts(path)
    fd = os.dup(root_fd)
    try:
        for part in parts[:-1]:
            try:
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    os.close(fd)
                    return None
                os.mkdir(part, 0o777, dir_fd=fd)
                child = os.open(part, DIR_FLAGS, dir_fd=fd)
            except OSError as error:   # a link or a file where a directory should be
                if error.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                os.close(fd)
                return None
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def _lstat(name, fd):
    try:
        return os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _content(name, fd, info):
    if stat.S_ISLNK(info.st_mode):
        return os.fsencode(os.readlink(name, dir_fd=fd))
    handle = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd)
    with open(handle, "rb") as stream:
        return stream.read()


def _unique(path):
    candidate, number = path, 1
    while os.path.lexists(candidate):
        number += 1
        candidate = f"{path}.{number}"
    return candidate


def _move_out(name, fd, info, archive, path):
    """Move the entry `name` of directory `fd` to `path` under the archive (a copy and an unlink
    across file systems); never deleted."""
    target = _unique(os.path.join(archive, path))
    os.makedirs(os.path.dirname(target), mode=0o700, exist_ok=True)
    try:
        os.rename(name, target, src_dir_fd=fd)
        return
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
    if stat.S_ISLNK(info.st_mode):
        os.symlink(os.readlink(name, dir_fd=fd), target)
    else:
        source = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK,
                         dir_fd=fd)
        with open(source, "rb") as stream, \
                open(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
            for chunk in iter(lambda: stream.read(1 << 20), b""):
                out.write(chunk)
    os.unlink(name, dir_fd=fd)


def _archive(root_fd, path, archive):
    """True when `path` is gone from the project (moved now, or already: a rewind finished
    after a kill); False when a directory stands there."""
    opened = _open_parent(root_fd, path, create=False)
    if opened is None:
        return True
    fd, name = opened
    try:
        info = _lstat(name, fd)
        if info is None:
            return True
        if stat.S_ISDIR(info.st_mode):
            return False
        _move_out(name, fd, info, archive, path)
        return True
    finally:
        os.close(fd)


def _remove_empty_parents(root_fd, path, kept_dirs):
    parts = path.split("/")[:-1]
    while parts:
        folder = "/".join(parts)
        if folder in kept_dirs:
            return
        opened = _open_parent(root_fd, folder, create=False)
        if opened is None:
            return
        fd, name = opened
        try:
            os.rmdir(name, dir_fd=fd)
        except OSError:
            return   # not empty (or already gone): files nagent did not archive stay
        finally:
            os.close(fd)
        parts.pop()


def _restore(root_fd, op, data, archive):
    """"restored", "kept" (restored after keeping a copy), "same" or "blocked"."""
    _, path, mode, sha, expected, keep = op
    opened = _open_parent(root_fd, path, create=True)
    if opened is None:
        return "blocked"   # a link or file someone else put where a parent directory was
    fd, name = opened
    try:
        info = _lstat(name, fd)
        kept = False
        if info is not None and stat.S_ISDIR(info.st_mode):
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError:
                return "blocked"
            info = None
        if info is not None:
            link = stat.S_ISLNK(info.st_mode)
            current = None
            if link or info.st_size <= HASHED_BYTES:   # larger: never what a snapshot holds
                current = blob_sha(_content(name, fd, info))
            executable = bool(info.st_mode & 0o100)
            if current == sha and link == (mode == "120000") and \
                    (link or executable == (mode == "100755")):
                return "same"
            if keep or current != expected:
                _move_out(name, fd, info, archive, path)
                kept = True
        temp = f".{name[:80]}.nagent-rewind-{os.urandom(4).hex()}"
        if mode == "120000":
            os.symlink(os.fsdecode(data), temp, dir_fd=fd)
        else:
            executable = mode == "100755"
            out = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                          0o777 if executable else 0o666, dir_fd=fd)
            with open(out, "wb") as stream:
                stream.write(data)
                if info is not None and stat.S_ISREG(info.st_mode):
                    bits = stat.S_IMODE(info.st_mode)
                    bits = bits | ((bits & 0o444) >> 2) if executable else bits & ~0o111
                    os.fchmod(stream.fileno(), bits)
        os.rename(temp, name, src_dir_fd=fd, dst_dir_fd=fd)
        return "kept" if kept else "restored"
    finally:
        os.close(fd)


def read_blobs(store, shas):
    """{sha: bytes} through one `git cat-file --batch`."""
    wanted = sorted(set(shas))
    if not wanted:
        return {}
    proc = store.git.popen("cat-file", "--batch")
    feeder = threading.Thread(target=lambda: (proc.stdin.write("".join(
        f"{sha}\n" for sha in wanted).encode()), proc.stdin.close()), daemon=True)
    feeder.start()
    blobs = {}
    try:
        for _ in wanted:
            header = proc.stdout.readline().split()
            if len(header) != 3:
                break
            size = int(header[2])
            blobs[header[0].decode()] = proc.stdout.read(size)
            proc.stdout.read(1)
    finally:
        feeder.join()
        proc.stdout.close()
        proc.wait()
    return blobs


def execute(store, plan):
    ops = plan["ops"]
    counts = {"restored": 0, "archived": 0, "kept": 0, "unrestorable": 0, "blocked": 0,
              "paths": {"restored": [], "archived": [], "kept": [], "unrestorable": [],
                        "blocked": []}}
    archive = plan["archive"]
    os.makedirs(archive, mode=0o700, exist_ok=True)
    blobs = read_blobs(store, [op[3] for op in ops if op[0] == "restore"])
    root_fd = os.open(store.root, DIR_FLAGS)
    try:
        archived = [op[1] for op in ops if op[0] == "archive"]
        for path in sorted(archived, key=lambda p: -p.count("/")):
            done = "archived" if _archive(root_fd, path, archive) else "blocked"
            counts[done] += 1
            counts["paths"][done].append(path)
        if archived:
            kept_dirs = set(os.fsdecode(item) for item in store.git.run(
                "ls-tree", "-d", "-r", "--name-only", "-z", plan["target_tree"]).split(b"\0"))
            for path in archived:
                _remove_empty_parents(root_fd, path, kept_dirs)
        for op in sorted((op for op in ops if op[0] == "restore"), key=lambda o: o[1].count("/")):
            outcome = _restore(root_fd, op, blobs.get(op[3], b""), archive)
            if outcome in ("restored", "kept"):
                counts["restored"] += 1
                counts["paths"]["restored"].append(op[1])
            if outcome == "kept":
                counts["kept"] += 1
                counts["paths"]["kept"].append(op[1])
            elif outcome == "blocked":
                counts["blocked"] += 1
                counts["paths"]["blocked"].append(op[1])
        for op in ops:
            if op[0] == "unrestorable":
                counts["unrestorable"] += 1
                counts["paths"]["unrestorable"].append(op[1])
    finally:
        os.close(root_fd)
    return counts


# -- the whole rewind -----------------------------------------------------------------------
def run_rewind(store, scope, limits, owner, entries, target, label, force=False, dry_run=False,
               base_turn_id=""):
    """Plan (and unless `dry_run`, carry out) going back to entries[target]; returns the result
    dict: label, plan, counts (None for a dry run), archive, ids."""
    meta = {"conv": owner.path, "turn_id": base_turn_id, "phase": "rewind", "kind": "rewind",
            "summary": f"rewind of {label}"}
    current = take_snapshot(store, scope, limits, meta, record=False)
    plan = make_plan(store, entries + [current], target, owner, force)
    result = {"label": label, "target": plan["target"], "conflicts": plan["conflicts"],
              "ops": plan["ops"], "kept_conflicts": plan["kept"], "counts": None,
              "archive": None, "conversation": owner.path, "id": None}
    if plan["conflicts"]:
        raise RewindConflict(plan["conflicts"])
    if dry_run or not plan["ops"]:
        return result
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    plan.update(pre=current, label=label, conversation=owner.path, turn_id=base_turn_id,
                archive=os.path.join(store.archive, f"{current['id']}-{stamp}"))
    write_plan(store, plan)
    append_journal(store, current)
    return _complete(store, scope, limits, plan, result)


def _complete(store, scope, limits, plan, result):
    counts = execute(store, plan)
    take_snapshot(store, scope, limits, {"conv": plan["conversation"],
                                        "turn_id": plan["turn_id"], "phase": "end",
                                        "kind": "rewind", "rewind": plan["pre"]["id"],
                                        "summary": f"rewind of {plan['label']}"})
    remove_plan(store)
    result.update(counts=counts, archive=plan["archive"], id=plan["pre"]["id"])
    return result


def finish_pending(store, scope, limits):
    """Complete a rewind a killed process left half done; None when there is none."""
    plan = read_plan(store)
    if plan is None:
        return None
    if not all(key in plan for key in ("pre", "ops", "archive", "label", "conversation")) or \
            not within(os.path.realpath(str(plan["archive"])), os.path.realpath(store.archive)):
        remove_plan(store)   # not a plan nagent wrote: nothing in it can be trusted
        return None
    entries = read_journal(store)
    pre_id = plan["pre"]["id"]
    result = {"label": plan["label"], "target": plan.get("target"), "conflicts": [],
              "ops": plan["ops"], "kept_conflicts": plan.get("kept", []), "counts": None,
              "archive": plan["archive"], "conversation": plan["conversation"], "id": pre_id,
              "recovered": True}
    if any(entry.get("rewind") == pre_id and entry.get("phase") == "end" for entry in entries):
        remove_plan(store)   # it ended; only the plan file was left
        return None
    if not any(entry["id"] == pre_id for entry in entries):
        pre = dict(plan["pre"], id=(entries[-1]["id"] if entries else 0) + 1)
        append_journal(store, pre)
        plan["pre"] = pre
    return _complete(store, scope, limits, plan, result)


def summary_line(result):
    counts = result["counts"] or {}
    line = (f"↺ rewound {result['label']}: {counted(counts.get('restored', 0), 'file')} restored, "
            f"{counts.get('archived', 0)} archived")
    extra = [f"{counts[key]} {word}" for key, word in
             (("kept", "kept as copies"), ("unrestorable", "not restorable (over the size cap)"),
              ("blocked", "blocked by a directory"))
             if counts.get(key)]
    return line + (f" ({', '.join(extra)})" if extra else "")


def note_text(result):
    counts = result["counts"] or {}
    paths = counts.get("paths", {})
    named = []
    for key, word in (("restored", "restored"), ("archived", "moved to the archive")):
        items = paths.get(key, [])
        if items:
            shown = ", ".join(items[:SHOWN]) + (f" and {len(items) - SHOWN} more"
                                                if len(items) > SHOWN else "")
            # File names are data a repository or the model chose: framed like any data, so
            # a name holding "\n</system>\n<system>" cannot end this note and open another.
            named.append(f"{word}: {frame_data(shown)}")
    return (f"<system>The user rewound the project's files to their state before "
            f"{result['label']} (nagent --rewind); {'; '.join(named) or 'nothing changed'}. "
            "Files now differ from what the results above show: read them again before "
            "relying on them.</system>")
