"""What this install of nagent is: its version, its executables, and how to run one of them.

Data contract:
- `VERSION` is the one version string (pyproject.toml reads it from here; every tool's
  `--version` prints it).
- `TOOLS` maps each executable's name to the module whose `run()` is its main (the console
  script of an installed copy, the 5-line shim in bin/ of a checkout). bin/, pyproject's
  [project.scripts] and this table hold the same names (a test checks it).
- Two layouts, one code: a **checkout** runs `bin/NAME` (the modules live in bin/helpers/ and
  bin/NAME is next to them); an **installed** copy (pip, pipx, uv tool) has the modules as
  top-level modules in site-packages and console scripts in the environment's scripts dir.
  `checkout_bin_dir()` is the checkout's bin/ or None.
- `tool_argv(name)` is the argv prefix that runs this install's own tool NAME with this
  interpreter, whatever the layout and whatever is on PATH: `[python, bin/NAME]` in a checkout,
  `[python, -P, -m, MODULE]` when installed (-P: the working directory is never put on
  sys.path, so a project's own files cannot stand in for nagent's modules).
  `tool_target(name)` is the same as ("path", FILE) or ("module", NAME) for runners that set
  something up in the child first (nagent_file_tools). `module_argv(module)` runs a helper
  module that is a program of its own but no user's tool (the run's MCP host).
- `install_command(requirement)` is the one line that adds a package (an optional SDK) to THIS
  install, by how it was installed: `pipx inject nagent REQ` (a pipx venv: pipx_metadata.json
  in sys.prefix), `uv tool install --with REQ DIR` (a uv tool: uv-receipt.toml naming the
  directory it was installed from; `uv pip install --python PYTHON REQ` when it names none),
  else `PYTHON -m pip install REQ` with the
  interpreter nagent runs on (a checkout, a venv, a system install). Every SetupError about a
  missing package uses it.
- In a checkout, a tool a shell action starts runs under `#!/usr/bin/env python3`: the first
  python3 on PATH, maybe not the interpreter (a venv's) that has the SDKs the run uses. So a
  checkout run gives its shell actions `run_python_env()` ({NAGENT_PYTHON: this interpreter}),
  and `reexec_under_run_python()` (every tool's start, through nagent_cli.run_main) re-executes
  a checkout tool under that interpreter when it started under another one.
- `scripts_dir()` is where this install's executables are, for the PATH of shell actions and
  for tool discovery: bin/ of a checkout; else the directory holding this install's `nagent`
  console script (next to the interpreter for a venv, pipx or uv tool; the scheme's scripts
  dir for pip install or pip install --user); None when none is found.
"""
import os
import sys

VERSION = "0.2.0"

TOOLS = {
    "nagent": "nagent_main",
    "nagent-llm-text": "nagent_main_llm_text",
    "nagent-llm-upload": "nagent_main_llm_upload",
    "nagent-file-split": "nagent_main_file_split",
    "nagent-file-patch": "nagent_main_file_patch",
    "nagent-file-edit": "nagent_main_file_edit",
    "nagent-file-summarize": "nagent_main_file_summarize",
    "nagent-mcp": "nagent_main_mcp",
    "nagent-batch": "nagent_main_batch",
}

HELPERS_DIR = os.path.dirname(os.path.realpath(__file__))


def checkout_bin_dir():
    """bin/ of a checkout (the parent of helpers/ holding the `nagent` shim), else None."""
    parent = os.path.dirname(HELPERS_DIR)
    if os.path.basename(HELPERS_DIR) == "helpers" and os.path.isfile(os.path.join(parent, "nagent")):
        return parent
    return None


def tool_target(name):
    """("path", bin/NAME) in a checkout, ("module", MODULE) when installed."""
    module = TOOLS[name]
    bin_dir = checkout_bin_dir()
    if bin_dir is not None:
        return "path", os.path.join(bin_dir, name)
    return "module", module


def tool_argv(name):
    kind, target = tool_target(name)
    if kind == "path":
        return [sys.executable, target]
    return [sys.executable, "-P", "-m", target]


