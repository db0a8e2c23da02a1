"""Snapshots during a run: at the turn's start, before and after each action that can change files.

Data contract: `RunSnapshots(session, emit, append, turn_id, turn)` is the loop's one handle for
the turn `turn_id` (number `turn`), made as the first model call goes out (nagent_loop loads this
module then: neither it nor a snapshot delays the first request); a no-op when
`settings.snapshots.enabled` is false:
- `model_call()` takes the turn's first snapshot in a thread, while the model works: no action
  runs before its reply, so that is still the turn's start. The thread also finds the project
  (nagent_snapshots.project_scope) and opens its store. Later calls take the snapshot that
  closes the reply's last action the same way.
- `before_action(action, summary) -> entry id | None`: before an action of a CHANGING kind
  ("shell", "write" into the project, "file-patch", "replace", "file-edit", and "agent", whose
  children work in the same tree), a snapshot that opens the action (and closes the one before
  it in the same reply). `after_action(entry_id, seq)` notes that it ended and the
  conversation record number of its result (the SEQ of `nagent --rewind --action`); the
  snapshot that closes it ("after") waits for whichever comes first: the next changing action
  of the reply, the next model call (then in a thread, off the wait between calls), the turn's
  end. The changes while an action is open are its own; those while no action of any run is
  open were made by someone else (the user while the model thinks, or between turns). Closing
  each action before the model is asked again keeps parallel agents' actions apart.
- `close_now(entry_id) -> (changes, more)`: a shell action's snapshot is closed at once, not
  later: the files it changed are known from the two snapshots' trees in the store (no second
  scan) and shown like an edit tag's: `changes` the nagent_file_change.FileChange of up to
  SHOWN_FILES changed files (regular files and links: added, modified, deleted, in path order),
  `more` how many others changed. ((), 0) when snapshots are off or the action opened none. A
  file over snapshots.max_file_bytes is not in the trees and not shown; a change someone else
  made in the project while the action ran (the user, a parallel agent) is in the same
  interval and is shown with it, as --changes attributes it. `after_action` then only records
  the result's seq.
- `end_turn()` closes what is still open ("after", or "end" for an action a Ctrl-C or an error
  cut short), then keeps the store bounded (nagent_snapshot_retention.maintain: prune daily,
  git gc when due).
- A snapshot runs git status only when something may have changed: with a TreeWatch over the
  project (nagent_tree_watch; set up in a thread at the run's first changing action) that saw
  nothing since this run's last snapshot, which is still the store's last entry, the snapshot
  repeats it (nagent_snapshots.repeat_snapshot) without running git. Not where a sandboxed
  command could hide a change from the watch (`TreeWatch.open`'s `writable`), nor when
  inotify cannot promise it (NAGENT_DEBUG=1 says which, at the end of each turn).
  Unsandboxed, the directories no snapshot looks into (ignored ones) are left out of the watch,
  until an ignore rule changes or a snapshot adds a file in one.
Every snapshot runs under the store's lock, after finishing a rewind a killed process left
(its `<system>` note goes into this conversation when it was this conversation's rewind). What
the run should say goes through `emit` and `append` on the run's own thread: a "snapshot"
event (id, files, phase, turn) for each snapshot that recorded a change, a note when snapshots
are off (the root is $HOME or /, a tree too large outside git, git missing) or a rewind was
finished. A snapshot that fails turns snapshots off for the rest of the run; it never stops it.
"""
import os
import threading
import time

import nagent_rewind as rewind
import nagent_snapshot_retention as retention
import nagent_snapshot_store as store_lib
import nagent_snapshots as snapshots
from nagent_errors import NagentError
from nagent_file_change import between
from nagent_paths import within
from nagent_shadow_git import parse_raw_diff, read_head
from nagent_tree_watch import TreeWatch, Unwatchable

CHANGING_KINDS = frozenset({"shell", "write", "file-patch", "replace", "file-edit", "agent"})
LOCK_WAIT = 30.0
SHOWN_FILES = 200
SHOWN_MODES = ("100644", "100755", "120000")
NO_OBJECT = "0" * 40


def tree_changes(store, root, cwd, tree_a, tree_b):
    """([FileChange], more) between two trees of the store (see `close_now`)."""
    if tree_a == tree_b:
        return [], 0
    listed = [entry for entry in parse_raw_diff(store.git.run(
        "diff-tree", "-r", "-z", "--no-renames", tree_a, tree_b))
        if entry.old_mode in SHOWN_MODES or entry.new_mode in SHOWN_MODES]
    shown = sorted(listed, key=lambda entry: entry.path)[:SHOWN_FILES]
    shas = [sha for entry in shown for sha in (entry.old_sha, entry.new_sha) if sha != NO_OBJECT]
    blobs = rewind.read_blobs(store, shas)
    changes = []
    for entry in shown:
        before = None if entry.old_sha == NO_OBJECT else blobs.get(entry.old_sha, b"")
        after = None if entry.new_sha == NO_OBJECT else blobs.get(entry.new_sha, b"")
        change = between(os.path.join(root, entry.path), before, after, cwd)
        if change is not None:
            changes.append(change)
    return changes, len(listed) - len(shown)


