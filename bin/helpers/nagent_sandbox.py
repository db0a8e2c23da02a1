"""The bubblewrap sandbox for shell actions: its argv, its environment, and the rule that a
sandboxed command cannot change what the next run trusts.

Data contract:
- `sandbox_env(environ, policy, secret_names=())` -> the environment a sandboxed command gets:
  only ENV_ALLOWLIST, variables starting with an ENV_PREFIXES entry, and the names listed in
  `policy.env`; a secret name (nagent_secrets.is_secret_name) or a key variable
  (nagent_secrets.withheld_names over `secret_names`) never passes, even
  when listed.
- `writable_roots(cwd, policy, environ)` -> tuple of real, existing directories the sandbox
  may write, none inside another: cwd, the write rules' temp roots
  (nagent_write_policy.temp_roots: /tmp, /var/tmp, $TMPDIR) and `policy.writable`; with
  `policy.read_only` (plan mode) neither cwd nor anything inside those trees, which `plan()`
  binds read-only over any writable root holding them.
- `plan(cwd, policy, environ, script=None)` -> Plan (frozen): the mount operations, in order,
  that keep what the next run trusts out of reach:
  * nagent's state dir (~/.nagent: config, conversations, cache, bin) is covered by an empty
    read-only tmpfs; ~/.nagent/bin is bound back read-only (tools stay on PATH) and so is the
    command's script file when it lives in there;
  * the NAGENT_CONFIG file is covered by /dev/null (nothing of it is visible);
  * nagent's own code (its bin/ with helpers/, this interpreter's directory, every directory
    on this Python's sys.path), the real target of ~/.nagent/bin, and the existing absolute
    PATH directories (where nagent finds git and bwrap) are bound read-only where they lie in a
    writable root;
  * each directory on the way to one of those that sits in a writable directory is "pinned":
    bound onto itself (still writable), because a mount point cannot be renamed or removed
    (EBUSY) — this is what stops `mv home home.moved && mkdir -p home/.nagent/bin`;
  * with the network off, /run (and /var/run, $XDG_RUNTIME_DIR) become empty tmpfs, and each
    Unix socket found within two levels of a temp root or of $HOME, or named by SSH_AUTH_SOCK,
    DBUS_SESSION_BUS_ADDRESS or DOCKER_HOST, is covered by /dev/null.
  Where that cannot be guaranteed it raises RefusedError (exit 10) naming the path: a symlink
  on the way that sits in a writable directory (it could be replaced), a NAGENT_CONFIG that does
  not exist in a writable directory (it could be created), or a writable root inside (or equal
  to) a protected path. bwrap itself is looked up only in PATH directories no sandboxed
  command can write.
- `plan(..., sockets)` / `bwrap_command(..., sockets)`: Unix sockets bound into the sandbox
  read-only (connect needs no write access): the run's MCP channel, which lives in the state dir.
- `bwrap_command(script, cwd, policy, environ, sockets=())` -> argv: bwrap with every namespace unshared
  (user, pid, ipc, uts, cgroup, and net unless `policy.sandbox_network`), nested user
  namespaces disabled, every capability dropped (also as root), a new session, death with its
  parent, a private /proc and /dev, `/` read-only, then `plan()`'s mounts; runs /bin/bash
  SCRIPT in `cwd`. SetupError when bwrap is missing.
- `prepare(policy, cwd, environ)` -> warnings (tuple of str) for a run about to start: checks
  bwrap, creates nagent's state dir (so it is protected from the first command on) and runs
  `plan()` once, so a refusal comes before any model call. A warning is given when cwd is $HOME
  or one of its ancestors ("/"): everything under it is writable.
"""
import os
import shutil
import stat
import sys
from dataclasses import dataclass

from nagent_config import config_layers
from nagent_discovery import install_bin_dir
from nagent_errors import ConfigError, RefusedError, SetupError
from nagent_install import RUN_PYTHON
from nagent_paths import (absolute_path_value, config_file, home_dir, nagent_home, within,
                          within_any)
from nagent_secrets import is_secret_name, withheld_names
from nagent_write_policy import temp_roots

ENV_ALLOWLIST = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "LANGUAGE", "TZ",
                 "TMPDIR", "COLUMNS", "LINES", "NO_COLOR", "COLORTERM", "EDITOR", "VISUAL",
                 "PAGER", RUN_PYTHON)
