"""The zygote server (see tests/zygote.py): imports the SDKs and helpers once, then reads one JSON
job per line on stdin — warm, spawn, kill — and reports on stdout: `warm 0 CODE`,
`spawned ID PID`, `exit ID CODE`. A child is named by its job ID, never by its pid: the kernel
reuses pids (pid_max is 32768 here), and a pid's old exit must never answer for its new child.
argv[1] is bin/helpers. Single-threaded, so forking is safe."""
import json, os, runpy, select, sys
sys.path[0] = os.path.dirname(sys.argv[1])  # as for `python3 bin/TOOL`: bin/, not tests/
sys.path.insert(0, sys.argv[1])
# The imports every fresh tool pays for; the helpers' own import order is kept by importing
# the entry modules, which pull in the rest.
import openai, anthropic, google.genai, google.genai.types, yaml  # noqa: F401
import nagent_main, nagent_commands, nagent_loop, nagent_session, nagent_actions  # noqa: F401
import nagent_provider_openai, nagent_provider_anthropic, nagent_provider_google  # noqa: F401
try:
    import anyio, anyio.lowlevel, mcp, mcp.client.stdio, mcp.client.streamable_http  # noqa: F401
    import nagent_main_mcp, nagent_mcp_client  # noqa: F401
except ImportError:
    pass  # the optional MCP SDK: nagent-mcp runs then report it missing, as they would
children, buffer = {}, b""   # pid -> job id of each live child

def say(*words):
    sys.stdout.write(" ".join(map(str, words)) + "\n")
    sys.stdout.flush()

def exit_code(stop):
    if stop.code is None or isinstance(stop.code, int):
        return stop.code or 0
    print(stop.code, file=sys.stderr)
    return 1

def finish(code):
    # What interpreter shutdown does before the process ends: join non-daemon threads, run
    # atexit functions, flush the standard streams.
    import atexit, threading
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code & 0xFF)

def child(job):
    code = 1
    try:
        if job.get("detach"):
            os.setsid()  # a new session: no controlling terminal, as `setsid TOOL`
        import tempfile
        tempfile.tempdir = None  # a fresh process reads TMPDIR on first use
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        stdin = job.get("stdin") or os.devnull
        for fd, path, flags in ((0, stdin, os.O_RDONLY),
                                (1, job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o600)
            os.dup2(opened, fd)
            os.close(opened)
        sys.argv = [job["script"], *job["args"]]
        runpy.run_path(job["script"], run_name="__main__")
        code = 0
    except SystemExit as stop:
        code = exit_code(stop)
    except KeyboardInterrupt:
        import signal, traceback
        traceback.print_exc()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except BaseException:
        import traceback
        traceback.print_exc()
    finally:
        finish(code)

def warm(job):
    # One real run in the zygote itself: the SDK's lazy imports and type caches are filled
    # once here instead of in every child. What the run leaves in the process (signal
    # handlers, the dumpable flag, the temp dir cache) is put back.
    import contextlib, ctypes, gc, io, signal, tempfile
    saved, cwd = dict(os.environ), os.getcwd()
    handlers = {sig: signal.getsignal(sig) for sig in signal.valid_signals()
                if sig not in (signal.SIGKILL, signal.SIGSTOP)}
    os.environ.update(job["env"])
    os.chdir(job["cwd"])
    sys.argv = [job["script"], *job["args"]]
    code = 0
    # A tool's run() ends its process once its work is done (nagent_cli.exit_now): not this one.
    ending = nagent_main.exit_now
    nagent_main.exit_now = lambda code: code
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            runpy.run_path(job["script"], run_name="__main__")
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except BaseException:
        code = 1
    finally:
        nagent_main.exit_now = ending
    for sig, handler in handlers.items():
        if handler is not None:
            try:
                signal.signal(sig, handler)
            except (OSError, ValueError):
                pass
    ctypes.CDLL(None, use_errno=True).prctl(4, 1, 0, 0, 0)  # PR_SET_DUMPABLE back on
    tempfile.tempdir = None
    os.environ.clear()
    os.environ.update(saved)
    os.chdir(cwd)
    gc.collect()
    gc.freeze()  # children's collections then leave the shared pages alone (no copy-on-write)
    say("warm", 0, code)

while True:
    ready = select.select([0], [], [], 0.005)[0]
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            break
        say("exit", children.pop(pid), os.waitstatus_to_exitcode(status))
    data = os.read(0, 65536) if ready else b"-"
    if not data:
        break
    buffer += data if ready else b""
    while b"\n" in buffer:
        line, buffer = buffer.split(b"\n", 1)
        job = json.loads(line)
        if job["op"] == "warm":
            warm(job)
        elif job["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                child(job)
            children[pid] = job["id"]
            say("spawned", job["id"], pid)
        elif job["op"] == "kill" and job["id"] in children.values():
            os.kill(next(pid for pid, ident in children.items() if ident == job["id"]), 9)
for pid in children:
    os.kill(pid, 9)
