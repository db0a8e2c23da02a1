"""Talk to MCP servers through the official `mcp` SDK (2.x), imported only inside these calls.

Data contract (inputs are `nagent_mcp_config.Resolved` servers; outputs are plain wire dicts):
- `require_sdk()` imports the SDK or raises SetupError (exit 4) with the line that installs it
  into this install (nagent_install.install_command: pipx inject, uv tool, or pip).
- `list_tools(servers, base_env, timeout) -> [{name, tools: [{name, description, inputSchema}],
  error: NagentError | None, warning: str}]`, in the order given; the servers start concurrently, each under
  its own timeout, and one failing server does not hide the others' tools.
- `call_tool(server, tool, arguments, base_env, timeout) -> (result, warning)`: `result` is
  {content, structuredContent, isError} as the wire carries it (a tool's own failure is
  `isError`, not an exception); `warning` is "" or one line about non-JSON-RPC text on stdout
  from a server that worked anyway.
- A stdio server runs with `process_env(server, base_env)`, its stderr kept in a temp file
  (shown only when it fails) and in its own process group; on return, error, timeout, Ctrl-C,
  SIGTERM or SIGHUP the SDK closes its stdin, then SIGTERMs and SIGKILLs the group.
- For a connection kept open (the run's live servers, nagent_mcp_pool): `transport_for(server,
  base_env, watch)` is its SDK transport, `Watch(server)` what it saw (stage, stdout noise, the
  stderr kept aside; `warning()`), `all_tools(client, watch)` its tool list, and
  `translate(error, server, watch, timeout, stage)` the one NagentError for a failure.
Errors: SetupError (command not found / not executable); McpServerError (exit 5: the server did
not start, exited, timed out, could not be reached or broke the protocol); McpCallError (exit 1:
the server rejected the tools/call). Messages name the server and the likely cause: text a
stdio server printed to stdout that is not JSON-RPC is quoted (it probably logs to stdout), and
the end of its stderr is shown. Values `${VAR}` expansion inserted are redacted from messages.
"""
import json
import tempfile
from contextlib import asynccontextmanager

from nagent_errors import NagentError, SetupError
from nagent_install import install_command
from nagent_mcp_config import display_url, process_env
from nagent_secrets import redact as _redact
from nagent_terminal_text import counted

REQUIREMENT = "mcp>=2"
LIST_PAGE_CAP = 100
STDERR_TAIL = 600
HTTP_CONNECT_TIMEOUT = 30.0
STDOUT_FIX = ("it probably logs to stdout, or is not an MCP stdio server: stdout must carry only "
              "JSON-RPC, so make it log to stderr")


class McpServerError(NagentError):
    kind = "provider"


class McpCallError(NagentError):
    kind = "failure"


def require_sdk():
    try:
        import anyio  # noqa: F401
        from mcp import Client  # noqa: F401
        from mcp.client.stdio import stdio_client  # noqa: F401
        from mcp.client.streamable_http import streamable_http_client  # noqa: F401
    except ImportError as error:
        raise SetupError("the MCP SDK is not installed", f"import failed: {error}",
                         install_command(REQUIREMENT)) from None


class Watch:
    """What one connection saw: its stage, stdout lines that were not JSON-RPC, stderr."""

    def __init__(self, server):
        self.server = server
        self.stage = "start-up"
        self.noise = []
        self.noise_count = 0
        self.errlog = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") \
            if server.spec.transport == "stdio" else None

    async def on_message(self, message):
        import anyio.lowlevel
        if isinstance(message, Exception):
            self.noise_count += 1
            if len(self.noise) < 2:
                self.noise.append(_bad_line(message))
        await anyio.lowlevel.checkpoint()

    def stderr_tail(self):
        if self.errlog is None:
            return ""
        try:
            self.errlog.flush()
            self.errlog.seek(0, 2)
            size = self.errlog.tell()
            self.errlog.seek(max(0, size - 4 * STDERR_TAIL))
            text = self.errlog.read()
        except (OSError, ValueError):
            return ""
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        tail = " | ".join(lines[-3:])
        return tail[-STDERR_TAIL:]

    def warning(self):
        """One line when a server that worked also printed non-JSON-RPC text to stdout."""
        if not self.noise_count:
            return ""
        return _redact(f"MCP server {self.server.spec.name} printed {_noise_text(self)}: it logs to "
                       "stdout; make it log to stderr (stdout must carry only JSON-RPC)", self.server.secrets)

    def close(self):
        if self.errlog is not None:
            self.errlog.close()


