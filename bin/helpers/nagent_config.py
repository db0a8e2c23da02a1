"""Configuration loading and settings resolution (no SDK imports).

Data contract: `load_config(environ)` returns the merged config dict: ~/.nagent/config.json
overlaid by the file named in NAGENT_CONFIG (objects merge key by key, NAGENT_CONFIG wins).
`resolve_settings(overrides, environ)` returns a frozen `Settings`: CLI flags (overrides) >
NAGENT_CONFIG > ~/.nagent/config.json > the provider table. Choosing a provider without a
model (on the command line, or in config) picks that provider's default model. Values of the
form "${VAR}" in provider entries are read from the environment when the key is needed.
A malformed file raises ConfigError naming the file and the problem.
"""
import json
import os
from dataclasses import dataclass, field

from nagent_errors import ConfigError, SetupError
from nagent_providers import ProviderRow, find_row

DEFAULTS = {
    "provider": "openai",
    "connect_timeout": 10.0,
    "read_timeout": 300.0,
    "max_attempts": 4,
    "retry_base_delay": 0.5,
    "retry_max_delay": 20.0,
    "retry_after_cap": 60.0,
    "max_output_tokens": 16000,
}
NUMERIC = {"connect_timeout": float, "read_timeout": float, "max_attempts": int,
           "retry_base_delay": float, "retry_max_delay": float, "retry_after_cap": float,
           "max_output_tokens": int}


@dataclass(frozen=True)
class Settings:
    provider: ProviderRow
    model: str
    connect_timeout: float = DEFAULTS["connect_timeout"]
    read_timeout: float = DEFAULTS["read_timeout"]
    max_attempts: int = DEFAULTS["max_attempts"]
    retry_base_delay: float = DEFAULTS["retry_base_delay"]
    retry_max_delay: float = DEFAULTS["retry_max_delay"]
    retry_after_cap: float = DEFAULTS["retry_after_cap"]
    max_output_tokens: int = DEFAULTS["max_output_tokens"]
    config: dict = field(default_factory=dict, compare=False, repr=False)
    config_files: tuple = ()
    environ: dict = field(default_factory=dict, compare=False, repr=False)

    @property
    def provider_name(self):
        return self.provider.name


def config_files(environ=None):
    environ = os.environ if environ is None else environ
    files = []
    home = environ.get("HOME") or os.path.expanduser("~")
    default = os.path.join(home, ".nagent", "config.json")
    if os.path.exists(default):
        files.append(default)
    explicit = environ.get("NAGENT_CONFIG")
    if explicit:
        if os.path.exists(explicit):
            if os.path.realpath(explicit) != os.path.realpath(default):
                files.append(explicit)
        elif os.path.abspath(explicit) != os.path.abspath(default):
            # A named-but-absent file is allowed: tests and scripts point NAGENT_CONFIG at a path
            # they may fill later. Only malformed content is an error.
            pass
    return files


def read_config_file(path):
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read config file {path}", getattr(error, "strerror", None) or error)
    if not text.strip():
        return {}
    try:
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ConfigError(f"config file {path} is not valid JSON",
                          f"{error.msg} at line {error.lineno} column {error.colno}",
                          "fix the file or point NAGENT_CONFIG elsewhere")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a JSON object", type(data).__name__)
    return data


def merge(base, top):
    merged = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def load_config(environ=None):
    config = {}
    for path in config_files(environ):
        config = merge(config, read_config_file(path))
    return config


def _flat_value(config, key):
    """Config keys may be flat ("read_timeout") or grouped ({"timeouts": {"read": ..}})."""
    if key in config:
        return config[key]
    groups = {"connect_timeout": ("timeouts", "connect"), "read_timeout": ("timeouts", "read"),
              "max_attempts": ("retry", "max_attempts"), "retry_base_delay": ("retry", "base_delay"),
              "retry_max_delay": ("retry", "max_delay"), "retry_after_cap": ("retry", "retry_after_cap")}
    group, name = groups.get(key, (None, None))
    if group and isinstance(config.get(group), dict):
        return config[group].get(name)
    return None


def _number(key, value, source):
    try:
        number = NUMERIC[key](value)
    except (TypeError, ValueError):
        raise ConfigError(f"{key} must be a number", f"{value!r} in {source}")
    if number < 0 or (key == "max_attempts" and number < 1):
        raise ConfigError(f"{key} is out of range", f"{value!r} in {source}")
    return number


def resolve_settings(overrides=None, environ=None, config=None):
    environ = dict(os.environ if environ is None else environ)
    overrides = {key: value for key, value in (overrides or {}).items() if value is not None}
    config = load_config(environ) if config is None else config
    files = tuple(config_files(environ))
    source = " / ".join(files) or "defaults"

    provider_name = overrides.get("provider") or config.get("provider") or DEFAULTS["provider"]
    if not isinstance(provider_name, str):
        raise ConfigError("provider must be a name", f"{provider_name!r} in {source}")
    row = find_row(provider_name, config)
    config_row = find_row(config["provider"], config) if isinstance(config.get("provider"), str) else None
    if "provider" in overrides and (config_row is None or config_row.name != row.name):
        model = overrides.get("model") or row.default_model
    else:
        model = overrides.get("model") or config.get("model") or row.default_model
    if not model:
        raise ConfigError("no model configured for provider", row.name,
                          f'set "model" in providers.{row.name} or pass --model')
    numbers = {}
    for key in NUMERIC:
        value = overrides.get(key, _flat_value(config, key))
        numbers[key] = DEFAULTS[key] if value is None else _number(key, value, source)
    return Settings(provider=row, model=str(model), config=config, config_files=files,
                    environ=environ, **numbers)


def expand_env_reference(value, environ):
    """"${VAR}" → the variable's value (or "" when unset); anything else is returned as-is."""
    if isinstance(value, str) and value.startswith("${") and value.endswith("}"):
        return environ.get(value[2:-1], "")
    return value


def api_key_for(settings):
    """The key for the selected provider, or SetupError naming the variables to set."""
    row = settings.provider
    environ = settings.environ
    if row.api_key:
        key = expand_env_reference(row.api_key, environ)
        if key:
            return key
        if row.api_key.startswith("${"):
            raise SetupError(f"missing API key for {row.name}", row.api_key[2:-1] + " is not set",
                             f"export {row.api_key[2:-1]}=...")
    for name in row.key_env:
        if environ.get(name):
            return environ[name]
    if not row.key_required:
        return "not-needed"
    names = " or ".join(row.key_env) or "an api_key entry"
    raise SetupError(f"missing API key for {row.name}", f"set {names}",
                     f"export {row.key_env[0]}=..." if row.key_env else "")


def config_number(config, key, default, minimum=0):
    """A numeric setting (loop limits, shell, windows ...) from a config object, checked once here."""
    value = config.get(key) if isinstance(config, dict) else None
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < minimum:
        raise ConfigError(f"{key} must be a number >= {minimum}", repr(value))
    return value