ENV_PREFIXES = ("LC_",)
SOCKET_SCAN_DEPTH = 2
MAX_LINKS = 40
REFUSED = "shell sandbox cannot protect nagent's own files"


@dataclass(frozen=True)
class Plan:
    root_writable: bool   # the working directory is "/": the base bind is writable
    roots: tuple          # the writable roots (their binds are among the mounts)
    mounts: tuple         # (op, source, dest) in order: "bind", "tmpfs", "ro-bind"
    remount_ro: tuple     # dests to remount read-only at the very end


def bwrap_path(environ, roots=()):
    """bwrap from PATH, skipping relative entries and ones a sandboxed command could write (it
    could plant a fake bwrap there, which nagent would run unsandboxed next time)."""
    trusted = [part for part in absolute_path_value(environ.get("PATH", os.defpath)).split(os.pathsep)
               if part and not within_any(os.path.realpath(part), roots, inclusive=True)]
    found = shutil.which("bwrap", path=os.pathsep.join(trusted)) if trusted else None
    if not found:
        raise SetupError("bwrap not found", "shell_sandbox is bwrap",
                         "install bubblewrap, e.g. apt-get install bubblewrap, or use --shell-sandbox none")
    return found


def sandbox_env(environ, policy, secret_names=()):
    blocked = withheld_names(secret_names)
    extra = set(getattr(policy, "env", ()) or ())
    env = {}
    for name, value in environ.items():
        if is_secret_name(name) or name.upper() in blocked:
            continue
        if name in ENV_ALLOWLIST or name.startswith(ENV_PREFIXES) or name in extra:
            env[name] = value
    return env


def read_only_trees(policy):
    return tuple(os.path.realpath(p) for p in getattr(policy, "read_only", ()) or ())


def writable_dirs(cwd, policy, environ):
    """Every directory the sandbox may write, as real paths (some may lie inside others). Plan
    mode's read-only trees (and the working directory then) are not among them."""
    held = read_only_trees(policy)
    candidates = [*([] if held else [cwd]), *temp_roots(environ), *policy.writable]
    real = {os.path.realpath(p) for p in candidates if p and os.path.isabs(p)}
    return tuple(sorted((p for p in real if os.path.isdir(p)
                         and not within_any(p, held, inclusive=True)), key=len))


def writable_roots(cwd, policy, environ):
    roots = []
    for path in writable_dirs(cwd, policy, environ):
        if not within_any(path, roots, inclusive=True):
            roots.append(path)
    return tuple(roots)


# -- resolving a path the way the kernel does, noting every directory looked in -------------

def lookup_steps(path):
    """([(directory, name, kind)], resolved path or None). kind: dir, file, symlink, missing."""
    steps, current, pending, links = [], "/", [p for p in path.split("/") if p], 0
    while pending:
        name = pending.pop(0)
        if name == ".":
            continue
        if name == "..":
            current = os.path.dirname(current)
            continue
        entry = os.path.join(current, name)
        try:
            info = os.lstat(entry)
        except OSError:
            steps.append((current, name, "missing"))
            return steps, None
        if stat.S_ISLNK(info.st_mode):
            steps.append((current, name, "symlink"))
            links += 1
            target = os.readlink(entry) if links <= MAX_LINKS else "/"
            if links > MAX_LINKS:
                return steps, None
            if target.startswith("/"):
                current = "/"
            pending = [p for p in target.split("/") if p] + pending
            continue
        steps.append((current, name, "dir" if stat.S_ISDIR(info.st_mode) else "file"))
        current = entry
    return steps, current


def config_locations(environ):
    """The config files nagent reads (nagent_config.config_layers), or, when NAGENT_CONFIG
    names no file yet, that path: a sandboxed command could create it."""
    try:
        return [path for _label, path in config_layers(environ)]
    except ConfigError:
        return [config_file(environ)]


def code_locations(environ):
    """Directories of code nagent runs outside the sandbox, besides its own bin/: the tools in
    ~/.nagent/bin, this interpreter's directory and import path, and the PATH directories it
    finds programs in (git, bwrap) — existing, absolute ones."""
    found = [os.path.join(nagent_home(environ), "bin"), os.path.dirname(sys.executable)]
    found += [p for p in sys.path if p and os.path.isabs(p) and os.path.isdir(p)]
    found += [p for p in environ.get("PATH", "").split(os.pathsep) if os.path.isabs(p)
              and os.path.isdir(p)]
    return list(dict.fromkeys(found))


