"""The initial context a conversation starts from, split for provider prompt caching.

Data contract:
- `InitialContext(static, session, files, warnings, root)`: `static` depends only on the mode ("main"
  or "file-edit"), the tag grammar, the discovered tool list (nagent's own bin/ and
  ~/.nagent/bin) and the MCP server names; it holds no timestamps, pids, paths, user or host
  names, nor anything of the project, so every request of that mode starts with the same bytes.
  `session` holds what varies, in this fixed order: the session facts (UTC date, cwd, user,
  host, OS, python, shell, how shell commands run when that is not the default: `shell`, from
  `shell_facts`, TMPDIR, the project root and git branch, or why a root was refused:
  nagent_project.probe_project), for
  file-edit mode the target's facts, the context layers user, project, directory
  (nagent_context_layers), the skills list (nagent_skills), and the project's tools (described
  only when trusted, by running nagent's private copy of the trusted bytes: nagent_trust).
  `files` are the context files read ({"layer", "path", "bytes", "cut"}); `warnings` lines for
  the user (a refused project root, project tools not run); `root` the project root found (its
  realpath), else the working directory's realpath: where the conversation starts
  (nagent_project_conversations). `meta` is what the conversation's meta record keeps.
- `shell_facts(sandbox, network, writable, approval, mode, read_only)` -> (key, value) facts: in
  plan mode what that allows (`read_only`: the trees a bwrap sandbox holds read-only; empty: no
  sandbox, only read-only commands run); with the bwrap sandbox, whether the network is on and
  which trees are writable (the working directory unless plan mode holds it, then `writable`:
  the caller passes nagent_sandbox.writable_dirs but cwd); with approval confirm or deny, what
  that means. Nothing for build mode, no sandbox and approval auto.
- `build_initial_context(mode, environ, cwd, now, tools, file_edit, mcp_servers, options, shell,
  secret_names, sandbox)` ->
  InitialContext. `tools` is discover_tools() output ([{name, description}]); None discovers
  with the default cache. `mcp_servers` are configured MCP server names: one sorted line each in
  `static` (names only, no tool fetch, so start-up stays fast and the prefix stable).
  `file_edit` (required for mode "file-edit") is describe_file_target() output, with
  `split_index`/`split_segments` filled by the caller for large files. `options` is
  settings.context (user, project, directory, max_bytes, skills); None: all on.
  `context.project` off leaves out everything read from the repository (project and
  directory layers, project skills, project tools); the git facts stay. `secret_names` are the
  session's key variable names (nagent_secrets.key_names), kept from every child it starts (git,
  tools' --description runs); None reads them from the config. `sandbox` is settings.shell.sandbox:
  under "bwrap" no project tool runs outside the sandbox, not even with --description.
- `create_initial_text(ctx)` -> "<initial_context>\n" + static + "\n" + session
  + "</initial_context>\n" (static first, so even the one-text form has a stable prefix).
- `describe_file_target(path, environ, secret_names)` -> {target, size, sha256, language, git_log,
  split_index: None, split_segments: []}; raises InputError for a missing or non-regular file.
- `load_root_context(environ)` -> (text, problems) of the user layer alone.
"""
import os
import sys
import time
from dataclasses import dataclass

import nagent_trust  # through the module: test_escapes races a swap right after its trust_status
from nagent_context_layers import load_layers, render_layers, user_layer
from nagent_discovery import default_bin_dirs, default_cache_path, discover_tools
from nagent_errors import InputError, UsageError
from nagent_fs import sha256_file
from nagent_project import git_marker_dir, probe_project, run_git
from nagent_protocol_grammar import GRAMMAR
from nagent_skills import find_skills, skills_text
from nagent_terminal_text import escape
from nagent_write_policy import temp_root_problem

MODES = ("main", "file-edit")
READ_LIMIT_KIB = 64
GIT_LOG_COUNT = 5

