"""Configuration: flags, files and defaults resolved once into frozen, typed Settings.

Data contract
-------------
* The settings themselves (names, kinds, defaults, ranges, flags, where each lands in Settings)
  are the rows of `nagent_config_schema.SCHEMA`. `Settings` is built from those rows, frozen:
  provider (the selected ProviderRow), model (str), providers ({name: ProviderRow}), prices
  ({model: Price}), one frozen section per schema section (timeouts, retry, llm, loop, agents,
  file_tools, shell, windows: `settings.loop.max_calls`, `settings.shell.timeout`, ...), files ((layer,
  path) read, highest first), sources ({key name: Source}), warnings (lines), environ (never
  printed). `settings.value(name)` / `settings.source(name)` look a setting up by its schema
  name; `settings.provider_name` is the provider's name. Settings and its sections are plain
  frozen classes (not dataclasses: no start-up cost); `x._replace(field=value)` gives a copy.
* Layers, first wins: command-line flags > the file NAGENT_CONFIG names > ~/.nagent/config.json >
  the row's default. Map rows (`providers`, `prices`) merge across the files entry by entry,
  objects key by key. A provider chosen by flag (other than the one the files choose) brings its
  own default model; otherwise `model`, else `providers.NAME.model`, else the provider table's.
* `resolve_settings(flags=None, environ=None, checks=None) -> Settings`. `flags` maps a flag's
  dest (`max_calls`, `read_timeout`, ...) to a value; None means not given; strings (from argv)
  are parsed per the row's kind. `checks() -> {row name: check}` gives the checks of the
  STRUCTURED rows (mcp_servers, permissions), whose parsers sit above this layer; it is called
  only when a config file gives one of them (else the row is empty and no parser loads), so a
  command such as --status pays for them only with a config that holds them.
  nagent_config_checks.resolve_checked passes them (every caller resolves settings with it);
  without `checks`, a config that gives such a row is a TypeError (a caller's bug), never a
  row left unchecked. Errors, in this order, before anything is written: NAGENT_CONFIG
  naming a missing file, an unreadable or malformed file (ConfigError naming the file and the
  problem), a bad value in a file (ConfigError naming the key as written, the allowed range and
  the file), a bad flag value (UsageError naming the flag and the range), an unknown provider.
* Unknown keys (top level, inside a group such as `shell`, inside a provider or price entry) are
  not errors: `settings.warnings` holds one line per key naming the key and the file; the
  command that resolved the settings prints them (nagent_cli.load_settings).
* Every value remembers its layer: `settings.source(name)` is a Source (flag, NAGENT_CONFIG,
  ~/.nagent/config.json or default, with the flag or path). `describe_settings(settings)` is the
  `nagent --config` view: (name, value, source) rows with keys redacted.
* `api_key_for(settings)` returns the key of the selected provider (an api_key that is one whole
  `${VAR}` or `${VAR:-default}` reference reads the variable, by nagent_env_refs' rule; other
  text is the key itself), or raises SetupError naming the variables to set. `key_source(settings)` names
  where that key comes from (the variable, or the config's api_key), for error messages.
"""
import json
import os
from collections import namedtuple
from types import MappingProxyType

from nagent_config_schema import (DEFAULT, ENV_FILE, FIXED, FLAG, HOME_FILE, KEYS,  # noqa: F401
                                  SCHEMA, Key, Price, check_value, unknown_keys)
from nagent_env_refs import lookup, whole_reference
from nagent_errors import ConfigError, SetupError
from nagent_paths import config_file, nagent_home
from nagent_providers import BUILTIN_PROVIDERS, builtin_row, find_row
from nagent_secrets import key_names, secret_values


