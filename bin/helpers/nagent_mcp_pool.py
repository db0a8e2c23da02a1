"""The run's live MCP servers, inside the run's host process (nagent_main_mcp_host): each configured
server is started once, on the first call that needs it, and stays up, with its state, until
the host stops.

Data contract:
- `Pool(specs, rules, environ, base_env, group)`: `specs` are the driver's
  nagent_mcp_config.ServerSpec, `rules` the deny rules it read when its session started
  (nagent_permissions.Rule), `environ` what `${VAR}` reads (the shell actions' scrubbed
  environment), `base_env` what a stdio server starts with before its entry's `env` (what the
  run's shell commands get), `group` the anyio task group the servers live in (cancelling it
  stops them).
- `await pool.call(server, tool, arguments, timeout) -> {"result", "warning"}`: the deny rules
  first (nagent_policy.mcp_deny_line: RefusedError, exit 10), then the server by name
  (UsageError when not configured), started if it is not up (concurrent callers share one
  start), then tools/call; `result` is the wire result with the server's secrets blanked
  (nagent_mcp_wire.redact_result). `timeout` covers the start-up and the call, as a cold
  `nagent-mcp call` does.
- `await pool.list(server, timeout) -> {"servers": [{name, transport, tools, error, warning}]}`:
  one named server or every configured one; they start in parallel; `error` is
  NagentError.as_dict() or None, one server's failure does not hide the others' tools.
A failure of the server (it exited, timed out, broke the protocol: McpServerError, exit 5) stops
it, and the next call starts it afresh; a call it rejected (McpCallError) or a tool error leaves
it up. A server found gone before a call (it exited while idle) is started again and the call's
warning says its state is gone. Errors are nagent_mcp_client.translate's, as for a cold call.
"""
import anyio

from nagent_errors import NagentError, RefusedError
from nagent_mcp_client import McpCallError, Watch, all_tools, transport_for, translate
from nagent_mcp_config import find_server, resolve
from nagent_mcp_wire import redact_result
from nagent_policy import mcp_deny_line

DENY_FIX = "the permission rules deny this MCP tool"


class _Stage:
    """What one caller asks of a live server (several callers share its Watch)."""

    def __init__(self, stage):
        self.stage = stage


class _EndAware:
    """A transport's read stream that notes when the server's side has ended (it exited)."""

    def __init__(self, stream, live):
        self._stream = stream
        self._live = live

    async def receive(self):
        try:
            return await self._stream.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            self._live.gone = True
            raise

    def __aiter__(self):
        return self

    async def __anext__(self):
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self):
        await self._stream.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        await self.aclose()

    def __getattr__(self, name):   # last_context and the like, when the stream has them
        return getattr(self._stream, name)


class _Watched:
    """The server's SDK transport, its read stream wrapped in _EndAware."""

    def __init__(self, transport, live):
        self._transport = transport
        self._live = live

    async def __aenter__(self):
        read, write = await self._transport.__aenter__()
        return _EndAware(read, self._live), write

    async def __aexit__(self, *exc_info):
        return await self._transport.__aexit__(*exc_info)


class LiveServer:
    """One started server: its SDK client, held open by `run` (the task that owns it)."""

    def __init__(self, server, base_env):
        self.server = server
        self.base_env = base_env
        self.watch = Watch(server)
        self.client = None
        self.error = None
        self.gone = False           # its side ended, or its task did: a new call starts it again
        self.up = False             # it answered the handshake
        self.stopped = False        # the pool stopped it (after a failure it reported)
        self.ready = anyio.Event()
        self.done = anyio.Event()
        self.scope = anyio.CancelScope()

    async def run(self):
        from mcp import Client
        from mcp_types import Implementation
        try:
            with self.scope:
                client = Client(_Watched(transport_for(self.server, self.base_env, self.watch), self),
                                message_handler=self.watch.on_message, cache=None,
                                client_info=Implementation(name="nagent-mcp", version="1"))
                async with client:
                    self.client = client
                    self.up = True
                    self.watch.stage = "ready"
                    self.ready.set()
                    await anyio.sleep_forever()
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:  # noqa: B036 - groups and cancellation are sorted out here
            if isinstance(error, anyio.get_cancelled_exc_class()):
                raise
            self.error = translate(error, self.server, self.watch, 0)
        finally:
            self.gone = True
            self.client = None
            self.ready.set()
            self.done.set()
            self.watch.close()

    def stop(self):
        self.gone = self.stopped = True
        self.scope.cancel()


