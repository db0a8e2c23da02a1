#!/usr/bin/env python3
"""A small MCP server for nagent's tests, written with the official SDK's server API (MCPServer).

usage: mcp_server.py [--http] [--pollute] [--junk] [--exit-at-start] [--hostile] [--meet N]

- default: serves over stdio.
- --http: serves streamable HTTP on 127.0.0.1 on a free port and prints "PORT <n>" on stdout.
- --pollute: prints a banner line to stdout before serving (a server that logs to stdout).
- --junk: not an MCP server at all: prints text to stdout and waits, never answering (and
  ignores its stdin closing). It and the sleep tool write their pid to $MCP_TEST_PIDFILE if set.
- --exit-at-start: writes a complaint to stderr and exits 3 before serving.
- --hostile: adds a tool whose name, description and enum values carry terminal controls
  (ESC, C1 CSI, CR, bidi override): HOSTILE_NAME, HOSTILE_DESCRIPTION.
- --meet N: before serving, waits until $MCP_TEST_STARTS holds N starts (up to MEET_WAIT
  seconds, then exits 4): servers started one after the other never meet, so a test that needs
  N of them up at once proves they were started in parallel.

Tools: echo, describe_path, add, fail, sleep, image, blob, env, headers, crash, counter (state
kept in the process: `counter(step)` says the count so far and the server's pid).
Each start appends the server's pid to $MCP_TEST_STARTS, if set (tests count starts with it).
"""
import os
import sys
import time

PNG_1PX = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360f8cfc0f01f0005000201a5d4a5ea0000000049454e44ae426082")
BLOB = bytes(range(256))
HOSTILE = "\x1b[2J\x9b2J\u202e\r\x07"
HOSTILE_NAME = "evil" + HOSTILE
HOSTILE_DESCRIPTION = "Clears" + HOSTILE + "the screen\u2066 and\x85 more"
MEET_WAIT = 30.0


def write_pidfile():
    if os.environ.get("MCP_TEST_PIDFILE"):
        with open(os.environ["MCP_TEST_PIDFILE"], "w") as handle:
            handle.write(str(os.getpid()))


def build_server():
    import anyio
    from mcp.server.mcpserver import Context, Image, MCPServer
    from mcp.server.mcpserver.exceptions import ToolError

    server = MCPServer("nagent-test-server")
    state = {"count": 0}

    @server.tool()
    def echo(text: str) -> str:
        """Return the text unchanged.

        A second paragraph the one-line listing must not show."""
        return text

    @server.tool()
    def describe_path(path: str, depth: int = 1) -> str:
        """Describe a path to some depth."""
        return f"{path} at depth {depth}"

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers."""
        return a + b

    @server.tool()
    def fail(message: str) -> str:
        """Always fails with the given message."""
        raise ToolError(message)

    @server.tool()
    async def sleep(seconds: float) -> str:
        """Sleep, then say so (writes the server's pid to $MCP_TEST_PIDFILE first, if set)."""
        write_pidfile()
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def image() -> Image:
        """A one-pixel PNG."""
        return Image(data=PNG_1PX, format="png")

    @server.tool()
    def blob() -> list:
        """Some text, an image and an embedded binary resource."""
        import base64
        from mcp_types import BlobResourceContents, EmbeddedResource, TextContent
        return [TextContent(text="here is the blob"), Image(data=PNG_1PX, format="png").to_image_content(),
                EmbeddedResource(resource=BlobResourceContents(
                    uri="test://blob.bin", mime_type="application/octet-stream",
                    blob=base64.b64encode(BLOB).decode()))]

    @server.tool()
    def env(names: list[str]) -> str:
        """Environment variables of the server's process as NAME=value lines (<unset> if unset)."""
        return "\n".join(f"{name}={os.environ.get(name, '<unset>')}" for name in names)

    @server.tool()
    def headers(names: list[str], ctx: Context) -> str:
        """HTTP request headers as name=value lines (streamable HTTP only; <none> if absent)."""
        request = ctx.request_context.request  # the HTTP request (a Starlette Request), None on stdio
        found = request.headers if request is not None else {}
        return "\n".join(f"{name}={found.get(name, '<none>')}" for name in names)

    @server.tool()
    def counter(step: int = 1) -> str:
        """Add `step` to this server process's count; say the count and the process's pid."""
        state["count"] += step
        return f"count={state['count']} pid={os.getpid()}"

    @server.tool()
    def crash() -> str:
        """Exit the server process in the middle of the call."""
        sys.stderr.write("test server: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(7)

    if "--hostile" in sys.argv[1:]:
        from typing import Literal

        def hostile(mode: Literal["a\u202eb", "c\x9bd"]) -> str:
            return mode
        server.add_tool(hostile, name=HOSTILE_NAME, description=HOSTILE_DESCRIPTION)
    return server


def serve_http(server):
    import socket

    import anyio
    import uvicorn
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the port is printed: a client that connects while uvicorn still starts
    # waits in the backlog instead of being refused (a loaded machine made that a flaky test).
    sock.listen(64)
    app = server.streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    sys.stdout.write(f"PORT {sock.getsockname()[1]}\n")
    sys.stdout.flush()
    anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))


def record_start():
    if os.environ.get("MCP_TEST_STARTS"):
        with open(os.environ["MCP_TEST_STARTS"], "a") as handle:
            handle.write(f"{os.getpid()}\n")


def meet(count):
    deadline = time.monotonic() + MEET_WAIT
    while time.monotonic() < deadline:
        with open(os.environ["MCP_TEST_STARTS"]) as handle:
            if len(handle.read().split()) >= count:
                return True
        time.sleep(0.02)
    sys.stderr.write(f"test server: the other {count - 1} server(s) never started beside this one\n")
    return False


def main(argv):
    record_start()
    if "--meet" in argv and not meet(int(argv[argv.index("--meet") + 1])):
        return 4
    if "--exit-at-start" in argv:
        sys.stderr.write("test server: missing configuration file /nonexistent/settings.toml\n")
        return 3
    if "--junk" in argv:
        write_pidfile()
        sys.stdout.write("Hello! This program prints a greeting and waits.\n")
        sys.stdout.flush()
        time.sleep(3600)
        return 0
    if "--pollute" in argv:
        sys.stdout.write("INFO starting nagent-test-server v1.0 on stdio\n")
        sys.stdout.flush()
    server = build_server()
    if "--http" in argv:
        serve_http(server)
    else:
        server.run("stdio")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
