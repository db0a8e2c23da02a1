"""The settings schema: one row per setting, and the frozen Settings type built from the rows.

Data contract
-------------
* `SCHEMA` has one `Key` row (a namedtuple) per setting: its name as the user writes it (`max_calls`,
  `shell.timeout`, `timeouts.read`), other spellings accepted in files (`read_timeout`), its kind
  and default, its allowed range or choices, the command-line flag that sets it (if any), a
  one-line help, and where it lands in Settings: `settings.SECTION.FIELD` (a name "a.b" lands in
  section "a", field "b" unless the row says otherwise; section "" is a top-level attribute).
  Sections and Settings are built from the table, so adding a setting is adding one row.
* Kinds: int, float (finite; bools are not numbers), bool, str (non-empty), choice, paths (a list
  of strings, kept as a tuple), map (an object checked by the row's `check(value, name, warn) ->
  typed value`; `warn(dotted_name)` reports an unknown inner key), rules (a list in each file,
  none replacing another: the row's `check([(path, value)] highest first, name, warn)` gets them
  all). A callable default is computed from the selected ProviderRow. The rows `mcp_servers`
  and `permissions` have no `check` here: their parsers (nagent_mcp_config,
  nagent_permissions and the shell parser it needs) are checks of nagent_config, which resolves
  settings, so that --help, which builds its flags from this table, never loads them.
* `check_value(key, value, written, where, flag=False)` types one value or raises ConfigError
  (UsageError for a flag) naming the key as written and its allowed range; `unknown_keys(data)`
  lists the keys of one file's object that no row knows.
* The frozen Settings type is built from these rows by nagent_config.
"""
import json
import math
from collections import namedtuple
from types import MappingProxyType

from nagent_errors import ConfigError, UsageError
from nagent_providers import ENTRY_FIELDS, all_rows

FLAG, ENV_FILE, HOME_FILE, DEFAULT = "flag", "NAGENT_CONFIG", "~/.nagent/config.json", "default"


class Price(namedtuple("Price", "input output cache_read cache_write")):
    """USD per million tokens."""
    __slots__ = ()


_KEY_FIELDS = "name kind default help minimum above choices aliases flag section field check"


class Key(namedtuple("Key", _KEY_FIELDS, defaults=(None, "", None, False, (), (), "", None, "",
                                                   None))):
    """One setting. minimum/above: the lower bound (strict when `above`); section None: from the
    dotted name, "": a top-level Settings attribute; check: for a map, check(value, name, warn)
    -> typed value. A namedtuple, not a dataclass: `--help` builds its flags from these rows and
    must not pay for dataclass generation."""
    __slots__ = ()

    @property
    def place(self):
        if self.section is not None:
            return self.section, self.field or self.name
        head, _, tail = self.name.partition(".")
        return head, self.field or tail

    @property
    def dest(self):
        return self.flag[2:].replace("-", "_") if self.flag else ""

    def requirement(self):
        if self.kind == "choice":
            return "must be one of " + ", ".join(self.choices)
        if self.kind == "bool":
            return "must be true or false"
        if self.kind == "paths":
            return "must be a list of paths"
        if self.kind == "str":
            return "must be a non-empty string"
        if self.kind == "map":
            return "must be an object"
        if self.kind == "rules":
            return "must be a list of rules"
        noun = "a whole number" if self.kind == "int" else "a number"
        if self.minimum is None:
            return f"must be {noun}"
        bound = int(self.minimum) if float(self.minimum).is_integer() else self.minimum
        return f"must be {noun} {'>' if self.above else '>='} {bound}"


def _window_max_default(row):
    # About 4 bytes a token; half the window leaves room for the reply and the next turns.
    return int(row.context_window * 4 * 0.5) if row.context_window else 400_000


def check_providers(value, name, warn):
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be an object", type(value).__name__)
    for provider, entry in value.items():
        if isinstance(entry, dict):
            for unknown in sorted(set(entry) - set(ENTRY_FIELDS)):
                warn(f"{name}.{provider}.{unknown}")
    return MappingProxyType(all_rows(value))


def check_prices(value, name, warn):
    if not isinstance(value, dict):
        raise ConfigError(f"{name} must be an object", type(value).__name__)
    prices = {}
    for model, entry in value.items():
        where = f"{name}.{model}"
        if not isinstance(entry, dict) or "input" not in entry or "output" not in entry:
            raise ConfigError(f"{where} must be an object with input and output prices",
                              json.dumps(entry), "USD per million tokens")
        numbers = {}
        for part in ("input", "output", "cache_read", "cache_write"):
            number = entry.get(part, entry["input"] if part.startswith("cache") else None)
            if isinstance(number, bool) or not isinstance(number, (int, float)) or number < 0:
                raise ConfigError(f"{where}.{part} must be a number >= 0", json.dumps(number),
                                  "USD per million tokens")
            numbers[part] = float(number)
        for unknown in sorted(set(entry) - {"input", "output", "cache_read", "cache_write"}):
            warn(f"{where}.{unknown}")
        prices[model] = Price(**numbers)
    return MappingProxyType(prices)


