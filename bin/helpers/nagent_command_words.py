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

from nagent_command_types import Command, Redirect, Script, Word, command_name
from nagent_command_wrappers import EXECUTING_VARIABLES, inner_commands

KEYWORDS = frozenset("if then elif else fi for in do done case esac while until select function "
                     "time coproc { } ! [[ ]]".split())
CLOSERS = frozenset({"then", "elif", "else", "fi", "do", "done", "esac", "}", "in", "]]"})
KEYWORD_RE = re.compile(r"(?:[a-z]+|\{|\}|!|\[\[|\]\])(?=[ \t\n;&|()<>]|$)")
ASSIGN_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\+?=")
REDIR_RE = re.compile(r"(\d*)(&>>|&>|<<<|<<-|<<|<>|<&|>>|>\||>&|<|>)")
DECLARERS = frozenset({"declare", "typeset", "local", "export", "readonly"})
VALUE_SETTERS = frozenset({"read", "mapfile", "readarray", "printf", "getopts", "unset", "let"})
ENDS_WORD = " \t\n;&|()<>"
MAX_DEPTH = 24


class ParseFail(Exception):
    pass


class _State:
    def __init__(self, cwd, home, cdpath):
        self.home, self.cdpath = home, cdpath
        self.cwds = frozenset({os.path.normpath(cwd)} if cwd else {None})
        self.commands, self.unsure = [], []
        self.functions, self.assigned = set(), set()
        self.used_home = self.quoted_code = self.evaluates = False


