"""Processes nagent starts, and how they end: process groups, trees, and exit signals.

Data contract:
- `exit_signals()` raises nagent_errors.ExitSignal (a BaseException, like KeyboardInterrupt)
  in the main thread when SIGTERM or SIGHUP arrives inside the block; `.name` is
  "SIGTERM"/"SIGHUP", `.exit_code` 128 + the signal number (143, 129). Inside the block only the first such signal raises; later ones are ignored, so
  the cleanup the first one triggers (ending the running shell group, appending the interrupt
  record) runs to the end. Outside the main thread the block installs nothing.
- `wait(proc, timeout)`: proc.wait(timeout), woken the moment the process exits (a pidfd)
  instead of subprocess's polling, which adds up to twice a short command's own run time.
  Raises subprocess.TimeoutExpired like proc.wait.
- `end_group(proc, grace)`: SIGTERM to the process group `proc` leads (it was started with
  start_new_session=True), SIGKILL to whatever is left after `grace` seconds, then reap `proc`.
- `process_tree(pid)` -> [(pid, pgid, start time)] of every live descendant of `pid`, read from
  /proc. `kill_tree(snapshot, own_pgid)` SIGKILLs each snapshot entry that is still the same
  process (same start time): its whole group when that group is not our own, else the process.
- `end_process_tree(proc, grace, signals=(SIGTERM,))`: how a parent ends a child nagent (started
  with stdout/stderr pipes) that owns shell commands in sessions of their own. Each entry of
  `signals` is sent in turn (None: send nothing, the child already got the signal, e.g. Ctrl-C
  from the terminal) and followed by up to `grace` seconds of draining its pipes while it ends
  its own shell groups and records why; then the child and every descendant it left are
  SIGKILLed (snapshots taken along the way, so nothing reparented to init escapes). Returns
  (stdout, stderr) collected.
- `end_process_trees(procs, grace, signals=(SIGTERM,))`: the same for several children at once
  (a batch of sub-agents), sharing each grace period; their output must go to files, not pipes
  (nothing drains them here). Returns when every child and every descendant it left is gone.
- `die_with_parent(parent, signum=SIGTERM)`: this process gets `signum` when the thread that
  started it ends (PR_SET_PDEATHSIG: also when the parent is killed with SIGKILL); False when
  `parent` is no longer its parent (it died before the call) or the kernel refused.
- /proc is read through nagent_pids (proc_stat, start_ticks).
"""
import contextlib
import os
import select
import signal
import subprocess
import threading
import time

from nagent_errors import ExitSignal
from nagent_pids import proc_stat

EXIT_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


@contextlib.contextmanager
def exit_signals():
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    fired = []

    def handler(signum, _frame):
        if not fired:
            fired.append(signum)
            raise ExitSignal(signum)

    previous = {signum: signal.signal(signum, handler) for signum in EXIT_SIGNALS}
    try:
        yield
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)


def wait(proc, timeout):
    try:
        fd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):   # no pidfd here (old kernel), or already reaped
        return proc.wait(timeout=timeout)
    try:
        if not select.select([fd], [], [], timeout)[0]:
            raise subprocess.TimeoutExpired(proc.args, timeout)
    finally:
        os.close(fd)
    return proc.wait()


PR_SET_PDEATHSIG = 1


def die_with_parent(parent, signum=signal.SIGTERM):
    try:
        import ctypes   # only the few processes that need it pay for it
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signum), 0, 0, 0) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return os.getppid() == parent   # set after the parent died: nothing would ever fire


# -- process groups ---------------------------------------------------------------------

def _all_stats():
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    stats = {}
    for name in names:
        if name.isdigit():
            info = proc_stat(name)
            if info and info[0] not in (b"Z", b"X"):
                stats[int(name)] = info
    return stats


def group_alive(pgid):
    """True while a non-zombie process is in the group (zombies answer kill(0) too)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return any(info[2] == pgid for info in _all_stats().values())


def signal_group(pgid, signum):
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def end_group(proc, grace):
    pgid = proc.pid
    if proc.poll() is not None and not group_alive(pgid):
        return
    signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_alive(pgid):
            break
        time.sleep(0.02)
    signal_group(pgid, signal.SIGKILL)
    proc.wait()


# -- process trees ----------------------------------------------------------------------

def process_tree(pid):
    stats = _all_stats()
    children = {}
    for child, info in stats.items():
        children.setdefault(info[1], []).append(child)
    found, pending = [], list(children.get(pid, ()))
    while pending:
        current = pending.pop()
        info = stats[current]
        found.append((current, info[2], info[3]))
        pending.extend(children.get(current, ()))
    return found


def kill_tree(snapshot, own_pgid):
    for pid, pgid, started in snapshot:
        info = proc_stat(pid)
        if not info or info[3] != started:
            continue   # gone, or the pid now belongs to someone else
        try:
            if pgid != own_pgid and pgid > 1:
                os.killpg(pgid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def end_process_tree(proc, grace, signals=(signal.SIGTERM,)):
    own = os.getpgrp()
    snapshot = process_tree(proc.pid)
    out, err = "", ""
    for signum in signals:
        if proc.poll() is not None:
            break
        if signum is not None:
            try:
                proc.send_signal(signum)
            except ProcessLookupError:
                break
        try:
            out, err = proc.communicate(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            snapshot += process_tree(proc.pid)
    if proc.poll() is None:
        snapshot += process_tree(proc.pid)
        proc.kill()
    kill_tree(snapshot + process_tree(proc.pid), own)
    try:
        more_out, more_err = proc.communicate(timeout=grace)
        out, err = (out or more_out or ""), (err or more_err or "")
    except (subprocess.TimeoutExpired, ValueError):
        pass   # something outside the tree holds the pipes: keep what we have
    proc.wait()
    return out or "", err or ""


def end_process_trees(procs, grace, signals=(signal.SIGTERM,)):
    own = os.getpgrp()
    procs = [proc for proc in procs if proc is not None]
    snapshot = [entry for proc in procs for entry in process_tree(proc.pid)]
    for signum in signals:
        alive = [proc for proc in procs if proc.poll() is None]
        if not alive:
            break
        if signum is not None:
            for proc in alive:
                try:
                    proc.send_signal(signum)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + grace
        while alive and time.monotonic() < deadline:
            # Descendants are reparented when their nagent exits: keep them in the snapshot.
            snapshot += [entry for proc in alive for entry in process_tree(proc.pid)]
            time.sleep(0.05)
            alive = [proc for proc in alive if proc.poll() is None]
    for proc in procs:
        if proc.poll() is None:
            snapshot += process_tree(proc.pid)
            proc.kill()
    kill_tree(snapshot + [entry for proc in procs for entry in process_tree(proc.pid)], own)
    for proc in procs:
        proc.wait()
