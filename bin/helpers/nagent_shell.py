"""Run one <nagent-shell> action: approval, environment, timeout, output cap, sandbox.

Data contract:
- `ShellPolicy` (frozen) says how to run: timeout seconds, per-stream inline byte cap
  (shown as head + tail halves), approval (auto | confirm | deny), sandbox (none | bwrap),
  whether the sandbox may use the network, extra writable dirs for the sandbox, extra
  variable names the sandbox passes in (`env`), and trees the sandbox binds read-only
  (`read_only`: plan mode's project).
- `run_shell(command, cwd, policy, side_dir, environ=None, confirm=None, secret_names=(),
  secrets=(), gate=None, mcp=None)` -> ShellOutcome. `gate(command) -> refusal | None` (the permission
  rules and the user's answer: nagent_permission_gate.shell_gate), when given, replaces the
  plain approval question; approval deny still refuses first. Every value in `secrets` is
  replaced by "[redacted]" in both
  streams before anything is kept (side files included); `secret_names` are the variables a
  provider key may live in (nagent_secrets.key_names): never passed to a command.
  The command text is written to a 0600 script file in `side_dir` and run as
  `/bin/bash FILE` (or /bin/sh) in its own session, stdin closed. Unsandboxed it gets
  nagent_secrets.scrubbed_env (everything but keys and NAGENT_* internals); sandboxed, only the
  allowlist of nagent_sandbox.sandbox_env, inside nagent_sandbox.bwrap_command; both plus
  nagent_secrets.SHELL_ACTION_VAR=1 and nagent_project.with_git_safety (git never discovers a
  bare repository the project carries: plan mode runs read-only git unsandboxed) and, with `mcp`
  (the run's nagent_mcp_channel.Channel), its variable (nagent_mcp_wire.CHANNEL_VAR): the
  command's process is registered with the channel while it runs (only its processes may
  connect), and the sandbox binds the channel's socket.
  Approval (confirm) asks through nagent_approval.ask_on_tty.
  Streams go to temp files in `side_dir`; a stream larger than the cap (or binary) is kept
  whole as `shell-{stamp}-{n}.stdout|.stderr` there and only head + tail are returned.
  Redaction rewrites a stream in place (never a second copy); a stream that cannot be redacted
  or kept (a full disk) is dropped whole and `stdout_lost`/`stderr_lost` says why ("disk full"):
  the result still carries the exit code, and nothing is left behind.
  On timeout the whole process group gets SIGTERM, then SIGKILL after a grace period.
  When the main process exits, anything it left running in its process group is ended too,
  so a background child holding the streams open never hangs or outlives the call.
  A refused command (approval) is never started: `refused` says why, exit_code is None.
- `format_shell_result(outcome) -> str` is the body of <nagent-shell-result>.
Errors: ConfigError for a bad policy, InputError for a missing cwd, SetupError when the
shell or bwrap cannot be started, RefusedError when the sandbox cannot protect nagent's own
files (nagent_sandbox.plan). Command failures are outcomes, not exceptions. An exit signal
(nagent_errors.ExitSignal) or Ctrl-C while a command runs ends its whole group first.
"""
import errno
import os
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass

from nagent_approval import Answer, ask_on_tty
from nagent_errors import ConfigError, InputError, SetupError
from nagent_procs import end_group, wait
from nagent_project import with_git_safety
from nagent_sandbox import bwrap_command, sandbox_env, shell_path
from nagent_secrets import SHELL_ACTION_VAR, scrubbed_env

APPROVALS = ("auto", "confirm", "deny")
SANDBOXES = ("none", "bwrap")
KILL_GRACE = 2.0
NO_TERMINAL = "shell approval needs a terminal; command not run"
DENIED = "shell commands are disabled (shell_approval: deny); command not run"
DECLINED = "the user declined this command; command not run"
REDACTED = b"[redacted]"
MAX_REDACTION_GROWTH = 64 << 20   # secrets shorter than the mark, held in memory while redacting


