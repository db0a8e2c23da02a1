"""The one rule for an exact replacement: <nagent-replace> bodies, old/new pairs applied to bytes.

Every route that changes a file by old/new text uses this module: the <nagent-replace> handler in
the main conversation (temp files) and in a per-file edit session (its target and its segments),
and `nagent-file-edit --old/--new/--replace-file` (which the main conversation's replaces of
project files go through). Pure functions, no I/O.

Data contract:
- `Pair(old, new)`: two str. A body is one or more `<old>TEXT</old><new>TEXT</new>` pairs with
  only whitespace around them; TEXT is taken exactly, newlines included, up to the first
  `</old>` (`</new>`), so it cannot contain that closing tag. `parse_pairs(body) -> tuple[Pair]`
  raises ValueError(one sentence) for anything else, an empty old, or an old equal to its new.
  `format_pairs(pairs) -> body` is its inverse.
- `apply_pairs(data, pairs) -> bytes`: `data` is the file's bytes. Each old (as
  UTF-8; surrogate escapes stand for raw bytes a command line gave) must occur exactly once in
  `data`, overlapping occurrences counted; all pairs are matched against the same bytes, their
  matches must not overlap, and then all are replaced at once: all pairs or none. Line endings:
  when an old holding "\\n" does not occur as written but occurs once with "\\r\\n" (a CRLF file),
  that form is used; the new text gets "\\r\\n" for its bare "\\n" whenever its match used CRLF or
  the whole file is CRLF. Every byte outside the matches is kept as it was: other line endings, a
  BOM, a missing final newline, lines that are not UTF-8. Otherwise ReplaceRefused(reason): a
  one-line reason per failing pair, with how many matches it had and where: line numbers of two
  or more matches, or for none the closest lines of the file (`closest_lines`) with their
  numbers.
- `closest_lines(data, old, count=3) -> [(line number, line text)]`: the file lines most like
  the first non-blank line of `old` (difflib ratio), best first.
"""
from collections import namedtuple

Pair = namedtuple("Pair", "old new")

OPEN_OLD, CLOSE_OLD, OPEN_NEW, CLOSE_NEW = "<old>", "</old>", "<new>", "</new>"
SHOWN_LINE = 120          # columns of a file line quoted in a refusal
CANDIDATE_LINES = 200000  # lines compared for closest_lines (a bigger file: the first ones)


class ReplaceRefused(ValueError):
    """The pairs do not apply; `reason` says why, per pair."""

    def __init__(self, reason):
        super().__init__(reason)
        self.reason = reason


def _skip_space(body, pos):
    while pos < len(body) and body[pos] in " \t\r\n":
        pos += 1
    return pos


def _part(body, pos, opening, closing, number):
    if not body.startswith(opening, pos):
        found = body[pos:pos + 20].split("\n", 1)[0]
        raise ValueError(f"pair {number}: expected {opening} but found '{found}'")
    end = body.find(closing, pos + len(opening))
    if end < 0:
        raise ValueError(f"pair {number}: {opening} has no {closing}")
    return body[pos + len(opening):end], end + len(closing)


def parse_pairs(body):
    pairs, pos = [], _skip_space(body, 0)
    while pos < len(body):
        number = len(pairs) + 1
        old, pos = _part(body, pos, OPEN_OLD, CLOSE_OLD, number)
        new, pos = _part(body, _skip_space(body, pos), OPEN_NEW, CLOSE_NEW, number)
        if old == "":
            raise ValueError(f"pair {number}: <old> is empty (quote the exact text to replace)")
        if old == new:
            raise ValueError(f"pair {number}: <old> and <new> are the same (nothing to change)")
        pairs.append(Pair(old, new))
        pos = _skip_space(body, pos)
    if not pairs:
        raise ValueError("needs at least one <old>exact text</old><new>replacement</new> pair")
    return tuple(pairs)


def format_pairs(pairs):
    return "\n".join(f"{OPEN_OLD}{old}{CLOSE_OLD}\n{OPEN_NEW}{new}{CLOSE_NEW}" for old, new in pairs)


# -- matching -----------------------------------------------------------------------------------

def _occurrences(data, needle, limit=10):
    """Start offsets of `needle` in `data`, overlapping ones too, at most `limit`."""
    found, at = [], data.find(needle)
    while at >= 0 and len(found) < limit:
        found.append(at)
        at = data.find(needle, at + 1)
    return found


def _crlf(text):
    return text.replace("\r\n", "\n").replace("\n", "\r\n")


def _all_crlf(data):
    newlines = data.count(b"\n")
    return newlines > 0 and data.count(b"\r\n") == newlines


def _line_of(data, offset):
    return data.count(b"\n", 0, offset) + 1


def _shown(text):
    text = text.rstrip("\r\n")
    return text if len(text) <= SHOWN_LINE else text[:SHOWN_LINE] + "…"


def closest_lines(data, old, count=3):
    wanted = next((line.strip() for line in old.splitlines() if line.strip()), "")
    if not wanted:
        return []
    import difflib   # only a refusal needs it; the live view imports this module at start-up
    scored = []
    matcher = difflib.SequenceMatcher(autojunk=False)
    matcher.set_seq2(wanted)
    for number, raw in enumerate(data.split(b"\n")[:CANDIDATE_LINES], 1):
        line = raw.decode("utf-8", "replace")
        stripped = line.strip()
        if not stripped:
            continue
        matcher.set_seq1(stripped)
        if matcher.real_quick_ratio() < 0.3 or matcher.quick_ratio() < 0.3:
            continue
        scored.append((-matcher.ratio(), number, line))
    scored.sort()
    return [(number, _shown(line)) for _ratio, number, line in scored[:count] if -_ratio >= 0.3]


def _match(data, pair, number):
    """(start, end, replacement bytes) of the pair's one match, or raise ReplaceRefused."""
    old = pair.old.encode("utf-8", "surrogateescape")
    found, crlf = _occurrences(data, old), False
    if not found and "\n" in pair.old and b"\r\n" in data:
        converted = _crlf(pair.old).encode("utf-8", "surrogateescape")
        found, crlf, old = _occurrences(data, converted), True, converted
    if len(found) == 1:
        new = _crlf(pair.new) if crlf or _all_crlf(data) else pair.new
        return found[0], found[0] + len(old), new.encode("utf-8", "surrogateescape")
    if found:
        lines = ", ".join(str(_line_of(data, at)) for at in found)
        more = "+" if len(found) >= 10 else ""
        raise ReplaceRefused(f"pair {number}: <old> matches {len(found)}{more} times (at lines "
                             f"{lines}); include more of the surrounding text so it matches once")
    near = closest_lines(data, pair.old)
    where = "; closest lines: " + "; ".join(f"{line}: {text!r}" for line, text in near) if near \
        else "; no similar line in the file"
    raise ReplaceRefused(f"pair {number}: <old> not found (0 matches){where}")


def apply_pairs(data, pairs):
    matches, problems = [], []
    for number, pair in enumerate(pairs, 1):
        try:
            matches.append((*_match(data, pair, number), number))
        except ReplaceRefused as refused:
            problems.append(refused.reason)
    if problems:
        raise ReplaceRefused(" | ".join(problems))
    matches.sort()
    for before, after in zip(matches, matches[1:]):
        if after[0] < before[1]:
            raise ReplaceRefused(f"pairs {before[3]} and {after[3]} match overlapping text; "
                                 "merge them into one pair")
    out, at = [], 0
    for start, end, new, _number in matches:
        out += [data[at:start], new]
        at = end
    out.append(data[at:])
    return b"".join(out)
