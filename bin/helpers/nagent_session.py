"""Everything one `nagent` invocation needs, resolved once from flags, config and environment.

Data contract: `build_session(options, environ, cwd) -> Session` where `options` is a plain
dict of the command-line values (conversation, pid, file_edit, provider, model, invocation,
parent_conversation, depth, shell_approval, shell_sandbox, shell_timeout, max_calls).
`Session` is frozen plain data: conversation path, settings, limits, write mode, the action
context, a factory for the initial context, meta for a new conversation, the prompt-cache
key and the secret values that must never be written anywhere.
Config keys read here (all optional): max_calls, max_format_retries, max_continuations,
repeat_limit, lock_timeout, max_agent_depth, agent_timeout, file_tool_timeout (seconds),
file_tool_memory_mb (0 = no cap), shell: {timeout, output_cap, approval, sandbox, network,
writable}.
"""
import hashlib
import os
from dataclasses import dataclass, field
from typing import Callable

from nagent_cli import secret_values
from nagent_config import api_key_for, config_number, expand_env_reference, resolve_settings
from nagent_errors import ConfigError, SetupError
from nagent_write_policy import WriteMode


@dataclass(frozen=True)
class LoopLimits:
    max_calls: int = 40
    max_format_retries: int = 3
    max_continuations: int = 3
    repeat_limit: int = 3
    lock_timeout: float = 3.0


@dataclass(frozen=True)
class Session:
    path: str
    settings: object
    limits: LoopLimits
    write_mode: WriteMode
    action_context: object
    initial_context: Callable = field(compare=False)
    meta: dict = field(default_factory=dict, compare=False)
    cache_key: str = ""
    secrets: tuple = ()
    pid: str = ""
    file_edit: dict | None = None


def loop_limits(config, options):
    max_calls = options.get("max_calls") or config_number(config, "max_calls", 40, 1)
    return LoopLimits(
        max_calls=int(max_calls),
        max_format_retries=int(config_number(config, "max_format_retries", 3)),
        max_continuations=int(config_number(config, "max_continuations", 3)),
        repeat_limit=int(config_number(config, "repeat_limit", 3, 2)),
        lock_timeout=float(config_number(config, "lock_timeout", 3.0)),
    )


def shell_policy(config, options, cwd):
    from nagent_shell import ShellPolicy, check_policy
    section = config.get("shell") or {}
    if not isinstance(section, dict):
        raise ConfigError("shell must be an object", repr(section))
    writable = section.get("writable") or ()
    policy = ShellPolicy(
        timeout=float(options.get("shell_timeout") or config_number(section, "timeout", 120.0)),
        output_cap=int(config_number(section, "output_cap", 32 * 1024)),
        approval=options.get("shell_approval") or config.get("shell_approval")
        or section.get("approval", "auto"),
        sandbox=options.get("shell_sandbox") or config.get("shell_sandbox")
        or section.get("sandbox", "none"),
        sandbox_network=bool(section.get("network", False)),
        writable=tuple(writable) if isinstance(writable, (list, tuple)) else (),
    )
    check_policy(policy)
    return policy


def require_sandbox(policy, environ):
    """A bwrap sandbox that cannot start stops the run before any model call (exit 4), rather
    than failing every shell action later."""
    import shutil
    if policy.sandbox == "bwrap" and not shutil.which("bwrap", path=environ.get("PATH", os.defpath)):
        raise SetupError("bwrap not found", "shell_sandbox is bwrap",
                         "install bubblewrap (apt-get install bubblewrap) or use --shell-sandbox none")


def config_secrets(config, environ):
    """Key values a config refers to (literal or ${VAR}), so redaction covers them too."""
    found = []
    for entry in (config.get("providers") or {}).values():
        if isinstance(entry, dict) and entry.get("api_key"):
            value = expand_env_reference(entry["api_key"], environ)
            if isinstance(value, str) and len(value) >= 6:
                found.append(value)
    return found


def secret_names(config):
    """Every variable a provider key may live in: the table's and the config's ${VAR} references."""
    from nagent_providers import all_rows
    names = set()
    for row in all_rows(config).values():
        names.update(row.key_env)
        if isinstance(row.api_key, str) and row.api_key.startswith("${") and row.api_key.endswith("}"):
            names.add(row.api_key[2:-1])
    return tuple(sorted(names))