class Pool:
    def __init__(self, specs, rules, environ, base_env, group):
        self.specs = tuple(specs)
        self.rules = tuple(rules)
        self.environ = dict(environ)
        self.base_env = dict(base_env)
        self.group = group
        self.live = {}

    def _get(self, name):
        """(LiveServer, note): the server's live session, started when it is not up."""
        live = self.live.get(name)
        note = ""
        if live is not None and live.gone:
            if live.up and not live.stopped:   # it ended on its own while nobody called it
                note = (f"MCP server {name} had exited since its last call; it was started "
                        "again, and what it held is gone")
            live.stop()
            live = None
        if live is None:
            server = resolve(find_server(self.specs, name), self.environ)
            live = LiveServer(server, self.base_env)
            self.live[name] = live
            self.group.start_soon(live.run)
        return live, note

    async def _ready(self, live, deadline, timeout):
        with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
            await live.ready.wait()
        if live.error is not None:
            raise live.error
        if live.client is None:
            live.stop()
            raise translate(TimeoutError(), live.server, live.watch, timeout, "start-up")
        return live.client

    def _failed(self, error, live, timeout, stage):
        failure = translate(error, live.server, live.watch, timeout, stage)
        if not isinstance(failure, McpCallError):
            live.stop()   # exited, timed out or broke the protocol: the next call starts it again
        return failure

    async def call(self, name, tool, arguments, timeout):
        refused = mcp_deny_line(self.rules, name, tool)
        if refused:
            raise RefusedError(refused[2:], f"{name}/{tool}", DENY_FIX)
        deadline = anyio.current_time() + timeout
        live, note = self._get(name)
        client = await self._ready(live, deadline, timeout)
        stage = f"tools/call {tool}"
        try:
            with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                result = await client.call_tool(tool, arguments)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as error:  # noqa: B036 - as in LiveServer.run
            if isinstance(error, anyio.get_cancelled_exc_class()):
                raise
            raise self._failed(error, live, timeout, stage) from None
        wire = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return {"result": redact_result(wire, live.server.secrets),
                "warning": "; ".join(part for part in (note, live.watch.warning()) if part)}

    async def _listed(self, spec, deadline, timeout):
        entry = {"name": spec.name, "transport": spec.transport, "tools": [], "error": None,
                 "warning": ""}
        try:
            live, note = self._get(spec.name)
            client = await self._ready(live, deadline, timeout)
            stage = _Stage("tools/list")
            try:
                with anyio.fail_after(max(0.0, deadline - anyio.current_time())):
                    entry["tools"] = await all_tools(client, stage)
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as error:  # noqa: B036 - as in LiveServer.run
                if isinstance(error, anyio.get_cancelled_exc_class()):
                    raise
                raise self._failed(error, live, timeout, stage.stage) from None
            entry["warning"] = "; ".join(part for part in (note, live.watch.warning()) if part)
        except NagentError as error:
            entry["error"] = error.as_dict()
        return entry

    async def list(self, name, timeout):
        specs = (find_server(self.specs, name),) if name else self.specs
        deadline = anyio.current_time() + timeout
        entries = [None] * len(specs)

        async def one(index, spec):
            entries[index] = await self._listed(spec, deadline, timeout)

        async with anyio.create_task_group() as group:
            for index, spec in enumerate(specs):
                group.start_soon(one, index, spec)
        return {"servers": entries}