SCHEMA = (
    Key("provider", "str", "openai", "provider name or alias (see docs/configuration.md, Providers)",
        flag="--provider", section=""),
    Key("model", "str", None, "model name (default: the provider's default model)",
        flag="--model", section=""),
    Key("providers", "map", {}, "per-provider model, base_url, api_key_env, api_key, models, "
        "context_window", section="", check=check_providers),
    Key("timeouts.connect", "float", 10.0, "connection timeout in seconds", 0, True,
        aliases=("connect_timeout",), flag="--connect-timeout"),
    Key("timeouts.read", "float", 300.0, "read timeout in seconds", 0, True,
        aliases=("read_timeout",), flag="--read-timeout"),
    Key("retry.max_attempts", "int", 4, "attempts per model call, retries included", 1,
        aliases=("max_attempts",), flag="--max-attempts"),
    Key("retry.base_delay", "float", 0.5, "first retry delay in seconds", 0,
        aliases=("retry_base_delay",)),
    Key("retry.max_delay", "float", 20.0, "longest retry delay in seconds", 0,
        aliases=("retry_max_delay",)),
    Key("retry.retry_after_cap", "float", 60.0, "longest retry-after honoured, seconds", 0,
        aliases=("retry_after_cap",)),
    Key("max_output_tokens", "int", 16000, "reply limit per call, tokens", 1, section="llm"),
    Key("max_calls", "int", 40, "model calls allowed in one invocation", 1, flag="--max-calls",
        section="loop"),
    Key("max_format_retries", "int", 3, "replies outside the protocol in a row before exit 8", 0,
        section="loop"),
    Key("max_continuations", "int", 3, "continuations of a reply cut off by the output limit", 0,
        section="loop"),
    Key("repeat_limit", "int", 3, "the same action this many times in a row gets a warning", 2,
        section="loop"),
    Key("lock_timeout", "float", 3.0, "seconds to wait for a busy conversation", 0, section="loop"),
    Key("max_agent_depth", "int", 3, "sub-agent nesting limit", 0, section="agents",
        field="max_depth"),
    Key("agent_timeout", "float", 1800.0, "seconds a sub-agent may run", 1, section="agents",
        field="timeout"),
    Key("max_parallel_agents", "int", 4, "sub-agents of one reply running at once", 1,
        flag="--max-parallel-agents", section="agents", field="max_parallel"),
    Key("file_tool_timeout", "float", 300.0, "seconds a file split or patch tool may run", 0.1,
        section="file_tools", field="timeout"),
    Key("file_tool_memory_mb", "int", 4096, "memory cap of a file split or patch tool, MiB; 0 none",
        0, section="file_tools", field="memory_mb"),
    Key("shell.timeout", "float", 120.0, "seconds a shell action may run", 0, True,
        flag="--shell-timeout"),
    Key("shell.output_cap", "int", 32 * 1024, "bytes of shell output kept inline", 0),
    Key("shell.approval", "choice", "auto", "run shell actions, ask first, or refuse them",
        choices=("auto", "confirm", "deny"), aliases=("shell_approval",), flag="--shell-approval"),
    Key("shell.sandbox", "choice", "none", "run shell actions under bubblewrap",
        choices=("none", "bwrap"), aliases=("shell_sandbox",), flag="--shell-sandbox"),
    Key("shell.network", "bool", False, "network inside the bwrap sandbox"),
    Key("shell.writable", "paths", (), "extra writable paths inside the bwrap sandbox"),
    Key("shell.env", "paths", (), "variable names passed into the bwrap sandbox besides its allowlist"),
    Key("checkpoint_every_bytes", "int", 200_000, "refresh the checkpoint after this growth", 0,
        section="windows"),
    Key("window_max_bytes", "int", _window_max_default,
        "start a new window past this size; 0 never (default: half the model's context window)", 0,
        section="windows"),
    Key("window_tail_bytes", "int", 40_000, "recent records carried into a new window", 0,
        section="windows", field="tail_bytes"),
    Key("side_threshold_bytes", "int", 4096, "larger carried results move to side files", 0,
        section="windows", field="side_threshold"),
    Key("prices", "map", {}, "USD per million tokens: {input, output, cache_read, cache_write}",
        section="", check=check_prices),
    Key("mcp_servers", "map", {}, "MCP servers for nagent-mcp: {NAME: {command, args, env} or {url, "
        "headers}}", section=""),
    Key("context.user", "bool", True, "read ~/.nagent/context.md and context.yaml"),
    Key("context.project", "bool", True, "read the project's AGENTS.md (else CLAUDE.md), its "
        ".nagent/context.md|yaml and the nearest nested AGENTS.md"),
    Key("context.directory", "bool", True, "read the nearest AGENTS.md between the working "
        "directory and the project root"),
    Key("context.max_bytes", "int", 32 * 1024, "size limit of each project or directory context "
        "layer, bytes", 1024),
    Key("skills", "bool", True, "list skills (~/.nagent/skills, <project>/.nagent/skills) in the "
        "context", section="context", field="skills"),
    Key("hooks.response", "str", None, "command that must accept a final response (exit 0) "
        "before it is printed", flag="--hook-per-response"),
    Key("hooks.action", "str", None, "policy command run before each action: exit 0 allows, "
        "2 refuses"),
    Key("hooks.timeout", "float", 120.0, "seconds a hook may run", 0, True),
    Key("max_gate_refusals", "int", 3, "refusals by the response hook before the run stops", 1,
        aliases=("hooks.max_gate_refusals",), section="hooks", field="max_gate_refusals"),
    Key("permissions", "rules", (), "permission rules: allow, confirm or deny shell commands, "
        "paths and MCP tools (docs/projects.md, Permission rules)", section=""),
    Key("mode", "choice", "build", "plan: read and plan only, change nothing; build: work "
        "(default)", choices=("build", "plan"), flag="--mode", section=""),
    Key("max_cost", "float", None, "USD the whole run may spend, sub-agents and edit sessions "
        "included", 0, True, flag="--max-cost", section="budget", field="max_cost"),
    Key("max_tokens", "int", None, "tokens (in + out) the whole run may use, sub-agents and edit "
        "sessions included", 1, flag="--max-tokens", section="budget", field="max_tokens"),
    Key("max_time", "float", None, "seconds the whole run may take (wall clock)", 0, True,
        flag="--max-time", section="budget", field="max_time"),
    Key("snapshots.enabled", "bool", True, "snapshot the project before each turn and each "
        "file-changing action, for --changes and --rewind"),
    Key("snapshots.max_file_bytes", "int", 10 << 20, "larger files are recorded as skipped, not "
        "copied", 1),
    Key("snapshots.max_files", "int", 20_000, "outside a git repository: most files of the "
        "working directory tree snapshotted", 1),
    Key("snapshots.max_bytes", "int", 512 << 20, "outside a git repository: most bytes one "
        "snapshot copies", 1),
    Key("snapshots.keep_days", "float", 30.0, "snapshots older than this many days are pruned",
        0, True),
    Key("snapshots.keep_turns", "int", 200, "snapshots of turns before the last this many of the "
        "project are pruned", 1),
    Key("warm_children", "bool", True, "start sub-agents and nested edit sessions as forks of "
        "the running nagent (no second SDK import); false: as new processes", section="agents",
        field="warm"),
)
KEYS = {key.name: key for key in SCHEMA}
FIXED = ("provider", "model")   # resolved together: Settings.provider (a ProviderRow) and .model





