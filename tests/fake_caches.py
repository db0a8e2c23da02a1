"""Prompt-cache and token accounting of the fake vendor servers (tests/fakes.py).

Data contract:
- Token estimate everywhere: `tokens(data)` = ceil(utf8 bytes / 4); `canonical(value)` is sorted,
  compact JSON; `serialize(parts)` joins the canonical JSON of the non-None parts with newlines.
- Anthropic prompt cache: `anthropic_blocks(request)` -> [(role, text, is_breakpoint)] in order
  tools -> system -> each message's content (string content = one text block; a non-text block
  counts as its canonical JSON without cache_control); a block with cache_control is a
  breakpoint (> MAX_BREAKPOINTS = 4 -> BadRequest). `AnthropicCache().account(model, blocks,
  min_tokens)` chains each prefix hash over model, role and block text. Lookup: for every
  breakpoint, the prefixes ending at it or at up to LOOKBACK = 20 block boundaries before it; the
  longest one previously written is the hit (cache_read). Every breakpoint after the hit whose
  prefix has >= `min_tokens` tokens is written; cache_write = tokens from the hit end to the
  last written breakpoint; input = the rest. Entries live as long as the object.
- OpenAI / Gemini implicit caching: `PrefixCache().account(model, serial, min_tokens, step)`
  compares the serialised prompt with every earlier prompt for the model; the longest common
  byte prefix (`common_prefix_len`) // 4 is the candidate. Below `min_tokens` -> 0; else rounded
  down to `min_tokens + k * step` (OpenAI step 128, Gemini 1 = exact).
"""
import hashlib
import json

from fake_wire import BadRequest

LOOKBACK = 20
MAX_BREAKPOINTS = 4


def tokens(data) -> int:
    raw = data if isinstance(data, bytes) else str(data).encode("utf-8")
    return (len(raw) + 3) // 4


def canonical(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def serialize(parts) -> bytes:
    return "\n".join(canonical(part) for part in parts if part is not None).encode("utf-8")


def common_prefix_len(a: bytes, b: bytes) -> int:
    va, vb = memoryview(a), memoryview(b)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if va[:mid] == vb[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def anthropic_blocks(req) -> list:
    """[(role, text, is_breakpoint)] in cache order; raises BadRequest past 4 breakpoints."""
    blocks = []

    def add(role, block):
        if isinstance(block, str):
            block = {"type": "text", "text": block}
        clean = {k: v for k, v in block.items() if k != "cache_control"}
        text = clean["text"] if clean.get("type") == "text" and isinstance(clean.get("text"), str) \
            else canonical(clean)
        blocks.append((role, text, block.get("cache_control") is not None))

    for tool in req.get("tools") or []:
        add("tools", tool)
    system = req.get("system")
    for block in [system] if isinstance(system, str) else system or []:
        add("system", block)
    for message in req.get("messages") or []:
        content = message.get("content")
        for block in [content] if isinstance(content, str) else content or []:
            add(message.get("role", "user"), block)
    count = sum(1 for block in blocks if block[2])
    if count > MAX_BREAKPOINTS:
        raise BadRequest(f"A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. "
                         f"Found {count}.")
    return blocks


class AnthropicCache:
    def __init__(self):
        self.entries = {}  # prefix hash -> prefix tokens

    def account(self, model, blocks, min_tokens) -> dict:
        hashes, cumulative, running, total = [], [], hashlib.sha256(model.encode()).digest(), 0
        for role, text, _ in blocks:
            running = hashlib.sha256(running + role.encode() + b"\0" + text.encode("utf-8")).digest()
            total += tokens(text)
            hashes.append(running)
            cumulative.append(total)
        breakpoints = [i for i, block in enumerate(blocks) if block[2]]
        hit = -1
        for point in reversed(breakpoints):
            for j in range(point, max(-1, point - LOOKBACK - 1), -1):
                if hashes[j] in self.entries:
                    hit = max(hit, j)
                    break
        read = cumulative[hit] if hit >= 0 else 0
        written = [p for p in breakpoints if p > hit and cumulative[p] >= min_tokens]
        for point in written:
            self.entries[hashes[point]] = cumulative[point]
        write = cumulative[written[-1]] - read if written else 0
        return {"input": total - read - write, "cache_read": read, "cache_write": write}


class PrefixCache:
    def __init__(self):
        self.seen = {}  # model -> {serialised prompt: None} (insertion-ordered set)

    def account(self, model, serial: bytes, min_tokens, step) -> int:
        earlier = self.seen.setdefault(model, {})
        best = max((common_prefix_len(serial, old) for old in earlier), default=0) // 4
        earlier[serial] = None
        if best < min_tokens:
            return 0
        return min_tokens + (best - min_tokens) // step * step
