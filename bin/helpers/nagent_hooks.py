"""Hooks: user commands that gate the final response and each action.

Data contract:
- `response_gated(settings)` -> True when a response hook (`hooks.response`, or
  `--hook-per-response`) is configured: then nothing of a final response may reach the user
  before the hook accepted it, so no streaming of final responses to stdout.
- `gates_invocation(invocation)`: the response gate applies to runs the user started, not to
  delegated sub-agents (their answer is a result the parent reads, and the parent's own final
  answer is gated).
- `run_hook(command, stdin_text, cwd, environ, timeout, hook="response", extra_env=None,
  secret_names=())` -> HookRun. The command runs as `/bin/sh -c COMMAND` in `cwd`, in its own
  process group, stdin the given text (from a file, so a hook that never reads it never
  blocks), stdout/stderr to temp files (a hook printing without end costs disk, not memory;
  OUTPUT_CAP bytes of each are kept, head and tail), the environment nagent_shell.scrubbed_env
  gives shell actions (no provider keys, no NAGENT_* internals) plus `extra_env` and
  NAGENT_HOOK=response|action. Past `timeout` seconds the whole group is killed; anything the
  hook left running in its group is killed when it exits. Never raises for a failing command.
- `HookRun(hook, command, exit_code, timed_out, stdout, stderr, seconds, error)`; `status()`:
  response hooks: "accepted" (exit 0), "timeout", else "refused" (fail closed: a hook that
  crashes or cannot start refuses); action hooks: "accepted" (exit 0), "refused" (exit 2),
  "timeout", else "error". `output()` is stdout and stderr as the model reads them;
  `describe()` says how it ended ("exit 1", "timed out after 5 s", "killed by signal 9").
  `record()` -> (body, attrs) of the conversation's "hook" record (bookkeeping, never sent).
- `gate_response(run, text)` -> None when the final response `text` may be printed (no gate, a
  delegated run, or the hook accepted); else a Gate(stop, hook_run): the hook refused, its
  output went back to the model as a <system> note, and `stop` is a GateRefused once
  `max_gate_refusals` refusals were counted in this run (`run.gate_refusals`), else None (the
  loop continues). `refusal_view(hook_run)` is what the live view says about it: how the hook
  ended, then the first lines of its output.
- `action_payload(action, ctx, target=None)` -> the JSON object an action hook reads on stdin:
  kind, mode (the session's write mode: main or file-edit), cwd, conversation, and per kind
  `path` as the model wrote it and `resolved_path` for read, file-read, write, file-patch (its
  index), replace and file-edit: the pinned target's real path (nagent_action_targets: the file
  a read opened before the hook, the path a write replaces, the file an edit changes), which the
  action then uses; a file-patch of a split nagent made also has `source`, the file the patch
  replaces. `content` for write, `pairs` ([{old, new}]) for replace, `instruction` for
  file-edit, `command` for shell, `task` for agent. `check_action(action, ctx, target=None)` ->
  HookRun, or None when no action hook is configured or the action is a <nagent-next>.
"""
from collections import namedtuple

from nagent_errors import GateRefused
from nagent_paths import resolved
from nagent_protocol_blocks import frame_data
from nagent_replace import parse_pairs
from nagent_secrets import scrubbed_env

OUTPUT_CAP = 16 * 1024
HOOKED_ACTIONS = ("read", "file-read", "file-patch", "write", "shell", "agent", "replace",
                  "file-edit")

Gate = namedtuple("Gate", "stop hook_run")


def response_gated(settings):
    return bool(settings.hooks.response)


def gates_invocation(invocation):
    return invocation != "delegated"


class HookRun(namedtuple("HookRun", "hook command exit_code timed_out stdout stderr seconds error "
                                    "timeout")):
    __slots__ = ()

    def status(self):
        if self.exit_code == 0 and not self.timed_out:
            return "accepted"
        if self.timed_out:
            return "timeout"
        if self.hook == "action":
            return "refused" if self.exit_code == 2 else "error"
        return "refused"

    def describe(self):
        if self.timed_out:
            return f"timed out after {self.timeout:g} s"
        if self.error:
            return f"could not start: {self.error}"
        if self.exit_code is not None and self.exit_code < 0:
            return f"killed by signal {-self.exit_code}"
        if self.exit_code is not None and 128 < self.exit_code < 160:
            return f"exit {self.exit_code} (the shell reports signal {self.exit_code - 128})"
        return f"exit {self.exit_code}"

    def output(self):
        parts = [text.rstrip("\n") for text in (self.stdout, self.stderr) if text.strip()]
        return "\n".join(parts) if parts else "(no output)"

    def record(self):
        body = f"command: {self.command}\nended: {self.describe()}\noutput:\n{self.output()}"
        attrs = {"hook": self.hook, "status": self.status(), "seconds": f"{self.seconds:.2f}"}
        if self.exit_code is not None:
            attrs["exit_code"] = str(self.exit_code)
        return body, attrs


