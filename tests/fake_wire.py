"""Wire-format pieces of the fake vendor servers (tests/fakes.py): errors, usage, finish, SSE.

Data contract:
- `FINISH[normalised]` -> (chat finish_reason, Responses incomplete reason or None, Anthropic
  stop_reason, Gemini finishReason) for normalised finish stop | length | stop_sequence |
  content_filter.
- `error_body(vendor, status, message=None)` -> the vendor's real error JSON (dict) for a status.
- `render_usage(api, u, native=None)` -> the usage object of api chat | responses | anthropic |
  google from normalised counts `u` (input = uncached prompt, cache_read, cache_write, output,
  reasoning), deep-merged with the vendor-native `native` dict; None when any count in `u` is None.
- `sse(events)` -> bytes of a Server-Sent-Events stream from (event name or None, data) pairs
  (data: str as is, else JSON); `pieces(text, size=0)` -> the text cut in (at most) two stream deltas, or in
  deltas of `size` characters.
- `parse_multipart(content_type, body)` -> {field: str, or {"filename", "content_type", "data"}}.
- `BadRequest(message)` is raised by request checks; the server answers it as a 400 in the
  vendor's format.
"""
import json

# normalised finish -> (chat finish_reason, Responses incomplete reason, Anthropic, Gemini)
FINISH = {"stop": ("stop", None, "end_turn", "STOP"),
          "length": ("length", "max_output_tokens", "max_tokens", "MAX_TOKENS"),
          "stop_sequence": ("stop", None, "stop_sequence", "STOP"),
          "content_filter": ("content_filter", "content_filter", "refusal", "SAFETY")}
ANTHROPIC_ERRORS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
                    500: "api_error", 504: "timeout_error", 529: "overloaded_error"}
GOOGLE_STATUS = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                 404: "NOT_FOUND", 409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                 503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}
OPENAI_ERRORS = {401: ("invalid_request_error", "invalid_api_key"), 403: ("invalid_request_error", None),
                 404: ("invalid_request_error", "model_not_found"), 429: ("requests", "rate_limit_exceeded")}


class BadRequest(Exception):
    pass


def deep_merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in (extra or {}).items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(
            out.get(key), dict) else value
    return out


def error_body(vendor, status, message=None) -> dict:
    message = message or f"fake {status} error"
    if vendor == "anthropic":
        kind = ANTHROPIC_ERRORS.get(status, "api_error" if status >= 500 else "invalid_request_error")
        return {"type": "error", "error": {"type": kind, "message": message}}
    if vendor == "google":
        return {"error": {"code": status, "message": message, "status": GOOGLE_STATUS.get(
            status, "INTERNAL" if status >= 500 else "INVALID_ARGUMENT")}}
    kind, code = OPENAI_ERRORS.get(status, ("server_error" if status >= 500 else "invalid_request_error",
                                            None))
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def render_usage(api, u, native=None):
    """The vendor's usage object; None (omitted) when any normalised count was scripted as None."""
    if any(value is None for value in u.values()):
        return None
    return deep_merge(_usage_object(api, u), native)


def _usage_object(api, u) -> dict:
    prompt = u["input"] + u["cache_read"] + u["cache_write"]
    out = u["output"] + u["reasoning"]
    if api == "chat":
        return {"prompt_tokens": prompt, "completion_tokens": out, "total_tokens": prompt + out,
                "prompt_tokens_details": {"cached_tokens": u["cache_read"], "audio_tokens": 0},
                "completion_tokens_details": {"reasoning_tokens": u["reasoning"], "audio_tokens": 0}}
    if api == "responses":
        return {"input_tokens": prompt, "input_tokens_details": {"cached_tokens": u["cache_read"]},
                "output_tokens": out, "output_tokens_details": {"reasoning_tokens": u["reasoning"]},
                "total_tokens": prompt + out}
    if api == "anthropic":
        return {"input_tokens": u["input"], "output_tokens": out,
                "cache_creation_input_tokens": u["cache_write"], "cache_read_input_tokens": u["cache_read"],
                "cache_creation": {"ephemeral_5m_input_tokens": u["cache_write"],
                                   "ephemeral_1h_input_tokens": 0}, "service_tier": "standard"}
    return {"promptTokenCount": prompt, "candidatesTokenCount": u["output"], "totalTokenCount": prompt + out,
            "cachedContentTokenCount": u["cache_read"], "thoughtsTokenCount": u["reasoning"]}


def sse(events) -> bytes:
    chunks = []
    for name, data in events:
        head = f"event: {name}\n" if name else ""
        chunks.append(f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n")
    return "".join(chunks).encode("utf-8")


def pieces(text, size=0) -> list:
    """The text as stream deltas: two halves, or pieces of `size` characters."""
    if size > 0:
        return [text[at:at + size] for at in range(0, len(text), size)] or [""]
    half = len(text) // 2
    return [part for part in (text[:half], text[half:]) if part] or [""]


def parse_multipart(content_type, body) -> dict:
    from email.parser import BytesParser
    from email.policy import HTTP
    message = BytesParser(policy=HTTP).parsebytes(
        b"Content-Type: " + content_type.encode() + b"\r\n\r\n" + body)
    form = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        data = part.get_payload(decode=True) or b""
        filename = part.get_filename()
        form[name] = {"filename": filename, "content_type": part.get_content_type(), "data": data} \
            if filename is not None else data.decode("utf-8", "replace")
    return form
