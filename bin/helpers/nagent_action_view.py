"""One-line views of actions and their outcomes, for the live display, --events and --json.

Data contract (pure functions):
- `one_line(text, limit)` is nagent_terminal_text.one_line with newlines shown as " ⏎ ": the
  model controls these strings, so control, format and bidi characters become visible escapes
  and text past `limit` columns is cut with "…".
- `action_summary(action)` -> the action's one line: the shell script, the path (with the
  number of pairs of a replace, the quoted instruction of a file-edit), the index, the quoted
  task or prompt (at most SUMMARY_LIMIT columns).
- `action_result(action, outcome, seconds)` -> {"ok", "outcome", "seconds", + facts}: facts
  read from the result block the handler built (exit_code and lines or output bytes for shell,
  bytes for read/write, calls and tokens for agent and file-edit); the block is the driver's
  own text. A refusal by the action hook is "refused: <its first line>"; a failed command,
  session or sub-agent says why after its exit code (`outcome.why`: its first stderr line,
  "Error: " dropped).
- `human_bytes(n)` ("4.1 kB") and `human_count(n)` ("12k") are the display's number formats.
"""
import re

from nagent_replace import parse_pairs
from nagent_terminal_text import counted
from nagent_terminal_text import one_line as _one_line

SUMMARY_LIMIT = 200
_MARKER = re.compile(r"^\[(?:stdout|stderr): (\d+) bytes; .*; full output in .*\]$")


def one_line(text, limit=SUMMARY_LIMIT):
    """`text` as one safe terminal line of at most `limit` columns, newlines shown as ⏎."""
    return _one_line(text, limit, newline=" ⏎ ")


def human_bytes(size):
    if size < 1000:
        return f"{size} B"
    for unit in ("kB", "MB", "GB"):
        size /= 1000
        if size < 1000 or unit == "GB":
            return f"{size:.1f} {unit}" if size < 100 else f"{size:.0f} {unit}"
    return f"{size} B"


def human_count(count):
    if count < 1000:
        return str(count)
    if count < 10_000:
        return f"{count / 1000:.1f}k"
    if count < 1_000_000:
        return f"{count // 1000}k"
    return f"{count / 1_000_000:.1f}M"


