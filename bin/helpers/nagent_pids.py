"""What /proc says about a process: its state, parent, group and start time.

Data contract: `proc_stat(pid)` -> (state bytes, ppid, pgid, start ticks) from /proc/PID/stat, or
None when it cannot be read; `start_ticks(pid)` -> the start time (clock ticks since boot, field
22) of a live process, or None when no such process lives (a zombie counts as gone). With the
pid, the start time names one process: a reused pid is never mistaken for it.
`session_of(pid)` -> the process's session id (field 6), or None. `controlling_tty(pid="self")` -> the device number of the process's controlling terminal
(field 7, tty_nr), 0 when it has none or /proc cannot say. Nothing is imported, so commands
that merely read run files (--ps, --status) stay cheap to start.
"""


def proc_stat(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2]), int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def start_ticks(pid):
    info = proc_stat(pid)
    return None if info is None or info[0] in (b"Z", b"X") else info[3]


def session_of(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[3])
    except (OSError, IndexError, ValueError):
        return None


def controlling_tty(pid="self"):
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[4])
    except (OSError, IndexError, ValueError):
        return 0
