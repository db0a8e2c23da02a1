"""The "stats" record: one short line per model call, and the one decoder of every stats format.

Data contract: a stats record's body is one line of ` | `-separated sections, each a label and
`key=value` words (values percent-escaped: `%`, space, `|`, `=`, tab, CR and LF become %XX):

    total calls=12 prompts=3 in=48211 out=3012 cache_read=40100 context=5120 cost=0.123400 | run calls=3 in=15000 out=600 cache_read=12000 cost=0.020000 | call openai/gpt-5.5 in=5120 out=210 cache_read=4096 finish=stop elapsed=1.42 attempts=1 | window=2 prev=/home/me/.nagent/conversations/archive/NAME.STAMP

- `total`: the conversation's running totals — calls (model calls), prompts (user prompts, see
  nagent_run_records.is_user_prompt), in/out (input tokens, cached included; output tokens),
  cache_read, cache_write, reasoning, context (the last request's input tokens), cost (USD, or
  `unknown` when a model has no price), `estimated=yes` when any count was estimated.
- `run`: the same counters for the invocation that wrote the record.
- `call` (only after a model call): `PROVIDER/MODEL`, in, out, cache_read, cache_write,
  reasoning, finish, elapsed (s), attempts, estimated.
- `window=K prev=PATH` (only from the second window on): this window's number and the archived
  window before it; earlier ones are found by following `prev` (nagent_conversation_tail).
- `budget` (only for a run with caps): its max_cost (USD), max_tokens, max_time (s).
Counters that are 0 are left out; a reader takes a missing counter as 0.

`encode_stats(total, run, call=None, window=1, previous=None, prompts=None, budget=None)` takes
the TokenStats.as_dict() shapes (and a call's usage dict, and the run's caps) and returns the line.
`decode_stats(body)` returns {"conversation", "run" (TokenStats dict shapes), "last_call"
(dict or None), "window" (int), "previous" (path or None), "windows" (the whole list of earlier
windows when the record names it: the older format; else None), "prompts" (int or None when
not recorded), "budget" ({max_cost, max_tokens, max_time}, each None when not capped; None
when the run had no caps)}, or None for a body that is neither format. Older files hold a JSON object per
stats record ({"conversation", "run", "windows", "last_call"}); it decodes to the same shape.
"""

_TOTALS = (("calls", "model_calls"), ("prompts", None), ("in", "input_tokens"), ("out", "output_tokens"),
           ("cache_read", "cache_read_tokens"), ("cache_write", "cache_write_tokens"),
           ("reasoning", "reasoning_tokens"), ("context", "current_input"))
_CALL = (("in", "input_tokens"), ("out", "output_tokens"), ("cache_read", "cache_read_tokens"),
         ("cache_write", "cache_write_tokens"), ("reasoning", "reasoning_tokens"))
_ALWAYS = ("calls", "in", "out")
_ESCAPES = {"%": "%25", " ": "%20", "|": "%7C", "=": "%3D", "\t": "%09", "\r": "%0D", "\n": "%0A"}
_TOKEN_KEYS = ("model_calls", "current_input", "input_tokens", "output_tokens", "cache_read_tokens",
               "cache_write_tokens", "reasoning_tokens")


def _escape(value):
    text = str(value)
    if any(char in text for char in _ESCAPES):
        text = "".join(_ESCAPES.get(char, char) for char in text)
    return text


def _unescape(text):
    if "%" not in text:
        return text
    out, index = [], 0
    while index < len(text):
        char = text[index]
        if char == "%" and index + 2 < len(text) and _is_hex(text[index + 1:index + 3]):
            out.append(chr(int(text[index + 1:index + 3], 16)))
            index += 3
        else:
            out.append(char)
            index += 1
    return "".join(out)


def _is_hex(pair):
    return len(pair) == 2 and all(char in "0123456789abcdefABCDEF" for char in pair)


def _number(value):
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0


def _counters(stats, prompts=None):
    words = []
    for short, key in _TOTALS:
        value = prompts if short == "prompts" else _number(stats.get(key))
        if value is None or (value == 0 and short not in _ALWAYS):
            continue
        words.append(f"{short}={value}")
    cost = stats.get("cost_usd")
    words.append("cost=unknown" if cost is None else f"cost={cost:.6f}")
    if stats.get("estimated"):
        words.append("estimated=yes")
    return words