LANGUAGES = {
    ".py": "Python", ".pyi": "Python", ".js": "JavaScript", ".mjs": "JavaScript",
    ".cjs": "JavaScript", ".jsx": "JavaScript", ".ts": "TypeScript", ".tsx": "TypeScript",
    ".c": "C", ".h": "C", ".cc": "C++", ".cpp": "C++", ".cxx": "C++", ".hpp": "C++",
    ".hh": "C++", ".go": "Go", ".rs": "Rust", ".java": "Java", ".json": "JSON",
    ".yaml": "YAML", ".yml": "YAML", ".xml": "XML", ".html": "HTML", ".htm": "HTML",
    ".md": "Markdown", ".markdown": "Markdown", ".txt": "text", ".sh": "Shell",
    ".bash": "Shell", ".toml": "TOML", ".ini": "INI", ".cfg": "INI", ".css": "CSS",
    ".sql": "SQL", ".rb": "Ruby", ".php": "PHP", ".kt": "Kotlin", ".swift": "Swift",
    ".cs": "C#", ".rst": "reStructuredText", ".csv": "CSV",
}
LANGUAGE_NAMES = {"Makefile": "Makefile", "makefile": "Makefile", "Dockerfile": "Dockerfile"}


@dataclass(frozen=True)
class InitialContext:
    """The initial context in its two parts (static, session), the files read and warnings."""

    static: str
    session: str
    files: tuple = ()      # the context files read: {"layer", "path", "bytes", "cut"}
    warnings: tuple = ()   # lines for the user (untrusted project tools)
    root: str = ""         # the project root, or the directory outside a project

    @property
    def meta(self):
        """What the conversation's meta record keeps about this context (for --status)."""
        return {"context_files": [dict(item) for item in self.files]}


# -- static part: the same bytes for every conversation of a mode -----------------------------

INTRO = {
    "main": (
        'You are the model inside nagent ("not-an-agent"). nagent drives a loop: it sends this '
        "conversation to you, runs the actions your reply asks for, appends their results and "
        "calls you again, until you answer with <nagent-response>."),
    "file-edit": (
        'You are the model inside nagent ("not-an-agent"), in a per-file edit session: this '
        "conversation exists to change ONE target file (path, size, hash and history are in the "
        "session facts below). nagent drives a loop: it sends this conversation to you, runs the "
        "actions your reply asks for, appends their results and calls you again, until you "
        "answer with <nagent-response>."),
}

CONTEXT_RULES = f"""Context rules:
- Read files up to {READ_LIMIT_KIB} KiB with <nagent-read>; larger ones with <nagent-file-read>, \
which splits them and returns the segment index.
- Delegate noisy exploration (wide searches, long logs, many files) to <nagent-agent>: only its \
final answer comes back, so this conversation stays small.
- The session part below may add context layers read from files (user, project, directory; \
a later layer is more specific), a list of skills (read a skill's SKILL.md before following it) \
and the project's own tools. A layer cut at its size limit says how to read the rest.
- One step at a time; keep replies short. Do not repeat an action that just failed the same \
way: change the approach, or explain the problem in <nagent-response>."""

WRITE_RULES = {
    "main": """Write rules (main conversation):
- <nagent-write> may write only under /tmp, /var/tmp or $TMPDIR, never into nagent's own ~/.nagent. A $TMPDIR that is your home, the working directory or one of their ancestors does not count.
- Change project files with <nagent-replace path="PATH"> for small exact changes (read the \
file first and copy <old> exactly), or with <nagent-file-edit path="PATH">instruction\
</nagent-file-edit> for a change that needs its own session: nagent runs both for you and \
shows you the diff. Never change project files with <nagent-write>, with shell redirection, \
tee, sed -i or similar, and never run nagent-file-edit or nagent from <nagent-shell> (it \
fails there: no key).""",
    "file-edit": f"""Write rules (per-file edit session):
- Change the target with <nagent-replace path="TARGET"> (exact old/new text, one or more \
pairs; the cheapest edit, also for a target over {READ_LIMIT_KIB} KiB and for text that spans \
two of its segments), or by replacing the WHOLE file: <nagent-write path="TARGET">the complete \
new content</nagent-write>. Never write a fragment or a diff with <nagent-write>.
- A target over {READ_LIMIT_KIB} KiB is read through the split nagent made of it (its \
segments are listed in the session facts or a <nagent-file-read> result); prefer \
<nagent-replace> on the target; a larger rewrite writes whole segment files, then merges them \
with <nagent-file-patch index="INDEX"/>. Only splits nagent made count: an index.json grants \
nothing.
- Nothing else in the project may be written; scratch files go under /tmp, /var/tmp or \
$TMPDIR. No shell redirection into project files, and no nagent-file-edit or \
<nagent-file-edit> from here.
- When the change is done, answer with <nagent-response> describing it in a few lines.""",
}

