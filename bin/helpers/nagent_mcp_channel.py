"""The run's MCP channel, the driver's side: the private Unix socket through which the run's shell
actions reach the run's live MCP sessions, and the host process that holds them.

Data contract:
- `run_channel(session)` (a context manager around a run) yields a `Channel` when the settings
  configure MCP servers and the SDK is installed, else None. Nothing happens until a shell
  action asks for the channel's variables; the host starts at the first connection.
- `Channel.variables(base_env)` -> {CHANNEL_VAR: socket path} for a shell action's environment
  ({} when the channel cannot open: the shell then starts servers per call, as outside a run);
  `base_env` is the environment the action's command gets (nagent_shell: scrubbed, or the
  sandbox's allowlist), what a stdio server starts with. The first call opens the channel: a
  0700 directory `~/.nagent/run/mcp-PID-HEX/` (stale ones of dead runs are removed), the
  socket `s` in it (0600), a thread that accepts. `sockets()` -> the paths a sandbox must bind
  for the shell to reach it.
- `track(pid)` / `untrack(pid)`: a shell action's process (bash, or bwrap) started and ended.
  A connection is accepted only from a process of this user (SO_PEERCRED) that descends from a
  running shell action of this run, or whose session does (a double-forked child): another
  run's, another user's, a sub-agent's, a hook's or nobody's shell command is refused with one
  error line. Vetted connections are passed (SCM_RIGHTS) to the host, which never listens.
- The host (nagent_main_mcp_host) is started by the accept thread on the first vetted connection (and
  again if it died), in a session of its own, in the run's working directory, with the shell
  actions' scrubbed environment (nagent_secrets.scrubbed_env: no provider key), and handed the
  bootstrap: the settings' server specs and the session's MCP deny rules (the driver's records,
  read when the session started: `host_setup`) and the first action's `base_env`, so under
  bwrap no variable reaches a server that the sandbox would not pass, unless the server's
  entry names it. PR_SET_PDEATHSIG ties it to that thread, which lives as long as the
  channel: if the driver dies, even by SIGKILL, the host gets SIGTERM and stops its servers.
- `close()`: stops accepting, ends the host's process tree (SIGTERM, HOST_GRACE seconds, then
  SIGKILL to every process of it left, each group whole: nagent_procs.end_process_tree), and
  removes the directory. Safe to call twice.
"""
import contextlib
import dataclasses
import json
import os
import secrets as token
import select
import shutil
import socket
import stat
import struct
import subprocess
import threading
from importlib.util import find_spec

from nagent_errors import NagentError
from nagent_install import module_argv
from nagent_instances import run_dir
from nagent_mcp_wire import CHANNEL_VAR, MAX_REQUEST, ChannelError, encode
from nagent_pids import proc_stat, session_of, start_ticks
from nagent_procs import end_process_tree, kill_tree, process_tree
from nagent_secrets import scrubbed_env

HOST_GRACE = 3.0
SOCKET_NAME = "s"
MAX_SOCKET_PATH = 107      # sun_path holds 108 bytes with the terminating NUL
MAX_DEPTH = 256            # ancestors looked at before a peer is judged a stranger
PEER = struct.Struct("3i")
FRESH_TRIES = 8


def run_channel(session):
    """A Channel for this run (None without servers or SDK); closed when the block ends."""
    settings = session.settings
    if not settings.mcp_servers or find_spec("mcp") is None:
        return contextlib.nullcontext()
    return contextlib.closing(Channel(lambda: host_setup(session)))


def host_setup(session):
    """(environment, working directory, bootstrap) of the run's host, from the driver's records:
    `${VAR}` reads the shell actions' scrubbed environment (the host's own)."""
    ctx = session.action_context
    rules = ctx.policy.rules if ctx.policy is not None else tuple(session.settings.permissions)
    deny = [{"name": rule.name, "pattern": rule.pattern, "source": rule.source, "index": rule.index}
            for rule in rules if rule.target == "mcp" and rule.decision == "deny"]
    servers = [dataclasses.asdict(spec) for spec in session.settings.mcp_servers]
    return scrubbed_env(ctx.environ, ctx.secret_names), ctx.cwd, {"servers": servers, "deny": deny}