@dataclass(frozen=True)
class ShellPolicy:
    timeout: float = 120.0
    output_cap: int = 32 * 1024
    approval: str = "auto"
    sandbox: str = "none"
    sandbox_network: bool = False
    writable: tuple = ()
    env: tuple = ()
    read_only: tuple = ()


@dataclass(frozen=True)
class ShellOutcome:
    exit_code: "int | None"
    stdout: str
    stderr: str
    timed_out: bool
    refused: "str | None"
    stdout_bytes: int
    stderr_bytes: int
    stdout_file: "str | None"
    stderr_file: "str | None"
    seconds: float
    timeout: float = 0.0                 # the policy's timeout, for the "killed after" line
    output_cap: int = 32 * 1024          # the policy's cap, for the "showing first/last" line
    stdout_lost: "str | None" = None     # why the stream could not be kept ("disk full")
    stderr_lost: "str | None" = None


def check_policy(policy):
    if policy.approval not in APPROVALS:
        raise ConfigError("unknown shell_approval", policy.approval, "use one of: " + ", ".join(APPROVALS))
    if policy.sandbox not in SANDBOXES:
        raise ConfigError("unknown shell_sandbox", policy.sandbox, "use one of: " + ", ".join(SANDBOXES))
    if not isinstance(policy.timeout, (int, float)) or policy.timeout <= 0:
        raise ConfigError("shell timeout must be a positive number of seconds", policy.timeout)
    if not isinstance(policy.output_cap, int) or policy.output_cap < 0:
        raise ConfigError("shell output cap must be a non-negative byte count", policy.output_cap)


# -- approval -----------------------------------------------------------------------------

def _refusal(command, policy, confirm, gate=None):
    if policy.approval == "deny":
        return DENIED
    if gate is not None:
        return gate(command)
    if policy.approval == "confirm":
        answer = (confirm or ask_on_tty)(command)
        if answer is None:
            return NO_TERMINAL
        if not (answer.run if isinstance(answer, Answer) else answer):
            return DECLINED
    return None


# -- output -------------------------------------------------------------------------------

def _side_names(side_dir):
    stamp = time.strftime("%Y%m%d-%H%M%S")
    n = 1
    while True:
        base = os.path.join(side_dir, f"shell-{stamp}-{n}")
        if not (os.path.exists(base + ".stdout") or os.path.exists(base + ".stderr")):
            return base + ".stdout", base + ".stderr"
        n += 1


def _first_match(fd, needles, keep, chunk_size):
    """File offset of the first chunk window holding a secret, or None (read only)."""
    offset, carry = 0, b""
    while True:
        chunk = os.pread(fd, chunk_size, offset)
        data = carry + chunk
        if any(needle in data for needle in needles):
            return offset - len(carry)
        if not chunk:
            return None
        carry = data[max(0, len(data) - keep):] if keep else b""
        offset += len(chunk)


def _pwrite_all(fd, data, offset):
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, offset)
        view, offset = view[written:], offset + written


def _redact_file(path, secrets, chunk_size=1 << 20):
    """Blank every secret in `path` in place, never making a second copy: streamed, holding back
    a tail that may be the start of a secret split across two chunks, and holding in memory only
    the redacted bytes that would overwrite bytes not read yet (the net growth, when a secret is
    shorter than the mark). An OSError (a full disk when the file grows) leaves the file
    half-redacted: the caller must drop it."""
    needles = sorted({s.encode("utf-8", "surrogateescape") for s in secrets if s}, key=len, reverse=True)
    if not needles:
        return
    keep = len(needles[0]) - 1
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        start = _first_match(fd, needles, keep, chunk_size)
        if start is None:
            return
        read_at = write_at = start
        carry, out = b"", bytearray()
        while True:
            chunk = os.pread(fd, chunk_size, read_at)
            read_at += len(chunk)
            data = carry + chunk
            for needle in needles:
                if needle in data:
                    data = data.replace(needle, REDACTED)
            cut = len(data) if not chunk else max(0, len(data) - keep)
            out += data[:cut]
            carry = data[cut:]
            room = min(len(out), read_at - write_at)   # what was read may be overwritten
            if room:
                _pwrite_all(fd, out[:room], write_at)
                write_at += room
                del out[:room]
            if len(out) > MAX_REDACTION_GROWTH:
                raise OSError(errno.EFBIG, "too many short secrets to redact in place")
            if not chunk:
                break
        _pwrite_all(fd, out, write_at)
        os.ftruncate(fd, write_at + len(out))
    finally:
        os.close(fd)


