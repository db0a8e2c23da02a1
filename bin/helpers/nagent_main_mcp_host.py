"""The run's MCP host, a process main (so a dispatch point: it imports the pool, and with it
anyio, only once the SDK is known to be there): the process that keeps one run's MCP servers up
(nagent_mcp_pool) and
answers the `nagent-mcp` commands of the run's shell actions (nagent_mcp_wire).

Data contract: the driver starts it (nagent_mcp_channel) as `module_argv("nagent_main_mcp_host") +
[FD, PID]` in a session of its own, in the run's working directory, with the shell actions'
scrubbed environment (no provider key ever enters it) — FD is its end of a SOCK_SEQPACKET
socketpair with the driver, PID the driver's pid:
- the first message on FD is the bootstrap, JSON: {"servers": [ServerSpec fields], "deny":
  [{name, pattern, source, index}], "base_env": {...}}: the servers the driver's settings hold,
  the MCP deny rules its session read when it started, and the environment a stdio server
  starts with (its entry's `env` added; `${VAR}` reads the host's own environment). Nothing a
  shell command sends can change them.
- every later message carries one client connection (SCM_RIGHTS) that the driver accepted and
  vetted (nagent_mcp_channel); the host never listens itself. Each gets one answer
  (nagent_mcp_wire) and is closed; a client that hangs up drops its call (the server stays).
- It stops on EOF of FD, on SIGTERM, SIGHUP or SIGINT, and when the driver dies however it dies
  (PR_SET_PDEATHSIG: SIGTERM). Stopping closes every server's stdin (the MCP shutdown), and
  SHUTDOWN_GRACE seconds later SIGKILLs whatever of its process tree is left, each group whole.
- Without the SDK every connection is answered with the SetupError that says how to install it.
Exit code 0; 3 for a bootstrap it cannot read; 1 when the driver was gone before it started.
"""
import json
import os
import signal
import socket
import sys
import threading

from nagent_errors import NagentError, SetupError
from nagent_mcp_client import quiet_sdk_logging, require_sdk
from nagent_mcp_config import ServerSpec
from nagent_mcp_wire import MAX_REQUEST, encode, request_of
from nagent_permissions import Rule
from nagent_procs import die_with_parent, kill_tree, process_tree
from nagent_secrets import make_undumpable

MAX_BOOTSTRAP = 4 << 20
SHUTDOWN_GRACE = 1.0
REQUEST_WAIT = 30.0     # a connection that sends no whole request in this long is dropped
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def specs_of(bootstrap):
    return tuple(ServerSpec(name=s["name"], transport=s["transport"], command=s.get("command", ""),
                            args=tuple(s.get("args", ())), env=tuple(map(tuple, s.get("env", ()))),
                            url=s.get("url", ""), headers=tuple(map(tuple, s.get("headers", ()))))
                 for s in bootstrap["servers"])


def rules_of(bootstrap):
    return tuple(Rule(name=r.get("name", ""), decision="deny", target="mcp", pattern=r["pattern"],
                      source=r.get("source", ""), index=r.get("index", 0)) for r in bootstrap["deny"])


def _hard_stop():
    """The end of the grace: every process of the tree left goes, then this one."""
    kill_tree(process_tree(os.getpid()), os.getpgrp())
    os._exit(0)


class _Stopping:
    """Arms the hard stop once, when the host starts to stop."""

    def __init__(self):
        self.armed = False

    def __call__(self, scope):
        if not self.armed:
            self.armed = True
            timer = threading.Timer(SHUTDOWN_GRACE, _hard_stop)
            timer.daemon = True
            timer.start()
        scope.cancel()


async def _dispatch(pool, request):
    if request["op"] == "call":
        return await pool.call(request["server"], request["tool"], request["arguments"],
                               request["timeout"])
    return await pool.list(request["server"], request["timeout"])


