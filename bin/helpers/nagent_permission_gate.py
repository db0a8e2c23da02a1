"""The permission check of one action, with the user's answers: the bridge between the verdicts
(nagent_policy), the terminal (nagent_approval) and the handlers (nagent_actions, nagent_shell).

Data contract (`ctx` is nagent_actions.ActionContext; ctx.policy a nagent_policy.Policy):
- `check_permission(action, ctx, ask, target=None) -> str | None`: for read, file-read, write,
  file-patch (its target: the source of the split in nagent's own registry), replace and
  file-edit: the path rules and plan mode (nagent_policy.path_verdict), judged on `target`
  (nagent_action_targets.pin_target: the file the action will then use) when given. None: go on. A str: the refusal the
  action's result carries (`✗ denied by rule NAME (FILE)` ...). A rule that asks asks on the
  terminal; no terminal refuses, saying so. Other kinds: None (shell: `shell_gate`).
- `shell_gate(text, ctx) -> gate`: `gate(command) -> refusal | None`, called by
  nagent_shell.run_shell once the sandbox is planned: the script's verdict with the approval
  mode. deny refuses; allow runs (no question, even under `shell.approval: confirm`); ask, or
  no rule under confirm, asks with the whole command and what asked. y runs; n refuses
  (nagent_shell's DECLINED); a runs and adds the forms to the session's rules (saved to the
  config after a second yes: nagent_permissions.save_rule); e refuses with the user's reason
  (`✗ denied by the user: REASON`). Without a terminal: NO_TERMINAL under plain confirm, else
  the verdict's refusal, which says how to allow it.
- `shell_time(policy, deadline)`: the ShellPolicy with its timeout cut to the time cap left.
"""
import time
from dataclasses import replace

from nagent_approval import ask_on_tty, tell_on_tty
from nagent_errors import NagentError
from nagent_file_tools import registered_source
from nagent_permissions import save_rule, session_rule
from nagent_policy import path_verdict, refusal, shell_verdict
from nagent_shell import DECLINED, NO_TERMINAL

PATH_KINDS = ("read", "file-read", "write", "file-patch", "replace", "file-edit")
WHAT = {"read": "read a file", "file-read": "read a file", "write": "write a file",
        "file-patch": "patch a file", "replace": "edit a file", "file-edit": "edit a file"}


def check_permission(action, ctx, ask=ask_on_tty, target=None):
    policy = ctx.policy
    if policy is None or action.kind not in PATH_KINDS:
        return None
    real = None
    if action.kind == "file-patch":
        path = target.source if target is not None else (
            registered_source(action.attr("index", ""), ctx) if action.attr("index") else None)
    else:
        path = action.attr("path")
        real = target.real if target is not None else None
    if not path or "\x00" in path:
        return None   # the handler reports a missing path, a NUL byte or a split it never made
    verdict = path_verdict(policy, action.kind, path, ctx.cwd, real)
    if verdict.decision == "deny":
        return refusal(verdict)
    if verdict.decision != "ask":
        return None
    answer = ask(path, asked_by=verdict.asked_by, what=WHAT[action.kind])
    if answer is None:
        return refusal(verdict)
    return None if answer.run else _declined(answer, "the user declined this action")


def _declined(answer, plain):
    return f"✗ denied by the user: {answer.reason}" if answer.reason else plain


def shell_gate(text, ctx, ask=ask_on_tty):
    policy = ctx.policy
    verdict = shell_verdict(policy, text, ctx.cwd)
    approval = ctx.shell_policy.approval

    def gate(command):
        if verdict.decision == "deny":
            return refusal(verdict)
        if verdict.decision == "allow" or (verdict.decision == "default" and approval != "confirm"):
            return None
        answer = ask(command, asked_by=verdict.asked_by or "shell.approval: confirm",
                     forms=verdict.forms, save_to=policy.save_to)
        if answer is None:
            return NO_TERMINAL if verdict.decision == "default" else refusal(verdict, policy.save_to)
        if not answer.run:
            return _declined(answer, DECLINED)
        for form in answer.allow:
            policy.session.append(session_rule(form))
            if answer.save:
                _save(policy.save_to, form)
        return None

    return gate


def _save(path, form):
    try:
        save_rule(path, {"decision": "allow", "shell": form,
                         "name": f"saved {time.strftime('%Y-%m-%d')}: {form}"})
        tell_on_tty(f"saved: allow `{form}` in {path}\n")
    except (OSError, ValueError, NagentError) as error:   # the session still keeps the rule
        tell_on_tty(f"could not save the rule to {path}: {error}\n")


def shell_time(policy, deadline):
    if deadline is None:
        return policy
    return replace(policy, timeout=max(1.0, min(policy.timeout, deadline - time.monotonic())))
