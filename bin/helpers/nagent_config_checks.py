"""The config checks whose parsers sit above the config layer, and settings resolved with them.

Data contract: `checks()` maps the nagent_config.STRUCTURED rows to their checks: `mcp_servers`
(nagent_mcp_config.parse_servers: the servers as McpServer values) and `permissions`
(nagent_permissions.check_rules: every file's rules, highest first, their examples checked by the
shell parser). nagent_config.resolve_settings calls it only when a config file gives one of
those rows. `resolve_checked(flags=None, environ=None)` is resolve_settings with them, for every
command and library that resolves settings (the session, nagent_llm, nagent_mcp, nagent_cli).

A dispatch point (tests/test_architecture.py DISPATCH): the parsers are imported in `checks()`,
when a config file asks for them. At the top they cost every run 10-20 ms of CPU before its
first request (the permission rules pull in the whole shell parser), config or not.
"""
from nagent_config import resolve_settings


def check_mcp_servers(value, name, warn):
    from nagent_mcp_config import parse_servers
    return parse_servers(value)


def checks():
    from nagent_permissions import check_rules
    return {"mcp_servers": check_mcp_servers, "permissions": check_rules}


def resolve_checked(flags=None, environ=None):
    return resolve_settings(flags, environ, checks)
