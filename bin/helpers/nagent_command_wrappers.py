"""Commands that run other commands: what `sudo rm -rf x`, `xargs rm`, `find -exec`, `bash -c`,
`eval` and their kin actually run, read from a simple command's words.

Data contract: `inner_commands(words) -> (role, [Inner])` for the words of one simple command
(nagent_command_types.Word, the name first). `role` is "wrapper" when the command only runs
the inner one and changes nothing else (timeout, nice, env, command, exec, xargs ...: a rule
then judges the inner command), else "run". Each `Inner` is one of:
- kind "argv": `words` run as a command; `via` names the wrapper; `open_tail` when the wrapper
  appends words at run time (xargs, find -exec … +); `replace` a string the wrapper replaces
  at run time (xargs -I, find's {}): words holding it are not known; `assigns` variables the
  wrapper sets for it (env NAME=VALUE); `chdir` when it runs in another directory; `role`
  "run", or "candidate" when the wrapper's options could not be parsed exactly and these
  words may or may not be the command it runs (`first`: the likeliest of them).
- kind "script": `text` (a Word) is shell code the wrapper runs (bash -c, eval, sudo -s,
  su -c, ssh's remote command, trap, watch, git -c alias.x=!…, an environment variable such as
  GIT_PAGER that holds a command).
- kind "stdin-script": a shell that reads its script from stdin (the caller looks at the
  here-document or pipe feeding it).
- kind "unsure": `reason` why what runs cannot be known (dynamic options, another shell's
  syntax, a script read from /dev/stdin or a process substitution).
Interpreter code (`python -c`, `perl -e`, `node -e`) and script files (`bash x.sh`, `make`)
are commands like any other: what they do inside is not shell text.
"""
import shlex
from dataclasses import dataclass

from nagent_command_types import Word, command_name

SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "rbash", "yash", "posh"})
OTHER_SHELLS = frozenset({"fish", "tcsh", "csh", "xonsh", "nu", "pwsh", "elvish"})
# Variables whose value is a command some program runs (git, less, man, ssh, bash itself).
EXECUTING_VARIABLES = frozenset({
    "GIT_EXTERNAL_DIFF", "GIT_PAGER", "PAGER", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EDITOR",
    "EDITOR", "VISUAL", "GIT_SEQUENCE_EDITOR", "GIT_ASKPASS", "SSH_ASKPASS", "LESSOPEN",
    "LESSCLOSE", "MANPAGER", "BROWSER", "PROMPT_COMMAND", "BASH_ENV", "ENV", "GIT_PROXY_COMMAND"})
# git -c keys whose value git runs as a shell command.
GIT_EXECUTING_KEYS = ("core.pager", "core.editor", "core.sshcommand", "core.fsmonitor",
                      "core.askpass", "diff.external", "sequence.editor", "credential.helper",
                      "gpg.program", "interactive.difffilter", "uploadpack.packobjectshook")
GIT_EXECUTING_SUFFIXES = (".command", ".cmd", ".driver", ".clean", ".smudge", ".process",
                          ".textconv", ".helper", ".program")
STDIN_PATHS = ("/dev/stdin", "/dev/fd/", "/proc/self/fd/", "/proc/thread-self/fd/")
MAX_CANDIDATES = 3


@dataclass(frozen=True)
class Spec:
    """How a wrapper's options read: short flags, short options taking a value, long ones,
    options after which nothing runs (`stop`), how many positional words precede the command."""
    flags: str = ""
    values: str = ""
    long_flags: tuple = ()
    long_values: tuple = ()
    stop: str = ""
    shell: str = ""           # sudo -s / -i: the rest is a shell command line
    positionals: int = 0
    numeric: bool = False     # nice -10
    wrapper: bool = True      # only runs the inner command


