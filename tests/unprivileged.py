"""Run a command as an unprivileged user from a test that may run as root.

Data contract: `unprivileged_argv(argv, tmp) -> argv'` wraps `argv` (its first element must be
sys.executable) so that it runs as uid/gid NOBODY with no capabilities and no supplementary
groups; raises unittest.SkipTest naming the reason where this machine cannot do that. When the
test already runs unprivileged, `argv` is returned as it is. `give_to_nobody(path)` hands a test's
temp tree to that user (the process must be able to use its HOME, cwd, TMPDIR and config).

As root the wrapper is `setpriv --reuid --regid --clear-groups --inh-caps=-all --bounding-set=-all`.
When the interpreter lives under a directory that user cannot enter (pyenv under a 0700 /root),
the command runs in a private mount namespace (`unshare -m`, nothing changes for the host) where
that directory is covered by a 0755 tmpfs with the interpreter's prefix bound back at its own path.
"""
import functools
import os
import shutil
import subprocess
import sys
import unittest

NOBODY = 65534


def _drop():
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
            "--inh-caps=-all", "--bounding-set=-all"]


def _closed_ancestor(path):
    """The topmost ancestor of `path` that others may not enter, or None."""
    parts = os.path.realpath(path).split("/")[1:]
    current = ""
    for part in parts:
        current += "/" + part
        try:
            if not os.stat(current).st_mode & 0o001:
                return current
        except OSError:
            return None
    return None


@functools.lru_cache(maxsize=None)
def _plan():
    """(kind, detail) once per process: kind is "self", "plain", "namespace" or "skip"."""
    if os.geteuid() != 0:
        return "self", ""
    if not shutil.which("setpriv"):
        return "skip", "setpriv (util-linux) is not installed"
    probe = [sys.executable, "-c", "import openai"]
    try:
        if subprocess.run(_drop() + probe, capture_output=True, timeout=60).returncode == 0:
            return "plain", ""
    except (OSError, subprocess.SubprocessError) as error:
        return "skip", f"cannot drop privileges with setpriv: {error}"
    prefix = os.path.realpath(sys.prefix)
    closed = _closed_ancestor(prefix)
    if not closed or not shutil.which("unshare") or closed == prefix:
        return "skip", f"user {NOBODY} cannot run {sys.executable} and no mount namespace helps"
    return "namespace", (closed, prefix)


def unprivileged_argv(argv, tmp):
    kind, detail = _plan()
    if kind == "skip":
        raise unittest.SkipTest(detail)
    if kind == "self":
        return list(argv)
    if kind == "plain":
        return _drop() + list(argv)
    closed, prefix = detail
    stash = os.path.join(tmp, ".prefix-stash")
    os.makedirs(stash, exist_ok=True)
    script = ('set -e; mount --bind "$1" "$2"; mount -t tmpfs -o mode=0755 none "$3"; '
              'mkdir -p "$1"; mount --bind "$2" "$1"; shift 3; exec "$@"')
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
            prefix, stash, closed] + _drop() + list(argv)


def give_to_nobody(path):
    for root, dirs, files in os.walk(path):
        for name in (root, *(os.path.join(root, d) for d in dirs),
                     *(os.path.join(root, f) for f in files)):
            os.lchown(name, NOBODY, NOBODY)


def outside_dir(case, accept=None):
    """A scratch dir on the host's real filesystem outside every temp root and the project,
    so the sandbox shows it read-only (under /dev, bwrap's private /dev would hide it instead,
    and a write there would "fail" for the wrong reason). A checkout under /tmp, whose test HOME
    is under /tmp too, takes a root-writable system directory instead. Falls back to
    case.make_outside_dir. With `accept`, only a dir it accepts (a test that needs a local
    filesystem, say, where the checkout may lie on a shared one); the test is skipped when no
    candidate is accepted."""
    import tempfile
    from base import REPO
    for parent in (REPO, case.home, "/srv", "/opt", "/mnt", "/var/lib"):
        real = os.path.realpath(parent)
        if os.access(real, os.W_OK) and not real.startswith(("/tmp/", "/var/tmp/", "/dev/")):
            path = os.path.realpath(tempfile.mkdtemp(prefix=".nagent-outside-", dir=real))
            if accept is not None and not accept(path):
                shutil.rmtree(path, True)
                continue
            case.addCleanup(shutil.rmtree, path, True)
            return path
    if accept is not None:
        case.skipTest("no writable directory outside the temp roots that the test accepts")
    return case.make_outside_dir()
