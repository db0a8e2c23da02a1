"""What the permission rules, the destructive-command guard and the mode say about one action:
run it, ask first, or refuse, and the one line that says why (on screen and to the model).

Data contract:
- `Policy` (frozen, built once per session by `build_policy`): `rules` (the config's and the
  project's, nagent_permissions.Rule), `place` (nagent_guard.Place: also the home `~` means),
  `mode` ("build" | "plan"), `sandboxed` (plan mode runs shell commands in bwrap with the
  project read-only), `save_to` (the config file an "a" answer may be saved to) and `session`
  (a list the "a" answers append rules to: mutable, the session's own).
- `Verdict(decision, line, command, forms, asked_by)`: decision "deny" (`line` is the refusal,
  `✗ denied by rule NAME (FILE)` …), "ask" (`asked_by` says what asks: a rule, the guard, an
  unsure parse), "allow" (every command is allowed by a rule: even `shell.approval: confirm`
  does not ask) or "default" (no rule decided: the approval mode does). `forms` are the rule
  patterns an "a" answer allows for the session (none when what asked cannot be allowed by a
  rule: an unsure parse).
- `shell_verdict(policy, text, cwd)`: over every command of the script (nagent_command_words):
  a deny rule that matches for sure refuses; a deny that may match, a confirm rule, the guard
  (unless an exact allow rule or a session answer names the command) and an unsure parse ask;
  the script is "allow" only when every command it runs is allowed. Plan mode without bwrap
  refuses every command that is not read-only (nagent_read_only or a `read_only` rule) and
  every redirection that writes outside the temp roots. Rules also see `nagent-mcp call SERVER
  TOOL` (mcp rules), `nagent-file-edit --file PATH` (edit rules) and redirection targets
  (write rules).
- `path_verdict(policy, kind, path, cwd, real=None)` for read, file-read, write, file-patch,
  replace and file-edit (path: the target; `real`: the file the action will use, when the
  caller pinned it, else path resolved here): path rules, and in plan mode a change outside the
  temp roots (or inside the project) is refused.
- `mcp_refusal(settings, cwd, environ, server, tool)`: the deny line for an MCP tool, or None;
  `mcp_deny_line(rules, server, tool)` the same over given rules (the run's MCP host).
- `refusal(verdict, save_to)`: the text a refused action's result carries; for an "ask" with
  no terminal it says how to allow the command.
"""
import json
import os
import re
from dataclasses import dataclass, field

from nagent_command_types import Word, command_name, shown_word
from nagent_command_words import parse_script
from nagent_guard import exact_form, findings, git_place, resolved_paths
from nagent_paths import config_file, nagent_home, within, within_any
from nagent_permissions import (SESSION, YES, load_project_rules, match_command, match_mcp,
                                match_path)
from nagent_project import find_project
from nagent_read_only import read_only
from nagent_write_policy import temp_roots

CHANGING = ("shell", "write", "file-patch", "replace", "file-edit")
WRITING_REDIRECTS = (">", ">>", ">|", "&>", "&>>", "<>")
SUBCOMMAND = re.compile(r"[a-z][a-z0-9:-]*")
SUBCOMMANDS = frozenset({"git", "npm", "pnpm", "yarn", "bun", "cargo", "go", "docker", "podman",
                         "kubectl", "helm", "pip", "pip3", "uv", "poetry", "pdm", "hatch", "make",
                         "apt", "apt-get", "brew", "gh", "terraform", "systemctl", "nagent-mcp",
                         "conda", "dotnet", "mvn", "gradle", "bundle", "rake", "composer", "nix",
                         "deno", "rustup", "kubectx", "aws", "gcloud", "az", "just", "tox", "nox"})
UNSURE = "nagent cannot read this command with confidence"
GUARD = "the destructive-command guard"
INTERPRETERS = frozenset({"python", "python3", "node", "bash", "sh", "perl", "ruby", "deno", "bun"})


@dataclass(frozen=True)
class Policy:
    rules: tuple = ()
    place: object = None
    mode: str = "build"
    sandboxed: bool = False
    save_to: str = ""
    session: list = field(default_factory=list, compare=False)

    def all_rules(self):
        return self.rules + tuple(self.session)

    @property
    def home(self):
        return (self.place.home if self.place else None) or ""


@dataclass(frozen=True)
class Verdict:
    decision: str
    line: str = ""
    command: str = ""
    forms: tuple = ()
    asked_by: str = ""


def build_policy(settings, cwd, environ, sandboxed=False, secret_names=None, project_rules=None):
    """The session's Policy: the config's rules and the project's (`project_rules`, when read
    already), the guard's place (the validated project root, the temp roots, git for tracked
    and changed files), the mode."""
    project = find_project(cwd, environ, secret_names)
    root = project.root if project else None
    rules = tuple(settings.permissions) + (load_project_rules(root) if project_rules is None
                                           else tuple(project_rules))
    place = git_place(cwd, environ, root, temp_roots(environ, cwd), secret_names)
    save_to = config_file(environ) or os.path.join(nagent_home(environ), "config.json")
    return Policy(rules, place, settings.mode, sandboxed, save_to)


