"""Commands that change nothing: what plan mode runs when it has no bwrap sandbox to hold the
project read-only.

Data contract: `read_only(command) -> bool` for one nagent_command_types.Command: True only
for a name in READ_ONLY (its path in a system directory, if a path) whose words hold none of
the options that make it write or run something (`find -exec/-delete/-fprint…`, `sort -o`,
`git diff --output`, `git grep -O`/`--open-files-in-pager` in any abbreviation, `rg --pre`,
`git -c` …), with no variable assignment in front of it and no
word known only at run time among its options. git runs only these read-only subcommands:
log, diff, status, show, blame, ls-files, ls-tree, rev-parse, grep, shortlog, describe,
cat-file, and `branch` / `tag` / `remote` / `stash list` only to list. Redirections are judged
by the caller (a write outside the temp roots is not read-only). A test runner becomes
read-only only through a rule marked `read_only` (nagent_permissions).
"""
from nagent_command_types import command_name

SIMPLE = frozenset({
    "ls", "cat", "head", "tail", "wc", "grep", "egrep", "fgrep", "pwd", "echo", "true", "false",
    "test", "[", "stat", "file", "du", "df", "which", "type", "basename", "dirname", "realpath",
    "readlink", "cut", "tr", "cmp", "comm", "id", "whoami", "uname", "nl", "od", "hexdump",
    "sha256sum", "sha1sum", "md5sum", "b2sum", "column", "jq", "cd", "printenv", "sleep",
    "seq", "expr", "fold", "rev", "strings", "zcat", "zgrep", "bzcat", "xzcat", "lsblk", "ps",
    "nproc", "free", "uptime", "locale", "getconf", "command", "exit", "return", ":",
})
FIND_ACTIONS = ("-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0",
                "-fprintf", "-fls")
GIT_READ = frozenset({"log", "diff", "status", "show", "blame", "ls-files", "ls-tree",
                      "rev-parse", "grep", "shortlog", "describe", "cat-file", "whatchanged"})
GIT_LISTING = {"branch": ("-a", "-r", "-v", "-vv", "--list", "--show-current", "--all",
                          "--remotes", "--merged", "--no-merged", "--contains"),
               "tag": ("-l", "--list", "-n"), "remote": ("-v", "show", "get-url")}


def _texts(command):
    return [word.text for word in command.words[1:] if word.static]


def _plain(command):
    return all(word.static for word in command.words[1:] if word.text.startswith("-")
               or not word.static)


def _opens_in_program(text):
    """`git grep -O<cmd>` / `--open-files-in-pager[=<cmd>]` runs a program on the files it
    finds. git grep takes bundled short options (-nOsh) and any unique prefix of a long one
    (--open-f=sh)."""
    if text.startswith("--"):
        name = text.split("=", 1)[0]
        return len(name) >= 4 and "--open-files-in-pager".startswith(name)
    return text.startswith("-") and "O" in text


def _git(command):
    words = command.words[1:]
    i = 0
    while i < len(words) and words[i].static and words[i].text in ("-C", "--no-pager", "-P"):
        i += 2 if words[i].text == "-C" else 1
    if i >= len(words) or not words[i].static:
        return False
    sub, rest = words[i].text, [w.text for w in words[i + 1:] if w.static]
    if any(text.startswith(("--output", "--ext-diff", "-o")) for text in rest):
        return False
    if sub == "grep" and any(_opens_in_program(text) for text in rest):
        return False
    if sub in GIT_READ:
        return True
    if sub == "stash":
        return rest[:1] in (["list"], ["show"])
    allowed = GIT_LISTING.get(sub)
    return allowed is not None and all(text in allowed for text in rest)


def read_only(command):
    if not command.words or command.assigns or command.function:
        return False
    name, certain = command_name(command.words[0])
    if name is None or not certain:
        return False
    texts = _texts(command)
    if not _plain(command):
        return False
    if name in SIMPLE:
        return name != "command" or bool({"-v", "-V"} & set(texts))
    if name == "find":
        return not any(text in FIND_ACTIONS for text in texts)
    if name in ("sort",):
        return not any(text.startswith(("-o", "--output")) for text in texts)
    if name in ("rg", "ripgrep"):
        return not any(text.startswith(("--pre", "--search-zip", "-z")) for text in texts)
    if name in ("diff", "tree"):
        return not any(text.startswith(("-o", "--output")) for text in texts)
    if name == "uniq":
        return len([t for t in texts if not t.startswith("-")]) <= 1
    if name == "date":
        return not any(text.startswith(("-s", "--set")) for text in texts)
    if name == "git":
        return _git(command)
    return False
