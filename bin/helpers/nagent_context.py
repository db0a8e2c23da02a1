"""The initial context a conversation starts from, split for provider prompt caching.

Data contract:
- `InitialContext(static, session)`: `static` depends only on the mode ("main" or
  "file-edit"), the tag grammar, the discovered tool list and the MCP server names; it holds no timestamps, pids,
  paths, user or host names, so every request of that mode starts with the same bytes.
  `session` holds what varies: UTC date, cwd, user, host, OS, python, shell, TMPDIR, the root
  context text and its problems, and for file-edit mode the target's facts.
- `build_initial_context(mode, environ, cwd, now, tools, file_edit, mcp_servers)` -> InitialContext.
  `tools` is discover_tools() output ([{name, description}]); None discovers with the default
  cache. `mcp_servers` are configured MCP server names: one sorted line each in `static`
  (names only, no tool fetch, so start-up stays fast and the prefix stable). `file_edit` (required for mode "file-edit") is describe_file_target() output, with
  `split_index`/`split_segments` filled by the caller for large files.
- `create_initial_text(ctx)` -> "<initial_context>\n" + static + "\n" + session
  + "</initial_context>\n" (static first, so even the one-text form has a stable prefix).
- `describe_file_target(path, environ)` -> {target, size, sha256, language, git_log,
  split_index: None, split_segments: []}; raises InputError for a missing or non-regular file.
- `load_root_context(environ)` -> (text, problems): ~/.nagent/context.md verbatim, then the
  documents listed by ~/.nagent/context.yaml (a list of paths or {paths: [...]}). A listed path
  is a file (a .yaml/.yml file is itself a context list, expanded recursively) or a directory
  (its regular files, sorted, not recursive); relative paths resolve against the listing file,
  ~ against HOME. Each document appears once (visited realpaths, so cycles end). Missing,
  unreadable or malformed entries become `problems` lines, never errors. The text is capped at
  256 KiB (a problem line notes the cut).
"""
import os
import sys
import time
from dataclasses import dataclass

from nagent_errors import InputError, UsageError
from nagent_fs import sha256_file
from nagent_write_policy import temp_root_problem

MODES = ("main", "file-edit")
READ_LIMIT_KIB = 64
GIT_LOG_COUNT = 5
GIT_TIMEOUT = 2.0
ROOT_CONTEXT_CAP = 256 * 1024
YAML_SUFFIXES = (".yaml", ".yml")

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
    static: str
    session: str


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
- One step at a time; keep replies short. Do not repeat an action that just failed the same \
way: change the approach, or explain the problem in <nagent-response>."""

WRITE_RULES = {
    "main": """Write rules (main conversation):
- <nagent-write> may write only under /tmp, /var/tmp or $TMPDIR, never into nagent's own ~/.nagent. A $TMPDIR that is your home, the working directory or one of their ancestors does not count.
- Project files are changed only by running `nagent-file-edit --file PATH "instruction"` \
through <nagent-shell>: a dedicated edit session for that one file. Never change project files \
with <nagent-write> or with shell redirection, tee, sed -i or similar.""",
    "file-edit": f"""Write rules (per-file edit session):
