"""`nagent-mcp` inside a run: its commands answered by the run's host over the channel, and what
both paths (this one and nagent_mcp's servers started here) assemble their answers with.

Data contract (the shapes are nagent_mcp's: list_servers, call):
- `list_servers(name, environ, timeout)` and `call(name, tool, arguments, environ, timeout,
  tmpdir=None)`: as nagent_mcp's, asked of the run's host (nagent_main_mcp_host) through the
  channel `environ[nagent_mcp_wire.CHANNEL_VAR]` names; the host reads the config, checks the
  deny rules and blanks the secrets, never this process. Kept apart from nagent_mcp so a call
  inside a run loads neither the config checks nor the MCP SDK's client: a later call costs the
  channel's round trip over the interpreter's start.
- `parse_arguments(text, source)` -> dict: a JSON object, or UsageError.
- `check_timeout(timeout)` -> float seconds > 0, or UsageError.
- `listing(answers)` and `outcome(name, tool, result, warning, tmpdir)` assemble the two answers
  from what servers answered, wherever they ran.
"""
import json

from nagent_errors import UsageError
from nagent_mcp_render import render_result, tool_entry
from nagent_mcp_wire import CHANNEL_VAR, ask, error_from


def parse_arguments(text, source="--args"):
    if text is None or not text.strip():
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise UsageError(f"{source} is not valid JSON", f"{error.msg} at line {error.lineno} column {error.colno}",
                         "pass a JSON object, e.g. --args '{\"path\": \".\"}'") from None
    if not isinstance(value, dict):
        raise UsageError(f"{source} must be a JSON object", type(value).__name__,
                         "pass the tool's arguments by name, e.g. --args '{\"path\": \".\"}'")
    return value


def check_timeout(timeout):
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise UsageError("--timeout must be a positive number of seconds", timeout)
    return float(timeout)


def check_tool(tool):
    if not tool or not isinstance(tool, str):
        raise UsageError("no tool name given", "", "nagent-mcp call SERVER TOOL")


def list_servers(name, environ, timeout):
    timeout = check_timeout(timeout)
    answer = ask(environ[CHANNEL_VAR], {"op": "list", "server": name, "timeout": timeout}, timeout)
    if not isinstance(answer.get("servers"), list):
        raise error_from(answer.get("error"))
    return listing([(entry.get("name", ""), entry.get("transport", ""), entry.get("tools") or [],
                     error_from(entry["error"]) if entry.get("error") else None,
                     entry.get("warning") or "")
                    for entry in answer["servers"] if isinstance(entry, dict)])


def call(name, tool, arguments, environ, timeout, tmpdir=None):
    timeout = check_timeout(timeout)
    check_tool(tool)
    answer = ask(environ[CHANNEL_VAR], {"op": "call", "server": name, "tool": tool,
                                        "arguments": arguments, "timeout": timeout}, timeout)
    if not isinstance(answer.get("result"), dict):
        raise error_from(answer.get("error"))
    return outcome(name, tool, answer["result"], answer.get("warning") or "", tmpdir)


def listing(answers):
    """(servers, first error) of list_servers' contract from [(name, transport, wire tools,
    NagentError | None, warning)], wherever the servers ran."""
    servers, first_error = [], None
    for name, transport, tools, error, warning in answers:
        first_error = first_error or error
        servers.append({"name": name, "transport": transport,
                        "tools": [tool_entry(tool) for tool in tools if isinstance(tool, dict)],
                        "error": error.line()[len("Error: "):] if error else None,
                        "warning": warning or None})
    return servers, first_error


def outcome(name, tool, result, warning, tmpdir=None):
    """call's dict for a wire result whose secrets are blanked already."""
    text, blocks = render_result(result, f"{name}-{tool}", tmpdir)
    return {"server": name, "tool": tool, "is_error": bool(result.get("isError")), "text": text,
            "content": blocks, "structured_content": result.get("structuredContent"),
            "warning": warning or None}