class _Parser:
    def __init__(self, text, state, via="", depth=0):
        self.text, self.pos, self.state = text, 0, state
        self.via, self.depth = via, depth
        self.piped, self.loop = False, 0
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
        self.command()
        self.loop -= 1

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

    # -- words --------------------------------------------------------------------------
    def word(self):
        text, start = self.text, self.pos
        parts, static, split = [], True, False
        while self.pos < len(text):
            c = text[self.pos]
            if c in ENDS_WORD:
                if c == "(" and ASSIGN_RE.fullmatch(text[start:self.pos]):
                    self.array()
                    static = False
                    continue
                if c in "<>" and text[self.pos + 1:self.pos + 2] == "(":
                    self.pos += 2
                    self.nested(")", (self.via + f" {c}(…)").strip())
                    static = False
                    continue
                break
            if c == "\\":
                nxt = text[self.pos + 1:self.pos + 2]
                self.pos += 2 if nxt else 1
                if nxt != "\n":
                    parts.append(nxt or "\\")
            elif c == "'":
                end = text.find("'", self.pos + 1)
                if end < 0:
                    raise ParseFail("unterminated '")
                parts.append(text[self.pos + 1:end])
                self.pos = end + 1
            elif c == '"':
                value, dynamic = self.double_quoted()
                parts.append(value)
                static = static and not dynamic
            elif c == "$":
                value = self.dollar(quoted=False)
                if value is None:
                    static, split = False, True
                else:
                    parts.append(value)
            elif c == "`":
                self.backquotes()
                static, split = False, True
            elif c in "*?" or (c == "[" and "]" in text[self.pos + 1:self._word_end()]):
                static, split = False, True
                self.pos += 1
            elif c == "{" and self._brace_list():
                static, split = False, True
                self.pos += 1
            elif c == "~" and self.pos == start:
                self.tilde(parts)
                static = static and bool(parts)
            else:
                parts.append(c)
                self.pos += 1
        if self.pos == start:
            return None
        raw = text[start:self.pos]
        if static:
            value = "".join(parts)
            if "$(" in value or "`" in value or "${" in value:
                self.state.quoted_code = True
            return Word(value, True, False, raw)
        return Word(raw, False, split, raw)

    def _word_end(self):
        end = self.pos
        while end < len(self.text) and self.text[end] not in ENDS_WORD:
            end += 1
        return end

    def _brace_list(self):
        inner = self.text[self.pos + 1:self._word_end()]
        close = inner.find("}")
        return close > 0 and ("," in inner[:close] or ".." in inner[:close])

    def tilde(self, parts):
        end = self.pos + 1
        while end < len(self.text) and self.text[end] not in ENDS_WORD + "/":
            end += 1
        if end == self.pos + 1 and self.state.home:
            parts.append(self.state.home)
            self.state.used_home = True
        self.pos = end

    def array(self):
        self.pos += 1
        while True:
            self.skip_newlines()
            if self.char() == ")":
                self.pos += 1
                return
            if self.word() is None:
                raise ParseFail("unterminated array")

    def double_quoted(self):
        """(value, dynamic) of a "…" string starting at self.pos."""
        text, parts, dynamic = self.text, [], False
        self.pos += 1
        while self.pos < len(text):
            c = text[self.pos]
            if c == '"':
                self.pos += 1
                return "".join(parts), dynamic
            if c == "\\":
                nxt = text[self.pos + 1:self.pos + 2]
                if nxt in ("$", "`", '"', "\\", "\n"):
                    parts.append("" if nxt == "\n" else nxt)
                    self.pos += 2
                    continue
                parts.append(c)
                self.pos += 1
            elif c == "$":
                value = self.dollar(quoted=True)
                if value is None:
                    dynamic = True
                else:
                    parts.append(value)
            elif c == "`":
                self.backquotes()
                dynamic = True
            else:
                parts.append(c)
                self.pos += 1
        raise ParseFail('unterminated "')

    def dollar(self, quoted):
        """The literal text of a `$…` at self.pos (past it), or None for an expansion."""
        text, after = self.text, self.text[self.pos + 1:self.pos + 2]
        if after == "'" and not quoted:
            return self.ansi_c()
        if after == '"' and not quoted:
            self.pos += 1
            self.double_quoted()   # translated by the locale at run time
            return None
        if text.startswith("$((", self.pos):
            self.arithmetic(self.pos + 3, command=False)
            return None
        if after == "(":
            self.pos += 2
            self.nested(")", (self.via + " $(…)").strip())
            return None
        if after == "{":
            self.braced()
            return None
        if after and (after.isalnum() or after == "_"):
            end = self.pos + 1
            if after.isdigit():
                end += 1
            else:
                while end < len(text) and (text[end].isalnum() or text[end] == "_"):
                    end += 1
            self.pos = end
            return None
        if after and after in "@*#?-$!":
            self.pos += 2
            return None
        self.pos += 1
        return "$"

    def ansi_c(self):
        text, i, out = self.text, self.pos + 2, []
        while i < len(text):
            c = text[i]
            if c == "'":
                self.pos = i + 1
                value = _ansi_c("".join(out))
                if value is None:
                    self.state.unsure.append("a $'…' string with an escape nagent does not decode")
                    return "\\"
                return value
            if c == "\\" and i + 1 < len(text):
                out.append(text[i:i + 2])
                i += 2
                continue
            out.append(c)
            i += 1
        raise ParseFail("unterminated $'")

    def braced(self):
        text, i, depth = self.text, self.pos + 2, 1
        if text[i:i + 1] == "!" or re.match(r"[^}]*@[PEA]", text[i:]):
            self.state.evaluates = True   # ${!x}, ${x@P}: a name or a prompt from data
        while i < len(text):
            c = text[i]
            if c == "\\":
                i += 2
            elif c == "'":
                end = text.find("'", i + 1)
                if end < 0:
                    raise ParseFail("unterminated '")
                i = end + 1
            elif c in ('"', "$", "`"):
                self.pos = i
                if c == '"':
                    self.double_quoted()
                elif c == "`":
                    self.backquotes()
                elif text[i + 1:i + 2] in ("(", "{"):
                    self.dollar(quoted=True)
                else:
                    self.pos = i + 1
                i = self.pos
            elif c == "[":
                self.state.evaluates = True   # a subscript is arithmetic
                i += 1
            elif c == "}":
                depth -= 1
                i += 1
                if depth == 0:
                    self.pos = i
                    return
            else:
                i += 1
        raise ParseFail("unterminated ${")

    def backquotes(self):
        text, i, out = self.text, self.pos + 1, []
        while i < len(text):
            c = text[i]
            if c == "\\" and text[i + 1:i + 2] in ("$", "`", "\\"):
                out.append(text[i + 1])
                i += 2
                continue
            if c == "`":
                self.pos = i + 1
                _Parser("".join(out), self.state, (self.via + " `…`").strip(), self.depth + 1).parse_all()
                return
            out.append(c)
            i += 1
        raise ParseFail("unterminated `")

    def arithmetic(self, inner_start, command):
        """`((…))` or `$((…))`; a `$((` that bash reads as `$( (…) … )` is parsed as that."""
        text, depth, i = self.text, 2, inner_start
        while i < len(text):
            c = text[i]
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 1:
                    if text[i + 1:i + 2] != ")":
                        break
                    self.state.evaluates = True
                    _Parser(text[inner_start:i], self.state, (self.via + " $((…))").strip(),
                            self.depth + 1).expansions()
                    self.pos = i + 2
                    return
            i += 1
        if command:   # `(( … ) … )`: a subshell inside a subshell
            self.pos = inner_start - 1
            self.nested(")", self.via)
            return
        self.pos = inner_start - 1   # "$(" + "(…": a command substitution
        self.nested(")", (self.via + " $(…)").strip())

    def expansions(self):
        """The command substitutions inside text that is only expanded (a here-document body,
        an arithmetic expression)."""
        text = self.text
        while self.pos < len(text):
            c = text[self.pos]
            if c == "\\":
                self.pos += 2
            elif c == "$":
                self.dollar(quoted=True)
            elif c == "`":
                self.backquotes()
            else:
                self.pos += 1

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

    def _assigned(self, name, word, values):
        self.state.assigned.add(name)
        if name in EXECUTING_VARIABLES:
            value = word.text.partition("=")[2] if word.static else word.raw.partition("=")[2]
            values.append((name, Word(value, word.static, False, value)))

    def emit(self, words, assigns, redirects, values, via=None, open_tail=False, role="run",
             cwds=None):
        if any(isinstance(r, tuple) and not r[2] for r in redirects):
            self.deferred.append(lambda: self.emit(words, assigns, redirects, values, via,
                                                   open_tail, role, cwds))
            return
        via = self.via if via is None else via
        redirects = tuple(r if isinstance(r, Redirect) else
                          Redirect(r[0], r[1], None, r[2][0][0], r[2][0][1]) for r in redirects)
        cwds = self.state.cwds if cwds is None else cwds
        for name, value in values:
            self.script(value, f"{via} {name}=".strip())
        name = command_name(words[0])[0] if words else None
        if words and name is None:
            self.state.unsure.append(f"a command name known only at run time: {words[0].raw}")
        self.settings(name, words)
        kind, inner = inner_commands(words)
        own_role = role if role == "candidate" else ("wrapper" if kind == "wrapper" else "run")
        self.state.commands.append(Command(tuple(words), tuple(assigns), redirects, via, self.piped,
                                           cwds, open_tail, own_role))
        for item in inner:
            inner_via = f"{via} {item.via}".strip()
            if item.kind == "unsure":
                if role != "candidate":
                    self.state.unsure.append(item.reason)
            elif item.kind == "script":
                self.script(item.text, inner_via)
            elif item.kind == "stdin-script":
                self.stdin_script(redirects, inner_via)
            else:
                sub = [Word(w.raw or w.text, False, w.split, w.raw) if item.replace and
                       item.replace in (w.raw or w.text) else w for w in item.words]
                self.emit(sub, list(item.assigns), [], [], inner_via, open_tail or item.open_tail,
                          "candidate" if "candidate" in (role, item.role) else "run",
                          frozenset({None}) if item.chdir else cwds)

    def settings(self, name, words):
        """What a command changes for the rest of the script: variables, the directory, the
        parser's own rules (aliases, extglob)."""
        state = self.state
        args = words[1:]
        if name in DECLARERS or name in VALUE_SETTERS:
            if name in DECLARERS or name in ("printf", "read", "unset", "let"):
                state.evaluates = state.evaluates or any(not w.static for w in args) or \
                    name in ("let", "printf", "read", "unset")
            for word in args:
                match = ASSIGN_RE.match(word.raw)
                if match:
                    self._assigned(match.group(1), word, [])
                    if match.group(1) in EXECUTING_VARIABLES:
                        value = word.text.partition("=")[2] if word.static else word.raw
                        self.script(Word(value, word.static, False, value), f"{name} {match.group(1)}=")
                elif word.static and word.text.isidentifier():
                    state.assigned.add(word.text)
        elif name == "shopt" and any(not w.static or w.text in ("expand_aliases", "extglob")
                                     for w in args):
            state.unsure.append("shopt changes how bash reads the rest of the script")
        elif name == "enable":
            state.unsure.append("enable changes which builtins run")
        elif name in ("test", "[") and any(w.static and w.text == "-v" for w in args):
            state.evaluates = True
        elif name in ("cd", "pushd", "popd"):
            self.change_directory(name, args)

    def change_directory(self, name, args):
        state = self.state
        targets = [w for w in args if not (w.static and w.text.startswith("-") and w.text != "-")]
        target = targets[0] if targets else Word(state.home or "", bool(state.home))
        text = target.text
        if name != "cd" or self.loop or not target.static or not text or text == "-" or (
                state.cdpath and not text.startswith(("/", "./", "../")) and text not in (".", "..")):
            state.cwds = state.cwds | {None}
            return
        state.cwds = state.cwds | {os.path.normpath(os.path.join(cwd, text))
                                   for cwd in state.cwds if cwd is not None}

    def script(self, word, via):
        if not word.static:
            self.state.unsure.append(f"{via} of a string known only at run time".strip())
            return
        sub = _Parser(word.text, self.state, via, self.depth + 1)
        sub.piped = False
        sub.parse_all()

    def stdin_script(self, redirects, via):
        source = [r for r in redirects if r.fd in ("", "0") and r.op in ("<", "<<", "<<-", "<<<",
                                                                          "<>")]
        if source:
            last = source[-1]
            if last.op in ("<<", "<<-"):
                if last.dynamic:
                    self.state.unsure.append(f"{via} reads an expanded here-document")
                else:
                    self.script(Word(last.body or ""), f"{via} <<here-document")
            elif last.op == "<<<":
                self.script(last.target, f"{via} <<<")
            return
        if self.piped:
            self.state.unsure.append(f"{via} runs a script it reads from a pipe")