async def _answer(pool, fd):
    import anyio
    from anyio.abc import UNIXSocketStream
    from anyio.streams.buffered import BufferedByteReceiveStream
    stream = await UNIXSocketStream.from_socket(socket.socket(fileno=fd))
    async with stream:
        try:
            with anyio.fail_after(REQUEST_WAIT):
                line = await BufferedByteReceiveStream(stream).receive_until(b"\n", MAX_REQUEST)
            request = request_of(line)
        except NagentError as error:
            await _send(stream, {"error": error.as_dict()})
            return
        except (TimeoutError, anyio.IncompleteRead, anyio.DelimiterNotFound, anyio.BrokenResourceError,
                OSError):
            return
        answer = None
        async with anyio.create_task_group() as group:
            async def hang_up():
                try:
                    while True:
                        await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
                    group.cancel_scope.cancel()   # the caller is gone: its call is dropped

            group.start_soon(hang_up)
            try:
                answer = await _dispatch(pool, request)
            except NagentError as error:
                answer = {"error": error.as_dict()}
            except Exception as error:  # noqa: BLE001 - a bug here must still answer the caller
                answer = {"error": {"error": "internal error in the run's MCP host", "value":
                                    f"{type(error).__name__}: {error}", "fix": "", "kind": "failure"}}
            group.cancel_scope.cancel()
        if answer is not None:
            await _send(stream, answer)


async def _send(stream, answer):
    import anyio
    try:
        await stream.send(encode(answer))
    except (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError):
        pass


async def _clients(control, pool, group, stopping):
    import anyio
    control.setblocking(False)
    while True:
        await anyio.wait_readable(control)
        try:
            data, fds, _flags, _address = socket.recv_fds(control, 16, 8)
        except BlockingIOError:
            continue
        except OSError:
            data, fds = b"", []
        if not data and not fds:          # the driver closed its end, or is gone
            stopping(group.cancel_scope)
            return
        for fd in fds:
            group.start_soon(_answer, pool, fd)


async def _signals(group, stopping):
    import anyio
    try:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as received:
            async for _signum in received:
                stopping(group.cancel_scope)
    finally:
        # Leaving the receiver restores the default actions: a second signal would then end
        # the host in the middle of stopping its servers (the hard stop still comes).
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN)


async def _serve(control, specs, rules, base_env):
    import anyio
    from nagent_mcp_pool import Pool   # it imports anyio: only once require_sdk passed
    stopping = _Stopping()
    async with anyio.create_task_group() as group:
        pool = Pool(specs, rules, os.environ, base_env, group)
        group.start_soon(_signals, group, stopping)
        group.start_soon(_clients, control, pool, group, stopping)


def _refuse_all(control, error):
    """No SDK: every caller hears why, until the driver closes its end."""
    while True:
        try:
            data, fds, _flags, _address = socket.recv_fds(control, 16, 8)
        except OSError:
            return
        if not data and not fds:
            return
        for fd in fds:
            with socket.socket(fileno=fd) as client:
                try:
                    client.sendall(encode({"error": error.as_dict()}))
                except OSError:
                    pass


def main(argv):
    control_fd, parent = int(argv[0]), int(argv[1])
    if not die_with_parent(parent):
        return 1
    make_undumpable()
    control = socket.socket(fileno=control_fd)
    try:
        bootstrap = json.loads(control.recv(MAX_BOOTSTRAP))
        specs, rules, base_env = specs_of(bootstrap), rules_of(bootstrap), dict(bootstrap["base_env"])
    except (OSError, ValueError, KeyError, TypeError):
        return 3
    try:
        require_sdk()
    except SetupError as error:
        _refuse_all(control, error)
        return 0
    import anyio
    quiet_sdk_logging()
    try:
        anyio.run(_serve, control, specs, rules, base_env)
    except KeyboardInterrupt:
        pass
    kill_tree(process_tree(os.getpid()), os.getpgrp())   # anything a server left behind
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