SHELL_RULES = """Shell rules:
- <nagent-shell> runs as a bash script in the user's working directory, stdin closed, under a \
timeout, without provider API keys; long output is cut to head and tail.
- Prefer read-only commands. Nothing interactive, no servers that never exit."""


def _grammar():
    # The grammar text alone: the parser it sits beside is not needed before the first request.
    return GRAMMAR.strip()


def tools_text(tools):
    lines = ["Tools on PATH:"]
    for tool in sorted(tools or [], key=lambda item: item["name"]):
        lines.append(f"- {tool['name']} — {tool['description']}")
    if len(lines) == 1:
        lines.append("- (none found)")
    return "\n".join(lines)


def mcp_text(names):
    """One line per configured MCP server, sorted; tool lists are fetched on demand, never here."""
    if not names:
        return ""
    lines = ["MCP servers (use their tools through <nagent-shell> with nagent-mcp):"]
    lines.extend(f"- {name}: run `nagent-mcp --list {name}` for its tools" for name in sorted(names))
    return "\n".join(lines)


def static_text(mode, tools, mcp_servers=()):
    parts = [INTRO[mode], "Reply grammar:\n" + _grammar(), CONTEXT_RULES, WRITE_RULES[mode],
             SHELL_RULES, tools_text(tools), mcp_text(mcp_servers)]
    return "\n\n".join(part for part in parts if part) + "\n"


# -- root context: ~/.nagent/context.md and context.yaml ---------------------------------------

def load_root_context(environ=None):
    """(text, problems) of the user layer alone (see nagent_context_layers.user_layer)."""
    environ = os.environ if environ is None else environ
    layer = user_layer(environ, set())
    return layer.text, list(layer.problems)


# -- session part: facts about this conversation -----------------------------------------------

def _date(now):
    if now is None:
        seconds = time.time()
    elif hasattr(now, "timestamp"):
        seconds = now.timestamp()
    else:
        seconds = float(now)
    return time.strftime("%Y-%m-%d", time.gmtime(seconds))


def _user(environ):
    name = environ.get("USER") or environ.get("LOGNAME")
    if name:
        return name
    try:
        import pwd
        return pwd.getpwuid(os.getuid()).pw_name
    except (ImportError, KeyError):
        return "(unknown)"


APPROVAL_FACTS = {
    "confirm": "confirm: the user approves each command on the terminal; a declined one is not run",
    "deny": "deny: every command is refused (shell.approval), so do without <nagent-shell>",
}


PLAN_FACT = ("plan: read, run read-only commands and plan; change nothing. {shell} <nagent-write> "
             "and edits are refused outside the temp roots. Your final <nagent-response> is the "
             "plan; the user carries it out with `nagent --mode build`.")
PLAN_SHELL = {True: "Shell commands run in a bwrap sandbox where the project is read-only.",
              False: "Only read-only shell commands run (ls, cat, grep, rg, find without actions, "
                     "git log/diff/status/show, and commands the user marked read-only)."}


def shell_facts(sandbox="none", network=False, writable=(), approval="auto", mode="build",
                read_only=()):
    """(key, value) session facts on how <nagent-shell> commands run: the mode when it is plan,
    the bwrap sandbox (network, the writable trees: the working directory unless plan mode holds
    it read-only, then `writable`) and an approval other than auto; none for the defaults."""
    facts = []
    if mode == "plan":
        facts.append(("mode", PLAN_FACT.format(shell=PLAN_SHELL[bool(read_only)])))
    if sandbox == "bwrap":
        trees = writable if read_only else ("the working directory", *writable)
        facts.append(("shell sandbox", f"bwrap, network {'on' if network else 'off'}; writable: "
                      + (", ".join(trees) or "none") + "; everything else read-only, "
                      "~/.nagent hidden (its bin/ tools still run); environment: an allowlist of "
                      "variables only"))
    if approval in APPROVAL_FACTS:
        facts.append(("shell approval", APPROVAL_FACTS[approval]))
    return tuple(facts)


