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
Config comes from the resolved settings (`Settings.mcp_servers`, checked by the schema);
`${VAR}` in a server's entry reads `environ`. A stdio server's base environment is the shell actions' scrubbed environment (one
rule: `nagent_secrets.scrubbed_env` with the session's provider-key names), so no provider key
reaches it unless its own `env` names it explicitly.
"""
import json

import nagent_mcp_config as mcp_config
from nagent_config_checks import resolve_checked
from nagent_errors import ConfigError, UsageError
from nagent_mcp_client import McpCallError, call_tool, list_tools
from nagent_mcp_render import error_message, render_result, tool_entry
from nagent_secrets import key_names, redact, scrubbed_env


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
    settings = _settings(environ)
    specs = (mcp_config.find_server(settings.mcp_servers, name),) if name else settings.mcp_servers
    if not specs:
        return [], None
    resolved, answers = [], {}
    for spec in specs:   # an unset ${VAR} in one entry does not hide the other servers
        try:
            resolved.append(mcp_config.resolve(spec, environ))
        except ConfigError as error:
            answers[spec.name] = {"tools": [], "error": error, "warning": ""}
    if resolved:
        for answer in list_tools(resolved, server_base_env(settings, environ), timeout):
            answers[answer["name"]] = answer
    servers, first_error = [], None
    for spec in specs:
        answer = answers[spec.name]
        error = answer["error"]
        first_error = first_error or error
        servers.append({"name": spec.name, "transport": spec.transport,
                        "tools": [tool_entry(tool) for tool in answer["tools"]],
                        "error": error.line()[len("Error: "):] if error else None,
                        "warning": answer["warning"] or None})
    return servers, first_error


def _redact_blocks(blocks, secrets):
    return [{key: redact(value, secrets) if isinstance(value, str) else value
             for key, value in block.items()} for block in blocks]


def call(name, tool, arguments, environ, timeout, tmpdir=None):
    timeout = _check_timeout(timeout)
    if not tool or not isinstance(tool, str):
        raise UsageError("no tool name given", "", "nagent-mcp call SERVER TOOL")
    settings = _settings(environ)
    server = mcp_config.resolve(mcp_config.find_server(settings.mcp_servers, name), environ)
    result, warning = call_tool(server, tool, arguments, server_base_env(settings, environ), timeout)
    text, blocks = render_result(result, f"{name}-{tool}", tmpdir)
    text = redact(text, server.secrets)
    structured = result.get("structuredContent")
    if structured is not None and server.secrets:
        encoded = json.dumps(structured, ensure_ascii=False)
        redacted = redact(encoded, server.secrets)
        structured = structured if redacted == encoded else redacted
    return {"server": name, "tool": tool, "is_error": bool(result.get("isError")), "text": text,
            "content": _redact_blocks(blocks, server.secrets), "structured_content": structured,
            "warning": warning or None}


def tool_failure(outcome):
    message = error_message({"content": [block for block in outcome["content"] if block.get("type") == "text"]})
    return McpCallError("MCP tool failed", f"{outcome['server']}/{outcome['tool']}: {message}")
