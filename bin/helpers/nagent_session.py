"""Everything one `nagent` invocation needs, resolved once from flags, config and environment.

Data contract: `build_session(selection, environ, cwd, settings=None, needs_model=True, *,
invocation="user", parent_conversation=None, depth=0, budget=None) -> Session` where
`selection` is the nagent_conversation_layout.Selection of the command line (conversation,
pid, file_edit), `settings` the command's resolved nagent_config.Settings (the config's alone,
no flags, when None), and the keywords say who started the run: "user" or "delegated" (a
parent nagent), the parent's conversation, the sub-agent depth and what is left of the parent
run's budget (`--budget`). No command-line dict comes here (nagent_invocation).
`Session` is frozen plain data: conversation path, settings, limits, write mode, the action
context (built on first use from `make_action_context`: the action handlers and the file tools
they import are not needed before the first reply asks for an action, and importing them costs
start-up time before the first request), a factory for the initial context, meta for a new
conversation, the prompt-cache key, the secret values that must never be written anywhere, and
start-up warnings (e.g. the sandbox working from $HOME), one line each, the sub-agent depth,
the invocation's environment (where ~/.nagent is), its working directory, the key names
the configured providers use (what no child gets), the run tree's budget (nagent_budget.caps_for:
the flags' and config's caps, tightened by a parent's `--budget`; a cost cap on an unpriced model
stops here) and the mode: in plan mode shell commands run under bwrap with the project and the
working directory read-only where bwrap exists (`plan_sandbox`), else only read-only commands
run; the action context carries the permission policy (nagent_policy.build_policy: rules,
guard, mode). `sandbox_roots`: the directories a sandboxed shell command may write (None when
commands run unsandboxed), for what must hold against them (nagent_run_snapshots).
Every setting comes from the Settings fields (loop limits are `settings.loop`, the shell policy is
built from `settings.shell`, sub-agent limits from `settings.agents`, file tool limits from
`settings.file_tools`); nothing here reads config.
"""
import hashlib
import os
from dataclasses import dataclass, field
from functools import cache, cached_property, partial
from typing import Callable

from nagent_budget import caps_for
from nagent_config import api_key_for
from nagent_config_checks import resolve_checked
import nagent_conversation_layout as layout
from nagent_fs import regular_file_stat
from nagent_paths import absolute_path_value
from nagent_secrets import key_names, secret_values
from nagent_write_policy import WriteMode


@dataclass(frozen=True)
class Session:
    """One invocation's resolved inputs (see the module's data contract)."""

    path: str
    settings: object
    limits: object          # settings.loop: max_calls, max_format_retries, ... (see nagent_config)
    write_mode: WriteMode
    make_action_context: Callable = field(compare=False)
    initial_context: Callable = field(compare=False)
    meta: dict = field(default_factory=dict, compare=False)
    cache_key: str = ""
    secrets: tuple = ()
    pid: str = ""
    file_edit: dict | None = None
    warnings: tuple = ()        # printed on stderr before the run
    depth: int = 0              # sub-agent depth (0: started by the user)
    environ: dict = field(default_factory=dict, compare=False)  # the invocation's (HOME: ~/.nagent)
    cwd: str = ""               # the working directory actions run in
    key_names: tuple = ()       # variables holding the configured providers' keys
    budget: object = None       # nagent_budget.Caps of the run tree (flags, config, a parent's)
    mode: str = "build"         # "plan": read-only (nagent_policy)
    sandbox_roots: tuple | None = None   # what a sandboxed shell command may write (real paths,
                                         # nagent_sandbox.writable_roots); None: unsandboxed

    @cached_property
    def action_context(self):
        return self.make_action_context()

    @cached_property
    def actions(self):
        """nagent_actions (process_action, process_agents), imported once a reply asks for an
        action: the handlers and the file tools they import cost time before the first request."""
        import nagent_actions
        return nagent_actions


def shell_policy(settings, read_only=()):
    """The ShellPolicy of `settings.shell`. The config schema checked every field (choices and
    ranges) and run_shell checks the policy it runs under, so nothing is checked here; the shell
    module is imported by the first shell action (or a sandboxed session), not before the first
    request. `read_only`: plan mode's trees (the project) bound read-only in a bwrap sandbox."""
    from nagent_shell import ShellPolicy
    shell = settings.shell
    return ShellPolicy(timeout=shell.timeout, output_cap=shell.output_cap, approval=shell.approval,
                       sandbox="bwrap" if read_only else shell.sandbox,
                       sandbox_network=shell.network, writable=shell.writable, env=shell.env,
                       read_only=tuple(read_only))


