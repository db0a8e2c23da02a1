"""nagent-mcp's two commands: list the tools of configured MCP servers, and call one tool.

Data contract:
- `list_servers(name, environ, timeout) -> (servers, error)`: `servers` is [{name, transport,
  tools: [nagent_mcp_render.tool_entry], error: str | None, warning: str | None}] for the named server or for all
  configured ones (sorted by name); `error` is the first NagentError among them (None if all
  answered), which decides the exit code.
- `call(name, tool, arguments, environ, timeout, tmpdir=None) -> dict` {server, tool, is_error,
  text, content, structured_content, warning}: `text` is what the terminal shows (binary content saved
  to files in `tmpdir`, default the temp dir, paths shown), `content` its JSON form. A tool
  that reports failure (`isError`) is returned with `is_error` true, not raised.
- `parse_arguments(text, source)` -> dict: a JSON object, or UsageError.
- `tool_failure(outcome)` -> the NagentError (exit 1) that reports a failed tool with its message.
- `listing(answers)` and `outcome(name, tool, result, warning, tmpdir)` assemble those two from
  what servers answered, wherever they ran (the run's host answers over the channel).
Inside a run (`nagent_mcp_wire.CHANNEL_VAR` set: the run's shell actions) both ask the run's
host (nagent_main_mcp_host), whose servers stay up for the run and keep their state; the host reads
the config, checks the deny rules and blanks the secrets, never this process. Elsewhere each
command starts the servers it needs and stops them after. Config then comes from the resolved
settings (`Settings.mcp_servers`, checked by the schema); `${VAR}` in a server's entry reads
`environ`. A stdio server's base environment is the shell actions' scrubbed environment (one
rule: `nagent_secrets.scrubbed_env` with the session's provider-key names), so no provider key
reaches it unless its own `env` names it explicitly. A tool result's strings are blanked of the
server's secrets (values `${VAR}` inserted that look secret) before anything renders them.
"""
import json

import nagent_mcp_config as mcp_config
from nagent_config_checks import resolve_checked
from nagent_errors import ConfigError, UsageError
from nagent_mcp_client import McpCallError, call_tool, list_tools
from nagent_mcp_render import error_message, render_result, tool_entry
from nagent_mcp_wire import CHANNEL_VAR, ask, error_from, redact_result
from nagent_secrets import key_names, scrubbed_env


def _settings(environ):
    return resolve_checked({}, environ)


def server_base_env(settings, environ):
    return scrubbed_env(environ, key_names(settings.providers.values()))


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


def _check_timeout(timeout):
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout > 0:
        raise UsageError("--timeout must be a positive number of seconds", timeout)
    return float(timeout)


def list_servers(name, environ, timeout):
    timeout = _check_timeout(timeout)
    channel = environ.get(CHANNEL_VAR)
    if channel:
        answer = ask(channel, {"op": "list", "server": name, "timeout": timeout}, timeout)
        if not isinstance(answer.get("servers"), list):
            raise error_from(answer.get("error"))
        answers = [(entry.get("name", ""), entry.get("transport", ""), entry.get("tools") or [],
                    error_from(entry["error"]) if entry.get("error") else None, entry.get("warning") or "")
                   for entry in answer["servers"] if isinstance(entry, dict)]
    else:
        answers = _list_cold(name, environ, timeout)
    return listing(answers)


def _list_cold(name, environ, timeout):
    """[(name, transport, wire tools, NagentError | None, warning)]: the servers started here."""
    settings = _settings(environ)
    specs = (mcp_config.find_server(settings.mcp_servers, name),) if name else settings.mcp_servers
    if not specs:
        return []
    resolved, answers = [], {}
    for spec in specs:   # an unset ${VAR} in one entry does not hide the other servers
        try:
            resolved.append(mcp_config.resolve(spec, environ))
        except ConfigError as error:
            answers[spec.name] = {"tools": [], "error": error, "warning": ""}
    if resolved:
        for answer in list_tools(resolved, server_base_env(settings, environ), timeout):
            answers[answer["name"]] = answer
    return [(spec.name, spec.transport, answers[spec.name]["tools"], answers[spec.name]["error"],
             answers[spec.name]["warning"]) for spec in specs]


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


def call(name, tool, arguments, environ, timeout, tmpdir=None):
    timeout = _check_timeout(timeout)
    if not tool or not isinstance(tool, str):
        raise UsageError("no tool name given", "", "nagent-mcp call SERVER TOOL")
    channel = environ.get(CHANNEL_VAR)
    if channel:
        answer = ask(channel, {"op": "call", "server": name, "tool": tool, "arguments": arguments,
                               "timeout": timeout}, timeout)
        if not isinstance(answer.get("result"), dict):
            raise error_from(answer.get("error"))
        result, warning = answer["result"], answer.get("warning") or ""
    else:
        result, warning = _call_cold(name, tool, arguments, environ, timeout)
    return outcome(name, tool, result, warning, tmpdir)


def _call_cold(name, tool, arguments, environ, timeout):
    """(wire result with the server's secrets blanked, warning): the server started here."""
    settings = _settings(environ)
    server = mcp_config.resolve(mcp_config.find_server(settings.mcp_servers, name), environ)
    result, warning = call_tool(server, tool, arguments, server_base_env(settings, environ), timeout)
    return redact_result(result, server.secrets), warning


def outcome(name, tool, result, warning, tmpdir=None):
    """call's dict for a wire result whose secrets are blanked already."""
    text, blocks = render_result(result, f"{name}-{tool}", tmpdir)
    return {"server": name, "tool": tool, "is_error": bool(result.get("isError")), "text": text,
            "content": blocks, "structured_content": result.get("structuredContent"),
            "warning": warning or None}


def tool_failure(outcome):
    message = error_message({"content": [block for block in outcome["content"] if block.get("type") == "text"]})
    return McpCallError("MCP tool failed", f"{outcome['server']}/{outcome['tool']}: {message}")