def _bad_line(error):
    errors = getattr(error, "errors", None)
    if callable(errors):
        try:
            value = errors()[0].get("input")
            return (value if isinstance(value, str) else json.dumps(value, default=str))[:120]
        except (IndexError, TypeError, AttributeError, ValueError):
            pass
    return " ".join(f"{type(error).__name__}: {error}".split())[:120]


@asynccontextmanager
async def _http_transport(url, headers):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    timeout = httpx2.Timeout(HTTP_CONNECT_TIMEOUT, read=300.0)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
        async with streamable_http_client(url, http_client=http) as streams:
            yield streams


def transport_for(server, base_env, watch):
    if server.spec.transport == "http":
        return _http_transport(server.url, server.headers)
    from mcp.client.stdio import StdioServerParameters, stdio_client
    params = StdioServerParameters(command=server.command, args=list(server.args),
                                   env=process_env(server, base_env))
    return stdio_client(params, errlog=watch.errlog)


async def _connected(server, base_env, watch, timeout, work):
    """Connect, run `work(client)` and disconnect, all within `timeout` seconds."""
    import anyio
    from mcp import Client
    from mcp_types import Implementation
    with anyio.fail_after(timeout):
        client = Client(transport_for(server, base_env, watch), message_handler=watch.on_message, cache=None,
                        client_info=Implementation(name="nagent-mcp", version="1"))
        async with client:
            watch.stage = "ready"
            return await work(client, watch)


def _leaves(error):
    if isinstance(error, BaseExceptionGroup):
        for inner in error.exceptions:
            yield from _leaves(inner)
    else:
        yield error


def _cause(error):
    import anyio
    leaves = [leaf for leaf in _leaves(error) if not isinstance(leaf, anyio.get_cancelled_exc_class())]
    for wanted in (NagentError, TimeoutError):
        for leaf in leaves:
            if isinstance(leaf, wanted):
                return leaf
    return leaves[0] if leaves else error


def _noise_text(watch):
    count = watch.noise_count
    first = watch.noise[0] if watch.noise else ""
    return (f"{counted(count, 'line')} to stdout that {'are' if count != 1 else 'is'} "
            f"not JSON-RPC, first: {first!r}")


def _hints(watch):
    hints = []
    if watch.noise_count:
        hints.append("it printed " + _noise_text(watch))
    tail = watch.stderr_tail()
    if tail:
        hints.append(f"its stderr ends: {tail}")
    return "; ".join(hints)