PRECISE = {
    "command": Spec(flags="p", stop="vV"),
    "builtin": Spec(),
    "exec": Spec(flags="cl", values="a"),
    "nice": Spec(values="n", long_values=("adjustment",), numeric=True),
    "nohup": Spec(),
    "time": Spec(flags="pvqa", values="fo", long_flags=("portability", "verbose", "quiet",
                                                        "append"),
                 long_values=("format", "output")),
    "timeout": Spec(flags="v", values="sk", long_flags=("preserve-status", "foreground",
                                                        "verbose"),
                    long_values=("signal", "kill-after"), positionals=1),
    "stdbuf": Spec(values="ioe", long_values=("input", "output", "error")),
    "ionice": Spec(flags="t", values="cnpPu", long_flags=("ignore",),
                   long_values=("class", "classdata", "pid", "pgid", "uid")),
    "chrt": Spec(flags="bdfiorRav", values="TPD", stop="p", positionals=1),
    "taskset": Spec(flags="ac", stop="p", positionals=1),
    "setsid": Spec(flags="cfw", long_flags=("ctty", "fork", "wait")),
    "unbuffer": Spec(flags="p"),
    "busybox": Spec(),
    "chroot": Spec(long_values=("userspec", "groups"), long_flags=("skip-chdir",), positionals=1,
                   wrapper=False),
    "sudo": Spec(flags="AbEHnPSBk", values="ugCDhprtTUR", stop="elvVKL", shell="si",
                 long_flags=("preserve-env", "non-interactive", "background", "login", "shell",
                             "stdin", "set-home", "askpass", "bell"),
                 long_values=("user", "group", "close-from", "chdir", "host", "prompt", "role",
                              "type", "command-timeout", "other-user", "chroot"),
                 wrapper=False),
    "doas": Spec(flags="nL", values="uC", shell="s", wrapper=False),
}
FUZZY = frozenset({"nsenter", "unshare", "strace", "ltrace", "valgrind", "prlimit", "systemd-run",
                   "firejail", "faketime", "torsocks", "proxychains", "proxychains4", "xvfb-run",
                   "dbus-run-session", "fakeroot", "fakechroot", "catchsegv", "pkexec", "npx",
                   "bunx", "parallel", "sem", "nix-shell", "tsp", "at", "batch"})
LAUNCHERS = {"uv": "run", "poetry": "run", "pipenv": "run", "pdm": "run", "hatch": "run",
             "conda": "run", "bundle": "exec", "pnpm": ("exec", "dlx"), "npm": "exec",
             "yarn": ("exec", "dlx"), "rye": "run", "pixi": "run", "mise": "exec", "asdf": "exec",
             "direnv": "exec", "opam": "exec", "stack": "exec", "cabal": "exec"}
XARGS = Spec(flags="0rtpxo", values="adEILnPs",
             long_flags=("null", "no-run-if-empty", "verbose", "interactive", "exit", "open-tty",
                         "show-limits"),
             long_values=("arg-file", "delimiter", "eof", "max-lines", "max-args", "max-procs",
                          "max-chars", "process-slot-var"))
ENV = Spec(flags="i0v", values="uCS", long_flags=("ignore-environment", "null", "debug",
                                                  "list-signal-handling"),
           long_values=("unset", "chdir", "split-string", "block-signal", "default-signal",
                        "ignore-signal"))
SSH = Spec(flags="46AaCfGgKkMNnqsTtVvXxYy", values="BbcDEeFIiJLlmOoPpQRSWw", wrapper=False)
FLOCK = Spec(flags="sxunoFh", values="wE", long_flags=("shared", "exclusive", "unlock", "nonblock",
                                                       "close", "no-fork", "verbose"),
             long_values=("timeout", "conflict-exit-code"), wrapper=False)
WATCH = Spec(flags="bcCdegptxrw", values="nq", long_flags=("beep", "color", "no-color",
                                                           "differences", "errexit", "chgexit",
                                                           "precise", "no-title", "exec",
                                                           "no-wrap", "no-rerun"),
             long_values=("interval", "equexit"), wrapper=False)


