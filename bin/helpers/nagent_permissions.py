"""Permission rules: what the config and a project's `.nagent/permissions` allow, ask about or
refuse, and how a rule matches a command, a path or an MCP tool.

Data contract
-------------
* A rule is a JSON object in the config's `permissions` list (every config file's rules apply,
  each naming its file) or in `<project>/.nagent/permissions` (a JSON list, or an object with a
  `permissions` list): `decision` allow | confirm | deny; exactly one target: `shell` (a command
  pattern), `read`, `write` or `edit` (a path glob) or `mcp` ("SERVER/TOOL", globs; "SERVER"
  alone is every tool of it); optional `name`, `read_only` (an allow rule for a shell command
  that changes nothing: plan mode runs it) and `examples` ({"match": [...], "no_match": [...]},
  commands, paths or SERVER/TOOL names), checked here when the config loads: a failing example
  is a ConfigError naming the rule and its file. A project file may only tighten: an allow
  rule or read_only there is a ConfigError.
* `Rule` (frozen): name, decision, target, pattern (as written), words (a shell pattern's
  words, a trailing lone `*` removed), prefix (it had one), read_only, source (its file, or
  "this session"), index. `label` is the name, else `shell "git diff *"`. `exact`: an allow
  rule with no glob anywhere: the only kind that lets one form of a destructive command
  through the guard.
* Shell patterns match nagent_command_types.Command words. Each pattern word is a glob for one
  word (fnmatch, case-sensitive); the first matches the command name (a path counts by its
  last part only in a system directory). allow rules match word by word, the whole command
  unless the pattern ends in `*`; deny and confirm rules are looser: their option words
  (`-…`) may stand anywhere after the words before them, and their other words match in order
  with only options (and one value after each) between (`git push --force` catches
  `git -C dir push origin --force`, not `git log --grep push`). Results are YES, MAYBE (a word known only at run time, a name
  that is a path elsewhere, a function or variable assignment in front of the command, words a
  wrapper appends later) or NO: allow needs YES; a MAYBE deny or confirm asks.
* Path globs: `*` within one component, `**` across components, `?`, `[…]`; relative to the
  project root (else the working directory), `~/` the home; a pattern also covers everything
  under what it names. `read` binds read and file-read, `edit` the edit kinds (file-patch,
  replace, file-edit, and `nagent-file-edit --file PATH` commands), `write` write and every
  edit kind; matched against the resolved path.
* `check_rules(layers, name, warn)` (the config schema's check: [(path, value)] highest first)
  and `load_project_rules(root)` -> tuple of Rule; `match_command(rule, command, assigned)`,
  `match_path(rule, real, base, home)`, `match_mcp(rule, server, tool)` -> YES | MAYBE | NO;
  `session_rule(pattern, decision)`; `save_rule(path, rule)` appends a rule to a config file
  (atomically, the previous file kept as PATH.bak).
"""
import json
import os
import re
import shlex
import shutil
from dataclasses import dataclass
from fnmatch import fnmatchcase
from functools import lru_cache

from nagent_command_types import Word, command_name
from nagent_command_words import parse_script
from nagent_errors import ConfigError
from nagent_fs import atomic_write

DECISIONS = ("allow", "confirm", "deny")
TARGETS = ("shell", "read", "write", "edit", "mcp")
FIELDS = frozenset(("name", "decision", "read_only", "examples") + TARGETS)
PATH_KINDS = {"read": ("read", "file-read"),
              "edit": ("file-patch", "replace", "file-edit"),
              "write": ("write", "file-patch", "replace", "file-edit")}
PROJECT_FILE = os.path.join(".nagent", "permissions")
SESSION = "this session"
YES, MAYBE, NO = 2, 1, 0
GLOB_CHARS = "*?["


@dataclass(frozen=True)
class Rule:
    name: str
    decision: str
    target: str
    pattern: str
    words: tuple = ()
    prefix: bool = False
    read_only: bool = False
    source: str = ""
    index: int = 0

    @property
    def label(self):
        return self.name or f'{self.target} "{self.pattern}"'

    @property
    def exact(self):
        return self.decision == "allow" and not self.prefix and \
            not any(ch in self.pattern for ch in GLOB_CHARS)

    def covers(self, kind):
        return kind in PATH_KINDS.get(self.target, ())


# -- reading rules ----------------------------------------------------------------------------
def _bad(what, value, where, fix=""):
    return ConfigError(what, f"{value} in {where}", fix)


