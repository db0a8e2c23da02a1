"""Path rules every other module shares: containment, and where nagent's own state lives.

Data contract:
- `within(path, root, inclusive=False)` is the one "is P inside R" rule. Both arguments must be
  absolute, already-resolved paths (callers resolve with os.path.realpath once, where they
  decide); it compares whole components, so "/tmpx" is not inside "/tmp", and everything is
  inside "/". `inclusive=True` also accepts path == root.
- `real_within(path, root, inclusive=False)` resolves both (symlinks, "..") and then applies
  `within`: for callers holding unresolved paths.
- `within_any(path, roots, inclusive=False)` is `within` over several roots.
- `home_dir(environ)` is $HOME from `environ` (else the user's home; ConfigError when not
  absolute); `nagent_home(environ)` is
  its ".nagent" directory, `conversations_dir(environ)` that directory's "conversations".
- `config_file(environ)` -> the file NAGENT_CONFIG names, as a realpath (a relative value is
  taken from the working directory, which nagent never changes), or None when unset: the one
  resolution the config reader, the write policy and the sandbox share, so a relative
  NAGENT_CONFIG names the same protected file for all three.
- `nagent_state_roots(environ)` -> realpaths of what nagent keeps for itself and must never be
  a write or patch target whatever the temp roots are: ~/.nagent (config, conversations, bin/
  whose executables run at the next context build, cache) and the NAGENT_CONFIG file
  (config_file). `in_nagent_state(real, environ)` tells whether a resolved path is one of them
  or inside one (a missing HOME counts as "/" so nothing passes by accident).
- `resolved(path)` -> os.path.realpath(path), or the path normalised as written when the kernel
  refuses to resolve it (a loop, a link swapped while it is read: realpath raises EINVAL):
  for callers that must name a path and never fail on it.
- `too_wide(directory, home)` -> how to name `directory` when it holds everything of the user
  ("/", "the home directory D", "D, which holds the home directory,"), else None: the one rule
  behind "never a project root" (nagent_project) and "never snapshotted" (nagent_snapshots).
- `absolute_path_value(value)` -> a PATH value with only its absolute entries: a relative or
  empty entry names the working directory, where a cloned repository's executables lie. The
  one rule for every program nagent itself looks up by name (git) and for the PATH of a
  --description run; `find_program(name, path_value)` -> the first executable regular file
  `name` in those entries, or None.
- `current_cwd()` -> the working directory, or InputError when it was deleted.
  Nothing here creates directories or touches the filesystem beyond resolving links and
  checking for an executable.
"""
import os

from nagent_errors import ConfigError, InputError


def within(path, root, inclusive=False):
    if path == root:
        return inclusive
    if root == "/":
        return path.startswith("/")
    return path.startswith(root.rstrip("/") + "/")


def within_any(path, roots, inclusive=False):
    return any(within(path, root, inclusive) for root in roots)


def real_within(path, root, inclusive=False):
    return within(os.path.realpath(path), os.path.realpath(root), inclusive)


def home_dir(environ=None):
    environ = os.environ if environ is None else environ
    home = environ.get("HOME") or os.path.expanduser("~")
    if not os.path.isabs(home):
        # A relative HOME would put nagent's state wherever the command happens to run.
        raise ConfigError("HOME is not set to an absolute path", home)
    return home


def nagent_home(environ=None):
    return os.path.join(home_dir(environ), ".nagent")


def conversations_dir(environ=None):
    return os.path.join(nagent_home(environ), "conversations")


def config_file(environ=None):
    environ = os.environ if environ is None else environ
    named = environ.get("NAGENT_CONFIG") or ""
    return os.path.realpath(named) if named else None


def nagent_state_roots(environ=None):
    environ = os.environ if environ is None else environ
    try:
        roots = [os.path.realpath(nagent_home(environ))]
    except ConfigError:
        return ("/",)   # no usable HOME: nothing can be shown to lie outside nagent's state
    config = config_file(environ)
    if config:
        roots.append(config)
    return tuple(roots)


def in_nagent_state(real, environ=None):
    return within_any(real, nagent_state_roots(environ), inclusive=True)


def resolved(path):
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return os.path.normpath(path)


def too_wide(directory, home):
    if directory == "/":
        return "/"
    if directory == home:
        return f"the home directory {directory}"
    if within(home, directory):
        return f"{directory}, which holds the home directory,"
    return None


def absolute_path_value(value):
    return os.pathsep.join(part for part in (value or "").split(os.pathsep) if os.path.isabs(part))


def find_program(name, path_value):
    for part in absolute_path_value(path_value).split(os.pathsep):
        candidate = os.path.join(part, name)
        if part and os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return None


def current_cwd():
    try:
        return os.getcwd()
    except FileNotFoundError:
        raise InputError("the current directory no longer exists", os.environ.get("PWD", "?"),
                         "cd to an existing directory")