def _spellings():
    top, groups = set(), {}
    for key in SCHEMA:
        for spelling in (key.name,) + key.aliases:
            group, dot, name = spelling.partition(".")
            top.add(spelling)  # a grouped name may also be written flat: {"shell.timeout": 5}
            if dot:
                groups.setdefault(group, set()).add(name)
    return top, groups


def unknown_keys(data, path=""):
    """Dotted names of keys no schema row knows, in one file's data; a group (`shell`,
    `timeouts`, `retry`) that is not an object is a ConfigError."""
    top, groups = _spellings()
    unknown = []
    for name, value in data.items():
        if name in top:
            continue
        if name in groups:
            if not isinstance(value, dict):
                raise ConfigError(f"{name} must be an object", f"{json.dumps(value)} in {path}",
                                  "group its keys: {\"" + name + "\": {...}}")
            unknown += [f"{name}.{inner}" for inner in value if inner not in groups[name]]
        else:
            unknown.append(name)
    return sorted(unknown)


def check_value(key, value, written, where, flag=False):
    """`value` typed per the row, or ConfigError (UsageError for a flag) naming `written`.
    The error shows the value as it was written (a flag's "0", not the 0.0 it converts to)."""
    given = value

    def bad():
        shown = given if flag and isinstance(given, str) else json.dumps(given, default=str)
        if flag:
            return UsageError(f"{written} {key.requirement()}", shown)
        return ConfigError(f"{written} {key.requirement()}", f"{shown} in {where}",
                           "fix the value or remove the key")

    if flag and isinstance(value, str) and key.kind in ("int", "float"):
        try:
            value = int(value, 10) if key.kind == "int" else float(value)
        except ValueError:
            raise bad() from None
    if key.kind in ("int", "float"):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise bad()
        if key.kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise bad()
            value = int(value)
        else:
            value = float(value)
        if key.minimum is not None and (value <= key.minimum if key.above else value < key.minimum):
            raise bad()
        return value
    if key.kind == "bool":
        if not isinstance(value, bool):
            raise bad()
        return value
    if key.kind == "choice":
        if value not in key.choices:
            raise bad()
        return value
    if key.kind == "str":
        if not isinstance(value, str) or not value.strip():
            raise bad()
        return value
    if key.kind == "paths":
        if not isinstance(value, (list, tuple)) or not all(isinstance(item, str) for item in value):
            raise bad()
        return tuple(value)
    raise ValueError(f"no single-value check for kind {key.kind}")
