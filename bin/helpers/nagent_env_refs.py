"""`${VAR}` references in config values: one syntax and one rule for every place that reads them.

Data contract (pure: `environ` is passed in, nothing is read or written):
- A reference is `${NAME}` or `${NAME:-default}`; NAME matches [A-Za-z_][A-Za-z0-9_]* and the
  default runs to the first "}" (no nesting, no escapes). Anything else (`$NAME`, a lone `${`,
  `${1X}`) is literal text.
- `lookup(name, default, environ) -> str | None`: the variable's value. With a default, the
  default stands in for a variable that is unset or empty; without one an unset variable is None
  (and a set but empty one "").
- `expand(text, environ, where="") -> (text, inserted)`: every reference in `text` replaced (MCP
  server entries); one that stays None raises ConfigError naming `where`. `inserted` holds the
  (name, value) pairs that came from the environment (defaults are not listed).
- `whole_reference(value) -> (name, default) | None`: when `value` is exactly one reference. A
  provider's `api_key` reads a variable only then ("sk-${X}" is a literal key), default included:
  `"${VLLM_KEY:-none}"` is VLLM_KEY's value, else "none"; a default is config text, so it counts
  as a literal key (nagent_secrets redacts it).
"""
from nagent_errors import ConfigError

# A pattern string, and `re` imported where a reference is read: every tool imports this module
# at start-up (through nagent_secrets), and a run whose config names no reference pays nothing.
REFERENCE = r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}"


def lookup(name, default, environ):
    value = environ.get(name)
    if default is not None and not value:
        return default
    return value


def whole_reference(value):
    if not (isinstance(value, str) and "${" in value):
        return None
    import re
    match = re.fullmatch(REFERENCE, value)
    return (match.group(1), match.group(2)) if match else None


def expand(text, environ, where=""):
    import re
    inserted = []

    def replace(match):
        name, default = match.group(1), match.group(2)
        value = lookup(name, default, environ)
        if value is None:
            raise ConfigError(f"{where or 'value'} uses ${{{name}}}, which is not set", name,
                              f"export {name}=... or write ${{{name}:-default}}")
        if default is None or environ.get(name):  # the environment's, not the default
            inserted.append((name, value))
        return value

    return re.sub(REFERENCE, replace, text), inserted