@dataclass(frozen=True)
class Inner:
    kind: str
    words: tuple = ()
    text: "Word | None" = None
    via: str = ""
    open_tail: bool = False
    replace: str = ""
    assigns: tuple = ()
    chdir: bool = False
    role: str = "run"
    reason: str = ""
    first: bool = True        # the first candidate: the likeliest command of its launcher


def unsure(reason):
    return Inner("unsure", reason=reason)


def _long_name(text):
    return text[2:].partition("=")


def skip_options(words, spec, start=1):
    """(index of the first word after the options and positionals, shell flag seen) — index
    -1 when a `stop` option means nothing runs, None when an option is not known."""
    i, shell = start, False
    while i < len(words):
        word = words[i]
        if not word.static:
            return None, shell
        text = word.text
        if text == "--":
            i += 1
            break
        if text.startswith("--") and len(text) > 2:
            name, eq, _ = _long_name(text)
            if name in spec.long_values:
                i += 1 if eq else 2
            elif name in spec.long_flags:
                shell = shell or name in ("shell", "login") and bool(spec.shell)
                i += 1
            else:
                return None, shell
            continue
        if text.startswith("-") and len(text) > 1:
            if spec.numeric and text[1:].isdigit():
                i += 1
                continue
            step = 1
            for j, letter in enumerate(text[1:], 1):
                if letter in spec.stop:
                    return -1, shell
                if letter in spec.shell:
                    shell = True
                elif letter in spec.values:
                    step = 1 if j + 1 < len(text) else 2
                    break
                elif letter not in spec.flags:
                    return None, shell
            i += step
            continue
        break
    return i + spec.positionals, shell


def candidates(words, start, via):
    """Every later word that could be the command a launcher runs: each is a candidate."""
    found = []
    for k in range(start, len(words)):
        word = words[k]
        if word.static and word.text.startswith("-"):
            continue
        found.append(Inner("argv", tuple(words[k:]), via=via, role="candidate", first=not found))
        if len(found) >= MAX_CANDIDATES:
            break
    return found


def _joined(words):
    """The words a wrapper joins with spaces into one shell command line, as one Word."""
    if all(word.static for word in words):
        return Word(" ".join(word.text for word in words))
    return Word(" ".join(word.raw or word.text for word in words), static=False)


def _precise(words, name, spec):
    start, shell = skip_options(words, spec)
    if start is None:
        return "run", candidates(words, 1, name)
    if start == -1 or start >= len(words):
        return ("wrapper" if spec.wrapper else "run"), []
    if shell:
        return "run", [Inner("script", text=_joined(words[start:]), via=f"{name} -s")]
    return ("wrapper" if spec.wrapper else "run"), [Inner("argv", tuple(words[start:]), via=name)]


def _env(words):
    start, _ = skip_options(words, ENV)
    if start is None:
        return "run", candidates(words, 1, "env")
    split = [words[i + 1] for i in range(1, min(start, len(words)) - 1)
             if words[i].static and words[i].text in ("-S", "--split-string")]
    split += [Word(w.text.partition("=")[2]) for w in words[1:start]
              if w.static and w.text.startswith("--split-string=")]
    split += [Word(w.text[w.text.index("S") + 1:]) for w in words[1:start]
              if w.static and not w.text.startswith("--") and "S" in w.text
              and not w.text.endswith("S")]
    chdir = any(w.static and (w.text.startswith(("-C", "--chdir"))) for w in words[1:start])
    assigns = []
    while start < len(words) and words[start].static and _is_assignment(words[start].text):
        assigns.append(words[start].text.partition("=")[0])
        start += 1
    found = [Inner("script", text=word, via="env -S") for word in split]
    if start < len(words):
        found.append(Inner("argv", tuple(words[start:]), via="env", assigns=tuple(assigns),
                           chdir=chdir))
    return "wrapper", found


def _is_assignment(text):
    name, eq, _ = text.partition("=")
    return bool(eq) and name.isidentifier()