def parse_rule(data, source, index, project=False, warn=None):
    where = f"permissions[{index}]"
    if not isinstance(data, dict):
        raise _bad(f"{where} must be an object", json.dumps(data), source,
                   'e.g. {"decision": "allow", "shell": "git diff *"}')
    name = data.get("name") or ""
    label = f"{where} ({name})" if name else where
    if not isinstance(name, str):
        raise _bad(f"{label}: name must be a string", json.dumps(name), source)
    decision = data.get("decision")
    if decision not in DECISIONS:
        raise _bad(f"{label}: decision must be one of {', '.join(DECISIONS)}",
                   json.dumps(decision), source)
    targets = [key for key in TARGETS if key in data]
    if len(targets) != 1:
        raise _bad(f"{label} must name exactly one of {', '.join(TARGETS)}",
                   ", ".join(targets) or "none", source)
    target = targets[0]
    pattern = data[target]
    if not isinstance(pattern, str) or not pattern.strip():
        raise _bad(f"{label}: {target} must be a non-empty string", json.dumps(pattern), source)
    read_only = data.get("read_only", False)
    if not isinstance(read_only, bool) or (read_only and (decision != "allow" or target != "shell")):
        raise _bad(f"{label}: read_only must be true or false, and only on an allow rule for a "
                   "shell command", json.dumps(read_only), source)
    if project and (decision == "allow" or read_only):
        raise _bad(f"{label}: a project's permissions can only deny or confirm", decision, source,
                   "allow commands in your own config (~/.nagent/config.json)")
    words, prefix = (), False
    if target == "shell":
        try:
            words = tuple(shlex.split(pattern))
        except ValueError as error:
            raise _bad(f"{label}: shell pattern cannot be split", f"{pattern!r} ({error})",
                       source) from None
        if not words:
            raise _bad(f"{label}: empty shell pattern", repr(pattern), source)
        words, prefix = _shell_words(words)
    for unknown in sorted(set(data) - FIELDS):
        if warn:
            warn(f"{where}.{unknown}")
    rule = Rule(name, decision, target, pattern.strip(), words, prefix, read_only, source, index)
    check_examples(rule, data.get("examples"), label)
    return rule


def check_examples(rule, examples, label):
    """Each example must match (or not) as the rule says; else a ConfigError naming the rule."""
    if examples is None:
        return
    if not isinstance(examples, dict) or set(examples) - {"match", "no_match"} or not all(
            isinstance(v, list) and all(isinstance(x, str) for x in v) for v in examples.values()):
        raise _bad(f"{label}: examples must be {{\"match\": [...], \"no_match\": [...]}} of strings",
                   json.dumps(examples), rule.source)
    for expected, key in ((True, "match"), (False, "no_match")):
        for example in examples.get(key, []):
            if example_matches(rule, example) != expected:
                verb = "does not match" if expected else "matches"
                raise _bad(f"rule {label} {verb} its example", repr(example), rule.source,
                           "fix the pattern or the example")


def example_matches(rule, example):
    if rule.target == "shell":
        commands = [c for c in parse_script(example, "/").commands if c.words and c.role != "candidate"]
        if rule.decision == "allow":
            runs = [c for c in commands if c.role == "run"]
            return bool(runs) and all(match_command(rule, c) == YES for c in runs)
        return any(match_command(rule, c) == YES for c in commands)
    if rule.target == "mcp":
        server, _, tool = example.partition("/")
        return match_mcp(rule, Word(server), Word(tool)) == YES
    base, home = "/project", "/home/user"
    path = example if os.path.isabs(example) else os.path.join(base, example)
    return match_path(rule, os.path.normpath(path.replace("~", home, 1)
                                             if example.startswith("~/") else path),
                      base, home, resolve=False) == YES


def _rule_list(value, source):
    if isinstance(value, dict) and "permissions" in value:
        value = value["permissions"]
    if not isinstance(value, list):
        raise _bad("permissions must be a list of rules", type(value).__name__, source,
                   '[{"decision": "deny", "shell": "git push --force"}]')
    return value


def check_rules(layers, name="permissions", warn=None):
    """The config schema's check: every file's rules, highest file first."""
    rules = []
    for source, value in layers:
        for index, data in enumerate(_rule_list(value, source)):
            rules.append(parse_rule(data, source, index, warn=warn))
    return tuple(rules)


def load_project_rules(root):
    """The rules of <root>/.nagent/permissions (deny and confirm only), or ()."""
    if not root:
        return ()
    path = os.path.join(root, PROJECT_FILE)
    if not os.path.lexists(path):
        return ()
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as error:
        raise ConfigError(f"cannot read the project's permissions {path}",
                          getattr(error, "strerror", None) or error) from None
    try:
        value = json.loads(text) if text.strip() else []
    except json.JSONDecodeError as error:
        raise ConfigError(f"the project's permissions {path} are not valid JSON",
                          f"{error.msg} at line {error.lineno} column {error.colno}",
                          "fix the file; it can only deny or confirm") from None
    return tuple(parse_rule(data, path, index, project=True)
                 for index, data in enumerate(_rule_list(value, path)))


def _shell_words(words):
    """(words, prefix): a trailing lone `*` means any further words; `*` alone, any command."""
    if words[-1] != "*":
        return words, False
    return (words[:-1] if len(words) > 1 else words), True


def session_rule(pattern, decision="allow"):
    words, prefix = _shell_words(tuple(shlex.split(pattern)))
    return Rule("", decision, "shell", pattern, words, prefix, source=SESSION)