def early_project_rules(cwd, environ, secret_names):
    """The project's .nagent/permissions rules, read (and checked: ConfigError) before the run
    starts; None when the project has no such file (nothing to import then)."""
    from nagent_project import find_project, has_permissions_file
    if not has_permissions_file(cwd):
        return None
    from nagent_permissions import load_project_rules
    project = find_project(cwd, environ, secret_names)
    return load_project_rules(project.root if project else None)


def plan_sandbox(settings, cwd, environ):
    """Plan mode's read-only trees (the project and the working directory) when bwrap is there
    to hold them, else () (then only read-only commands run: nagent_policy)."""
    if settings.mode != "plan":
        return ()
    import nagent_sandbox
    from nagent_errors import SetupError
    try:
        nagent_sandbox.bwrap_path(environ)
    except SetupError:
        if settings.shell.sandbox == "bwrap":
            raise
        return ()
    from nagent_project import find_project
    project = find_project(cwd, environ)
    trees = {os.path.realpath(cwd)} | ({project.root} if project else set())
    return tuple(sorted(trees))


def check_conversation(selection, environ):
    """The conversation id for `selection`, after checking, without writing anything, what
    selects the conversation: a bad --pid or --conversation name is a UsageError, a missing
    --file-edit target an InputError. Callers run this before key and SDK checks and before any
    write."""
    pid = layout.selected_pid(selection.pid, environ)
    if selection.file_edit:
        regular_file_stat(selection.file_edit, ("is a directory", "give a file"))
    elif selection.conversation:
        layout.given_name(selection.conversation, environ)
    return pid


def resolve_conversation(selection, environ):
    """(conversation path, write mode, file-edit record or None, pid) for this selection. A
    --file-edit target gets its record in the per-shell index here (that writes the index)."""
    pid = check_conversation(selection, environ)
    if selection.file_edit:
        import nagent_file_edit_lib as file_edit
        record = file_edit.resolve_file_edit(selection.file_edit, pid, environ)
        target = os.path.realpath(record["path"])
        mode = WriteMode(kind="file-edit", target=target, target_id=record["file_id"])
        return layout.conversation_path(record["conversation"], environ), mode, record, pid
    return layout.selected_conversation(selection, environ)[0], WriteMode(), None, pid


def require_sdk(row):
    """A provider SDK that is not installed stops the run before anything is written (exit 4).
    It is only looked up here; the import itself waits for the first model call."""
    from importlib.util import find_spec
    try:
        found = find_spec(row.package) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        import nagent_llm
        nagent_llm.require_package(row)  # raises the SetupError with the install line


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
    facts = context_module.describe_file_target(record["path"],
                                                secret_names=action_context.secret_names)
    if split:
        index_path, index, _ = split
        facts["split_index"] = index_path
        facts["split_segments"] = [
            {"file": os.path.join(os.path.dirname(index_path), s["file"]), "first_line": s["first_line"],
             "last_line": s["last_line"], "bytes": s["bytes"]} for s in index["segments"]]
    return facts


def shell_environ(environ):
    """The environment actions run in: the tool list the model reads says "Tools on PATH" (the
    user's PATH without its relative entries). An
    installed copy's scripts directory also holds its environment's python and pip: it goes
    last, so the project's own python stays the one a shell action finds. A checkout's tools
    reach this run's interpreter (and its SDKs) through NAGENT_PYTHON (nagent_install)."""
    from nagent_discovery import default_bin_dirs
    from nagent_install import checkout_bin_dir, run_python_env
    env = dict(environ, **run_python_env())   # a checkout's tools run on this interpreter
    # Absolute entries only (nagent_paths.absolute_path_value, the one rule for names looked up
    # on PATH): rules and plan mode judge `git status` as the system's git, and a "." or "bin"
    # entry would make bash run the repository's own ./git.
    parts = [part for part in absolute_path_value(env.get("PATH")).split(os.pathsep) if part]
    own, home_bin = default_bin_dirs(env)
    if os.path.isdir(home_bin) and home_bin not in parts:
        parts.insert(0, home_bin)
    if os.path.isdir(own) and own not in parts:
        parts.insert(0 if checkout_bin_dir() else len(parts), own)
    env["PATH"] = os.pathsep.join(parts)
    return env