def environment_facts(environ, cwd, now, project=None, shell=(), refused=None):
    uname = os.uname()
    facts = [
        ("date (UTC)", _date(now)),
        ("working directory", cwd),
        ("user", _user(environ)),
        ("host", uname.nodename),
        ("os", f"{uname.sysname} {uname.release} {uname.machine}"),
        ("python", "%d.%d.%d" % sys.version_info[:3]),
        ("shell", environ.get("SHELL") or "(unset)"),
        *shell,
    ]
    if environ.get("TMPDIR"):
        problem = temp_root_problem(environ, cwd)
        facts.append(("TMPDIR", environ["TMPDIR"] + (f" ({problem})" if problem else "")))
    if project is None:
        facts.append(("project root", f"none (refused: {refused})" if refused
                      else "none (not inside a git work tree)"))
    else:
        facts += [("project root", project.root), ("git branch", project.branch)]
    return "Session facts:\n" + "\n".join(f"- {key}: {escape(value)}" for key, value in facts)


def _segment_line(segment):
    """One split segment {file, first_line, last_line, bytes} as the model reads it."""
    return (f"{segment['file']} (lines {segment['first_line']}-{segment['last_line']}, "
            f"{segment['bytes']} bytes)")


def target_facts(file_edit):
    lines = ["Edit target:",
             f"- path: {file_edit['target']}",
             f"- size: {file_edit['size']} bytes",
             f"- sha256: {file_edit['sha256']}",
             f"- language: {file_edit['language']}"]
    history = file_edit.get("git_log") or []
    if history:
        lines.append("- recent git history of this file (newest first):")
        lines.extend(f"  - {subject}" for subject in history)
    else:
        lines.append("- git history: none (not in a git work tree, or no commits touch it)")
    if file_edit.get("split_index"):
        lines.append(f"- split index: {file_edit['split_index']}")
        lines.append(f"  The target is over {READ_LIMIT_KIB} KiB: edit it through this split "
                     "(whole segment files, then <nagent-file-patch index=...>).")
        segments = file_edit.get("split_segments") or []
        if segments:
            lines.append("- split segments:")
            lines.extend(f"  - {_segment_line(segment)}" for segment in segments)
    return "\n".join(lines)


def _changed_tools(where, count):
    return (f"Project tools: {where} changed since the user trusted it, so nagent neither ran "
            f"nor described its {count} entries; only the user can trust them again, with "
            "`nagent --trust` in the project."), (
        f"project tools in {where} changed since you trusted them and were not run "
        "(check them, then run `nagent --trust` in the project again)",)


def project_tools_text(project, environ, secret_names=None, sandbox="none"):
    """(section text, warnings for the user) about <root>/.nagent/bin (see nagent_trust). A
    trusted tool's --description runs from nagent's private copy of the trusted bytes, never
    from the project (whatever a command renames there meanwhile); under the shell sandbox not
    at all, since the project's tools are the sandbox's to run."""
    status = nagent_trust.trust_status(project, environ)
    if status.state == "none":
        return "", ()
    where = escape(status.bin_dir)
    if status.state == "trusted" and sandbox != "none":
        lines = [f"Project tools (in {where}, trusted by the user with nagent --trust; not run: "
                 "the shell sandbox is on, so nagent did not describe them; run one with "
                 "--description by path through <nagent-shell> to learn what it does):"]
        lines += [f"- {escape(os.path.join(status.bin_dir, name))}" for name in status.tools]
        return "\n".join(lines), ()
    if status.state == "trusted":
        copy = nagent_trust.trusted_copy(project, status.hash, environ)
        if copy is None:   # .nagent/bin changed between the check and the copy
            return _changed_tools(where, len(status.tools))
        tools = discover_tools([copy], default_cache_path(environ), environ=environ,
                               secret_names=secret_names)
        lines = [f"Project tools (in {where}, trusted by the user with nagent --trust; run them "
                 "by path through <nagent-shell>):"]
        lines += [f"- {escape(os.path.join(status.bin_dir, tool['name']))} — {tool['description']}"
                  for tool in tools]
        if not tools:
            lines.append("- (no executables)")
        return "\n".join(lines), ()
    if status.state == "changed":
        return _changed_tools(where, len(status.tools))
    return (f"Project tools: {where} holds {len(status.tools)} entries that nagent neither ran nor "
            "described: the user has not trusted this project's tools (only the user can, with "
            "`nagent --trust` in the project)."), (
        f"project tools in {where} were not run: this project is not trusted "
        "(run `nagent --trust` in it to use them)",)