def descends(pid, roots):
    """True when `pid` is one of `roots` ({pid: start ticks}) or a descendant of one."""
    for _ in range(MAX_DEPTH):
        info = proc_stat(pid)
        if info is None:
            return False
        if roots.get(pid) == info[3]:
            return True
        if info[1] <= 1:
            return False
        pid = info[1]
    return False


def from_shell(pid, roots):
    """A process of a running shell action: it descends from one, or its session's leader does
    (a child that was forked twice and left to init keeps the session). A session leader is
    older than its members: a younger process under the leader's pid is another process that
    took the pid of a leader gone (a daemon of an ended action, its pid reused by a new one)."""
    if descends(pid, roots):
        return True
    leader = session_of(pid)
    if not leader or leader == pid:
        return False
    born, leader_born = start_ticks(pid), start_ticks(leader)
    return born is not None and leader_born is not None and leader_born <= born \
        and descends(leader, roots)


class Channel:
    def __init__(self, setup):
        self._setup = setup
        self._lock = threading.Lock()
        self._roots = {}
        self._opened = False
        self.path = None
        self.problem = ""          # why the channel did not open ("" when it did, or never tried)
        self._dir = None
        self._listener = None
        self._wake = None
        self._thread = None
        self._host = None
        self._control = None
        self._config = None

    # -- the shell's side -------------------------------------------------------------------
    def variables(self, base_env):
        self._open(base_env)
        return {CHANNEL_VAR: self.path} if self.path else {}

    def sockets(self):
        return (self.path,) if self.path else ()

    def track(self, pid):
        ticks = start_ticks(pid)
        if ticks is not None:
            with self._lock:
                self._roots[pid] = ticks

    def untrack(self, pid):
        with self._lock:
            self._roots.pop(pid, None)

    # -- opening ----------------------------------------------------------------------------
    def _open(self, base_env):
        if self._opened:
            return
        self._opened = True
        listener = None
        try:
            environ, cwd, bootstrap = self._setup()
            self._config = environ, cwd, dict(bootstrap, base_env=dict(base_env))
            folder = run_dir(self._config[0])
            os.makedirs(folder, mode=0o700, exist_ok=True)
            _private(folder, "the run directory")
            _sweep(folder)
            self._dir = _fresh_dir(folder)
            path = os.path.join(self._dir, SOCKET_NAME)
            if len(os.fsencode(path)) > MAX_SOCKET_PATH:
                raise OSError(f"the socket path would be longer than {MAX_SOCKET_PATH} bytes")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            _private(self._dir, "the channel directory")
            if not stat.S_ISSOCK(os.lstat(path).st_mode):
                raise OSError(f"{path} is not the socket this run bound")
            os.chmod(path, 0o600)
            listener.listen(16)
        except OSError as error:
            self.problem = f"the run's MCP channel did not open: {error.strerror or error}"
            if listener is not None:
                listener.close()
            self._remove_dir()
            return
        self._listener, self.path = listener, path
        self._wake = os.pipe()
        self._thread = threading.Thread(target=self._accept, name="nagent-mcp-channel", daemon=True)
        self._thread.start()

    # -- the accept thread (the host's parent thread: it lives as long as the channel) --------
    def _accept(self):
        while True:
            ready = select.select([self._listener, self._wake[0]], [], [])[0]
            if self._wake[0] in ready:
                return
            try:
                conn, _address = self._listener.accept()
            except OSError:
                continue
            with conn:
                try:
                    self._refuse_stranger(conn)
                    self._forward(conn)
                except NagentError as error:
                    _answer_error(conn, error)

    def _refuse_stranger(self, conn):
        pid, uid, _gid = PEER.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, PEER.size))
        with self._lock:
            roots = dict(self._roots)
        if uid != os.geteuid() or not from_shell(pid, roots):
            raise ChannelError("the run's MCP channel serves only its own shell commands",
                               f"process {pid}", "nagent-mcp reaches it from the run's shell actions")

    def _forward(self, conn):
        for attempt in range(2):
            host = self._host
            if host is None or host.poll() is not None:
                self._start_host()
            try:
                socket.send_fds(self._control, [b"c"], [conn.fileno()])
                return
            except OSError:
                if attempt:
                    raise ChannelError("the run's MCP host is not running", self._host_log(),
                                       "see the error above; the next call starts it again") from None
                self._stop_host()

    def _start_host(self):
        self._stop_host()
        environ, cwd, bootstrap = self._config
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        log = os.path.join(self._dir, "host.log")
        try:
            with open(log, "ab") as errors:
                os.chmod(log, 0o600)
                host = subprocess.Popen(module_argv("nagent_main_mcp_host") + [str(theirs.fileno()), str(os.getpid())],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=errors,
                                        env=environ, cwd=cwd, pass_fds=(theirs.fileno(),),
                                        start_new_session=True, close_fds=True)
            ours.sendall(json.dumps(bootstrap).encode("utf-8"))
        except OSError as error:
            ours.close()
            raise ChannelError("the run's MCP host did not start", error.strerror or str(error)) from None
        finally:
            theirs.close()
        with self._lock:
            self._host, self._control = host, ours

    def _host_log(self):
        try:
            with open(os.path.join(self._dir, "host.log"), "rb") as handle:
                lines = handle.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
        except OSError:
            lines = []
        return lines[-1] if lines else "it exited"

    def _stop_host(self):
        with self._lock:
            host, control = self._host, self._control
            self._host = self._control = None
        if control is not None:
            control.close()
        if host is not None:
            end_process_tree(host, HOST_GRACE)

    # -- closing ----------------------------------------------------------------------------
    def close(self):
        host = self._host
        tree = process_tree(host.pid) if host is not None else []
        if self._thread is not None:
            os.write(self._wake[1], b"x")
            self._thread.join()
            self._thread = None
        # With the accept thread gone, PR_SET_PDEATHSIG has told the host to stop already;
        # end_process_tree waits for it, and whatever of its tree is left is killed.
        self._stop_host()
        kill_tree(tree, os.getpgrp())
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._wake is not None:
            for fd in self._wake:
                os.close(fd)
            self._wake = None
        self._remove_dir()

    def _remove_dir(self):
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)


