"""The run's MCP channel, as a wire: what `nagent-mcp` sends to the run's live MCP sessions and
what comes back (no SDK, no config).

Data contract:
- `CHANNEL_VAR` ("NAGENT_MCP_CHANNEL") names the run's channel, a Unix socket, in the
  environment of the run's shell actions only (nagent_shell sets it after scrubbing); when it
  is set, `nagent-mcp` asks the run's host (nagent_main_mcp_host) instead of starting a server.
- One request per connection, one JSON object on one line (at most MAX_REQUEST bytes):
  `{"op": "call", "server", "tool", "arguments": {...}, "timeout"}` or
  `{"op": "list", "server": NAME | null, "timeout"}`. Nothing else: no command, no
  environment, no config path, no file name travels; the host answers from the driver's records.
- One answer per request, one JSON line: `{"result": WIRE_RESULT, "warning": str}` (call: the
  tool result as the MCP wire carries it, secrets already blanked by the host), `{"servers":
  [{name, transport, tools: [wire tool], error: str | None, warning: str}], "error": ERROR |
  None}` (list), or `{"error": ERROR}` where ERROR is NagentError.as_dict(): `error_from(dict)`
  makes it a NagentError again (`RemoteError`, same line, kind and exit code).
- `request_of(line) -> dict` checks one request (UsageError naming what is wrong), the host's
  side; `ask(path, request, timeout) -> dict` is the client's: connect, send, read the answer.
  A channel that cannot be reached is ChannelError (exit 5), naming the path and the fix.
- `redact_result(result, secrets)`: every string of a wire result blanked (nagent_secrets.redacted),
  except base64 payloads (`data`, `blob`), which are bytes, not text.
"""
import json
import socket

from nagent_errors import EXIT_CODES, NagentError, UsageError
from nagent_secrets import redacted

CHANNEL_VAR = "NAGENT_MCP_CHANNEL"
MAX_REQUEST = 32 << 20
BINARY_FIELDS = ("data", "blob")
ANSWER_MARGIN = 30.0   # the host answers by the call's timeout; the client waits this much longer
CHANNEL_FIX = f"unset {CHANNEL_VAR} to start the server for this call alone"


class ChannelError(NagentError):
    kind = "provider"


class RemoteError(NagentError):
    """An error the host reported: the same what, value, fix, kind and exit code."""

    def __init__(self, what, value="", fix="", kind="failure"):
        super().__init__(what, value, fix)
        self.kind = kind if kind in EXIT_CODES else "failure"


def encode(message):
    return (json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def error_from(data):
    if not isinstance(data, dict):
        return RemoteError("MCP channel sent a malformed answer", repr(data)[:200], CHANNEL_FIX,
                           "provider")
    return RemoteError(str(data.get("error", "MCP call failed")), data.get("value", ""),
                       data.get("fix", ""), data.get("kind", "failure"))


def _timeout(value):
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise UsageError("--timeout must be a positive number of seconds", value)
    return float(value)


def request_of(line):
    """The checked request in one line of bytes."""
    try:
        request = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        raise UsageError("MCP channel request is not JSON", "", "send what nagent-mcp sends") from None
    if not isinstance(request, dict) or request.get("op") not in ("call", "list"):
        raise UsageError("MCP channel request must be a call or a list", "", "send what nagent-mcp sends")
    server = request.get("server")
    if request["op"] == "list":
        if server is not None and not isinstance(server, str):
            raise UsageError("MCP channel request: server must be a name", repr(server)[:80])
        return {"op": "list", "server": server or None, "timeout": _timeout(request.get("timeout"))}
    tool, arguments = request.get("tool"), request.get("arguments")
    if not isinstance(server, str) or not server:
        raise UsageError("MCP channel request: server must be a name", repr(server)[:80])
    if not isinstance(tool, str) or not tool:
        raise UsageError("no tool name given", "", "nagent-mcp call SERVER TOOL")
    if not isinstance(arguments, dict):
        raise UsageError("--args must be a JSON object", type(arguments).__name__)
    return {"op": "call", "server": server, "tool": tool, "arguments": arguments,
            "timeout": _timeout(request.get("timeout"))}


def redact_result(result, secrets):
    if not secrets:
        return result
    return redacted(result, secrets, keep=BINARY_FIELDS)


def ask(path, request, timeout):
    """The host's answer to `request` over the channel at `path`."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(timeout + ANSWER_MARGIN)
        try:
            sock.connect(path)
        except OSError as error:
            raise ChannelError("cannot reach the run's MCP channel",
                               f"{path}: {error.strerror or error}", CHANNEL_FIX) from None
        chunks = []
        try:
            sock.sendall(encode(request))
            while True:
                chunk = sock.recv(1 << 20)
                if not chunk:
                    break
                chunks.append(chunk)
        except socket.timeout:
            raise ChannelError("the run's MCP channel did not answer in time", path, CHANNEL_FIX) from None
        except OSError as error:
            raise ChannelError("the run's MCP channel failed", f"{path}: {error.strerror or error}",
                               CHANNEL_FIX) from None
    finally:
        sock.close()
    data = b"".join(chunks)
    if not data.endswith(b"\n"):
        raise ChannelError("the run's MCP channel closed without an answer", path,
                           "the run may have ended; " + CHANNEL_FIX)
    try:
        answer = json.loads(data)
    except ValueError:
        raise ChannelError("the run's MCP channel sent a malformed answer", path, CHANNEL_FIX) from None
    if not isinstance(answer, dict):
        raise ChannelError("the run's MCP channel sent a malformed answer", path, CHANNEL_FIX)
    return answer