- Change the target by replacing the WHOLE file: <nagent-write path="TARGET">the complete new \
content</nagent-write>. Never write a fragment or a diff.
- A target over {READ_LIMIT_KIB} KiB is edited through the split nagent made of it (its \
segments are listed in the session facts or a <nagent-file-read> result): write whole segment \
files, then merge them with <nagent-file-patch index="INDEX"/>. Only splits nagent made count: \
an index.json grants nothing.
- Nothing else in the project may be written; scratch files go under /tmp, /var/tmp or \
$TMPDIR. No shell redirection into project files, and no nagent-file-edit from here.
- When the change is done, answer with <nagent-response> describing it in a few lines.""",
}

SHELL_RULES = """Shell rules:
- <nagent-shell> runs as a bash script in the user's working directory, stdin closed, under a \
timeout, without provider API keys; long output is cut to head and tail.
- Prefer read-only commands. Nothing interactive, no servers that never exit."""


def _grammar():
    # Imported here so a missing protocol module breaks prompt building, not this module's import.
    from nagent_protocol import grammar_text
    return grammar_text().strip()


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

def _expand_home(path, home):
    if path == "~" or path.startswith("~/"):
        return home + path[1:]
    return os.path.expanduser(path)


class _RootContextLoader:
    """One load: visited realpaths, collected documents, problems and the size budget."""

    def __init__(self, home):
        self.home = home
        self.visited = set()
        self.documents = []
        self.problems = []
        self.used = 0
        self.full = False

    def add_document(self, path):
        try:
            with open(path, "rb") as handle:
                data = handle.read(ROOT_CONTEXT_CAP + 1)
        except OSError as error:
            self.problems.append(f"unreadable: {path} ({error.strerror or error})")
            return
        if self.used + len(data) > ROOT_CONTEXT_CAP:
            data = data[:ROOT_CONTEXT_CAP - self.used]
            self.full = True
            self.problems.append(f"root context capped at {ROOT_CONTEXT_CAP // 1024} KiB: "
                                 f"{path} cut, later documents skipped")
        self.used += len(data)
        text = data.decode("utf-8", "replace").rstrip("\n")
        self.documents.append(f"=== {path} ===\n{text}")

    def load_list(self, path):
        import yaml  # only paid when a yaml context file exists
        try:
            with open(path, encoding="utf-8") as handle:
                data = yaml.safe_load(handle)
        except OSError as error:
            self.problems.append(f"unreadable: {path} ({error.strerror or error})")
            return
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            self.problems.append(f"malformed context list: {path} ({first})")
            return
        if isinstance(data, dict) and isinstance(data.get("paths"), list):
            entries = data["paths"]
        elif isinstance(data, list):
            entries = data
        elif data is None:
            entries = []
        else:
            self.problems.append(f"malformed context list: {path} "
                                 "(expected a list of paths or {paths: [...]})")
            return
        base = os.path.dirname(path)
        for entry in entries:
            if not isinstance(entry, str) or not entry.strip():
                self.problems.append(f"not a path in {path}: {entry!r}")
                continue
            self.include(os.path.join(base, _expand_home(entry.strip(), self.home)))

    def include(self, path, as_list=None):
        if self.full:
            return
        real = os.path.realpath(path)
        if real in self.visited:
            return
        if not os.path.exists(real):
            self.problems.append(f"missing: {path}")
            return
        self.visited.add(real)
        if os.path.isdir(real):
            try:
                names = sorted(os.listdir(real))
            except OSError as error:
                self.problems.append(f"unreadable: {path} ({error.strerror or error})")
                return
            for name in names:
                child = os.path.join(real, name)
                if not name.startswith(".") and os.path.isfile(child):
                    self.include(child)
        elif as_list or (as_list is None and real.lower().endswith(YAML_SUFFIXES)):
            self.load_list(real)
        else:
            self.add_document(real)


def load_root_context(environ=None):
    environ = os.environ if environ is None else environ
    home = environ.get("HOME") or os.path.expanduser("~")
    loader = _RootContextLoader(home)
    root = os.path.join(home, ".nagent")
    markdown, listing = os.path.join(root, "context.md"), os.path.join(root, "context.yaml")
    if os.path.exists(markdown):
        loader.include(markdown, as_list=False)
    if os.path.exists(listing):
        loader.include(listing, as_list=True)
    return "\n\n".join(loader.documents), loader.problems


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


def environment_facts(environ, cwd, now):
    uname = os.uname()
    facts = [
        ("date (UTC)", _date(now)),
        ("working directory", cwd),
        ("user", _user(environ)),
        ("host", uname.nodename),
        ("os", f"{uname.sysname} {uname.release} {uname.machine}"),
        ("python", "%d.%d.%d" % sys.version_info[:3]),
        ("shell", environ.get("SHELL") or "(unset)"),
    ]
    if environ.get("TMPDIR"):
        problem = temp_root_problem(environ, cwd)
        facts.append(("TMPDIR", environ["TMPDIR"] + (f" ({problem})" if problem else "")))
    return "Session facts:\n" + "\n".join(f"- {key}: {value}" for key, value in facts)


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


def root_context_text(text, problems):
    parts = []
    if text:
        parts.append("Root context (from ~/.nagent):\n" + text.rstrip("\n"))
    if problems:
        parts.append("Root context problems:\n" + "\n".join(f"- {item}" for item in problems))
    return "\n\n".join(parts)


def session_text(mode, environ, cwd, now, file_edit):
    parts = [environment_facts(environ, cwd, now)]
    if mode == "file-edit":
        parts.append(target_facts(file_edit))
    root = root_context_text(*load_root_context(environ))
    if root:
        parts.append(root)
    return "\n\n".join(parts) + "\n"


# -- public API -------------------------------------------------------------------------------

def build_initial_context(mode="main", environ=None, cwd=None, now=None, tools=None,
                          file_edit=None, mcp_servers=()):
    if mode not in MODES:
        raise UsageError("unknown context mode", mode, "use main or file-edit")
    if mode == "file-edit" and not file_edit:
        raise UsageError("file-edit context needs a target", "", "pass describe_file_target()")
    environ = os.environ if environ is None else environ
    cwd = os.getcwd() if cwd is None else cwd
    if tools is None:
        from nagent_discovery import default_bin_dirs, default_cache_path, discover_tools
        tools = discover_tools(default_bin_dirs(environ), default_cache_path(environ))
    return InitialContext(static=static_text(mode, tools, mcp_servers),
                          session=session_text(mode, environ, cwd, now, file_edit))


def create_initial_text(ctx):
    return ("<initial_context>\n" + ctx.static + "\n" + ctx.session.rstrip("\n") + "\n"
            "</initial_context>\n")


def language_for(path):
    name = os.path.basename(path)
    if name in LANGUAGE_NAMES:
        return LANGUAGE_NAMES[name]
    return LANGUAGES.get(os.path.splitext(name)[1].lower(), "text")


def _in_work_tree(directory):
    # Walk up for .git instead of spawning git: most targets outside a repo then cost nothing.
    current = directory
    while True:
        if os.path.exists(os.path.join(current, ".git")):
            return True
        parent = os.path.dirname(current)
        if parent == current:
            return False
        current = parent


def git_history(path, environ=None, count=GIT_LOG_COUNT):
    """Last `count` commit subjects touching `path`; [] outside a work tree or on any failure."""
    real = os.path.realpath(path)
    directory = os.path.dirname(real)
    if not _in_work_tree(directory):
        return []
    import subprocess  # only targets inside a work tree pay for it
    env = dict(os.environ if environ is None else environ)
    env.update(GIT_TERMINAL_PROMPT="0", GIT_PAGER="cat", GIT_OPTIONAL_LOCKS="0")
    # The repository may be untrusted: no pager, no fsmonitor hook, no external helpers.
    cmd = ["git", "--no-pager", "-c", "core.fsmonitor=false", "-C", directory, "log",
           "-n", str(count), "--format=%s", "--no-show-signature", "--", real]
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=GIT_TIMEOUT, env=env)
    except (OSError, subprocess.SubprocessError):
        return []
    if proc.returncode != 0:
        return []
    text = proc.stdout.decode("utf-8", "replace")
    return [line.strip() for line in text.splitlines() if line.strip()]


def describe_file_target(path, environ=None):
    target = os.path.abspath(os.path.expanduser(path))
    if not os.path.isfile(target):
        raise InputError("edit target is not a regular file", path)
    try:
        size = os.path.getsize(target)
        digest = sha256_file(target)
    except OSError as error:
        raise InputError("cannot read edit target", path, error.strerror or "") from None
    return {"target": target, "size": size, "sha256": digest, "language": language_for(target),
            "git_log": git_history(target, environ), "split_index": None, "split_segments": []}
