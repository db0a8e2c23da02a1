"""MCP server configuration: the `mcp_servers` config key, resolved into frozen specs (no SDK).

Data contract:
- `mcp_servers` is an object in the shape Claude Code and Cursor use for `mcpServers`:
  `{"NAME": {"command": "...", "args": [...], "env": {...}}}` for a stdio server and
  `{"NAME": {"url": "https://...", "headers": {...}}}` for streamable HTTP. An optional
  `"type"` of `stdio`, `http` or `streamable-http` is checked against the fields; `sse` is
  refused (not supported). Unknown keys are ignored, so entries copied from other clients work.
- `ServerSpec` is one entry as written: name, transport (`stdio` | `http`), command, args,
  env pairs, url, header pairs. Values are kept unexpanded, so a spec never holds a secret.
- `parse_servers(section) -> tuple[ServerSpec]` sorted by name, from the `mcp_servers` object
  (the config schema's row calls it, so Settings.mcp_servers holds the specs and a malformed
  entry is reported by every command that reads the config); `find_server(specs, name)`.
  Both raise ConfigError naming the entry and the problem; an unknown name is a UsageError.
- `expand(text, environ) -> (text, inserted)` is nagent_env_refs.expand (the one `${VAR}` rule):
  `${VAR}` and `${VAR:-default}` anywhere in a string; an unset variable without a default
  raises ConfigError. `inserted` are the (variable, value) pairs that came from the environment.
- `resolve(spec, environ) -> Resolved`: the spec with `${VAR}` expanded in command, args, env,
  url and headers, read from `environ`. `secrets` are the inserted values that look secret (the
  variable's or the env/header key's name is secret by nagent_secrets.is_secret_name, the one
  rule) and every value under a secret-named env/header key however it was written (a literal,
  a default: its last word, the credential of "Bearer TOKEN"); values pass through
  nagent_secrets.redactable, so output and errors can redact them without blanking ordinary
  paths.
- `display_url(url)`: the url as messages may show it (no userinfo, no query).
- `process_env(resolved, base_env) -> dict`: a stdio server's environment: `base_env` (the
  caller passes the shell's scrubbed environment: no provider keys) plus its configured env.
"""
import re
from dataclasses import dataclass

from nagent_env_refs import expand
from nagent_errors import ConfigError, UsageError
from nagent_secrets import is_secret_name, redactable

NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")
HTTP_TYPES = ("http", "streamable-http", "streamable_http", "streamableHttp")
FIX = "see docs/mcp.md"


@dataclass(frozen=True)
class ServerSpec:
    name: str
    transport: str                  # "stdio" or "http"
    command: str = ""
    args: tuple = ()
    env: tuple = ()                 # ((name, value-as-written), ...)
    url: str = ""
    headers: tuple = ()             # ((name, value-as-written), ...)


@dataclass(frozen=True)
class Resolved:
    spec: ServerSpec
    command: str
    args: tuple
    env: dict
    url: str
    headers: dict
    secrets: tuple                  # values ${VAR} expansion inserted


def _section(section):
    if section is None:
        return {}
    if not isinstance(section, dict):
        raise ConfigError("mcp_servers must be an object of named servers", type(section).__name__, FIX)
    return section


def _strings(name, key, value, kind):
    where = f"mcp_servers.{name}.{key}"
    if kind == "list":
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise ConfigError(f"{where} must be a list of strings", repr(value), FIX)
        return tuple(value)
    if not isinstance(value, dict) or not all(isinstance(item, str) for item in value.values()):
        raise ConfigError(f"{where} must be an object of string values", repr(value), FIX)
    return tuple(sorted(value.items()))


def parse_server(name, entry):
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ConfigError("invalid MCP server name", repr(name),
                          "use at most 64 letters, digits, '.', '_' or '-', starting with a letter or digit")
    if not isinstance(entry, dict):
        raise ConfigError(f"mcp_servers.{name} must be an object", type(entry).__name__, FIX)
    kind = entry.get("type")
    has_command, has_url = "command" in entry, "url" in entry
    if kind == "sse":
        raise ConfigError(f"mcp_servers.{name}: the SSE transport is not supported", "type: sse",
                          "use the server's streamable HTTP endpoint as url")
    if kind not in (None, "stdio", *HTTP_TYPES):
        raise ConfigError(f"mcp_servers.{name}.type is unknown", repr(kind), "use stdio or http")
    if has_command == has_url:
        raise ConfigError(f"mcp_servers.{name} needs either command (stdio) or url (streamable HTTP)",
                          "both given" if has_command else "neither given", FIX)
    if kind is not None and (kind == "stdio") != has_command:
        raise ConfigError(f"mcp_servers.{name}.type does not match its fields", repr(kind),
                          "stdio takes command/args/env, http takes url/headers")
    if has_command:
        command = entry["command"]
        if not isinstance(command, str) or not command.strip():
            raise ConfigError(f"mcp_servers.{name}.command must be a non-empty string", repr(command), FIX)
        return ServerSpec(name=name, transport="stdio", command=command,
                          args=_strings(name, "args", entry.get("args") or [], "list"),
                          env=_strings(name, "env", entry.get("env") or {}, "dict"))
    url = entry["url"]
    if not isinstance(url, str) or not url.startswith(("http://", "https://", "${")):
        raise ConfigError(f"mcp_servers.{name}.url must be an http(s) URL", repr(url), FIX)
    return ServerSpec(name=name, transport="http", url=url,
                      headers=_strings(name, "headers", entry.get("headers") or {}, "dict"))


def parse_servers(section):
    section = _section(section)
    return tuple(parse_server(name, section[name]) for name in sorted(section, key=str))


def find_server(specs, name):
    for spec in specs:
        if spec.name == name:
            return spec
    known = ", ".join(spec.name for spec in specs) or "none configured"
    raise UsageError("unknown MCP server", name, f"configured: {known}")


def resolve(spec, environ):
    secrets = []

    def one(text, where, key=""):
        value, inserted = expand(text, environ, f"mcp_servers.{spec.name}.{where}")
        secrets.extend(found for name, found in inserted
                       if is_secret_name(name) or is_secret_name(key))
        if is_secret_name(key) and value.strip():
            # Under a secret name the value is a secret however it was written (a literal, a
            # default): its last word, the credential of "Bearer TOKEN".
            secrets.append(value.rsplit(None, 1)[-1])
        return value

    env = {key: one(value, f"env.{key}", key) for key, value in spec.env}
    headers = {key: one(value, f"headers.{key}", key) for key, value in spec.headers}
    resolved = Resolved(spec=spec, command=one(spec.command, "command") if spec.command else "",
                        args=tuple(one(arg, "args") for arg in spec.args), env=env,
                        url=one(spec.url, "url") if spec.url else "", headers=headers,
                        secrets=redactable(secrets))
    if spec.transport == "http" and not resolved.url.startswith(("http://", "https://")):
        raise ConfigError(f"mcp_servers.{spec.name}.url must be an http(s) URL", "after ${VAR} expansion", FIX)
    return resolved


def display_url(url):
    """scheme://host[:port]/path: no user:password@ and no query, which may carry credentials."""
    from urllib.parse import urlsplit
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "(unparsable url)"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}{parts.path}"


def process_env(resolved, base_env):
    env = dict(base_env)
    env.update(resolved.env)
    return env