def _read_capped(handle):
    size = handle.seek(0, 2)
    handle.seek(0)
    if size <= OUTPUT_CAP:
        data = handle.read()
        return data.decode("utf-8", "replace")
    half = OUTPUT_CAP // 2
    head = handle.read(half)
    handle.seek(size - half)
    tail = handle.read(half)
    return (head.decode("utf-8", "replace") + f"\n[... {size - 2 * half} bytes not shown ...]\n"
            + tail.decode("utf-8", "replace"))


def _kill_group(pid):
    import os
    import signal
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def run_hook(command, stdin_text, cwd, environ, timeout, hook="response", extra_env=None,
             secret_names=()):
    import subprocess
    import tempfile
    import time
    env = scrubbed_env(environ, secret_names)
    env.update(extra_env or {})
    env["NAGENT_HOOK"] = hook
    started = time.monotonic()
    exit_code, timed_out, error = None, False, None
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as out, \
            tempfile.TemporaryFile() as err:
        stdin.write(stdin_text.encode("utf-8"))
        stdin.seek(0)
        try:
            proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, stdin=stdin, stdout=out,
                                    stderr=err, env=env, start_new_session=True)
        except OSError as problem:
            error = problem.strerror or str(problem)
        else:
            try:
                exit_code = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                _kill_group(proc.pid)
                exit_code = proc.wait()
            except BaseException:
                # Ctrl-C or an exit signal: the hook has its own session, so the terminal's
                # signal never reached it; it must not outlive nagent.
                _kill_group(proc.pid)
                proc.wait()
                raise
            _kill_group(proc.pid)  # whatever it left running in its group ends with it
        stdout, stderr = _read_capped(out), _read_capped(err)
    return HookRun(hook, command, exit_code, timed_out, stdout, stderr,
                   time.monotonic() - started, error, timeout)


# -- the response gate ------------------------------------------------------------------------

def refusal_note(hook_run):
    # The hook's output is data (test logs quoting files): framed, it cannot end the note.
    return ("<system>The response hook (" + hook_run.command + ") did not accept your final "
            f"response ({hook_run.describe()}). Its output:\n{frame_data(hook_run.output())}\n"
            "Address this, then give your final <nagent-response> again.</system>")


def refusal_view(hook_run, lines=5):
    output = [line for line in hook_run.output().splitlines() if line.strip()]
    return "\n".join([f"the response hook did not accept the answer ({hook_run.describe()})"]
                     + output[:lines])


def gate_response(run, text):
    session = run.session
    settings = session.settings
    if not response_gated(settings) or not gates_invocation(session.meta.get("invocation")):
        return None
    ctx = session.action_context
    hook_run = run_hook(settings.hooks.response, text, ctx.cwd, ctx.environ, settings.hooks.timeout,
                        "response", {"NAGENT_CONVERSATION": session.path}, ctx.secret_names)
    body, attrs = hook_run.record()
    run.append("hook", body, attrs)
    if hook_run.status() == "accepted":
        return None
    run.gate_refusals += 1
    run.append("system", refusal_note(hook_run), {"gate": "refused"})
    limit = settings.hooks.max_gate_refusals
    if run.gate_refusals < limit:
        return Gate(None, hook_run)
    return Gate(GateRefused("the response hook refused the final response",
                            f"{run.gate_refusals} times (max_gate_refusals {limit})",
                            f"the last response is printed as not accepted; the hook runs are "
                            f"recorded in {session.path}"), hook_run)


# -- the action hook --------------------------------------------------------------------------

def action_payload(action, ctx, target=None):
    import os
    payload = {"kind": action.kind, "mode": getattr(ctx.write_mode, "kind", "main"),
               "cwd": ctx.cwd, "conversation": ctx.conversation}
    raw = action.attr("index" if action.kind == "file-patch" else "path")
    if action.kind in ("read", "file-read", "write", "file-patch", "replace", "file-edit"):
        payload["path"] = raw or ""
        payload["resolved_path"] = (target.real if target is not None
                                    else resolved(os.path.join(ctx.cwd, raw or "")))
        if target is not None and target.source:
            payload["source"] = target.source
    if action.kind == "write":
        payload["content"] = action.body
    elif action.kind == "replace":
        # Here, not at the top: nagent_stream asks this module before the first request.
        payload["pairs"] = [{"old": old, "new": new} for old, new in parse_pairs(action.body)]
    elif action.kind == "file-edit":
        payload["instruction"] = action.body.strip()
    elif action.kind == "shell":
        payload["command"] = action.body
    elif action.kind == "agent":
        payload["task"] = action.body.strip()
    return payload


def check_action(action, ctx, target=None):
    import json
    settings = ctx.settings
    if settings is None or not settings.hooks.action or action.kind not in HOOKED_ACTIONS:
        return None
    return run_hook(settings.hooks.action, json.dumps(action_payload(action, ctx, target)), ctx.cwd,
                    ctx.environ, settings.hooks.timeout, "action",
                    {"NAGENT_CONVERSATION": ctx.conversation}, ctx.secret_names)