class Source(namedtuple("Source", "layer detail", defaults=("",))):
    """Where a value came from: layer is FLAG, ENV_FILE, HOME_FILE or DEFAULT; detail the flag as
    typed or the file's path."""
    __slots__ = ()

    def __str__(self):
        # The home file's path is what its label says; a flag or NAGENT_CONFIG needs its detail.
        return f"{self.layer} {self.detail}" if self.detail and self.layer != HOME_FILE else self.layer


class FrozenInstanceError(AttributeError):
    """Assigning to a field of frozen settings (the same base class as dataclasses' error)."""


_REQUIRED = object()


class _Plain:
    """Keyword __init__, frozen-after-init, repr and == for the generated classes, written once:
    dataclasses would import inspect and generate (exec) code per class, which costs
    milliseconds at every start-up. `_members` is ((name, default, factory, shown/compared)...)."""
    _members = ()

    def __init__(self, **values):
        for name, default, factory, _ in self._members:
            if name in values:
                value = values.pop(name)
            elif factory is not None:
                value = factory()
            elif default is _REQUIRED:
                raise TypeError(f"{type(self).__name__} needs {name}")
            else:
                value = default
            object.__setattr__(self, name, value)
        if values:
            raise TypeError(f"{type(self).__name__} has no field {sorted(values)[0]}")
        object.__setattr__(self, "_sealed", True)

    def __setattr__(self, name, value):
        if getattr(self, "_sealed", False):
            raise FrozenInstanceError(f"cannot assign to field {name!r}")
        object.__setattr__(self, name, value)

    def __delattr__(self, name):
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __repr__(self):
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name, _, _, shown in self._members if shown)
        return f"{type(self).__name__}({shown})"

    def _replace(self, **changes):
        """A copy with `changes` (as namedtuple._replace and dataclasses.replace do)."""
        values = {name: getattr(self, name) for name, _, _, _ in self._members}
        values.update(changes)
        return type(self)(**values)

    def __eq__(self, other):
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, name) == getattr(other, name) for name, _, _, compared in self._members
                   if compared)

    __hash__ = None


def _plain_class(name, members, namespace=None):
    """A _Plain subclass with these members: (name, default=_REQUIRED, factory=None, shown=True)."""
    full = tuple((member + (_REQUIRED, None, True)[len(member) - 1:])[:4] for member in members)
    return type(name, (_Plain,), dict(namespace or {}, _members=full, __slots__=()))


def _build_types():
    sections = {}
    for key in SCHEMA:
        section, name = key.place
        if section:
            sections.setdefault(section, []).append((name,))
    classes = {name: _plain_class(name.capitalize() + "Settings", members)
               for name, members in sections.items()}
    top = [(key.place[1],) for key in SCHEMA if key.place[0] == "" and key.name not in FIXED]

    def value(self, name):
        if name == "provider":
            return self.provider.name
        section, attr = KEYS[name].place
        return getattr(getattr(self, section) if section else self, attr)

    def source(self, name):
        return self.sources.get(name, Source(DEFAULT))

    # sources and environ are neither shown nor compared: environ holds the keys.
    members = ([("provider",), ("model",)] + top + [(name,) for name in classes]
               + [("files", ()), ("sources", None, lambda: MappingProxyType({}), False),
                  ("warnings", ()), ("environ", None, dict, False)])
    settings = _plain_class("Settings", members,
                            {"value": value, "source": source,
                             "provider_name": property(lambda self: self.provider.name)})
    return classes, settings


SECTIONS, Settings = _build_types()


# -- reading the files --------------------------------------------------------------------
def config_layers(environ=None):
    """[(label, path)] of the files to read, highest first. NAGENT_CONFIG naming a missing file
    is a ConfigError: a typo there would otherwise silently run without the intended settings."""
    environ = os.environ if environ is None else environ
    home = os.path.join(nagent_home(environ), "config.json")
    layers = []
    explicit = config_file(environ)   # the same resolved file the write rules protect
    if explicit:
        if not os.path.exists(explicit):
            raise ConfigError("NAGENT_CONFIG names a missing file", environ["NAGENT_CONFIG"],
                              "create it or unset NAGENT_CONFIG")
        layers.append((ENV_FILE, explicit))
    if os.path.exists(home) and not (explicit and _same_file(explicit, home)):
        layers.append((HOME_FILE, home))
    return layers