def _ansi_c(body):
    """The value of a $'…' body, or None for an escape not decoded here (\\c, \\u beyond)."""
    simple = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b",
              "f": "\f", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?"}
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c != "\\" or i + 1 >= len(body):
            out.append(c)
            i += 1
            continue
        nxt = body[i + 1]
        if nxt in simple:
            out.append(simple[nxt])
            i += 2
            continue
        match = (re.match(r"x([0-9a-fA-F]{1,2})", body[i + 1:]) or
                 re.match(r"u([0-9a-fA-F]{1,4})", body[i + 1:]) or
                 re.match(r"U([0-9a-fA-F]{1,8})", body[i + 1:]))
        if match:
            out.append(chr(min(int(match.group(1), 16), 0x10FFFF)))
            i += 1 + len(match.group())
            continue
        match = re.match(r"[0-7]{1,3}", body[i + 1:])
        if match:
            out.append(chr(int(match.group(), 8) & 0xFF))
            i += 1 + len(match.group())
            continue
        return None
    return "".join(out)


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


def parse_script(text, cwd, home=None, cdpath=False):
    state = _parse(text, cwd, home, cdpath)
    if state.used_home and "HOME" in state.assigned:   # `~` is whatever HOME was set to
        state = _parse(text, cwd, None, cdpath)
    if state.quoted_code and state.evaluates:
        state.unsure.append("code in a quoted string where the script evaluates arithmetic, "
                            "subscripts or names (bash may run it)")
    functions = frozenset(state.functions)
    commands = tuple(Command(c.words, c.assigns, c.redirects, c.via, c.piped, c.cwds, c.open_tail,
                             c.role, function=c.name in functions) for c in state.commands)
    return Script(commands, tuple(dict.fromkeys(state.unsure)), functions,
                  frozenset(state.assigned))
