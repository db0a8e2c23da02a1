"""`nagent -c` (`--continue`) and `nagent --resume`: the conversations of this directory, whatever
the terminal they were started from.

Data contract (ROOT: `here(environ, cwd)`, the project root of the working directory
(nagent_project.find_project), or the directory itself outside a project; the index and its
checks are nagent_project_conversations'):
- `continue_target(environ, cwd)` -> Recent or None: the conversation started in ROOT that a run
  used last.
- `resume_name(name, environ)` -> NAME for `--resume NAME`: a valid name of an existing
  conversation (UsageError, InputError otherwise).
- `listing(settings)` -> (data, text) for `--resume` without a name, like a lifecycle
  command: data {"root", "conversations": [{"name", "path", "used" (ISO time), "started",
  "first_prompt", "turns", "model_calls", "cost_usd"}]}, most recently used first, at most
  LIST_LIMIT; text a numbered table (or one line saying there are none).
- `choose(settings, ask, out)` -> NAME or None: the listing written to `out`, then
  `ask(question)` (one line) picks a row by number (Enter: the first); None when there is none
  or the answer is empty after "q". A bad answer is a UsageError.
- `hint_line(path, environ, cwd, now)` -> "continuing? nagent -c ..." when another conversation
  started in ROOT was used within HINT_SECONDS (a new shell about to start fresh), else None.
Turns and cost come from each conversation's tail (nagent_conversation_tail), the first prompt
from its head: nothing reads a whole conversation.
"""
import os
import time

import nagent_project_conversations as projects
from nagent_conversation_layout import conversation_path, validate_name
from nagent_conversation_lifecycle import HEAD_BYTES, first_prompt
from nagent_conversation_tail import read_tail_summary
from nagent_errors import InputError, UsageError
from nagent_paths import current_cwd
from nagent_project import find_project
from nagent_terminal_text import one_line

LIST_LIMIT = 20
HINT_SECONDS = 24 * 3600
RESUME_FIX = "nagent --resume lists this directory's conversations"


def here(environ, cwd):
    """ROOT of the working directory: its project's root, else the directory itself."""
    project = find_project(cwd, environ)
    return project.root if project is not None else os.path.realpath(cwd)


def continue_target(environ, cwd):
    found = projects.recent(here(environ, cwd), environ, limit=1)
    return found[0] if found else None


def resume_name(name, environ):
    path = conversation_path(validate_name(name), environ)
    if not os.path.isfile(path):
        raise InputError("no such conversation", name, RESUME_FIX)
    return name


def ago(seconds):
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return "just now"


def _head_prompt(path):
    try:
        with open(path, "rb") as handle:
            return first_prompt(handle.read(HEAD_BYTES))
    except OSError:
        return ""


def row(entry):
    summary = read_tail_summary(entry.path)
    stats = summary.get("stats") or {}
    totals = stats.get("conversation") or {}
    recorded = stats.get("prompts") if stats else 0
    turns = None if recorded is None else recorded + summary.get("prompts_after", 0)
    return {"name": entry.name, "path": entry.path,
            "used": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(entry.used)),
            "started": entry.started, "first_prompt": _head_prompt(entry.path), "turns": turns,
            "model_calls": totals.get("model_calls", 0), "cost_usd": totals.get("cost_usd"),
            "_used": entry.used}


def _rows(environ, cwd):
    root = here(environ, cwd)
    rows = []
    for entry in projects.recent(root, environ, limit=LIST_LIMIT):
        try:
            rows.append(row(entry))
        except InputError:   # unreadable since it was checked: left out
            continue
    return root, rows


def _text(root, rows, now):
    if not rows:
        return f"no conversations started in {one_line(root)} yet"
    lines = [f"conversations started in {one_line(root)}, last used first:",
             f"{'#':>3}  {'USED':<12} {'TURNS':>5} {'COST':>9}  {'NAME':<28} FIRST PROMPT"]
    for number, item in enumerate(rows, start=1):
        cost = "?" if item["cost_usd"] is None else f"${item['cost_usd']:.4f}"
        turns = "?" if item["turns"] is None else str(item["turns"])
        lines.append(f"{number:>3}  {ago(now - item['_used']):<12} {turns:>5} {cost:>9}  "
                     f"{one_line(item['name'], 28):<28} {one_line(item['first_prompt'], 60)}")
    return "\n".join(lines)


def listing(settings):
    environ = dict(settings.environ) if settings.environ else dict(os.environ)
    root, rows = _rows(environ, current_cwd())
    text = _text(root, rows, time.time())
    return {"root": root, "conversations": [{key: value for key, value in item.items()
                                             if key != "_used"} for item in rows]}, text


def choose(settings, ask, out):
    data, text = listing(settings)
    out.write(text + "\n")
    out.flush()
    names = [item["name"] for item in data["conversations"]]
    if not names:
        return None
    answer = ask(f"resume which? [1-{len(names)}, Enter: 1, q: none] ").strip()
    if answer.lower() in ("q", "quit"):
        return None
    if not answer:
        return names[0]
    if answer.isdigit() and 1 <= int(answer) <= len(names):
        return names[int(answer) - 1]
    if answer in names:
        return answer
    raise UsageError("no such row", answer, f"answer a number from 1 to {len(names)}")


def hint_line(path, environ, cwd, now):
    found = projects.recent(here(environ, cwd), environ, exclude=(path,), since=now - HINT_SECONDS,
                            limit=1)
    if not found:
        return None
    entry = found[0]
    return (f"continuing? nagent -c continues {entry.name} (used {ago(now - entry.used)}); "
            "this prompt starts a new conversation")