def resolve_conversation(options, environ):
    """(conversation path, write mode, file-edit facts or None) for these options."""
    import nagent_conversation_lifecycle as lifecycle
    pid = options.get("pid") or lifecycle.default_pid(environ)
    if options.get("file_edit"):
        import nagent_file_edit_lib as file_edit
        record = file_edit.resolve_file_edit(options["file_edit"], pid, environ)
        target = os.path.realpath(record["path"])
        mode = WriteMode(kind="file-edit", target=target, target_id=record["file_id"])
        return lifecycle.conversation_path(record["conversation"], environ), mode, record, pid
    if options.get("conversation"):
        return lifecycle.conversation_path(options["conversation"], environ), WriteMode(), None, pid
    return lifecycle.default_conversation_path(environ, pid=pid), WriteMode(), None, pid


def file_edit_facts(record, context_module, action_context):
    """Target facts for the per-file initial context; a large target starts from its split.
    The split comes first: a target too large or too binary to split is refused before the
    whole file is hashed."""
    from nagent_actions import READ_SPLIT_THRESHOLD_BYTES, ensure_split
    try:
        large = os.path.getsize(record["path"]) > READ_SPLIT_THRESHOLD_BYTES
    except OSError:
        large = False  # describe_file_target names the problem
    split = ensure_split(record["path"], action_context) if large else None
    facts = context_module.describe_file_target(record["path"])
    if split:
        index_path, index, _ = split
        facts["split_index"] = index_path
        facts["split_segments"] = [
            {"file": os.path.join(os.path.dirname(index_path), s["file"]), "first_line": s["first_line"],
             "last_line": s["last_line"], "bytes": s["bytes"]} for s in index["segments"]]
    return facts


def shell_environ(environ):
    """The environment actions run in: the tool list the model reads says "Tools on PATH"."""
    from nagent_discovery import default_bin_dirs
    env = dict(environ)
    parts = [part for part in env.get("PATH", "").split(os.pathsep) if part]
    for directory in reversed(default_bin_dirs(env)):
        if os.path.isdir(directory) and directory not in parts:
            parts.insert(0, directory)
    env["PATH"] = os.pathsep.join(parts)
    return env


def build_session(options, environ, cwd):
    from nagent_actions import ActionContext
    import nagent_conversation_lifecycle as lifecycle
    from nagent_cli import provider_overrides
    settings = resolve_settings(provider_overrides(options), environ)
    api_key_for(settings)   # a missing key stops the run before anything is written
    config = settings.config
    path, mode, record, pid = resolve_conversation(options, environ)
    side_dir = lifecycle.side_dir(path)
    depth = int(options.get("depth") or 0)
    secrets = tuple(sorted(set(secret_values(environ)) | set(config_secrets(config, environ)),
                           key=len, reverse=True))
    action_context = ActionContext(
        cwd=cwd, environ=shell_environ(environ), write_mode=mode, conversation=path, side_dir=side_dir,
        shell_policy=shell_policy(config, options, cwd), settings=settings, pid=pid, depth=depth,
        max_depth=int(config_number(config, "max_agent_depth", 3)),
        agent_timeout=float(config_number(config, "agent_timeout", 1800.0, 1)),
        file_tool_timeout=float(config_number(config, "file_tool_timeout", 300.0, 0.1)),
        file_tool_memory=int(config_number(config, "file_tool_memory_mb", 4096)) << 20,
        secret_names=secret_names(config), secrets=secrets,
        nagent_bin=os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(__file__))), "nagent"),
    )
    require_sandbox(action_context.shell_policy, action_context.environ)

    def initial_context():
        import nagent_context
        facts = file_edit_facts(record, nagent_context, action_context) if record else None
        return nagent_context.build_initial_context(
            mode="file-edit" if record else "main", environ=environ, cwd=cwd, file_edit=facts)

    meta = {"invocation": options.get("invocation") or "user"}
    if options.get("parent_conversation"):
        meta["parent_conversation"] = options["parent_conversation"]
    if record:
        meta["file_edit"] = {"file_id": record["file_id"], "path": record["path"]}
    return Session(
        path=path, settings=settings, limits=loop_limits(config, options), write_mode=mode,
        action_context=action_context, initial_context=initial_context, meta=meta,
        cache_key="nagent-" + hashlib.sha256(os.path.basename(path).encode()).hexdigest()[:24],
        secrets=secrets, pid=pid, file_edit=record,
    )