def mcp_refusal(settings, cwd, environ, server, tool):
    """The refusal line of a deny rule for MCP tool SERVER/TOOL (the config's and the project's
    rules), or None: nagent-mcp checks it itself, so a call the driver could not see (from a
    script) is refused too."""
    project = find_project(cwd, environ)
    rules = tuple(settings.permissions) + load_project_rules(project.root if project else None)
    return mcp_deny_line(rules, server, tool)


def mcp_deny_line(rules, server, tool):
    """The refusal line of the first of `rules` that denies MCP tool SERVER/TOOL, or None: the
    one check of nagent-mcp (over the rules it reads) and of the run's MCP host (over the rules
    the driver read when the session started)."""
    for rule in rules:
        if rule.decision == "deny" and match_mcp(rule, Word(server), Word(tool)) == YES:
            return rule_line(rule)
    return None


def rule_line(rule):
    return f"✗ denied by rule {rule.label} ({rule.source})"


def prefix_form(command):
    """The pattern an "always" answer allows: `git diff *`, `pytest *`, `python3 -m pytest *`,
    `python3 tool.py *`; the exact command for inline code (`python3 -c …`); "" when the name
    is known only at run time."""
    words = command.words
    if not words or not words[0].static:
        return ""
    name, head = command_name(words[0])[0], [words[0].text]
    first = words[1] if len(words) > 1 and words[1].static else None
    if name in INTERPRETERS and first is not None:
        if first.text in ("-c", "-e", "-p") or not all(w.static for w in words):
            return exact_form(command) if all(w.static for w in words) else ""
        head += [first.text] + ([words[2].text] if first.text == "-m" and len(words) > 2
                                and words[2].static else [])
    elif name in SUBCOMMANDS and first is not None:
        after_option = False
        for word in words[1:6]:   # global options (and their values), then the subcommand
            if not word.static:
                return ""
            head.append(word.text)
            if word.text.startswith("-"):
                after_option = "=" not in word.text
            elif after_option or not SUBCOMMAND.fullmatch(word.text):
                after_option = False
            else:
                break
        else:
            return exact_form(command) if all(w.static for w in words) else ""
    return " ".join(shown_word(Word(text)) for text in head) + " *"


class _Tally:
    def __init__(self):
        self.deny = None           # (line, command text)
        self.asks = []             # (asked_by, command text, form or "")
        self.unallowed = []        # forms of commands no rule allows

    def ask(self, asked_by, command, form=""):
        self.asks.append((asked_by, command, form))


def _mcp_target(command):
    words = command.words
    i = 1
    while i < len(words):
        word = words[i]
        if word.static and word.text in ("--timeout", "--args"):
            i += 2
        elif word.static and word.text.startswith("-"):
            i += 1
        elif word.static and word.text == "call":
            rest = words[i + 1:i + 3]
            return (rest[0] if rest else Word("", False), rest[1] if len(rest) > 1 else Word("", False))
        else:
            return None
    return None


def _edit_target(command):
    words = command.words
    for i, word in enumerate(words[1:], 1):
        if word.static and word.text == "--file" and i + 1 < len(words):
            return words[i + 1]
        if word.static and word.text.startswith("--file="):
            return Word(word.text[len("--file="):])
    return None


def _path_rules(policy, tally, kind, word, command, base):
    """Path rules for a path a command names (a redirection target, nagent-file-edit --file)."""
    rules = [r for r in policy.all_rules() if r.covers(kind) and r.decision != "allow"]
    for real in resolved_paths(word, command) if rules else ():
        for rule in rules:
            if real is None:
                tally.ask(f"rule {rule.label} ({rule.source}): {word.raw or word.text} is "
                          "named only at run time", command.text())
            elif match_path(rule, real, base, policy.home) == YES:
                if rule.decision == "deny":
                    tally.deny = tally.deny or (rule_line(rule), command.text())
                else:
                    tally.ask(f"rule {rule.label} ({rule.source})", command.text())


def _judge(policy, tally, command, assigned, base):
    rules = policy.all_rules()
    text = command.text()
    for redirect in command.redirects:
        if redirect.op in WRITING_REDIRECTS and redirect.target is not None:
            _path_rules(policy, tally, "write", redirect.target, command, base)
            if policy.mode == "plan" and not policy.sandboxed:
                _plan_write(policy, tally, redirect.target, command)
    if not command.words:
        return
    results = [(rule, match_command(rule, command, assigned)) for rule in rules
               if rule.target == "shell"]
    mcp = _mcp_target(command) if command.name == "nagent-mcp" else None
    if mcp:
        results += [(rule, match_mcp(rule, *mcp)) for rule in rules if rule.target == "mcp"]
    if command.name == "nagent-file-edit":
        target = _edit_target(command)
        if target is not None:
            _path_rules(policy, tally, "file-edit", target, command, base)
    certain = command.role != "candidate"
    for rule, result in results:
        if rule.decision == "deny" and result == YES and certain:
            tally.deny = tally.deny or (rule_line(rule), text)
            return
    session_yes = any(r.source == SESSION and r.decision == "allow" and res == YES
                      for r, res in results)
    for rule, result in results:
        if result and rule.decision in ("deny", "confirm") and not session_yes:
            tally.ask(f"rule {rule.label} ({rule.source})", text, prefix_form(command))
    exact = any(rule.exact and result == YES for rule, result in results)
    for finding in findings(command, policy.place) if policy.place else ():
        if not exact:
            tally.ask(f"{GUARD}: {finding}", text,
                      exact_form(command) if all(w.static for w in command.words) else "")
    if command.role != "run":
        return
    if policy.mode == "plan" and not policy.sandboxed:
        if not (read_only(command) or any(r.read_only and res == YES for r, res in results)):
            tally.deny = tally.deny or (
                f"✗ denied by plan mode: `{text}` is not a read-only command (no bwrap sandbox "
                "here, so only read-only commands run; nagent --mode build to change files)", text)
            return
    if not any(rule.decision == "allow" and result == YES for rule, result in results):
        tally.unallowed.append(prefix_form(command))