def _same_file(first, second):
    try:
        return os.path.samefile(first, second)
    except OSError:
        return False


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


# -- one layer ----------------------------------------------------------------------------
def _lookup(data, key, path):
    """(spelling as written, value) of `key` in one file's data, or None."""
    found = []
    for spelling in (key.name,) + key.aliases:
        group, dot, name = spelling.partition(".")
        if spelling in data:  # "max_calls", or a grouped name written flat: "shell.timeout"
            found.append((spelling, data[spelling]))
        if dot and isinstance(data.get(group), dict) and name in data[group]:
            found.append((spelling, data[group][name]))
    if len(found) > 1 and any(value != found[0][1] for _, value in found[1:]):
        raise ConfigError(f"{found[0][0]} and {found[1][0]} are the same setting with different "
                          "values", path, "keep one of them")
    return found[0] if found else None


# -- resolution ---------------------------------------------------------------------------
# Rows whose checks sit above this layer (nagent_config_checks: the MCP server and permission
# rule parsers); resolve_settings asks its caller for them only when a config file gives one.
STRUCTURED = ("mcp_servers", "permissions")


def _check(key, checks, given):
    """The check of row `key`: its own, else the caller's (`checks()`) when the files give the
    row a value; a row nobody gives is its empty value, with no parser loaded."""
    if key.check:
        return key.check
    if not given:
        return lambda value, name, warn: ()
    if checks is None:
        raise TypeError(f"resolve_settings: the config gives {key.name}; pass checks "
                        "(nagent_config_checks.checks)")
    return checks()[key.name]


def _resolve_map(key, layers, warnings, checks):
    merged, where = {}, []
    for label, path, data in reversed(layers):
        found = _lookup(data, key, path)
        if found is not None:
            if not isinstance(found[1], dict):
                raise ConfigError(f"{found[0]} must be an object", f"{json.dumps(found[1])} in {path}")
            merged = merge(merged, found[1])
            where.insert(0, (label, path))
    name = key.name
    try:
        typed = _check(key, checks, merged)(merged, name, lambda unknown: warnings.append(
            f"unknown config key {unknown} in {' and '.join(path for _, path in where)} (ignored)"))
    except ConfigError as error:
        files = " and ".join(path for _, path in where) or "defaults"
        raise ConfigError(error.what, f"{error.value} in {files}", error.fix) from None
    source = Source(where[0][0], where[0][1]) if where else Source(DEFAULT)
    return typed, source


def _resolve_rules(key, layers, warnings, checks):
    """Every file's list, highest first: one file's rules never hide another's."""
    found = []
    for label, path, data in layers:
        value = _lookup(data, key, path)
        if value is not None and value[1] is not None:
            found.append((label, path, value[1]))
    typed = _check(key, checks, found)([(path, value) for _, path, value in found], key.name,
                                       lambda unknown: warnings.append(
                                           f"unknown config key {unknown} (ignored)"))
    return typed, Source(found[0][0], found[0][1]) if found else Source(DEFAULT)


def _resolve_value(key, flags, layers):
    """(typed value, Source, how it was written) of a single-value row; the value is None when
    only the default applies."""
    if key.dest and flags.get(key.dest) is not None:
        return check_value(key, flags[key.dest], key.flag, key.flag, flag=True), Source(FLAG, key.flag)
    for label, path, data in layers:
        found = _lookup(data, key, path)
        if found is not None and found[1] is not None:
            return check_value(key, found[1], found[0], path), Source(label, path)
    return None, Source(DEFAULT)