def _refuse(path, reason):
    return RefusedError(REFUSED, path, reason + "; move it outside the project and the temp dirs, "
                        "or run without --shell-sandbox")


def _protected(environ):
    """[(lexical path, kind, steps, real path or None)] of everything the next run trusts."""
    wanted = [(nagent_home(environ), "state"), (install_bin_dir(), "code")]
    wanted += [(path, "config") for path in config_locations(environ)]
    wanted += [(path, "imports") for path in code_locations(environ)]
    return [(path, kind, *lookup_steps(path)) for path, kind in wanted]


def _check_roots(real, kind, dirs):
    """A writable dir inside what must stay unchanged defeats any mount: refuse."""
    for root in dirs:
        # An import dir only matters itself (nagent never imports a package named after a
        # subdirectory); the state dir, a config file and nagent's bin/ matter whole.
        if root == real or (kind != "imports" and within(root, real)):
            raise _refuse(real, "sandboxed commands could write inside it: it is, or holds, "
                          "the working directory or a temp dir")


def _walk(path, kind, steps, writable, pins):
    """Pin each directory on the way that sits in a writable directory; refuse what cannot be."""
    for index, (directory, name, step) in enumerate(steps):
        if not writable(directory):
            continue
        entry = os.path.join(directory, name)
        if step == "symlink":
            raise _refuse(entry, "it is a symlink in a directory sandboxed commands can write, "
                          "so they could point it elsewhere")
        if step == "missing":
            if kind in ("config", "state"):
                raise _refuse(entry, f"{'the NAGENT_CONFIG file' if kind == 'config' else 'it'} "
                              "does not exist, in a directory sandboxed commands can write: they "
                              "could create it")
            return
        if index < len(steps) - 1:
            pins.add(entry)


def plan(cwd, policy, environ, script=None, sockets=()):
    roots = writable_roots(cwd, policy, environ)
    protected = _protected(environ)
    state = protected[0][3]
    configs = [real for _p, kind, _s, real in protected if real and kind == "config"
               and not (state and within(real, state, inclusive=True))]
    read_only = [real for _p, kind, _s, real in protected if real and kind in ("code", "imports")
                 and within_any(real, roots, inclusive=True)
                 and not (state and within(real, state, inclusive=True))]
    covered = ([state] if state else []) + configs + read_only

    def writable(directory):
        return (within_any(directory, roots, inclusive=True)
                and not within_any(directory, covered, inclusive=True))

    pins, dirs = set(), writable_dirs(cwd, policy, environ)
    for path, kind, steps, real in protected:
        if real:
            _check_roots(real, kind, dirs)
        _walk(path, kind, steps, writable, pins)
    held = read_only_trees(policy)   # plan mode: the project, read-only even inside a temp root
    ops = [("bind", root, root) for root in roots if root != "/"]
    ops += [("bind", pin, pin) for pin in pins
            if not within_any(pin, [*covered, *held], inclusive=True)]
    ops += [("ro-bind", tree, tree) for tree in held if within_any(tree, roots, inclusive=True)]
    if state:
        ops.append(("tmpfs", None, state))
        bin_dir = os.path.join(state, "bin")
        if os.path.isdir(bin_dir):
            ops.append(("ro-bind", os.path.realpath(bin_dir), bin_dir))
        if script and within(os.path.realpath(script), state):
            ops.append(("ro-bind", script, script))
    # The run's MCP channel: the one socket of nagent's the sandbox reaches (nagent_mcp_channel
    # vets each caller and answers only `nagent-mcp` requests).
    ops += [("ro-bind", sock, sock) for sock in sockets]
    ops += [("ro-bind", "/dev/null", real) if os.path.isfile(real) else ("tmpfs", None, real)
            for real in configs]
    ops += [("ro-bind", real, real) for real in read_only]
    if not policy.sandbox_network:
        ops += [("tmpfs", None, directory) for directory in socket_dirs(environ)]
        ops += [("ro-bind", "/dev/null", sock) for sock in host_sockets(environ, state)
                if sock not in sockets]
    # Parents before children: a later mount lands on top of an earlier one.
    ordered = sorted(set(ops), key=lambda op: (op[2].count("/"), _ORDER[op[0]], op[2]))
    return Plan(root_writable="/" in roots, roots=roots, mounts=tuple(ordered),
                remount_ro=(state,) if state else ())