def _plan_write(policy, tally, word, command):
    for real in resolved_paths(word, command):
        if real == "/dev/null":
            continue
        if real is None or _outside_scratch(real, policy.place):
            tally.deny = tally.deny or (
                f"✗ denied by plan mode: the redirection to {word.raw or word.text} writes outside "
                "the temp roots", command.text())


def _outside_scratch(real, place):
    if not within_any(real, place.temp_roots):
        return True
    return any(kept and within(real, kept, inclusive=True) for kept in (place.project, place.cwd))


def shell_verdict(policy, text, cwd):
    place = policy.place
    script = parse_script(text, cwd, home=policy.home or None)
    tally = _Tally()
    base = (place.project if place else None) or cwd
    for command in script.commands:
        _judge(policy, tally, command, script.assigned, base)
        if tally.deny:
            break
    if tally.deny:
        return Verdict("deny", tally.deny[0], tally.deny[1])
    if script.unsure and policy.mode == "plan" and not policy.sandboxed:
        return Verdict("deny", f"✗ denied by plan mode: {UNSURE}: {script.unsure[0]} (no bwrap "
                               "sandbox here, so only commands it can read as read-only run)")
    for reason in script.unsure:
        tally.ask(f"{UNSURE}: {reason}", "")
    if tally.asks:
        asked_by, command, _ = tally.asks[0]
        unsure = any(not a[1] or not a[2] for a in tally.asks)
        forms = () if unsure else tuple(dict.fromkeys(a[2] for a in tally.asks))
        return Verdict("ask", command=command, forms=forms,
                       asked_by="\n".join(dict.fromkeys(a[0] for a in tally.asks)))
    if not tally.unallowed and any(c.role == "run" and c.words for c in script.commands):
        return Verdict("allow")
    forms = () if "" in tally.unallowed else tuple(dict.fromkeys(tally.unallowed))
    return Verdict("default", forms=forms)


def path_verdict(policy, kind, path, cwd, real=None):
    """The verdict on a read, write or edit of `path` (as the action names it); `real` is the
    file the action will use when the caller pinned it (nagent_action_targets), else resolved here."""
    place = policy.place
    base = (place.project if place else None) or cwd
    full = os.path.normpath(path if os.path.isabs(path) else os.path.join(cwd, path))
    try:
        real = os.path.realpath(full) if real is None else real
    except (OSError, ValueError):   # a link loop, a path the kernel refuses: judged as written
        real = full
    for decision in ("deny", "confirm"):
        for rule in policy.all_rules():
            if rule.decision == decision and rule.covers(kind) and \
                    match_path(rule, real, base, policy.home) == YES:
                if decision == "deny":
                    return Verdict("deny", rule_line(rule), path)
                return Verdict("ask", command=path, asked_by=f"rule {rule.label} ({rule.source})")
    if policy.mode == "plan" and kind in CHANGING and place and _outside_scratch(real, place):
        return Verdict("deny", f"✗ denied by plan mode: {kind} of {path} (plan mode changes "
                               "nothing outside the temp roots; nagent --mode build to change "
                               "files)", path)
    return Verdict("default")


def refusal(verdict, save_to=""):
    """The refusal text of a verdict that did not run: its line, or for an "ask" without a
    terminal a line that says how to allow it."""
    tail = f"\ncommand: {verdict.command}" if verdict.command else ""
    if verdict.decision == "deny":
        return verdict.line + tail
    first = verdict.asked_by.split("\n")[0]
    if first.startswith(UNSURE):
        return (f"✗ denied: {first} (no terminal to ask; write the command plainly, or run "
                f"nagent on a terminal to answer)" + tail)
    how = "run nagent on a terminal to answer"
    if verdict.forms:
        rules = ", ".join('{"decision": "allow", "shell": %s}' % json.dumps(form)
                          for form in verdict.forms)
        how = (f"to allow it add {rules} to permissions in {save_to or '~/.nagent/config.json'}, "
               f"or {how}")
    if first.startswith("rule "):
        return f"✗ denied by {first}: it asks first and there is no terminal ({how})" + tail
    return f"✗ denied by {first} (no terminal to ask; {how})" + tail
