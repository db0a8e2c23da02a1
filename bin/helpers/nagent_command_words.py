"""Shell command text as every simple command bash may run from it, for the permission rules
and the destructive-command guard.

Data contract: `parse_script(text, cwd, home=None, cdpath=False) -> Script`
(nagent_command_types). `text` is what nagent hands to `/bin/bash FILE`; `cwd` the directory
it starts in; `home` the value `~` expands to; `cdpath` whether CDPATH is set (then `cd name`
may go elsewhere). Every command is listed, wherever it sits: lists (`;`, `&&`, `||`, `&`,
newlines), pipelines, subshells, groups, if/while/until/for/select/case bodies, function
bodies (as if called), `$(…)`, backquotes, process substitutions, arithmetic, `${x:-$(…)}`,
unquoted here-documents, and what wrappers run (nagent_command_wrappers: sudo, env, xargs,
find -exec, bash -c, eval, trap …), here-documents and here-strings fed to a shell
included. A variable that holds a command for another program (GIT_PAGER=…, export
GIT_EXTERNAL_DIFF=…) is parsed as a script too.
A function whose body runs its arguments (`run() { echo "+ $*"; "$@"; }`) is a launcher: the
words of each of its calls are candidate commands (nagent_command_wrappers.candidates); "$@" as
a command outside a function runs nothing (nagent runs the script without arguments) unless the
script sets them (`set -- …`).
Each command's `cwds` follows `cd`/`pushd`/`popd` in text order as a set of possible
directories (a `cd` adds its target, never removes the old one; inside a loop or function,
with a dynamic target, or through CDPATH the directory becomes unknown: None).
`Script.unsure` lists why the text cannot be read with confidence: a syntax this parser does
not follow, a command name known only at run time (`$cmd`, `{rm,-rf}`, `/bin/r?`), code from a
pipe or a dynamic string (`curl … | sh`, `eval "$x"`), `shopt -s expand_aliases|extglob`,
`enable`, a NUL byte, code inside a quoted string where the script also evaluates arithmetic or
subscripts (bash runs `$(…)` found in a variable's value there). Nothing here runs anything.
"""
import os
import re

from nagent_command_effects import POSITIONAL_RE, CommandEffects
from nagent_command_quoting import ASSIGN_RE, ParseFail, WordReader
from nagent_command_types import Command, Redirect, Script
from nagent_command_wrappers import candidates

KEYWORDS = frozenset("if then elif else fi for in do done case esac while until select function "
                     "time coproc { } ! [[ ]]".split())
CLOSERS = frozenset({"then", "elif", "else", "fi", "do", "done", "esac", "}", "in", "]]"})
KEYWORD_RE = re.compile(r"(?:[a-z]+|\{|\}|!|\[\[|\]\])(?=[ \t\n;&|()<>]|$)")
REDIR_RE = re.compile(r"(\d*)(&>>|&>|<<<|<<-|<<|<>|<&|>>|>\||>&|<|>)")
MAX_DEPTH = 24


class _State:
    def __init__(self, cwd, home, cdpath):
        self.home, self.cdpath = home, cdpath
        self.cwds = frozenset({os.path.normpath(cwd)} if cwd else {None})
        self.commands, self.unsure = [], []
        self.functions, self.assigned = set(), set()
        self.used_home = self.evaluates = False
        self.quoted_code = set()   # quoted literals holding $( or `: data bash may still run
        self.runs_args = set()     # functions that run their arguments ("$@" as a command)
        self.owner = {}            # id(Command) -> the function whose body holds it
        self.sets_positionals = False   # `set -- …`: "$@" is no longer the caller's words


