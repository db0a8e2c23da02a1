"""How a tool's process ends once its work is done.

Data contract:
- `exit_now(code)`: a tool's last call once its work is done (nagent_main.run): flushes stdout and
  stderr, runs the atexit functions, and ends the process with `code` (os._exit), skipping the
  interpreter's teardown (0.3-0.5 s of freeing every module's objects once a provider SDK is
  loaded; it keeps no data). It returns `code` for the ordinary exit instead when a stream
  cannot be flushed (a closed pipe: the interpreter reports it as it always did), a
  non-daemon thread is still running (the ordinary exit waits for it), or a profiler or tracer
  is on (it writes its data at the ordinary exit).
"""
import atexit
import os
import sys
import threading


def _flushed():
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):   # a closed pipe or stream
            return False
    return True


def exit_now(code):
    """End the process with `code` now; see the module's contract. Every record of a run is
    already in its file (one os.write each, the same as at an ordinary exit), and the run's
    files are closed by then: what is skipped only frees memory."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        return code   # a profiler or a tracer (cProfile, coverage) writes its data at the end
    current = threading.current_thread()
    if any(thread is not current and not thread.daemon and thread.is_alive()
           for thread in threading.enumerate()):
        return code
    if not _flushed():
        return code
    atexit._run_exitfuncs()
    if not _flushed():
        return code
    os._exit(code if isinstance(code, int) else 1)