def _xargs(words):
    start, _ = skip_options(words, XARGS)
    if start is None:
        return "run", candidates(words, 1, "xargs")
    replace = ""
    for i in range(1, start):
        text = words[i].text
        if text == "-I" and i + 1 < len(words):
            replace = words[i + 1].text
        elif text.startswith("-I") and len(text) > 2:
            replace = text[2:]
        elif text.startswith("--replace"):
            replace = text.partition("=")[2] or "{}"
        elif text.startswith("-i"):
            replace = text[2:] or "{}"
    inner = tuple(words[start:]) or (Word("echo"),)
    return "wrapper", [Inner("argv", inner, via="xargs", open_tail=not replace,
                             replace=replace)]


def _find(words):
    found, i = [], 1
    while i < len(words):
        word = words[i]
        if word.static and word.text in ("-exec", "-execdir", "-ok", "-okdir"):
            end = i + 1
            while end < len(words) and not (words[end].static and words[end].text in (";", "+")):
                end += 1
            plus = end < len(words) and words[end].text == "+"
            if end > i + 1:
                found.append(Inner("argv", tuple(words[i + 1:end]), via=f"find {word.text}",
                                   open_tail=plus, replace="{}"))
            i = end + 1
            continue
        i += 1
    return "run", found


def _shell(words, name):
    i, script_mode = 1, False
    while i < len(words):
        word = words[i]
        if not word.static:
            return "run", [unsure(f"{name} with dynamic options")]
        text = word.text
        if text == "--":
            i += 1
            break
        if text in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if text.startswith("--") or (text[:1] in "-+" and len(text) > 1):
            script_mode = script_mode or (not text.startswith("--") and "c" in text[1:])
            i += 1
            continue
        break
    if name in OTHER_SHELLS:
        return "run", [unsure(f"a {name} script (not bash syntax)")]
    if script_mode:
        return "wrapper", [Inner("script", text=words[i], via=f"{name} -c")] if i < len(words) else []
    if i < len(words):
        return "run", [unsure(f"{name} runs a script it reads from {words[i].raw or words[i].text}")] \
            if reads_stdin(words[i]) else []
    return "wrapper", [Inner("stdin-script", via=name)]


def reads_stdin(word):
    """A script path that is really a pipe or a process substitution."""
    raw = word.raw or word.text
    return raw.startswith(("<(", ">(")) or (word.static and word.text.startswith(STDIN_PATHS)) \
        or (not word.static and "<(" in raw)


def _words_script(words, via):
    if not words:
        return []
    return [Inner("script", text=_joined(words), via=via)]


def _su(words, name):
    for i, word in enumerate(words[1:], 1):
        if not word.static:
            continue
        text = word.text
        if (text in ("--command", "--session-command") or (
                text.startswith("-") and not text.startswith("--") and text.endswith("c"))) \
                and i + 1 < len(words):
            return "run", [Inner("script", text=words[i + 1], via=f"{name} -c")]
        if text.startswith("-") and not text.startswith("--") and "c" in text[1:]:
            rest = text[text.index("c", 1) + 1:]   # -cCMD: the command glued on
            return "run", [Inner("script", text=Word(rest), via=f"{name} -c")]
        if text.startswith(("--command=", "--session-command=")):
            return "run", [Inner("script", text=Word(text.partition("=")[2]), via=f"{name} -c")]
        if text == "--" and name == "runuser":
            return "run", [Inner("argv", tuple(words[i + 1:]), via=name)] if i + 1 < len(words) else []
    return "run", []


def _git(words):
    found, i = [], 1
    while i + 1 < len(words) and words[i].static and words[i].text in ("-c", "-C", "--git-dir",
                                                                      "--work-tree", "--namespace"):
        if words[i].text == "-c":
            setting = words[i + 1]
            if not setting.static:
                found.append(unsure("git -c with a dynamic setting"))
            else:
                key, _, value = setting.text.partition("=")
                key = key.lower()
                if key.startswith("alias."):
                    found += _git_alias(value)
                elif key in GIT_EXECUTING_KEYS or (key.count(".") >= 1 and
                                                   key.endswith(GIT_EXECUTING_SUFFIXES)):
                    found.append(Inner("script", text=Word(value), via=f"git -c {key}"))
        i += 2
    return "run", found