class _Parser(WordReader, CommandEffects):
    def __init__(self, text, state, via="", depth=0):
        self.text, self.pos, self.state = text, 0, state
        self.via, self.depth = via, depth
        self.piped, self.loop, self.function = False, 0, None
        self.heredocs, self.deferred = [], []
        if depth > MAX_DEPTH:
            raise ParseFail("nested too deeply")

    # -- characters ---------------------------------------------------------------------
    def at(self, text):
        return self.text.startswith(text, self.pos)

    def char(self):
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def skip_blanks(self):
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            if c in " \t":
                self.pos += 1
            elif text.startswith("\\\n", self.pos):
                self.pos += 2
            elif c == "#":
                end = text.find("\n", self.pos)
                self.pos = len(text) if end < 0 else end
            else:
                break

    def skip_newlines(self):
        while True:
            self.skip_blanks()
            if self.char() != "\n":
                return
            self.pos += 1
            if self.heredocs:
                self.read_heredocs()

    def keyword(self):
        match = KEYWORD_RE.match(self.text, self.pos)
        return match.group() if match and match.group() in KEYWORDS else None

    def expect(self, word):
        self.skip_newlines() if word != ")" else self.skip_blanks()
        if (self.keyword() if word != ")" else self.char()) != word:
            raise ParseFail(f"expected {word}")
        self.pos += len(word)

    # -- lists --------------------------------------------------------------------------
    def parse_all(self):
        if self.compound_list(frozenset()) != "EOF":
            raise ParseFail(f"unexpected {self.char()!r}")
        self.flush()

    def flush(self):
        if self.heredocs:   # a here-document cut off by the end of the text: empty body
            for _delim, _strip, _quoted, slot in self.heredocs:
                slot.append(("", False))
            self.heredocs = []
        deferred, self.deferred = self.deferred, []
        for build in deferred:
            build()

    def compound_list(self, terms):
        while True:
            self.skip_newlines()
            if self.pos >= len(self.text):
                return "EOF"
            word, c = self.keyword(), self.char()
            if word in terms:
                return word
            if c == ")" and ")" in terms:
                return ")"
            if self.at(";;") or self.at(";&"):
                if ";;" in terms:
                    return ";;"
                raise ParseFail("unexpected ;;")
            if word in CLOSERS or c == ")":
                raise ParseFail(f"unexpected {word or c}")
            self.and_or()
            self.skip_blanks()
            c = self.char()
            if c == ";" and not (self.at(";;") or self.at(";&")):
                self.pos += 1
            elif c == "&" and not self.at("&&"):
                self.pos += 1
            elif c not in ("", "\n", ")", ";"):
                raise ParseFail(f"unexpected {c!r}")

    def and_or(self):
        self.pipeline()
        while True:
            self.skip_blanks()
            if not (self.at("&&") or self.at("||")):
                return
            self.pos += 2
            self.skip_newlines()
            self.pipeline()

    def pipeline(self):
        self.skip_blanks()
        while self.keyword() in ("!", "time"):
            self.pos += len(self.keyword())
            self.skip_blanks()
            if self.at("-p") and self.text[self.pos + 2:self.pos + 3] in ("", " ", "\t", "\n"):
                self.pos += 2
                self.skip_blanks()
        self.command()
        while True:
            self.skip_blanks()
            if self.at("|&") or (self.char() == "|" and not self.at("||")):
                self.pos += 2 if self.at("|&") else 1
                self.skip_newlines()
                before, self.piped = self.piped, True
                self.command()
                self.piped = before
            else:
                return

    # -- compound commands --------------------------------------------------------------
    def command(self):
        self.skip_blanks()
        word = self.keyword()
        if self.at("(("):
            self.arithmetic(self.pos + 2, command=True)
        elif self.char() == "(":
            self.pos += 1
            self.nested(")", self.via)
        elif word == "{":
            self.pos += 1
            if self.compound_list(frozenset({"}"})) != "}":
                raise ParseFail("expected }")
            self.pos += 1
        elif word == "if":
            self.if_clause()
        elif word in ("while", "until"):
            self.pos += len(word)
            self.loop += 1
            self.block("do")
            self.block("done")
            self.loop -= 1
        elif word in ("for", "select"):
            self.for_clause(word)
        elif word == "case":
            self.case_clause()
        elif word == "function":
            self.pos += len(word)
            self.skip_blanks()
            name = self.word()
            if name is None:
                raise ParseFail("function without a name")
            self.skip_blanks()
            if self.char() == "(":
                self.pos += 1
                self.expect(")")
            self.function_body(name.text)
            return
        elif word == "[[":
            self.conditional()
        elif word == "coproc":
            self.pos += len(word)
            self.command()
            return
        elif word in CLOSERS:
            raise ParseFail(f"unexpected {word}")
        else:
            self.simple_command()
            return
        self.trailing_redirects()

    def block(self, end):
        if self.compound_list(frozenset({end})) != end:
            raise ParseFail(f"expected {end}")
        self.pos += len(end)

    def if_clause(self):
        self.pos += 2
        self.block("then")
        while True:
            end = self.compound_list(frozenset({"elif", "else", "fi"}))
            if end == "elif":
                self.pos += 4
                self.block("then")
                continue
            if end == "else":
                self.pos += 4
                end = self.compound_list(frozenset({"fi"}))
            if end != "fi":
                raise ParseFail("expected fi")
            self.pos += 2
            return

    def for_clause(self, word):
        self.pos += len(word)
        self.skip_blanks()
        if self.at("(("):
            self.arithmetic(self.pos + 2, command=True)
        else:
            name = self.word()
            if name is None or not name.static:
                raise ParseFail(f"{word} without a variable")
            self.state.assigned.add(name.text)
            self.skip_newlines()
            if self.keyword() == "in":
                self.pos += 2
                while True:
                    self.skip_blanks()
                    if self.char() in ("", "\n", ";"):
                        break
                    if self.word() is None:
                        raise ParseFail(f"unexpected {self.char()!r}")
        self.skip_blanks()
        if self.char() == ";":
            self.pos += 1
        self.skip_newlines()
        self.loop += 1
        if self.keyword() == "{":
            self.command()
        else:
            self.expect("do")
            self.block("done")
        self.loop -= 1

    def case_clause(self):
        self.pos += 4
        self.skip_blanks()
        if self.word() is None:
            raise ParseFail("case without a word")
        self.expect("in")
        while True:
            self.skip_newlines()
            if self.keyword() == "esac":
                self.pos += 4
                return
            if self.char() == "(":
                self.pos += 1
            while True:
                self.skip_blanks()
                if self.word() is None:
                    raise ParseFail("case pattern expected")
                self.skip_blanks()
                if self.char() == "|":
                    self.pos += 1
                    continue
                self.expect(")")
                break
            end = self.compound_list(frozenset({";;", "esac"}))
            if end == ";;":
                self.pos += 3 if self.at(";;&") else 2
            elif end != "esac":
                raise ParseFail("expected esac")

    def conditional(self):
        self.pos += 2
        self.state.evaluates = True
        while True:
            self.skip_newlines()
            if self.at("]]") and self.text[self.pos + 2:self.pos + 3] in ("", " ", "\t", "\n", ";",
                                                                          "&", "|", ")"):
                self.pos += 2
                return
            if self.pos >= len(self.text):
                raise ParseFail("expected ]]")
            if self.at("&&") or self.at("||"):
                self.pos += 2
            elif self.char() in "()!<>|&":
                self.pos += 1
            elif self.word() is None:
                raise ParseFail(f"unexpected {self.char()!r}")

    def function_body(self, name):
        self.state.functions.add(name)
        self.skip_newlines()
        self.loop += 1
        outer, self.function = self.function, name
        self.command()
        self.loop, self.function = self.loop - 1, outer

    def nested(self, closer, via):
        before = self.via
        self.via = via
        if self.compound_list(frozenset({closer})) != closer:
            raise ParseFail(f"expected {closer}")
        self.pos += 1
        self.via = before

    # -- redirections and here-documents ------------------------------------------------
    def redirect(self):
        match = REDIR_RE.match(self.text, self.pos)
        if not match:
            return None
        fd, op = match.groups()
        if op in ("<", ">") and self.text[match.end():match.end() + 1] == "(":
            return None   # a process substitution
        self.pos = match.end()
        self.skip_blanks()
        target = self.word()
        if target is None:
            raise ParseFail(f"{op} without a target")
        if op in ("<<", "<<-"):
            quoted = any(ch in target.raw for ch in "'\"\\")
            slot = []
            self.heredocs.append((target.text if target.static else target.raw, op == "<<-",
                                  quoted, slot))
            return (fd, op, slot)
        return Redirect(fd, op, target)

    def trailing_redirects(self):
        found = []
        while True:
            self.skip_blanks()
            redirect = self.redirect()
            if redirect is None:
                break
            found.append(redirect)
        if found:
            self.emit([], [], found, [])

    def read_heredocs(self):
        pending, self.heredocs = self.heredocs, []
        text = self.text
        for delim, strip, quoted, slot in pending:
            lines = []
            while self.pos < len(text):
                end = text.find("\n", self.pos)
                line = text[self.pos:] if end < 0 else text[self.pos:end]
                self.pos = len(text) if end < 0 else end + 1
                if strip:
                    line = line.lstrip("\t")
                if line == delim:
                    break
                lines.append(line)
            body = "".join(line + "\n" for line in lines)
            dynamic = not quoted and ("$" in body or "`" in body)
            if dynamic:
                _Parser(body, self.state, (self.via + " <<here-document").strip(), self.depth + 1).expansions()
            slot.append((body, dynamic))
        deferred, self.deferred = self.deferred, []
        for build in deferred:
            build()

    # -- simple commands ----------------------------------------------------------------
    def simple_command(self):
        words, assigns, redirects, values = [], [], [], []
        while True:
            self.skip_blanks()
            redirect = self.redirect()
            if redirect is not None:
                redirects.append(redirect)
                continue
            c = self.char()
            if c in ("", "\n", ";", "&", "|", ")"):
                break
            if c == "(":
                if len(words) == 1 and not assigns and not redirects and words[0].static:
                    self.pos += 1
                    self.expect(")")
                    self.function_body(words[0].text)
                    return
                raise ParseFail("unexpected (")
            word = self.word()
            if word is None:
                raise ParseFail(f"unexpected {c!r}")
            match = ASSIGN_RE.match(word.raw) if not words else None
            if match:
                assigns.append(match.group(1))
                self._assigned(match.group(1), word, values)
                continue
            words.append(word)
        if words or assigns or redirects:
            self.emit(words, assigns, redirects, values)

