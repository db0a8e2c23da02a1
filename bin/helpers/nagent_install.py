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
  something up in the child first (nagent_file_tools).
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


def version_line(prog):
    return f"{prog} {VERSION}"