def module_argv(module):
    """The argv that runs this install's helper module MODULE as a program (its `__main__`):
    the file in a checkout's bin/helpers (its directory becomes the import path), `-P -m
    MODULE` when installed."""
    if checkout_bin_dir() is not None:
        return [sys.executable, os.path.join(HELPERS_DIR, module + ".py")]
    return [sys.executable, "-P", "-m", module]


def _has_nagent(directory):
    return bool(directory) and os.path.isfile(os.path.join(directory, "nagent"))


def scripts_dir():
    bin_dir = checkout_bin_dir()
    if bin_dir is not None:
        return bin_dir
    here = os.path.dirname(sys.executable)
    if _has_nagent(here):
        return here
    import sysconfig
    for scheme in (None, f"{os.name}_user"):
        try:
            directory = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        if _has_nagent(directory):
            return directory
    return None


RUN_PYTHON = "NAGENT_PYTHON"


def run_python_env():
    """What a checkout run adds to its shell actions' environment (see the docstring)."""
    return {RUN_PYTHON: sys.executable} if checkout_bin_dir() is not None else {}


def reexec_under_run_python(environ=None):
    """Re-execute this checkout tool under NAGENT_PYTHON when that names another interpreter;
    returns when there is nothing to do. The variable is dropped on the way, so the new process
    never re-executes again."""
    environ = os.environ if environ is None else environ
    wanted = environ.get(RUN_PYTHON)
    if not wanted or not os.path.isabs(wanted) or _same_environment(wanted):
        return
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    bin_dir = checkout_bin_dir()
    if bin_dir is None or os.path.dirname(script) != bin_dir or not os.access(wanted, os.X_OK):
        return
    env = {name: value for name, value in environ.items() if name != RUN_PYTHON}
    os.execve(wanted, [wanted, script, *sys.argv[1:]], env)


def _same_environment(wanted):
    """True when interpreter `wanted` is this one with the same packages (a venv's python is a
    link to its base interpreter, but has other packages: its pyvenv.cfg says which prefix)."""
    if os.path.abspath(sys.executable) == wanted:
        return True
    venv = os.path.dirname(os.path.dirname(wanted))
    if os.path.isfile(os.path.join(venv, "pyvenv.cfg")):
        return os.path.realpath(venv) == os.path.realpath(sys.prefix)
    try:
        return sys.prefix == sys.base_prefix and os.path.samefile(wanted, sys.executable)
    except OSError:
        return False


_UNSET = object()


def install_command(requirement, prefix=None, base_prefix=None, executable=None,
                    checkout=_UNSET):
    """The command that installs `requirement` where this nagent runs (see the docstring); the
    keyword arguments stand in for sys.prefix, sys.base_prefix, sys.executable and
    checkout_bin_dir() (tests give other layouts)."""
    from shlex import quote  # only an error that names a missing package needs it
    prefix = sys.prefix if prefix is None else prefix
    base_prefix = sys.base_prefix if base_prefix is None else base_prefix
    executable = sys.executable if executable is None else executable
    checkout = checkout_bin_dir() if checkout is _UNSET else checkout
    if checkout is None and prefix != base_prefix:
        if os.path.isfile(os.path.join(prefix, "pipx_metadata.json")):
            return f"pipx inject nagent {quote(requirement)}"
        receipt = os.path.join(prefix, "uv-receipt.toml")
        if os.path.isfile(receipt):
            source = _uv_source(receipt)
            if source:
                return f"uv tool install --with {quote(requirement)} {quote(source)}"
            return f"uv pip install --python {quote(executable)} {quote(requirement)}"
    return f"{quote(executable)} -m pip install {quote(requirement)}"


def _uv_source(receipt):
    """The absolute directory a uv tool receipt says nagent was installed from, or None."""
    import tomllib
    try:
        with open(receipt, "rb") as handle:
            data = tomllib.load(handle)
        for entry in data["tool"]["requirements"]:
            if isinstance(entry, dict) and entry.get("name") == "nagent":
                where = entry.get("directory") or entry.get("path")
                where = where.get("install_path") if isinstance(where, dict) else where
                return where if isinstance(where, str) and os.path.isabs(where) else None
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def version_line(prog):
    return f"{prog} {VERSION}"