def _parse(text, cwd, home, cdpath):
    state = _State(cwd, home, cdpath)
    if "\x00" in text:
        state.unsure.append("a NUL byte in the script")
    try:
        _Parser(text, state).parse_all()
    except ParseFail as problem:
        state.unsure.append(f"cannot parse: {problem}")
    except RecursionError:
        state.unsure.append("cannot parse: nested too deeply")
    return state


def _calls_of_runners(state):
    """A function that runs its arguments (`run() { "$@"; }`) is a launcher: its calls' words
    are candidate commands; a runner called with "$@" makes its caller one too."""
    expanded, changed = set(), True
    while changed:
        changed = False
        for command in list(state.commands):
            if command.name not in state.runs_args or id(command) in expanded:
                continue
            expanded.add(id(command))
            parser = _Parser("", state, f"{command.via} {command.name}()".strip())
            for item in candidates(command.words, 1, command.name):
                if POSITIONAL_RE.match(item.words[0].raw or ""):
                    owner = state.owner.get(id(command))
                    if owner and owner not in state.runs_args:
                        state.runs_args.add(owner)
                        changed = True
                    elif not owner:
                        state.unsure.append(f"{command.name} runs words known only at run time")
                    continue
                parser.emit(list(item.words), [], [], [], role="candidate", cwds=command.cwds,
                            quiet=not item.first)


def parse_script(text, cwd, home=None, cdpath=False):
    state = _parse(text, cwd, home, cdpath)
    if state.used_home and "HOME" in state.assigned:   # `~` is whatever HOME was set to
        state = _parse(text, cwd, None, cdpath)
    _calls_of_runners(state)
    if state.quoted_code and state.evaluates:
        state.unsure.append("code in a quoted string where the script evaluates arithmetic, "
                            "subscripts or names (bash may run it)")
    functions = frozenset(state.functions)
    commands = tuple(Command(c.words, c.assigns, c.redirects, c.via, c.piped, c.cwds, c.open_tail,
                             c.role, function=c.name in functions) for c in state.commands)
    return Script(commands, tuple(dict.fromkeys(state.unsure)), functions,
                  frozenset(state.assigned))