def resolve_settings(flags=None, environ=None, checks=None):
    environ = dict(os.environ if environ is None else environ)
    flags = {name: value for name, value in (flags or {}).items() if value is not None}
    layers = [(label, path, read_config_file(path)) for label, path in config_layers(environ)]
    warnings = [f"unknown config key {name} in {path} (ignored)"
                for _, path, data in layers for name in unknown_keys(data, path)]
    values, sources = {}, {}
    for key in SCHEMA:
        if key.kind == "map":
            values[key.name], sources[key.name] = _resolve_map(key, layers, warnings, checks)
        elif key.kind == "rules":
            values[key.name], sources[key.name] = _resolve_rules(key, layers, warnings, checks)
        else:
            values[key.name], sources[key.name] = _resolve_value(key, flags, layers)

    provider_name = values["provider"] or KEYS["provider"].default
    providers = values["providers"]
    row = find_row(provider_name, providers)
    model, model_source = values["model"], sources["model"]
    if model is None or (sources["provider"].layer == FLAG and model_source.layer != FLAG
                         and _file_provider(layers, providers) != row.name):
        # A provider chosen on the command line (other than the configured one) brings its own
        # default model: a configured model of another provider would only fail at the API.
        model = row.default_model
        model_source = sources["providers"] if row.name in _configured(layers) else Source(DEFAULT)
    if not model:
        raise ConfigError("no model configured for provider", row.name,
                          f'set "model" in providers.{row.name} or pass --model')
    values["provider"], values["model"] = row.name, model
    sources["model"] = model_source

    sections = {name: {} for name in SECTIONS}
    top = {}
    for key in SCHEMA:
        value = values[key.name]
        if value is None:
            value = key.default(row) if callable(key.default) else key.default
        section, attr = key.place
        if key.name not in FIXED:
            (sections[section] if section else top)[attr] = value
    return Settings(provider=row, model=model, **top,
                    **{name: SECTIONS[name](**fields) for name, fields in sections.items()},
                    files=tuple((label, path) for label, path, _ in layers),
                    sources=MappingProxyType(sources), warnings=tuple(dict.fromkeys(warnings)), environ=environ)


def _file_provider(layers, providers):
    """The provider the files select (resolved to its row name), or None."""
    for _, path, data in layers:
        found = _lookup(data, KEYS["provider"], path)
        if found is not None and isinstance(found[1], str):
            try:
                return find_row(found[1], providers).name
            except ConfigError:
                return None
    return None


def _configured(layers):
    names = set()
    for _, _, data in layers:
        entries = data.get("providers")
        if isinstance(entries, dict):
            names.update(name for name, entry in entries.items()
                         if isinstance(entry, dict) and entry.get("model"))
    return names


# -- keys ---------------------------------------------------------------------------------
def configured_key(row, environ):
    """(key or "", variable name or None) from a row's `api_key`: a whole-value reference
    (nagent_env_refs) reads its variable, with its default; any other text is the key itself."""
    reference = whole_reference(row.api_key)
    if reference is None:
        return row.api_key or "", None
    name, default = reference
    return lookup(name, default, environ) or "", name


def api_key_for(settings):
    """The key for the selected provider, or SetupError naming the variables to set."""
    row = settings.provider
    environ = settings.environ
    if row.api_key:
        key, name = configured_key(row, environ)
        if key:
            return key
        if name:
            raise SetupError(f"missing API key for {row.name}", name + " is not set",
                             f"export {name}=...")
    for name in row.key_env:
        if environ.get(name):
            return environ[name]
    if not row.key_required:
        return "not-needed"
    names = " or ".join(row.key_env) or "an api_key entry"
    raise SetupError(f"missing API key for {row.name}", f"set {names}",
                     f"export {row.key_env[0]}=..." if row.key_env else "")


