"""Slash commands of the interactive session, as the `nagent` flags they stand for. A slash
command is never a second implementation: it is the command line it maps to, run by the same
command functions as `nagent FLAGS` (nagent_interactive).

Data contract (pure: no I/O)
----------------------------
* `COMMANDS`: name -> (usage, summary), in /help order.
* `parse(entry) -> (name, words) | None`: None when the entry is a prompt, that is when it does
  not start with "/" and a name of lowercase letters followed by whitespace or its end
  ("/etc/hosts looks odd" is a prompt; "//..." too, sent without its first slash:
  `prompt_text`). Words are split on whitespace.
* `plan(name, words) -> Plan(action, argv)`; UsageError for an unknown command or words that
  do not fit its usage:
  - "run": `argv` is a lifecycle command line (["--status"], ["--rewind", "--turn", "2"]) the
    session runs as `nagent ARGV` would, with the session's own flags;
  - "set": `argv` holds for the rest of the session (["--model", NAME], ["--mode", "plan"]);
  - "show": /model or /mode without a value: `argv` is the flag whose value is shown;
  - "new": the next prompt runs with --new; `argv` holds the prompt words given with it;
  - "cost": `argv` is ["--status"], of which the session shows the token and cost lines;
  - "help", "exit": argv empty.
* `help_text()`: the /help listing, with the keys of the session.
"""
from collections import namedtuple

from nagent_errors import UsageError

Plan = namedtuple("Plan", "action argv")

COMMANDS = {
    "status": ("/status", "this conversation: size, turns, tokens, cost (nagent --status)"),
    "changes": ("/changes [N]", "what the agent changed, per turn and action, or in turn N (nagent --changes)"),
    "rewind": ("/rewind [N]", "put the files back as before turn N, or the last one (nagent --rewind)"),
    "clear": ("/clear", "start afresh; the old conversation is archived (nagent --clear)"),
    "new": ("/new [PROMPT]", "the next prompt starts a fresh conversation (nagent -n)"),
    "save": ("/save NAME [--force]", "save a copy as NAME (nagent --save-conversation)"),
    "load": ("/load NAME", "archive this conversation, continue from a copy of NAME "
                           "(nagent --load-conversation)"),
    "branch": ("/branch [N]", "archive this conversation, continue from its first N turns "
                              "(nagent --branch-conversation --turn N)"),
    "compact": ("/compact", "start a new window now (nagent --compact)"),
    "cost": ("/cost", "tokens and cost so far (the lines of nagent --status)"),
    "model": ("/model [NAME]", "use model NAME from now on (nagent --model)"),
    "mode": ("/mode [plan|build]", "plan: look, change nothing; build: work (nagent --mode)"),
    "config": ("/config", "the settings in effect and where they come from (nagent --config)"),
    "help": ("/help", "this list"),
    "exit": ("/exit", "leave the session (Ctrl-D at an empty prompt does too)"),
}

KEYS_HELP = ("Enter sends the prompt; Alt-Enter or a line ending in \\ adds a line; a paste "
             "arrives whole. Up/Down walk the history (~/.nagent/history), Tab completes commands, "
             "conversation names and paths. Typing while a run goes queues a message for its next "
             "turn (as nagent --send). Ctrl-C stops a run, or clears the line; Ctrl-D leaves. "
             "//text sends a prompt that starts with /.")

SIMPLE = {"status": ["--status"], "clear": ["--clear"],
          "compact": ["--compact"], "config": ["--config"]}


def parse(entry):
    if not entry.startswith("/"):
        return None
    head = entry[1:].split(None, 1)
    name = head[0] if head and not entry[1:2].isspace() else ""
    if not name or not (name.isascii() and name.isalpha() and name.islower()):
        return None
    return name, entry[1:].split()[1:]


def prompt_text(entry):
    return entry[1:] if entry.startswith("//") else entry


def _usage(name, given):
    return UsageError(f"usage: {COMMANDS[name][0]}", " ".join(given), "/help lists the commands")


def _turn(name, words):
    if not words:
        return []
    if len(words) != 1 or not words[0].isdigit() or int(words[0]) < 1:
        raise _usage(name, words)
    return ["--turn", str(int(words[0]))]


def plan(name, words):
    if name not in COMMANDS:
        raise UsageError("unknown command", "/" + name, "/help lists the commands; //text sends "
                         "a prompt that starts with /")
    if name in SIMPLE or name in ("cost", "help", "exit"):
        if words:
            raise _usage(name, words)
        if name in SIMPLE:
            return Plan("run", SIMPLE[name])
        return Plan(name, ["--status"] if name == "cost" else [])
    if name in ("rewind", "changes"):
        return Plan("run", ["--" + name, *_turn(name, words)])
    if name == "branch":
        return Plan("run", ["--branch-conversation", *_turn(name, words)])
    if name == "new":
        return Plan("new", list(words))
    if name in ("save", "load"):
        force = name == "save" and words[1:] == ["--force"]
        if len(words) != 1 + force:
            raise _usage(name, words)
        flag = "--save-conversation" if name == "save" else "--load-conversation"
        return Plan("run", [flag, words[0]] + (["--force"] if force else []))
    # model, mode: a value for the rest of the session, or show the current one
    if len(words) > 1 or (name == "mode" and words and words[0] not in ("plan", "build")):
        raise _usage(name, words)
    return Plan("set", ["--" + name, words[0]]) if words else Plan("show", ["--" + name])


def help_text():
    width = max(len(usage) for usage, _ in COMMANDS.values())
    lines = [f"  {usage:<{width}}  {summary}" for usage, summary in COMMANDS.values()]
    return "\n".join(["Commands:"] + lines + ["", KEYS_HELP])