def action_summary(action):
    kind = action.kind
    if kind in ("read", "file-read", "write"):
        text = action.attr("path", "")
        if kind == "write":
            text += f" ({human_bytes(len(action.body.encode('utf-8', 'replace')))})"
        return one_line(text)
    if kind == "file-patch":
        return one_line(action.attr("index", ""))
    if kind == "replace":
        try:
            count = len(parse_pairs(action.body))
        except ValueError:
            count = 0
        return one_line(action.attr("path", "") + f" ({counted(count, 'pair')})")
    if kind == "file-edit":
        path = one_line(action.attr("path", ""), SUMMARY_LIMIT // 2)
        return path + '  "' + one_line(action.body, SUMMARY_LIMIT - len(path) - 4) + '"'
    if kind in ("agent", "next"):
        return '"' + one_line(action.body, SUMMARY_LIMIT - 2) + '"'
    return one_line(action.body)


def _block_parts(block):
    """(attrs text of the opening tag, body) of a driver result block."""
    head, _, rest = block.partition("\n")
    body = rest[:rest.rfind("\n</")] if "\n</" in rest else ""
    return head, body


def _attr(head, name):
    match = re.search(rf' {name}="([^"]*)"', head)
    return match.group(1) if match else None


def _why(outcome):
    """" · <why it failed>" for a failed outcome that knows (empty otherwise)."""
    why = (outcome.why or "").strip()
    why = why[len("Error: "):] if why.startswith("Error: ") else why
    return f" · {one_line(why, 120)}" if why else ""


def _children(child):
    calls = int(child.get("model_calls") or 0)
    tokens = int(child.get("input_tokens") or 0) + int(child.get("output_tokens") or 0)
    return calls, tokens, f"{counted(calls, 'call')} · {human_count(tokens)} tokens"


def _shell(body, seconds, why=""):
    lines = body.split("\n")
    code = lines[0][len("exit_code: "):] if lines[0].startswith("exit_code: ") else "none"
    facts = {"exit_code": int(code) if code.lstrip("-").isdigit() else None}
    header = lines[:lines.index("stdout:")] if "stdout:" in lines else lines
    for line in header:
        if line.startswith("refused: "):
            return dict(facts, ok=False, outcome="refused: " + one_line(line[9:], 160))
        if line.startswith("✗ "):   # a permission refusal: the line the model reads, as is
            return dict(facts, ok=False, outcome=one_line(line[2:], 200))
    timed_out = any(line.startswith("timed_out: true") for line in header)
    parts = [(f"exit {code}" if not timed_out else "timed out") + why, f"{seconds:.1f} s"]
    markers = [int(m.group(1)) for m in map(_MARKER.match, lines) if m]
    if markers:
        facts["output_bytes"] = sum(markers)
        parts.append(f"{human_bytes(facts['output_bytes'])} output")
    elif "stdout:" in lines:
        count = len(lines) - len(header) - 2 - (1 if lines[-1] == "" else 0)
        facts["lines"] = max(0, count)
        parts.append(counted(facts['lines'], "line"))
    ok = facts["exit_code"] == 0 and not timed_out
    return dict(facts, ok=ok, outcome=" · ".join(parts))


def action_result(action, outcome, seconds):
    """What the display and the JSON outputs say about one finished action."""
    seconds = round(seconds, 3)
    head, body = _block_parts(outcome.block) if outcome.block else ("", "")
    if _attr(head, "status") == "refused":
        reason = body.split(": ", 1)[1] if body.startswith("refused by the action hook: ") else body
        return {"ok": False, "outcome": "refused: " + one_line(reason.split("\n", 1)[0], 160),
                "seconds": seconds}
    if action.kind == "file-edit" and body.startswith("exit_code: "):
        return _file_edit(body, outcome, seconds)
    if _attr(head, "status") == "error" or body.startswith("error: "):
        message = body[len("error: "):] if body.startswith("error: ") else body
        return {"ok": False, "outcome": one_line(message, 160), "seconds": seconds}
    kind = action.kind
    if _attr(head, "status") == "refused" and body.startswith("✗ "):
        return {"ok": False, "outcome": one_line(body.split("\n", 1)[0][2:], 200),
                "seconds": seconds}
    if kind == "shell":
        return dict(_shell(body, seconds, _why(outcome)), seconds=seconds)
    if kind == "replace":
        return {"ok": True, "outcome": one_line(body.split("\n", 1)[0], 160), "seconds": seconds}
    if kind in ("read", "file-read"):
        if _attr(head, "split") == "true":
            count = sum(1 for line in body.split("\n") if line.lstrip().startswith(("- ", "* ")))
            text = f"split into segments ({count})" if count else "split into segments"
            return {"ok": True, "outcome": text, "seconds": seconds}
        size = int(_attr(head, "bytes") or 0)
        return {"ok": True, "outcome": human_bytes(size), "bytes": size, "seconds": seconds}
    if kind == "write":
        verb = body.split(" ", 1)[0] if body else "written"
        size = len(action.body.encode("utf-8", "replace"))
        return {"ok": True, "outcome": f"{verb} · {human_bytes(size)}", "bytes": size,
                "seconds": seconds}
    if kind == "file-patch":
        return {"ok": True, "outcome": one_line(_attr(head, "status") or "done", 60),
                "seconds": seconds}
    if kind == "agent":
        calls, tokens, text = _children(outcome.child or {})
        code = body.split("\n", 1)[0][len("exit_code: "):] if body.startswith("exit_code: ") else ""
        ok = code == "0"
        return {"ok": ok, "outcome": text if ok else f"exit {code or '?'} · {text}", "calls": calls,
                "tokens": tokens, "seconds": seconds}
    return {"ok": not outcome.failed, "outcome": "continue" if kind == "next" else "done",
            "seconds": seconds}


def _file_edit(body, outcome, seconds):
    """A nested edit session: its calls and tokens; a failure's exit code and error line."""
    calls, tokens, text = _children(outcome.child or {})
    lines = body.split("\n")
    code = lines[0][len("exit_code: "):] if lines[0].startswith("exit_code: ") else "?"
    error = next((line[len("error: "):] for line in lines[1:3] if line.startswith("error: ")), "")
    ok = code == "0" and not error
    facts = {"calls": calls, "tokens": tokens, "seconds": seconds}
    if ok:
        return dict(facts, ok=True, outcome=text)
    head = f"exit {code}" if code != "none" else "not finished"
    return dict(facts, ok=False, outcome=f"{head} · {one_line(error, 120)} · {text}" if error
                else f"{head} · {text}")