def _git_alias(value):
    if value.startswith("!"):
        return [Inner("script", text=Word(value[1:]), via="git alias")]
    try:
        parts = shlex.split(value)
    except ValueError:
        return [unsure("git alias that cannot be split")]
    return [Inner("argv", (Word("git"),) + tuple(Word(part) for part in parts), via="git alias",
                  open_tail=True)]


def _watch(words):
    start, _ = skip_options(words, WATCH)
    if start is None:
        return "run", candidates(words, 1, "watch")
    exec_mode = any(w.static and w.text in ("-x", "--exec") for w in words[1:start])
    if exec_mode:
        return "run", [Inner("argv", tuple(words[start:]), via="watch -x")] if start < len(words) else []
    return "run", _words_script(words[start:], "watch")


def _flock(words):
    start, _ = skip_options(words, FLOCK)
    if start is None or start >= len(words):
        return "run", [] if start is not None else candidates(words, 1, "flock")
    rest = words[start + 1:]
    if rest and rest[0].static and rest[0].text in ("-c", "--command"):
        return "run", [Inner("script", text=rest[1], via="flock -c")] if len(rest) > 1 else []
    return "run", [Inner("argv", tuple(rest), via="flock")] if rest else []


def _ssh(words):
    start, _ = skip_options(words, SSH)
    if start is None:
        return "run", candidates(words, 1, "ssh")
    return "run", _words_script(words[start + 1:], "ssh")


def inner_commands(words):
    if not words:
        return "run", []
    name, _certain = command_name(words[0])
    if name is None:
        return "run", []
    if name in PRECISE:
        return _precise(words, name, PRECISE[name])
    if name in SHELLS:
        return _shell(words, name)
    if name in OTHER_SHELLS:
        return _shell(words, name)
    handler = {"env": _env, "xargs": _xargs, "find": _find, "git": _git, "watch": _watch,
               "flock": _flock, "ssh": _ssh}.get(name)
    if handler:
        return handler(words)
    if name in ("su", "runuser", "script"):
        return _su(words, name)
    if name == "eval":   # eval, like every builtin, takes a `--` before its words
        rest = words[1:]
        return "wrapper", _words_script(rest[1:] if rest and rest[0].static and rest[0].text == "--"
                                        else rest, "eval")
    if name in ("mapfile", "readarray"):
        return "run", _callback(words, name)
    if name in ("source", "."):
        if len(words) > 1 and reads_stdin(words[1]):
            return "run", [unsure(f"{name} of a pipe or process substitution")]
        return "run", []
    if name == "trap":
        return _trap(words)
    if name in FUZZY:
        return "run", candidates(words, 1, name)
    sub = LAUNCHERS.get(name)
    if sub and len(words) > 1 and words[1].static and words[1].text in (
            (sub,) if isinstance(sub, str) else sub):
        return "run", candidates(words, 2, f"{name} {words[1].text}")
    return "run", []


def _trap(words):
    if len(words) > 1 and words[1].static and words[1].text == "--":
        words = words[:1] + words[2:]
    if len(words) < 3:
        return "run", []
    handler = words[1]
    if handler.static and (handler.text in ("-", "") or handler.text.startswith("-")):
        return "run", []
    return "run", [Inner("script", text=handler, via="trap")]


def _callback(words, name):
    """mapfile/readarray -C CODE runs CODE for each chunk of lines."""
    for i, word in enumerate(words[1:], 1):
        if word.static and word.text == "-C" and i + 1 < len(words):
            return [Inner("script", text=words[i + 1], via=f"{name} -C")]
        if word.static and word.text.startswith("-C") and len(word.text) > 2:
            return [Inner("script", text=Word(word.text[2:]), via=f"{name} -C")]
    return []
