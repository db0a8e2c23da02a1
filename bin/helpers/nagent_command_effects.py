"""What a simple command means for the rest of a script, for nagent_command_words: the commands
it runs through wrappers (nagent_command_wrappers), the variables it sets, the directory it
moves to, the parser settings it changes.

Data contract: `CommandEffects` is a mixin of nagent_command_words' parser (it uses `state`,
`via`, `depth`, `piped`, `loop`, `deferred`; a nested text gets a parser of the same class).
`emit(words, assigns, redirects, values, …)` records one Command (deferred until its
here-documents are read) and recurses into what it runs: argv wrappers as commands, strings
(`bash -c`, `eval`, `trap`, `GIT_PAGER=…`) parsed as scripts, a shell's stdin script from a
here-document or here-string; a dynamic string or a script from a pipe is unsure. `settings()`
follows variables (HOME, PATH), `cd` (state.cwds, a growing set; None: unknown) and what makes
the rest unreadable (`shopt -s expand_aliases|extglob`, `enable`).
"""
import os
import re

from nagent_command_types import Command, Redirect, Word, command_name
from nagent_command_wrappers import EXECUTING_VARIABLES, inner_commands

ASSIGN_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)(\[[^\]]*\])?\+?=")
POSITIONAL_RE = re.compile(r'^"?\$\{?([@*]|\d+)(:[^}]*)?\}?"?$')   # "$@", $1, "${@:2}"
DECLARERS = frozenset({"declare", "typeset", "local", "export", "readonly"})
VALUE_SETTERS = frozenset({"read", "mapfile", "readarray", "printf", "getopts", "unset", "let"})


class CommandEffects:
    def _assigned(self, name, word, values):
        self.state.assigned.add(name)
        if name in EXECUTING_VARIABLES:
            value = word.text.partition("=")[2] if word.static else word.raw.partition("=")[2]
            values.append((name, Word(value, word.static, False, value)))

    def emit(self, words, assigns, redirects, values, via=None, open_tail=False, role="run",
             cwds=None, quiet=False):
        if any(isinstance(r, tuple) and not r[2] for r in redirects):
            self.deferred.append(lambda: self.emit(words, assigns, redirects, values, via,
                                                   open_tail, role, cwds, quiet))
            return
        via = self.via if via is None else via
        redirects = tuple(r if isinstance(r, Redirect) else
                          Redirect(r[0], r[1], None, r[2][0][0], r[2][0][1]) for r in redirects)
        cwds = self.state.cwds if cwds is None else cwds
        for name, value in values:
            self.script(value, f"{via} {name}=".strip())
        name = command_name(words[0])[0] if words else None
        if words and name is None and POSITIONAL_RE.match(words[0].raw or ""):
            if self.function and not self.state.sets_positionals:
                self.state.runs_args.add(self.function)   # its calls say what runs
            elif self.state.sets_positionals:
                self.state.unsure.append(f"{words[0].raw} runs what `set --` put there")
            # (outside a function nagent passed the script no arguments: nothing runs)
            words, name = [], None
            if not (redirects or assigns):
                return
        if words and name is None and not quiet:   # (a later candidate: likely an argument)
            self.state.unsure.append(f"a command name known only at run time: {words[0].raw}")
        self.settings(name, words)
        kind, inner = inner_commands(words)
        own_role = role if role == "candidate" else ("wrapper" if kind == "wrapper" else "run")
        command = Command(tuple(words), tuple(assigns), redirects, via, self.piped, cwds, open_tail,
                          own_role)
        self.state.commands.append(command)
        if self.function:
            self.state.owner[id(command)] = self.function
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
                          frozenset({None}) if item.chdir else cwds, quiet=not item.first)

    def settings(self, name, words):
        """What a command changes for the rest of the script: variables, the directory, the
        parser's own rules (aliases, extglob)."""
        state = self.state
        args = words[1:]
        if name in DECLARERS or name in VALUE_SETTERS:
            # Names with subscripts, and values from data, are evaluated: `a[$(cmd)]` runs.
            state.evaluates = state.evaluates or name == "let" or any(
                not w.static or "[" in w.text for w in args) or (
                name == "printf" and any(w.static and w.text.startswith("-v") for w in args))
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
        elif name == "set" and any(w.static and (w.text == "--" or not w.text[:1] in "-+")
                                   or not w.static for w in args):
            state.sets_positionals = True
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
        self.state.quoted_code.discard(word.text)   # read as a script: its code is seen
        sub = type(self)(word.text, self.state, via, self.depth + 1)
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