def encode_stats(total, run, call=None, window=1, previous=None, prompts=None, budget=None):
    """The stats line for these totals (TokenStats.as_dict() shapes) and last call."""
    sections = [" ".join(["total"] + _counters(total, prompts)), " ".join(["run"] + _counters(run))]
    if call is not None:
        words = ["call", _escape(f"{call.get('provider') or '?'}/{call.get('model') or '?'}")]
        words += [f"{short}={_number(call.get(key))}" for short, key in _CALL
                  if _number(call.get(key)) or short in _ALWAYS]
        words.append(f"finish={_escape(call.get('finish_reason') or 'other')}")
        if isinstance(call.get("elapsed"), (int, float)):
            words.append(f"elapsed={call['elapsed']:.2f}")
        words.append(f"attempts={_number(call.get('attempts')) or 1}")
        if call.get("estimated"):
            words.append("estimated=yes")
        sections.append(" ".join(words))
    if window > 1 or previous:
        sections.append(f"window={int(window)}" + (f" prev={_escape(previous)}" if previous else ""))
    if budget:
        sections.append(" ".join(["budget"] + [f"{key}={value:g}" for key, value in budget.items()
                                               if value is not None]))
    return " | ".join(sections)


def _parse_section(section):
    words = section.split(" ")
    label, values, bare = words[0], {}, []
    for word in words[1:]:
        key, sep, value = word.partition("=")
        if sep:
            values[key] = _unescape(value)
        elif word:
            bare.append(_unescape(word))
    return label, values, bare


def _int(values, key):
    try:
        return int(values.get(key, 0))
    except ValueError:
        return 0


def _totals(values):
    data = {key: _int(values, short) for short, key in _TOTALS if key}
    cost = values.get("cost")
    try:
        data["cost_usd"] = None if cost in (None, "unknown") else float(cost)
    except ValueError:
        data["cost_usd"] = None
    data["estimated"] = values.get("estimated") == "yes"
    return data


def _decode_line(body):
    sections = {}
    for section in body.strip().split(" | "):
        label, values, bare = _parse_section(section)
        if label.startswith("window="):
            values["window"] = label.partition("=")[2]
            label = "window"
        sections[label] = (values, bare)
    if "total" not in sections or "run" not in sections:
        return None
    total, _ = sections["total"]
    data = {"conversation": _totals(total), "run": _totals(sections["run"][0]), "last_call": None,
            "windows": None, "window": 1, "previous": None,
            "prompts": _int(total, "prompts") if "prompts" in total else None}
    if "call" in sections:
        values, bare = sections["call"]
        provider, _, model = (bare[0] if bare else "?/?").partition("/")
        call = {key: _int(values, short) for short, key in _CALL}
        elapsed = values.get("elapsed")
        try:
            elapsed = float(elapsed) if elapsed is not None else None
        except ValueError:
            elapsed = None
        call.update(provider=provider, model=model, finish_reason=values.get("finish", "other"),
                    elapsed=elapsed, attempts=_int(values, "attempts") or 1,
                    estimated=values.get("estimated") == "yes")
        data["last_call"] = call
    if "window" in sections:
        values, _ = sections["window"]
        data["window"] = max(1, _int(values, "window"))
        data["previous"] = values.get("prev") or None
    data["budget"] = None
    if "budget" in sections:
        values, _ = sections["budget"]
        data["budget"] = {key: _float(values.get(key)) for key in ("max_cost", "max_tokens",
                                                                   "max_time")}
    return data


def _float(text):
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def _decode_json(body):
    import json
    try:
        old = json.loads(body)
    except ValueError:
        return None
    if not isinstance(old, dict):
        return None

    def section(value):
        value = value if isinstance(value, dict) else {}
        data = {key: _number(value.get(key)) for key in _TOKEN_KEYS}
        data["model_calls"] = _number(value.get("turns"))   # the old records' name for it
        cost = value.get("cost_usd", 0.0)
        data["cost_usd"] = cost if isinstance(cost, (int, float)) and not isinstance(cost, bool) \
            else (None if cost is None else 0.0)
        data["estimated"] = bool(value.get("estimated"))
        return data

    windows = old.get("windows")
    windows = [item for item in windows if isinstance(item, str)] if isinstance(windows, list) else []
    call = old.get("last_call") if isinstance(old.get("last_call"), dict) else None
    return {"conversation": section(old.get("conversation")), "run": section(old.get("run")),
            "last_call": call, "windows": windows, "window": len(windows) + 1,
            "previous": windows[-1] if windows else None, "prompts": None, "budget": None}


def decode_stats(body):
    """The normalised dict of a stats record body (either format), or None."""
    text = body.strip()
    if text.startswith("{"):
        return _decode_json(text)
    if text.startswith("total "):
        return _decode_line(text)
    return None
