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
Inside a run (`nagent_mcp_wire.CHANNEL_VAR` set: the run's shell actions) both ask the run's
host (nagent_mcp_live, nagent_main_mcp_host), whose servers stay up for the run and keep their state; the host reads
the config, checks the deny rules and blanks the secrets, never this process. Elsewhere each
command starts the servers it needs and stops them after. Config then comes from the resolved
settings (`Settings.mcp_servers`, checked by the schema); `${VAR}` in a server's entry reads
`environ`. A stdio server's base environment is the shell actions' scrubbed environment (one
rule: `nagent_secrets.scrubbed_env` with the session's provider-key names), so no provider key
reaches it unless its own `env` names it explicitly. A tool result's strings are blanked of the
server's secrets (values `${VAR}` inserted that look secret) before anything renders them.
"""
import nagent_mcp_config as mcp_config
import nagent_mcp_live as live
from nagent_config_checks import resolve_checked
from nagent_errors import ConfigError
from nagent_mcp_client import McpCallError, call_tool, list_tools
from nagent_mcp_live import check_timeout, check_tool, parse_arguments  # noqa: F401  (nagent_mcp's contract)
from nagent_mcp_render import error_message
from nagent_mcp_wire import CHANNEL_VAR, redact_result
from nagent_secrets import key_names, scrubbed_env


def _settings(environ):
    return resolve_checked({}, environ)


def server_base_env(settings, environ):
    return scrubbed_env(environ, key_names(settings.providers.values()))


def list_servers(name, environ, timeout):
    if environ.get(CHANNEL_VAR):
        return live.list_servers(name, environ, timeout)
    return live.listing(_list_cold(name, environ, check_timeout(timeout)))


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


def call(name, tool, arguments, environ, timeout, tmpdir=None):
    if environ.get(CHANNEL_VAR):
        return live.call(name, tool, arguments, environ, timeout, tmpdir)
    timeout = check_timeout(timeout)
    check_tool(tool)
    result, warning = _call_cold(name, tool, arguments, environ, timeout)
    return live.outcome(name, tool, result, warning, tmpdir)


def _call_cold(name, tool, arguments, environ, timeout):
    """(wire result with the server's secrets blanked, warning): the server started here."""
    settings = _settings(environ)
    server = mcp_config.resolve(mcp_config.find_server(settings.mcp_servers, name), environ)
    result, warning = call_tool(server, tool, arguments, server_base_env(settings, environ), timeout)
    return redact_result(result, server.secrets), warning


def tool_failure(outcome):
    message = error_message({"content": [block for block in outcome["content"] if block.get("type") == "text"]})
    return McpCallError("MCP tool failed", f"{outcome['server']}/{outcome['tool']}: {message}")