def translate(error, server, watch, timeout, stage=None):
    """The one NagentError that explains why talking to `server` failed (`stage`: what was
    asked of it, when not `watch.stage`: a live server answers several callers at once)."""
    from mcp.shared.exceptions import MCPError
    cause = _cause(error)
    name = server.spec.name
    hints = _hints(watch)
    stdout_fix = STDOUT_FIX
    stage = stage or watch.stage

    def detail(text):
        return _redact(f"{name}: {text}" + (f"; {hints}" if hints else ""), server.secrets)

    if isinstance(cause, NagentError):
        return cause
    if isinstance(cause, TimeoutError):
        return McpServerError("MCP server did not answer in time",
                              detail(f"no answer within {timeout:g} s during {stage}; it was stopped"),
                              stdout_fix if watch.noise_count else "raise --timeout if it needs longer")
    if isinstance(cause, FileNotFoundError) and server.spec.transport == "stdio" and stage == "start-up":
        return SetupError("MCP server command not found", _redact(f"{name}: {server.command}", server.secrets),
                          f"check mcp_servers.{name}.command and PATH")
    if isinstance(cause, PermissionError) and server.spec.transport == "stdio" and stage == "start-up":
        return SetupError("MCP server command cannot be run", _redact(f"{name}: {server.command}", server.secrets),
                          f"check that mcp_servers.{name}.command is executable")
    if isinstance(cause, MCPError):
        from mcp_types import CONNECTION_CLOSED
        if cause.code == CONNECTION_CLOSED:
            gone = "exited" if server.spec.transport == "stdio" else "closed the connection"
            fix = stdout_fix if watch.noise_count else (
                "run its command by hand to see why" if server.spec.transport == "stdio" else "")
            return McpServerError(f"MCP server {gone}", detail(f"during {stage}"), fix)
        message = f"{cause.message} (code {cause.code})"
        if stage.startswith("tools/call"):
            return McpCallError("MCP server rejected the tool call", detail(f"{stage}: {message}"))
        fix = "check the url (often it ends in /mcp)" if server.spec.transport == "http" else ""
        return McpServerError("MCP server refused the request", detail(f"{stage}: {message}"), fix)
    module = type(cause).__module__ or ""
    if module.startswith("httpx2"):
        return McpServerError("cannot reach MCP server", detail(f"{display_url(server.url)}: {type(cause).__name__}: {cause}"),
                              "is the server running, and is the url right?")
    if module.startswith("pydantic"):
        first = str(cause).splitlines()[0] if str(cause) else type(cause).__name__
        return McpServerError("MCP server sent an invalid reply", detail(f"during {stage}: {first}"))
    text = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    return McpServerError("MCP server failed", detail(f"during {stage}: {text}"))


async def _guarded(server, base_env, timeout, work):
    """Run one connection; returns (value, None, warning) or (None, NagentError, "")."""
    watch = Watch(server)
    try:
        value = await _connected(server, base_env, watch, timeout, work)
        return value, None, watch.warning()
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as error:  # noqa: B036 - groups and cancellation are sorted out below
        import anyio
        if isinstance(error, anyio.get_cancelled_exc_class()):
            raise
        return None, translate(error, server, watch, timeout), ""
    finally:
        watch.close()


def quiet_sdk_logging():
    # The SDK logs parse failures with tracebacks; nagent-mcp reports them as one line instead.
    import logging
    for name in ("mcp", "mcp_types", "httpx2", "httpcore2"):
        logger = logging.getLogger(name)
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


def _run(coroutine_fn):
    """anyio.run, where SIGTERM and SIGHUP cancel the work like Ctrl-C does: the SDK's shielded
    shutdown then stops the server (its own process group would outlive a plain kill of us)."""
    import signal
    import threading

    import anyio
    quiet_sdk_logging()
    outcome, stopped = [], []

    async def main():
        async with anyio.create_task_group() as group:
            if threading.current_thread() is threading.main_thread():
                async def on_signal():
                    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
                        async for signum in signals:
                            stopped.append(signum)
                            group.cancel_scope.cancel()
                            return
                group.start_soon(on_signal)
            outcome.append(await coroutine_fn())
            group.cancel_scope.cancel()

    anyio.run(main)
    if stopped or not outcome:
        raise KeyboardInterrupt
    return outcome[0]


async def all_tools(client, watch):
    tools, cursor = [], None
    for _ in range(LIST_PAGE_CAP):
        watch.stage = "tools/list"
        page = await client.list_tools(cursor=cursor)
        tools.extend(tool.model_dump(mode="json", by_alias=True, exclude_none=True) for tool in page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def list_tools(servers, base_env, timeout):
    require_sdk()
    import anyio
    results = [None] * len(servers)

    async def one(index, server):
        tools, error, warning = await _guarded(server, base_env, timeout, all_tools)
        results[index] = {"name": server.spec.name, "tools": tools or [], "error": error, "warning": warning}

    async def main():
        async with anyio.create_task_group() as group:
            for index, server in enumerate(servers):
                group.start_soon(one, index, server)

    _run(main)
    return results


def call_tool(server, tool, arguments, base_env, timeout):
    require_sdk()

    async def work(client, watch):
        watch.stage = f"tools/call {tool}"
        result = await client.call_tool(tool, arguments)
        return result.model_dump(mode="json", by_alias=True, exclude_none=True)

    async def main():
        return await _guarded(server, base_env, timeout, work)

    value, error, warning = _run(main)
    if error is not None:
        raise error
    return value, warning