def build_session(selection, environ, cwd, settings=None, needs_model=True, *, invocation="user",
                  parent_conversation=None, depth=0, budget=None):
    """The session for `selection`. `settings` is the command's resolved Settings (the config's,
    without flags, when None). `needs_model` False (a replace that calls no model) checks
    neither the key nor the SDK, and prepares no sandbox (it runs no shell)."""
    # Checks first, cheapest and most specific first, and nothing written until all pass:
    # names and files, then settings, then the key and the SDK.
    check_conversation(selection, environ)
    if settings is None:
        settings = resolve_checked({}, environ)
    # A cost cap on a model without a price is refused here, before anything runs.
    caps = caps_for(settings, budget) if needs_model else None
    if needs_model:
        api_key_for(settings)
        require_sdk(settings.provider)
    run_environ = shell_environ(environ)
    read_only = plan_sandbox(settings, cwd, run_environ)
    sandboxed = settings.shell.sandbox == "bwrap" or bool(read_only)
    policy = cache(partial(shell_policy, settings, read_only))
    warnings, sandbox_roots = (), None
    if sandboxed and needs_model:
        import nagent_sandbox  # an unsandboxed run needs none of it before its first action
        # A sandbox that cannot start (exit 4) or cannot protect nagent's own files (exit 10)
        # stops the run here, before any model call, rather than failing every shell action.
        warnings = nagent_sandbox.prepare(policy(), cwd, run_environ)
        sandbox_roots = nagent_sandbox.writable_roots(cwd, policy(), run_environ)
    path, mode, record, pid = resolve_conversation(selection, environ)
    side_dir = layout.side_dir(path)
    depth = int(depth or 0)
    rows = settings.providers.values()
    secrets = secret_values(rows, environ)   # every key nagent knows: never written anywhere
    # Before any model call: a project's .nagent/permissions that cannot be read stops the run.
    # The rest of the policy (the guard's git, the parser) waits for the first action.
    project_rules = early_project_rules(cwd, run_environ, key_names(rows))

    def make_action_context():
        from nagent_actions import ActionContext
        from nagent_policy import build_policy
        return ActionContext(
            policy=build_policy(settings, cwd, run_environ, bool(read_only), key_names(rows),
                                project_rules),
            cwd=cwd, environ=run_environ, write_mode=mode, conversation=path, side_dir=side_dir,
            shell_policy=policy(), settings=settings, pid=pid, depth=depth,
            max_depth=settings.agents.max_depth, agent_timeout=settings.agents.timeout,
            max_parallel=settings.agents.max_parallel, warm_children=settings.agents.warm,
            file_tool_timeout=settings.file_tools.timeout,
            file_tool_memory=settings.file_tools.memory_mb << 20,
            secret_names=key_names(rows), secrets=secrets,
        )

    def initial_context():
        import nagent_context
        facts = file_edit_facts(record, nagent_context, make_action_context()) if record else None
        writable = ()
        if sandboxed:
            import nagent_sandbox
            writable = tuple(tree for tree in nagent_sandbox.writable_dirs(
                cwd, policy(), run_environ) if tree != os.path.realpath(cwd))
        shell = nagent_context.shell_facts("bwrap" if sandboxed else "none", settings.shell.network,
                                           writable, settings.shell.approval,
                                           mode=settings.mode, read_only=read_only)
        return nagent_context.build_initial_context(
            mode="file-edit" if record else "main", environ=environ, cwd=cwd, file_edit=facts,
            mcp_servers=tuple(spec.name for spec in settings.mcp_servers),
            options=settings.context, shell=shell, secret_names=key_names(rows),
            sandbox=settings.shell.sandbox)

    meta = {"invocation": invocation or "user"}
    if parent_conversation:
        meta["parent_conversation"] = parent_conversation
    if record:
        meta["file_edit"] = {"file_id": record["file_id"], "path": record["path"]}
    return Session(
        path=path, settings=settings, limits=settings.loop, write_mode=mode,
        make_action_context=make_action_context, initial_context=initial_context, meta=meta,
        cache_key="nagent-" + hashlib.sha256(os.path.basename(path).encode()).hexdigest()[:24],
        secrets=secrets, pid=pid, file_edit=record, warnings=warnings, depth=depth,
        environ=environ, cwd=cwd, key_names=key_names(rows), budget=caps,
        mode=settings.mode, sandbox_roots=sandbox_roots,
    )
