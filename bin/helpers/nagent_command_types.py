"""The plain data a shell script is parsed into, shared by the parser, the wrappers table, the
permission rules and the destructive-command guard.

Data contract:
- `Word(text, static, split, raw)`: one word of a command. `static`: its value is known (no
  expansion happens): `text` is that value after quote removal. Otherwise `text` is the source
  text and the value is only known at run time. `split`: it may become zero or several words
  (an unquoted expansion, a glob, a brace list).
- `Redirect(fd, op, target, body)`: `op` one of < > >> >| <> <& >& &> &>> << <<- <<<; `target` a
  Word (None for a here-document); `body` the here-document's text, or None; `dynamic` True
  when that body is expanded at run time (an unquoted delimiter with `$` or backquotes in it).
- `Command`: one simple command as bash would run it: `words` (Words, the command name first;
  empty for a bare redirection or assignment), `assigns` (variable names assigned in front of
  it: `FOO=1 cmd`), `redirects`, `via` (how it is reached: "" at the top, else a chain such as
  "$(…)", "bash -c", "sudo", "find -exec"), `piped` (its stdin is a pipe), `cwds` (frozenset of
  the directories it may run in; None in it: unknown), `open_tail` (the caller appends more
  words at run time: xargs, find -exec … +), `role` ("run"; "wrapper": a command that only
  runs another one, checked through that one; "candidate": words that may or may not be a
  command, from a launcher whose options nagent cannot parse exactly), `function` (its name
  is a function the script defines).
- `Script(commands, unsure, functions, assigned)`: every Command, the reasons it cannot be
  parsed with confidence (empty when it can), the names of the functions it defines and of
  the variables it sets (PATH among them changes what every later command name means).
- `command_name(word) -> (name, certain)`: the name a rule matches: the word itself, or the
  last component of a path; `certain` False for a path outside the system directories (a
  `./git` is not git) and for a word whose value is not static (name None).
"""
from dataclasses import dataclass, field

SYSTEM_DIRS = ("/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin", "/usr/local/sbin")


@dataclass(frozen=True)
class Word:
    text: str
    static: bool = True
    split: bool = False
    raw: str = ""


@dataclass(frozen=True)
class Redirect:
    fd: str
    op: str
    target: "Word | None" = None
    body: "str | None" = None
    dynamic: bool = False


@dataclass(frozen=True)
class Command:
    words: tuple
    assigns: tuple = ()
    redirects: tuple = ()
    via: str = ""
    piped: bool = False
    cwds: frozenset = field(default_factory=frozenset)
    open_tail: bool = False
    role: str = "run"
    function: bool = False

    @property
    def name(self):
        return command_name(self.words[0])[0] if self.words else None

    def text(self):
        """The command as one line, for messages (the source text of dynamic words)."""
        return " ".join(shown_word(word) for word in self.words)


@dataclass(frozen=True)
class Script:
    commands: tuple
    unsure: tuple = ()
    functions: frozenset = frozenset()
    assigned: frozenset = frozenset()


def command_name(word):
    if not word.static:
        return None, False
    text = word.text
    if "/" not in text:
        return text, True
    head, _, base = text.rpartition("/")
    return base, head in SYSTEM_DIRS


def shown_word(word):
    if not word.static:
        return word.raw or word.text
    text = word.text
    if text and all(ch.isalnum() or ch in "-_./=:,+@%^~" for ch in text) and text[0] != "~":
        return text
    return "'" + text.replace("'", "'\\''") + "'"