def key_source(settings):
    """Where the selected provider's key comes from: a variable name, or the config entry."""
    row = settings.provider
    if row.api_key:
        reference = whole_reference(row.api_key)
        if reference and (settings.environ.get(reference[0]) or reference[1] is None):
            return reference[0]
        return f"providers.{row.name}.api_key in the config"
    for name in row.key_env:
        if settings.environ.get(name):
            return name
    return " or ".join(row.key_env) or "no key"


# -- the effective settings, for `nagent --config` ------------------------------------------
def _shown(value):
    """A setting as the user writes it: 300, not the 300.0 the typed field holds."""
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def redacted_key(value, environ):
    """How a provider's api_key is shown: a ${VAR} reference and whether it is set, never a value."""
    reference = whole_reference(value)
    if reference:
        name, default = reference
        state = "set" if environ.get(name) else "not set, default used" if default else "not set"
        # A default is config text that may itself be a key: it is never shown.
        return f"${{{name}{'' if default is None else ':-…'}}} ({state})"
    return "[redacted]" if value else None


def describe_settings(settings):
    """[(name, value, source)] for every setting in effect, keys redacted: one row per schema
    key, the selected provider's key variables, and one row per configured provider entry and
    price override."""
    rows = []
    for key in SCHEMA:
        source = str(settings.source(key.name))
        if key.name == "providers":
            for name, row in settings.providers.items():
                if row == builtin_row(name):
                    continue
                entry = {"model": row.default_model, "base_url": row.base_url,
                         "api_key_env": list(row.key_env) or None,
                         "api_key": redacted_key(row.api_key, settings.environ),
                         "context_window": row.context_window or None}
                rows.append((f"providers.{name}", {k: v for k, v in entry.items() if v is not None},
                             source))
        elif key.name == "prices":
            for model, price in settings.prices.items():
                rows.append((f"prices.{model}", {part: _shown(number) for part, number
                                                 in price._asdict().items()}, source))
        elif key.name == "permissions":
            rows += permission_rows(settings.permissions)
        else:
            rows.append((key.name, _shown(settings.value(key.name)), source))
            if key.name == "provider":
                provider = settings.provider
                names = [name for name in provider.key_env]
                state = ", ".join(f"{name} ({'set' if settings.environ.get(name) else 'not set'})"
                                  for name in names) or ("not needed" if not provider.key_required
                                                         else "none")
                if provider.api_key:
                    state = "api_key " + redacted_key(provider.api_key, settings.environ)
                rows.append(("api key", state, "environment"))
    return rows


def permission_rows(rules):
    """One --config row per permission rule: its decision, target, pattern, name, file."""
    rows = []
    for rule in rules:
        shown = f'{rule.decision} {rule.target} "{rule.pattern}"'
        if rule.name or rule.read_only:
            shown += " (" + ", ".join(filter(None, (rule.name, rule.read_only and "read-only"))) + ")"
        rows.append((f"permissions[{rule.index}]", shown, rule.source))
    return rows


# -- the secrets of the configured providers, for callers that hold no Settings ---------------
def _providers_only():
    """Checks that skip the STRUCTURED rows: for callers that read only the provider table."""
    return dict.fromkeys(STRUCTURED, lambda value, name, warn: ())


def _configured_rows(environ):
    try:
        return tuple(resolve_settings({}, environ, checks=_providers_only).providers.values())
    except Exception:  # noqa: BLE001 - a report must not fail; the config may be what failed
        return BUILTIN_PROVIDERS


def known_secrets(environ=None):
    """nagent_secrets.secret_values for the providers the config files define (the provider
    table when the config cannot be read): for error reporters that hold no session."""
    environ = os.environ if environ is None else environ
    return secret_values(_configured_rows(environ), environ)


def child_key_names(environ, secret_names=None):
    """`secret_names` (a caller's nagent_secrets.key_names), or, when None, the key names of the
    providers the config files define: what nagent_secrets.scrubbed_env withholds."""
    if secret_names is not None:
        return tuple(secret_names)
    return key_names(_configured_rows(os.environ if environ is None else environ))
