"""How bash reads one word of a command: quoting, escapes and expansions, and the commands
hidden in them (`$(…)`, backquotes, `<(…)`, `${x:-$(…)}`, `$((…))`), for nagent_command_words.

Data contract: `WordReader` is a mixin of nagent_command_words' parser (it uses the parser's
`text`, `pos`, `state`, `via`, `depth` and `nested()`; a nested text gets a parser of the same
class). `word()` returns nagent_command_types.Word or None at a word's end: `static` when no
expansion happens (the value after quote removal: `\\rm`, `'r'm` and `$'\\x72m'` are all `rm`),
`split` when it may become zero or several words (an unquoted expansion, a glob, a brace
list). `~` expands to state.home. Code inside a quoted literal (`'$(rm x)'`) is noted
(state.quoted_code, unless it is later read as a script itself: bash -c, eval), as are
arithmetic, subscript and indirect expansions (state.evaluates), for the
parser's unsure rule. `ParseFail` is raised on text bash would not accept either.
"""
import re

from nagent_command_types import Word

ASSIGN_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\+?=")
ENDS_WORD = " \t\n;&|()<>"


class ParseFail(Exception):
    pass


class WordReader:
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
                self.state.quoted_code.add(value)
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
                type(self)("".join(out), self.state, (self.via + " `…`").strip(), self.depth + 1).parse_all()
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
                    type(self)(text[inner_start:i], self.state, (self.via + " $((…))").strip(),
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