def _kept_problem(error):
    if error.errno in (errno.ENOSPC, errno.EDQUOT):
        return "disk full"
    return error.strerror or str(error)


def _collect(tmp_path, cap, final_path, secrets=()):
    """(text, byte count, side file or None, why it was not kept or None) for one stream
    captured in `tmp_path`. When it cannot be redacted or kept (a full disk), nothing of it is
    shown and the temp file is gone."""
    size = 0
    try:
        size = os.stat(tmp_path).st_size
        _redact_file(tmp_path, secrets)
        text, size, side = _keep(tmp_path, cap, final_path)
    except OSError as error:
        _quiet(os.unlink, tmp_path)
        return "", size, None, _kept_problem(error)
    return text, size, side, None


def _keep(tmp_path, cap, final_path):
    with open(tmp_path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        if size <= cap:
            head, tail = handle.read(size), b""
        else:
            head = handle.read(cap // 2)
            handle.seek(size - (cap - cap // 2))
            tail = handle.read(cap - cap // 2)
    binary = b"\0" in head or b"\0" in tail
    if size <= cap and not binary:
        os.unlink(tmp_path)
        return head.decode("utf-8", "replace"), size, None
    os.chmod(tmp_path, 0o600)
    os.replace(tmp_path, final_path)
    if binary:
        return f"(binary output: {size} bytes)", size, final_path
    text = head.decode("utf-8", "replace")
    if text and not text.endswith("\n"):
        text += "\n"
    text += f"[... {size - len(head) - len(tail)} bytes omitted ...]\n"
    return text + tail.decode("utf-8", "replace"), size, final_path


# -- running ------------------------------------------------------------------------------

def _refused_outcome(reason, policy):
    return ShellOutcome(exit_code=None, stdout="", stderr="", timed_out=False, refused=reason,
                        stdout_bytes=0, stderr_bytes=0, stdout_file=None, stderr_file=None,
                        seconds=0.0, timeout=float(policy.timeout), output_cap=policy.output_cap)


def _write_script(side_dir, command):
    fd, path = tempfile.mkstemp(prefix=".shell-", suffix=".sh", dir=side_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
            handle.write(command if command.endswith("\n") else command + "\n")
    except BaseException:
        _quiet(os.unlink, path)   # a full disk leaves no half-written script behind
        raise
    return path


def run_shell(command, cwd, policy, side_dir, environ=None, confirm=None, secret_names=(),
              secrets=(), gate=None, mcp=None):
    check_policy(policy)
    environ = dict(os.environ if environ is None else environ)
    cwd = os.path.abspath(cwd)
    if not os.path.isdir(cwd):
        raise InputError("shell working directory not found", cwd)
    if policy.approval == "deny":
        return _refused_outcome(DENIED, policy)
    os.makedirs(side_dir, mode=0o700, exist_ok=True)
    script = _write_script(side_dir, command)
    paths = []
    try:
        sandboxed = policy.sandbox == "bwrap"
        env = with_git_safety(sandbox_env(environ, policy, secret_names) if sandboxed
                              else scrubbed_env(environ, secret_names))
        # The run's MCP servers start with what the run's shell commands get (the first action's).
        channel = mcp.variables(env) if mcp is not None else {}
        # The sandbox is planned before the user is asked: one it refuses asks nothing.
        argv = bwrap_command(script, cwd, policy, environ, mcp.sockets() if channel else ()) \
            if sandboxed else [shell_path(), script]
        env[SHELL_ACTION_VAR] = "1"   # nagent and nagent-file-edit in here name the tag instead
        env.update(channel)           # after the scrub and the allowlist: the run's own channel
        reason = _refusal(command, policy, confirm, gate)
        if reason:
            return _refused_outcome(reason, policy)
        fds = []
        try:
            for _ in range(2):
                fd, path = tempfile.mkstemp(prefix=".shell-", suffix=".tmp", dir=side_dir)
                fds.append(fd)
                paths.append(path)
            started = time.monotonic()
            proc = _start(argv, cwd, env, fds[0], fds[1])
        finally:
            for fd in fds:
                os.close(fd)
        if channel:
            mcp.track(proc.pid)
        timed_out = False
        try:
            wait(proc, policy.timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            end_group(proc, KILL_GRACE)
            if channel:
                mcp.untrack(proc.pid)
        seconds = time.monotonic() - started
        out_final, err_final = _side_names(side_dir)
        out_text, out_size, out_file, out_lost = _collect(paths[0], policy.output_cap, out_final,
                                                          secrets)
        err_text, err_size, err_file, err_lost = _collect(paths[1], policy.output_cap, err_final,
                                                          secrets)
    finally:
        for path in (*paths, script):
            _quiet(os.unlink, path)
    return ShellOutcome(exit_code=proc.returncode, stdout=out_text, stderr=err_text,
                        timed_out=timed_out, refused=None, stdout_bytes=out_size,
                        stderr_bytes=err_size, stdout_file=out_file, stderr_file=err_file,
                        seconds=seconds, timeout=float(policy.timeout),
                        output_cap=policy.output_cap, stdout_lost=out_lost, stderr_lost=err_lost)


def _start(argv, cwd, env, out_fd, err_fd):
    try:
        return subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out_fd,
                                stderr=err_fd, start_new_session=True, close_fds=True)
    except OSError as error:
        raise SetupError("cannot start shell", f"{argv[0]}: {error.strerror or error}") from None


def _quiet(fn, arg):
    try:
        fn(arg)
    except OSError:
        pass


# -- result text --------------------------------------------------------------------------

def _signal_name(number):
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _stream_block(label, text, size, path, cap, lost=None):
    if lost:
        return f"{label}:\n[{label}: {size} bytes; output could not be kept: {lost}]\n"
    block = f"{label}:\n{text}"
    if text and not text.endswith("\n"):
        block += "\n"
    if path:
        shown = ("binary, not shown" if text == f"(binary output: {size} bytes)"
                 else f"showing first {cap // 2} and last {cap - cap // 2}")
        block += f"[{label}: {size} bytes; {shown}; full output in {path}]\n"
    return block


def format_shell_result(outcome):
    """The text inside <nagent-shell-result>."""
    code = outcome.exit_code
    lines = [f"exit_code: {'none' if code is None else code}"]
    if code is not None and code < 0:
        lines.append(f"signal: {_signal_name(-code)}")
    if outcome.timed_out:
        lines.append(f"timed_out: true (killed after {outcome.timeout:g} s)")
    if outcome.refused:
        # A rule's refusal is its own line, the same the user sees: "✗ denied by rule ...".
        lines.append(outcome.refused if outcome.refused.startswith("✗ ")
                     else f"refused: {outcome.refused}")
        return "\n".join(lines) + "\n"
    cap = outcome.output_cap
    text = "\n".join(lines) + "\n"
    text += _stream_block("stdout", outcome.stdout, outcome.stdout_bytes, outcome.stdout_file, cap,
                          outcome.stdout_lost)
    text += _stream_block("stderr", outcome.stderr, outcome.stderr_bytes, outcome.stderr_file, cap,
                          outcome.stderr_lost)
    return text
