"""The config checks whose parsers sit above the config layer, and settings resolved with them.

Data contract: `CHECKS` maps the nagent_config.STRUCTURED rows to their checks: `mcp_servers`
(nagent_mcp_config.parse_servers: the servers as McpServer values) and `permissions`
(nagent_permissions.check_rules: every file's rules, highest first, their examples checked by the
shell parser). `checks()` returns CHECKS (what nagent_config.resolve_settings calls when a config
file gives one of those rows); `resolve_checked(flags=None, environ=None)` is
resolve_settings with them, for the code that resolves settings on its way to a model call or a
server (the session, nagent_llm, nagent_mcp), where these imports cost nothing that matters.
"""
from nagent_config import resolve_settings
from nagent_mcp_config import parse_servers
from nagent_permissions import check_rules


def check_mcp_servers(value, name, warn):
    return parse_servers(value)


CHECKS = {"mcp_servers": check_mcp_servers, "permissions": check_rules}


def checks():
    return CHECKS


def resolve_checked(flags=None, environ=None):
    return resolve_settings(flags, environ, checks)