def session_parts(mode, environ, cwd, now, file_edit, options=None, shell=(), secret_names=None,
                  sandbox="none"):
    """(session text, context files read, warnings for the user, the project or None)."""
    project, refused = probe_project(cwd, environ, secret_names)
    parts = [environment_facts(environ, cwd, now, project, shell, refused)]
    if mode == "file-edit":
        parts.append(target_facts(file_edit))
    layers = load_layers(cwd, environ, project, options)
    parts.append(render_layers(layers))
    from_project = project is not None and getattr(options, "project", True)
    if getattr(options, "skills", True):
        parts.append(skills_text(find_skills(environ, project.root if from_project else None)))
    warnings = (f"project root refused: {refused}",) if refused else ()
    if from_project:
        text, tool_warnings = project_tools_text(project, environ, secret_names, sandbox)
        warnings += tool_warnings
        parts.append(text)
    files = tuple(item for layer in layers for item in layer.files)
    return "\n\n".join(part for part in parts if part) + "\n", files, warnings, project


def session_text(mode, environ, cwd, now, file_edit, options=None):
    return session_parts(mode, environ, cwd, now, file_edit, options)[0]


# -- public API -------------------------------------------------------------------------------

def build_initial_context(mode="main", environ=None, cwd=None, now=None, tools=None,
                          file_edit=None, mcp_servers=(), options=None, shell=(), secret_names=None,
                          sandbox="none"):
    if mode not in MODES:
        raise UsageError("unknown context mode", mode, "use main or file-edit")
    if mode == "file-edit" and not file_edit:
        raise UsageError("file-edit context needs a target", "", "pass the output of describe_file_target")
    environ = os.environ if environ is None else environ
    cwd = os.getcwd() if cwd is None else cwd
    if tools is None:
        tools = discover_tools(default_bin_dirs(environ), default_cache_path(environ),
                               environ=environ, secret_names=secret_names)
    session, files, warnings, project = session_parts(mode, environ, cwd, now, file_edit, options,
                                                      shell, secret_names, sandbox)
    return InitialContext(static=static_text(mode, tools, mcp_servers), session=session,
                          files=files, warnings=warnings,
                          root=project.root if project else os.path.realpath(cwd))


def create_initial_text(ctx):
    return ("<initial_context>\n" + ctx.static + "\n" + ctx.session.rstrip("\n") + "\n"
            "</initial_context>\n")


def language_for(path):
    name = os.path.basename(path)
    if name in LANGUAGE_NAMES:
        return LANGUAGE_NAMES[name]
    return LANGUAGES.get(os.path.splitext(name)[1].lower(), "text")


def git_history(path, environ=None, count=GIT_LOG_COUNT, secret_names=None):
    """Last `count` commit subjects touching `path`, from the repository whose `.git` holds it
    (nagent_project.run_git: never one it carries); [] outside a work tree or on any failure."""
    real = os.path.realpath(path)
    marker = git_marker_dir(os.path.dirname(real))
    if marker is None:
        return []
    proc = run_git(marker, ("log", "-n", str(count), "--format=%s", "--no-show-signature", "--",
                            real), environ, secret_names)
    if proc is None or proc.returncode != 0:
        return []
    text = proc.stdout.decode("utf-8", "replace")
    return [line.strip() for line in text.splitlines() if line.strip()]


def describe_file_target(path, environ=None, secret_names=None):
    target = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(target):
        raise InputError("edit target is not a regular file", path)
    try:
        size = os.path.getsize(target)
        digest = sha256_file(target)
    except OSError as error:
        raise InputError("cannot read edit target", path, error.strerror or "") from None
    return {"target": target, "size": size, "sha256": digest, "language": language_for(target),
            "git_log": git_history(target, environ, secret_names=secret_names), "split_index": None, "split_segments": []}