class RunSnapshots:
    def __init__(self, session, emit, append, turn_id, turn):
        self.session, self.emit, self.append = session, emit, append
        self.enabled = session.settings.snapshots.enabled
        self.cwd = session.cwd or os.getcwd()
        self.limits = snapshots.limits_of(session.settings)
        self.scope = self.store = self.thread = None
        self.turn_id, self.turn, self.started, self.open = turn_id, turn, False, False
        self.ended = None        # (entry id, result seq) of an ended action not yet closed
        self.opened = None       # the journal entry of the open action
        self.amends = []         # result seqs of actions closed before their result was known
        self.found = ([], 0)     # what `close_now` found, from under the store's lock
        self.off = None          # why snapshots stopped for this run
        self.outbox = []         # (kind, fields) to emit on the run's thread
        self.watch = None        # nagent_tree_watch.TreeWatch over the project, when it can tell
        self.watching = None     # the thread setting it up (its result in self.started_watch)
        self.started_watch = None
        self.watch_refused = None  # why TreeWatch.open refused, for NAGENT_DEBUG
        self.skip_basis = None   # tracked_ignored() when the watch's ignored directories were found
        self.last = None         # the journal entry this run recorded last

    # -- taking one -----------------------------------------------------------------
    def _open(self):
        environ = self.session.environ or dict(os.environ)
        keys = tuple(self.session.key_names)
        self.scope = snapshots.project_scope(self.cwd, environ, keys)
        if self.scope.refused:
            self.off = f"no snapshots for --rewind here: {self.scope.refused}"
            return
        self.store = store_lib.open_store(self.scope.root, environ, keys)

    def _start_watch(self):
        """Set up the tree watch in a thread, at the run's first changing action: a run without
        one never pays for it (nor for its teardown, which the kernel makes wait an RCU grace
        period, 5-20 ms, when watches exist). It is used from the first snapshot after it is
        ready; its first answer is "changed", so that snapshot is a full one."""
        if self.watching is not None or self.store is None:
            return
        scope = self.scope

        store = self.store

        def start():
            skip = frozenset()
            # Ignored directories (node_modules, .venv) are left out only unsandboxed: a command
            # could hard-link a project file into one and write through the link unseen.
            if self.session.sandbox_roots is None:
                try:
                    self.skip_basis = snapshots.tracked_ignored(store)
                    skip = snapshots.ignored_dirs(store, scope, self.skip_basis)
                except (NagentError, OSError):
                    skip = frozenset()
            # Sandboxed, the watch holds only while no writable root reaches a project file
            # under a name outside the project on one mount, where a command could hard-link
            # the file out of the tree and write through the link unseen; every writable root
            # is a bind mount of its own, and link() across mounts fails (EXDEV). Unsandboxed,
            # a command can rewrite the store itself: the snapshots hold against mistakes there,
            # and the watch sees every change a mistake makes through the tree.
            try:
                self.started_watch = TreeWatch.open(scope.root, scope.user_git, skip=skip,
                                                    writable=self.session.sandbox_roots)
            except Unwatchable as error:
                self.watch_refused = str(error)
        self.watching = threading.Thread(target=start, name="nagent-tree-watch", daemon=True)
        self.watching.start()

    def _ready_watch(self):
        if self.watch is None and self.watching is not None and not self.watching.is_alive():
            self.watch, self.started_watch = self.started_watch, None
        return self.watch

    def _snapshot(self, meta):
        """take_snapshot, or its repeat when the watch saw nothing since this run's last entry,
        which is still the store's last (no other run, rewind or prune wrote since) and HEAD."""
        watch = self._ready_watch()
        quiet = watch is not None and not watch.changed()   # drained either way
        last = self.last
        if quiet and last is not None:
            latest = store_lib.last_entry(self.store)
            if (latest is not None and latest.get("id") == last["id"]
                    and latest.get("tree") == last["tree"]
                    and read_head(self.store.git.git_dir) == last.get("commit")):
                return snapshots.repeat_snapshot(self.store, latest, meta)
        entry = snapshots.take_snapshot(self.store, self.scope, self.limits, meta)
        if watch is not None and watch.skip and \
                snapshots.tracked_ignored(self.store) != self.skip_basis:
            watch.give_up()   # a file in an ignored directory is now in the store
        return entry

    def _take(self, phase, kind="", summary="", maintain=False, amend=None, since=None):
        meta = {"conv": self.session.path, "turn_id": self.turn_id, "turn": self.turn,
                "phase": phase, "kind": kind, "summary": summary}
        try:
            if self.store is None:
                self._open()
                if self.store is None:
                    return None
            with store_lib.locked(self.store, LOCK_WAIT):
                for line in ([amend] if amend else []) + self.amends:
                    store_lib.append_journal(self.store, line)
                self.amends = []
                finished = rewind.finish_pending(self.store, self.scope, self.limits)
                entry = None if phase is None else self._snapshot(meta)
                if entry is not None:
                    self.last = entry
                if since is not None and entry is not None:
                    self.found = tree_changes(self.store, self.scope.root, self.cwd,
                                              since["tree"], entry["tree"])
                if maintain:
                    retention.maintain(self.store, self.limits, time.time())
        except Exception as error:   # noqa: BLE001 - a snapshot never stops the run (contract)
            # Also what no check foresaw (a hand-damaged journal entry): said, not lost in the
            # thread that took the turn's first snapshot.
            what = (error.line()[len("Error: "):] if isinstance(error, NagentError) else
                    str(error) if isinstance(error, OSError) else
                    f"{type(error).__name__}: {error}")
            self.off = f"snapshots off for the rest of this run: {what}"
            self.store = None
            self._unwatch()
            return None
        self.open = phase == "action"
        self.opened = entry if self.open else None
        if finished:
            self.outbox.append(("note", {"text": "finished a rewind a killed nagent left: "
                                                 + rewind.summary_line(finished)}))
            if finished["conversation"] == self.session.path:
                self.outbox.append(("system", {"text": rewind.note_text(finished)}))
        if entry and entry["files"]:
            self.outbox.append(("snapshot", {"id": entry["id"], "files": entry["files"],
                                             "phase": phase, "turn": self.turn}))
        return entry

    def _flush(self):
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        for kind, fields in self.outbox:
            if kind == "system":
                self.append("system", fields["text"])
            else:
                self.emit(kind, **fields)
        self.outbox = []
        if self.off:
            self.emit("note", text=self.off)
            self.off, self.enabled = None, False

    def _first(self):
        """The turn's first snapshot, once (in a thread when `model_call` asks for it)."""
        if self.enabled and not self.started:
            self.started = True
            self._take("start")

    def _close(self, phase="after", kind="", summary=""):
        """A snapshot that closes the ended action (and opens the next one, as "action")."""
        entry_id, seq = self.ended
        self.ended = None
        return self._take(phase, kind, summary,
                          amend=None if seq is None else {"id": entry_id, "seq": seq})

    def _in_background(self, work):
        self.thread = threading.Thread(target=work, daemon=True)
        self.thread.start()

    # -- the loop's calls -----------------------------------------------------------
    def model_call(self):
        if not self.enabled or self.thread is not None:
            return
        if not self.started:
            self._in_background(self._first)
        elif self.ended and self.store is not None:
            self._in_background(self._close)

    def before_action(self, action, summary):
        if not self.enabled:
            return None
        self._flush()
        self._first()
        self._flush()
        if not self.enabled or self.store is None or action.kind not in CHANGING_KINDS:
            return None
        if action.kind == "write" and not self._in_project(action.attr("path", "")):
            return None
        self._start_watch()
        if self.ended:
            entry = self._close("action", action.kind, summary)
        else:
            entry = self._take("action", action.kind, summary)
        self._flush()
        return None if entry is None else entry["id"]

    def _in_project(self, raw):
        try:
            real = os.path.realpath(os.path.join(self.cwd, raw))
        except (ValueError, OSError):   # a NUL byte: the write is refused, nothing changes
            return False
        return within(real, self.scope.root)

    def close_now(self, entry_id):
        opened = self.opened
        if entry_id is None or self.store is None or opened is None or opened["id"] != entry_id:
            return (), 0
        self.ended, self.found = None, ([], 0)
        self._take("after", since=opened)
        self._flush()
        changes, more = self.found
        self.found = ([], 0)
        return tuple(changes), more

    def after_action(self, entry_id, seq):
        """The action that `before_action` opened (entry `entry_id`) ended; its result is
        record `seq` (None: it has none)."""
        if entry_id is None or self.store is None:
            return
        if self.opened is not None and self.opened["id"] == entry_id:
            self.ended = (entry_id, seq)
        elif seq is not None:      # closed already (close_now): the seq goes with the next lock
            self.amends.append({"id": entry_id, "seq": seq})

    def end_turn(self):
        """Close what is still open, and keep the store bounded."""
        if not self.enabled:
            return
        try:
            self._flush()
            self._first()
            self._flush()
            if self.enabled and self.store is not None:
                if self.ended:
                    self._close()
                    self._flush()
                self._take("end" if self.open else None, maintain=True)
            self._flush()
        finally:
            if self.session.environ.get("NAGENT_DEBUG"):
                self.emit("note", text=f"debug: tree watch: {self._watch_state()}")
            self._unwatch()

    def _watch_state(self):
        """Why snapshots did or did not skip git status this turn (NAGENT_DEBUG=1 shows it)."""
        watch = self._ready_watch()
        if self.watching is None and watch is None:
            return "not started (no changing action, or snapshots off)"
        if watch is None:
            return ("still being set up" if self.watching.is_alive() else
                    f"refused here: {self.watch_refused}")
        return "in use" if watch.reason is None else f"gave up: {watch.reason}"

    def _unwatch(self):
        if self.watching is not None:
            self.watching.join()
            self.watching = None
        for watch in (self.watch, self.started_watch):
            if watch is not None:
                watch.close()
        self.watch = self.started_watch = None