def save_rule(path, rule):
    """Append `rule` (a dict) to the permissions of the config file `path`; the previous file
    is kept as PATH.bak."""
    data = {}
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        data = json.loads(text) if text.strip() else {}
        if not isinstance(data, dict):
            raise ConfigError(f"config file {path} must hold a JSON object", type(data).__name__)
        shutil.copy2(path, path + ".bak")
    rules = data.setdefault("permissions", [])
    if not isinstance(rules, list):
        raise ConfigError("permissions must be a list of rules", f"in {path}")
    rules.append(rule)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    atomic_write(path, (json.dumps(data, indent=2) + "\n").encode("utf-8"),
                 mode=None if os.path.exists(path) else 0o600)


# -- matching commands ------------------------------------------------------------------------
def _name(pattern, word):
    if pattern == "*":
        return YES
    if not word.static:
        return MAYBE
    if "/" in pattern:
        return YES if fnmatchcase(word.text, pattern) else NO
    name, certain = command_name(word)
    if not fnmatchcase(name, pattern):
        return NO
    return YES if certain else MAYBE


def _word(pattern, word):
    if pattern == "*":
        return YES
    if not word.static:
        return MAYBE
    return YES if fnmatchcase(word.text, pattern) else NO


def match_command(rule, command, assigned=frozenset()):
    """YES | MAYBE | NO: does shell rule `rule` match `command`?"""
    if rule.target != "shell" or not command.words:
        return NO
    best = _name(rule.words[0], command.words[0])
    if best == NO:
        return NO
    if command.role == "candidate" or command.function:
        best = min(best, MAYBE)
    if rule.decision == "allow":
        if command.assigns or "PATH" in assigned:
            best = min(best, MAYBE)   # FOO=1 cmd, PATH=. cmd: not the command the rule meant
        return min(best, _in_place(rule, command))
    return min(best, _in_order(rule, command))


def _in_place(rule, command):
    words, best, i = command.words, YES, 1
    for pattern in rule.words[1:]:
        if i >= len(words):
            return MAYBE if command.open_tail else NO
        word = words[i]
        if word.split:
            return MAYBE   # zero or several words: the rest cannot be lined up
        result = _word(pattern, word)
        if result == NO:
            return NO
        best, i = min(best, result), i + 1
    rest = words[i:]
    if rest and not rule.prefix:
        return MAYBE if all(word.split for word in rest) else NO
    if command.open_tail and not rule.prefix:
        return min(best, MAYBE)
    return best


def _in_order(rule, command):
    """deny/confirm: option words of the pattern anywhere after what matched so far; other
    words in order, with only options (and one value after each) skipped between."""
    words, best, i = command.words, YES, 1
    for pattern in rule.words[1:]:
        if pattern.startswith("-"):
            if any(_word(pattern, words[j]) == YES for j in range(i, len(words))):
                continue
            if command.open_tail or any(not word.static for word in words[i:]):
                best = MAYBE
                continue
            return NO
        j, value_next = i, False
        while True:
            if j >= len(words):
                return MAYBE if command.open_tail else NO
            result = _word(pattern, words[j])
            if result:
                best = min(best, result)
                break
            text = words[j].text
            if text.startswith("-") and text != "-":
                value_next = "=" not in text
            elif value_next:
                value_next = False
            else:
                return NO
            j += 1
        i = j + 1
    return best


def match_mcp(rule, server, tool):
    if rule.target != "mcp":
        return NO
    want_server, _, want_tool = rule.pattern.partition("/")
    best = YES
    for pattern, word in ((want_server, server), (want_tool or "*", tool)):
        result = _word(pattern, word)
        if result == NO:
            return NO
        best = min(best, result)
    return best


# -- matching paths ---------------------------------------------------------------------------
def _glob_regex(pattern):
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and "]" in pattern[i + 2:]:
            end = pattern.index("]", i + 2)
            inner = pattern[i + 1:end]
            out.append("[" + ("^" + inner[1:] if inner.startswith("!") else inner) + "]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


@lru_cache(maxsize=256)
def _path_regex(pattern, base, home, resolve):
    if pattern == "~" or pattern.startswith("~/"):
        pattern = home + pattern[1:]
    full = os.path.normpath(pattern if os.path.isabs(pattern) else os.path.join(base, pattern))
    if resolve:   # the literal part of the pattern names real directories: resolve its links
        parts = full.split("/")
        literal = next((n for n, part in enumerate(parts) if any(c in part for c in GLOB_CHARS)),
                       len(parts))
        head = "/".join(parts[:literal]) or "/"
        full = os.path.join(os.path.realpath(head), *parts[literal:]) if literal < len(parts) \
            else os.path.realpath(head)
    return re.compile(_glob_regex(full) + r"(?:/.*)?\Z")


def match_path(rule, real, base, home, resolve=True):
    """YES | NO: does path rule `rule` match the resolved path `real`?"""
    if rule.target not in PATH_KINDS:
        return NO
    return YES if _path_regex(rule.pattern, base, home, resolve).match(real) else NO
