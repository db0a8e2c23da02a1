"""The provider table: one row per provider, the only place provider facts live.

Data contract: `ProviderRow` is a frozen record (a namedtuple: every command reads this
table, and dataclass generation would cost milliseconds at each start) — name, aliases, key_env
(variables tried in order), package (import name) and its requirement (what to install:
nagent_install.install_command makes the line), default model, adapter (the
bin/helpers module that talks to that SDK; imported only when a model is called), api
("responses" or "chat" for the openai adapter), base_url (None = the SDK default / its
*_BASE_URL variable), the SDK's own default URL (shown in connection errors), known models,
stop-sequence capacity, and the variable its SDK reads for a base URL. `row._replace(...)`
gives a changed copy. `BUILTIN_PROVIDERS` holds the fixed rows;
`config_provider_row(name, entry)` turns a config `providers.<name>` entry with a
`base_url` into an OpenAI-compatible row, so a new endpoint is one config entry, no code;
`all_rows(entries)` is every row by name given the config's `providers` object, and
`find_row(name, rows)` picks one by name or alias (ConfigError naming the known ones).
Nothing here imports an SDK.
"""
from collections import namedtuple

from nagent_errors import ConfigError

_FIELDS = (
    ("name", None), ("aliases", ()), ("key_env", ()), ("package", "openai"),
    ("requirement", "openai"), ("default_model", ""), ("adapter", "nagent_provider_openai"),
    ("api", "responses"),
    ("base_url", None),             # None: the SDK's default, or its *_BASE_URL variable
    ("base_url_env", None),         # variable the SDK reads for its base URL
    ("default_base_url", None),     # where the SDK goes when neither is set
    ("key_required", True),
    ("api_key", None),              # literal key or "${VAR}" from config (never printed)
    ("models", ()),
    ("max_stop_sequences", 0),      # 0: the API takes no stop sequences
    ("context_window", 0),          # tokens; 0 = unknown
)


class ProviderRow(namedtuple("ProviderRow", [name for name, _ in _FIELDS],
                             defaults=[default for _, default in _FIELDS[1:]])):
    __slots__ = ()


# The fields a config `providers.NAME` entry may hold (others get an unknown-key warning).
ENTRY_FIELDS = ("model", "base_url", "api_key_env", "api_key", "models", "context_window")

BUILTIN_PROVIDERS = (
    ProviderRow("openai", key_env=("OPENAI_API_KEY",), package="openai",
                requirement="openai>=3.54", default_model="gpt-5.5",
                adapter="nagent_provider_openai", api="responses", base_url_env="OPENAI_BASE_URL",
                default_base_url="https://api.openai.com/v1",
                models=("gpt-5.5", "gpt-5.5-mini", "gpt-5", "gpt-5-mini", "gpt-4.1"),
                max_stop_sequences=0, context_window=400_000),
    ProviderRow("anthropic", aliases=("claude",), key_env=("ANTHROPIC_API_KEY",),
                package="anthropic", requirement="anthropic>=2.12",
                default_model="claude-sonnet-4-6", adapter="nagent_provider_anthropic",
                api="messages", base_url_env="ANTHROPIC_BASE_URL",
                default_base_url="https://api.anthropic.com",
                models=("claude-sonnet-4-6", "claude-opus-4-6", "claude-haiku-4-5"),
                max_stop_sequences=8, context_window=200_000),
    ProviderRow("google", aliases=("gemini",), key_env=("GOOGLE_API_KEY", "GEMINI_API_KEY"),
                package="google.genai", requirement="google-genai>=3.4",
                default_model="gemini-2.5-flash", adapter="nagent_provider_google",
                api="generateContent", base_url_env="GOOGLE_GEMINI_BASE_URL",
                default_base_url="https://generativelanguage.googleapis.com",
                models=("gemini-2.5-flash", "gemini-2.5-pro", "gemini-2.5-flash-lite"),
                max_stop_sequences=5, context_window=1_000_000),
    ProviderRow("cursor", key_env=("CURSOR_API_KEY",), package="cursor_agent",
                requirement="cursor-agent-sdk", default_model="composer-2.5",
                adapter="nagent_provider_cursor", api="cursor",
                models=("composer-2.5",), max_stop_sequences=0),
)


def builtin_row(name):
    wanted = (name or "").strip().lower()
    for row in BUILTIN_PROVIDERS:
        if wanted == row.name or wanted in row.aliases:
            return row
    return None


def config_provider_row(name, entry):
    """A row for `providers.<name>` of the config, layered over a builtin row of that name."""
    where = f"providers.{name}"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where} must be an object", type(entry).__name__)
    base = builtin_row(name)
    key_env = entry.get("api_key_env", None)
    if isinstance(key_env, str):
        key_env = (key_env,)
    elif key_env is not None and not (isinstance(key_env, list)
                                      and all(isinstance(item, str) for item in key_env)):
        raise ConfigError(f"{where}.api_key_env must be a variable name or a list of them",
                          repr(key_env))
    models = entry.get("models")
    if models is not None and not (isinstance(models, list) and all(isinstance(m, str) for m in models)):
        raise ConfigError(f"{where}.models must be a list of names", repr(models))
    for field in ("model", "base_url", "api_key"):
        if entry.get(field) is not None and not (isinstance(entry[field], str) and entry[field]):
            raise ConfigError(f"{where}.{field} must be a non-empty string", repr(entry[field]))
    window = entry.get("context_window")
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 0):
        raise ConfigError(f"{where}.context_window must be a whole number >= 0", repr(window))
    overrides = {}
    for field in ("model", "base_url", "api_key", "context_window"):
        if field in entry and entry[field] is not None:
            overrides["default_model" if field == "model" else field] = entry[field]
    if base is not None and "base_url" not in entry:
        if key_env is not None:
            overrides["key_env"] = tuple(key_env)
        if models is not None:
            overrides["models"] = tuple(models)
        return base._replace(**overrides)
    if not entry.get("base_url"):
        raise ConfigError(f"{where} needs a base_url (an OpenAI-compatible endpoint)", name,
                          f'add "base_url" to {where} in the config')
    return ProviderRow(
        name=name, key_env=tuple(key_env or ()), package="openai",
        requirement="openai>=3.54", adapter="nagent_provider_openai", api="chat",
        key_required=bool(key_env) or bool(entry.get("api_key")),
        models=tuple(models or ()), max_stop_sequences=4,
        **{key: value for key, value in overrides.items()},
    )


def all_rows(entries=None):
    """Builtin rows (with config overrides) followed by config-only endpoints, by name.
    `entries` is the config's `providers` object (name -> entry)."""
    entries = {} if entries is None else entries
    if not isinstance(entries, dict):
        raise ConfigError("providers must be an object", type(entries).__name__)
    rows = {row.name: row for row in BUILTIN_PROVIDERS}
    for name, entry in entries.items():
        row = config_provider_row(name, entry)
        rows[row.name] = row
    return rows


def find_row(name, rows):
    """The row named `name` (or one of its aliases) among `rows` (from all_rows)."""
    wanted = (name or "").strip().lower()
    for row in rows.values():
        if wanted == row.name.lower() or wanted in row.aliases:
            return row
    known = ", ".join(sorted(rows))
    raise ConfigError("unknown provider", name, f"choose one of: {known}, or add a providers entry "
                      "with a base_url to the config")