_ORDER = {"bind": 0, "tmpfs": 1, "ro-bind": 2}


# -- sockets --------------------------------------------------------------------------------

def _named_sockets(environ):
    found = [environ.get("SSH_AUTH_SOCK", "")]
    bus = environ.get("DBUS_SESSION_BUS_ADDRESS", "")
    found += [part[len("unix:path="):].split(",")[0] for part in bus.split(";")
              if part.startswith("unix:path=")]
    docker = environ.get("DOCKER_HOST", "")
    if docker.startswith("unix://"):
        found.append(docker[len("unix://"):])
    return [path for path in found if path and os.path.isabs(path)]


def _scan_sockets(directory, depth, found):
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            # is_dir/is_file/is_symlink come from the directory listing; only the rest (sockets,
            # fifos, devices) costs a stat.
            if entry.is_dir(follow_symlinks=False):
                if depth > 1:
                    _scan_sockets(entry.path, depth - 1, found)
            elif not (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                if stat.S_ISSOCK(entry.stat(follow_symlinks=False).st_mode):
                    found.append(entry.path)
        except OSError:
            continue


def host_sockets(environ, state=None):
    """Unix sockets a sandboxed command could connect to outside the socket dirs: within two
    levels of each temp root and of $HOME, and the ones the environment names."""
    found = []
    scan = [*temp_roots(environ)]
    home = os.path.realpath(environ.get("HOME", "") or "/")
    if home != "/" and os.path.isdir(home):   # never the whole filesystem (/proc, /sys ...)
        scan.append(home)
    for directory in scan:
        _scan_sockets(directory, SOCKET_SCAN_DEPTH, found)
    for path in _named_sockets(environ):
        try:
            if stat.S_ISSOCK(os.stat(path).st_mode):
                found.append(os.path.realpath(path))
        except OSError:
            continue
    dirs = socket_dirs(environ)
    return sorted({path for path in found if not within_any(path, dirs)
                   and not (state and within(path, state))})


def socket_dirs(environ):
    """Directories of host sockets, hidden whole when the network is off: /run, a /var/run that
    is not a link to it, and $XDG_RUNTIME_DIR."""
    dirs = ["/run", "/var/run", environ.get("XDG_RUNTIME_DIR", "")]
    found = []
    for directory in dirs:
        if directory and os.path.isabs(directory) and os.path.isdir(directory):
            real = os.path.realpath(directory)
            if not within_any(real, found, inclusive=True):
                found.append(real)
    return found


# -- argv -----------------------------------------------------------------------------------

def shell_path():
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


def bwrap_command(script, cwd, policy, environ, sockets=()):
    cwd = os.path.realpath(cwd)
    layout = plan(cwd, policy, environ, script, sockets)
    bwrap = bwrap_path(environ, layout.roots)
    argv = [bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
            "--new-session", "--die-with-parent"]
    if policy.sandbox_network:
        argv.append("--share-net")
    argv += ["--bind" if layout.root_writable else "--ro-bind", "/", "/",
             "--dev", "/dev", "--proc", "/proc"]
    for op, source, dest in layout.mounts:
        argv += ["--tmpfs", dest] if op == "tmpfs" else [f"--{op}", source, dest]
    for dest in layout.remount_ro:
        argv += ["--remount-ro", dest]
    return argv + ["--chdir", cwd, shell_path(), script]


def prepare(policy, cwd, environ):
    if policy.sandbox != "bwrap":
        return ()
    bwrap_path(environ, writable_roots(cwd, policy, environ))
    os.makedirs(nagent_home(environ), mode=0o700, exist_ok=True)
    plan(os.path.realpath(cwd), policy, environ)
    home = os.path.realpath(home_dir(environ))
    real_cwd = os.path.realpath(cwd)
    if within(home, real_cwd, inclusive=True) and real_cwd not in read_only_trees(policy):
        return (f"the shell sandbox lets commands write everything under {real_cwd}, "
                "including ~/.bashrc and ~/.ssh; run nagent from a project directory",)
    return ()
