"""Long runs stay bounded and lossless: when to checkpoint and when to start a new window.

Data contract: `maybe_compact(run, now)` runs between turns, holding the conversation lock
through `run` (nagent_run.Run). It refreshes the checkpoint (nagent_checkpoint) when it is due
and rebuilds the window (nagent_window_rebuild) when the window is over `window_max_bytes` and
has grown a quarter of that since its own rebuild; `rebuild_window(run, now, reason)` does a
rebuild on demand (nagent_compact). Every checkpoint call goes through the run's provider
client and counts in its totals.
- A checkpoint reply that fails the schema check is rejected: the previous checkpoint stays,
  and an "error" record (`checkpoint="rejected"`, `at_bytes`; bookkeeping, never sent to the
  model) notes it; the next attempt waits another `checkpoint_every_bytes`. A rebuild whose
  fresh checkpoint is rejected uses the previous checkpoint if that passes the check, else a
  note pointing at the archived window.
- The old window is first copied whole to `archive/`, side files are written next, and only
  then is the live file replaced, so every byte stays on disk.
"""
import os

import nagent_checkpoint as checkpoints
import nagent_conversation_lifecycle as lifecycle
from nagent_errors import InputError
from nagent_fs import atomic_write, write_unique
from nagent_llm import generate_text
from nagent_window_rebuild import (current_window, encode_window, rebuild_records, window_growth,
                                   window_settings)

REJECTED = "rejected"


def rejected_at(records, window):
    """The window size at the last rejected checkpoint attempt of this window (0: none)."""
    for record in reversed(records):
        if record.attr("carried") is not None:
            return 0  # the window starts after its carried records
        if record.kind == "error" and record.attr("checkpoint") == REJECTED \
                and str(record.attr("window")) == str(window):
            at = record.attr("at_bytes", "0")
            return int(at) if at.isdigit() else 0
    return 0


def refresh_checkpoint(run, now):
    """One checkpoint call covering the current window. Returns the new checkpoint text, or
    None when the model's reply was rejected (noted in the conversation)."""
    records = run.writer.records()
    size = os.path.getsize(run.session.path)
    window = current_window(records)
    checkpoints.retire_stale_checkpoint(run.session.path, window, size)
    settings = run.session.settings
    limit = max(20_000, window_settings(settings).window_max_bytes // 2)
    run.call_started("checkpoint")
    try:
        text, result, problem = checkpoints.write_checkpoint(
            run.session.path, records, size,
            lambda prompt: generate_text(prompt, settings, client=run.provider_client()),
            now, window=window, limit=limit)
    except BaseException as error:   # a failed or interrupted call still counts
        run.count_spent(error, "checkpoint")
        raise
    run.count_call(result)
    if problem:
        run.append("error", f"checkpoint rejected: {problem}; the previous checkpoint is kept "
                   f"({checkpoints.checkpoint_path(run.session.path)})",
                   {"checkpoint": REJECTED, "at_bytes": size, "window": window})
    return text


def maybe_checkpoint(run, now, every_bytes, size):
    records = run.writer.records()
    window = current_window(records)
    if checkpoints.retire_stale_checkpoint(run.session.path, window, size):
        meta = None
    else:
        _, meta = checkpoints.read_checkpoint(run.session.path)
    if meta and meta.get("window", 0) != window:
        meta = None
    # The scan for a rejected attempt runs only when a checkpoint would otherwise be due.
    if checkpoints.checkpoint_due(size, meta, every_bytes) and \
            checkpoints.checkpoint_due(size, meta, every_bytes, rejected_at(records, window)):
        refresh_checkpoint(run, now)
        return True
    return False


def rebuild_checkpoint(run, now):
    """The checkpoint text the new window carries: a fresh one, else the last good one."""
    text = refresh_checkpoint(run, now)
    if text is not None:
        return text
    text, problem = checkpoints.usable_checkpoint(run.session.path)
    if text:
        return text
    if problem:
        run.append("error", f"checkpoint not used: {problem}",
                   {"checkpoint": REJECTED, "at_bytes": os.path.getsize(run.session.path)})
    return ("(No checkpoint is available for the earlier part of this conversation; the archived "
            "window named above holds all of it: read it if you need earlier details.)")


def rebuild_window(run, now, reason="size"):
    """Archive the current window and start the next one from its checkpoint and tail."""
    path = run.session.path
    checkpoint = rebuild_checkpoint(run, now)
    records = run.writer.records()
    window = current_window(records) + 1
    mode = checkpoints.file_mode(path)
    with open(path, "rb") as handle:
        old = handle.read()
    archived = checkpoints.archive_copy(path, old, mode)
    new_records, side_files = rebuild_records(records, checkpoint, archived, window,
                                              window_settings(run.session.settings),
                                              lifecycle.side_dir(path))
    for side_path, data in side_files:
        if write_unique(side_path, data) != side_path:  # names embed the archive's: never taken
            raise InputError("side file name already taken", side_path, "move that file away")
    atomic_write(path, encode_window(new_records, now), mode)
    run.writer.reopen()
    run.windows = run.windows + [archived]
    run.record_stats()
    # The checkpoint now covers everything up to the new window's start.
    size = os.path.getsize(path)
    checkpoints.restamp(path, now, size, window)
    return {"archived": archived, "window": window, "reason": reason, "records": len(new_records),
            "side_files": [p for p, _ in side_files], "bytes_before": len(old), "bytes_after": size}


def maybe_compact(run, now, checkpoint=True):
    """Between turns: refresh the checkpoint when due (and `checkpoint`: the loop says False
    while the model is failing, so a failing run costs no extra call); rebuild when the window
    is too big."""
    w = window_settings(run.session.settings)
    try:
        size = os.path.getsize(run.session.path)
        if w.window_max_bytes > 0 and size > w.window_max_bytes and \
                window_growth(run.writer.records(), size) >= w.window_max_bytes // 4:
            return rebuild_window(run, now)
        if checkpoint:
            maybe_checkpoint(run, now, w.checkpoint_every_bytes, size)
    except OSError as error:
        raise io_error(run.session.path, error) from None
    return None


def io_error(path, error):
    return InputError("cannot write the checkpoint or new window", getattr(error, "filename", None)
                      or path, error.strerror or str(error))