def _answer_error(conn, error):
    """One error line. The request is read first (what is left unread when a Unix socket closes
    resets the connection, and the caller would see that instead)."""
    try:
        conn.settimeout(1.0)
        received = 0
        while received < MAX_REQUEST:
            chunk = conn.recv(65536)
            received += len(chunk)
            if not chunk or chunk.endswith(b"\n"):
                break
        conn.sendall(encode({"error": error.as_dict()}))
    except OSError:
        pass


def _private(folder, what):
    """`folder` is a directory itself (no link), of this user, that nobody else may write in:
    nobody else can swap what is in it (a socket, a directory) for one of theirs."""
    info = os.lstat(folder)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise OSError(f"{what} {folder} is not a private directory of this user "
                      "(a link, another owner, or writable by others)")


def _fresh_dir(folder):
    """A new 0700 directory `mcp-PID-HEX` in `folder`: mkdir never follows a link planted at the
    name, and a name taken (planted, or a clash) is passed over for another."""
    for _ in range(FRESH_TRIES):
        path = os.path.join(folder, f"mcp-{os.getpid()}-{token.token_hex(4)}")
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        return path
    raise OSError(f"no fresh channel directory in {folder} after {FRESH_TRIES} tries")


def _sweep(folder):
    """Remove the channel directories of runs that are gone (killed before they could)."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) == 3 and parts[0] == "mcp" and parts[1].isdigit() \
                and start_ticks(int(parts[1])) is None:
            shutil.rmtree(os.path.join(folder, name), ignore_errors=True)
