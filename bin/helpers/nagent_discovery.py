"""Tool discovery: which executables the model may call, and what each one says it does.

Data contract:
- `install_bin_dir()` -> str: realpath of the directory holding this install's own executables
  (nagent_install.scripts_dir: bin/ of a checkout, the console scripts' directory when
  installed); only the names of nagent_install.TOOLS are taken from it (an installed copy's
  scripts directory also holds python, pip and whatever else the environment installed).
- `default_bin_dirs(environ)` -> [install bin, ~/.nagent/bin]; never anything from the cwd, so
  running nagent inside a cloned repository executes none of that repository's code.
- `default_cache_path(environ)` -> ~/.nagent/cache/tool-descriptions.json.
- `discover_tools(bin_dirs, cache_path, timeout=5.0, environ=None, secret_names=None)` ->
  [{"name", "description"}] sorted by
  name. Candidates are executable regular files directly inside each dir (no dotfiles, no
  helpers/, no *.pyc, no editor backups) whose realpath is inside that dir's realpath (a
  symlink pointing elsewhere is skipped: nothing outside bin_dirs is ever run). On a name
  clash the earlier dir wins, like PATH. A description is the first stdout line of
  `<exe> --description`, stripped, at most 200 chars; a failure, empty output or timeout gives
  "(no description)" (cached too, until the file changes). A `--description` run gets
  nagent_secrets.scrubbed_env over nagent_config.child_key_names(environ, secret_names) (the
  one child-environment rule: no provider keys) with only the absolute PATH entries (it runs in the tool's directory).
- Cache file (JSON, written atomically, only when it changed):
  {"version": 1, "entries": {realpath: {"size", "mtime_ns", "description"}}}. An entry is
  valid while the file's size and mtime_ns match; stale entries (changed or deleted files) are
  dropped; a corrupt or unreadable cache is ignored and rewritten; an unwritable cache dir only
  costs the caching, never the discovery.
"""
import json
import os
import signal
import stat
import subprocess

from nagent_fs import atomic_write, existing_mode
from nagent_install import HELPERS_DIR, TOOLS, scripts_dir
from nagent_paths import absolute_path_value, nagent_home, within
from nagent_config import child_key_names
from nagent_secrets import is_secret_name, scrubbed_env
from nagent_terminal_text import one_line

NO_DESCRIPTION = "(no description)"
MAX_DESCRIPTION = 200
MAX_WORKERS = 8
CACHE_VERSION = 1


def install_bin_dir():
    return os.path.realpath(scripts_dir() or HELPERS_DIR)


def default_bin_dirs(environ=None):
    environ = os.environ if environ is None else environ
    return [install_bin_dir(), os.path.join(nagent_home(environ), "bin")]


def default_cache_path(environ=None):
    environ = os.environ if environ is None else environ
    return os.path.join(nagent_home(environ), "cache", "tool-descriptions.json")


def _skipped_name(name):
    return (name.startswith(".") or name == "helpers" or name == "__pycache__"
            or name.endswith((".pyc", "~", ".swp")))


def list_candidates(bin_dirs):
    """[(name, realpath, size, mtime_ns)] of runnable tools, first dir winning per name."""
    found = {}
    own = install_bin_dir()
    for raw_dir in bin_dirs:
        if not raw_dir or not os.path.isdir(raw_dir):
            continue
        directory = os.path.realpath(raw_dir)
        try:
            names = sorted(os.listdir(directory))
        except OSError:
            continue
        for name in names:
            if _skipped_name(name) or name in found or (directory == own and name not in TOOLS):
                continue
            real = os.path.realpath(os.path.join(directory, name))
            if not within(real, directory):
                continue
            try:
                info = os.stat(real)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode) and os.access(real, os.X_OK):
                found[name] = (name, real, info.st_size, info.st_mtime_ns)
    return [found[name] for name in sorted(found)]


def clean_description(raw):
    """First non-empty stdout line on one safe line (nagent_terminal_text.one_line), capped."""
    for line in raw.splitlines():
        text = one_line(line)
        if text:
            return text[:MAX_DESCRIPTION]
    return NO_DESCRIPTION


def description_environ(environ, secret_names=None):
    """A child's environment (scrubbed_env) without any secret-named variable either: a
    --description run happens at context build, before anyone asked for the tool, and needs no
    credentials."""
    env = scrubbed_env(environ, child_key_names(environ, secret_names))
    env = {name: value for name, value in env.items() if not is_secret_name(name)}
    # Relative PATH entries would resolve against the tool's directory, where it runs.
    env["PATH"] = absolute_path_value(env.get("PATH"))
    return env


def run_description(path, timeout, env):
    """`path --description` -> description text; never raises."""
    try:
        proc = subprocess.Popen([path, "--description"], cwd=os.path.dirname(path),
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, env=env,
                                start_new_session=True)
    except OSError:
        return NO_DESCRIPTION
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # Kill the whole group: a grandchild holding the pipe would block communicate().
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            proc.communicate(timeout=1.0)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.stdout.close()
            proc.wait()
        return NO_DESCRIPTION
    if proc.returncode != 0:
        return NO_DESCRIPTION
    return clean_description(out.decode("utf-8", "replace"))


def read_cache(cache_path):
    """{realpath: entry} from the cache file; None when missing, unreadable or malformed."""
    try:
        with open(cache_path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return None
    entries = data.get("entries")
    if not isinstance(entries, dict):
        return None
    return {path: entry for path, entry in entries.items()
            if isinstance(entry, dict) and isinstance(entry.get("description"), str)
            and isinstance(entry.get("size"), int) and isinstance(entry.get("mtime_ns"), int)}


def _still_valid(path, entry):
    try:
        info = os.stat(path)
    except OSError:
        return False
    return info.st_size == entry["size"] and info.st_mtime_ns == entry["mtime_ns"]


def write_cache(cache_path, entries):
    """Atomic replace; silently gives up when the directory is not writable."""
    text = json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1, sort_keys=True)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(cache_path)), exist_ok=True)
        # No fsync: a cache lost in a crash is only rebuilt by the next run.
        atomic_write(cache_path, (text + "\n").encode("utf-8"), existing_mode(cache_path, 0o600),
                     sync=False)
    except OSError:
        return False
    return True


def _describe_all(paths, timeout, env):
    if len(paths) == 1:
        return {paths[0]: run_description(paths[0], timeout, env)}
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(max_workers=min(MAX_WORKERS, len(paths))) as pool:
        results = pool.map(lambda path: run_description(path, timeout, env), paths)
        return dict(zip(paths, results))


def discover_tools(bin_dirs, cache_path, timeout=5.0, environ=None, secret_names=None):
    candidates = list_candidates(bin_dirs)
    old = read_cache(cache_path) if cache_path else {}
    # Keep valid entries of other installs sharing this cache; drop changed or deleted files.
    entries = {path: entry for path, entry in (old or {}).items() if _still_valid(path, entry)}
    missing = [real for _, real, size, mtime in candidates
               if not (real in entries and entries[real]["size"] == size
                       and entries[real]["mtime_ns"] == mtime)]
    described = {}
    if missing:   # the environment (which may read the config) only when something runs
        env = description_environ(os.environ if environ is None else environ, secret_names)
        described = _describe_all(missing, timeout, env)
    for _, real, size, mtime in candidates:
        if real in described:
            entries[real] = {"size": size, "mtime_ns": mtime, "description": described[real]}
    if cache_path and entries != old:
        write_cache(cache_path, entries)
    return [{"name": name, "description": entries[real]["description"]}
            for name, real, _, _ in candidates]
