"""Anthropic adapter (Messages API).

Data contract: as every adapter — `make_client`, `call` → dict, `stream` → dict (Messages
stream events, read as JSON from the raw stream (nagent_llm.sse_events): text deltas to
on_text; usage from message_start, updated by message_delta),
`classify`, `list_models`.
Request parts become separate text blocks; `request.cache_breakpoints` (message index, part
index) get `cache_control: {"type": "ephemeral"}` (at most 4, the API's limit). Anthropic
reports input_tokens WITHOUT cached tokens, so input = input + cache read + cache creation.
"""
import base64
import json

from nagent_llm import (MalformedResponse, base_url_for, is_malformed, malformed_error,
                        network_error, read_reply, require_package, sse_events, status_error,
                        stream_cut, transport_problem)
from nagent_upload import read_text_attachment, unsupported

MAX_BREAKPOINTS = 4


def make_client(settings, key):
    anthropic = require_package(settings.provider)
    import httpx2
    timeout = httpx2.Timeout(settings.timeouts.read, connect=settings.timeouts.connect)
    return anthropic.Anthropic(api_key=key, base_url=base_url_for(settings),
                               max_retries=0, timeout=timeout)


def attachment_blocks(attachments):
    blocks = []
    for item in attachments:
        if item.category == "text":
            blocks.append({"type": "document", "source": {"type": "text", "media_type": "text/plain",
                                                          "data": read_text_attachment(item)},
                           "title": item.name})
            continue
        if item.category not in ("image", "pdf"):
            raise unsupported(item, "anthropic", "images (png, jpeg, gif, webp), PDF and text files")
        with open(item.path, "rb") as handle:
            data = base64.b64encode(handle.read()).decode("ascii")
        kind = "image" if item.category == "image" else "document"
        blocks.append({"type": kind, "source": {"type": "base64", "media_type": item.mime,
                                                "data": data}})
    return blocks


def build_messages(request):
    marks = set(tuple(mark) for mark in request.cache_breakpoints[-MAX_BREAKPOINTS:])
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=-1)
    messages = []
    for index, message in enumerate(request.messages):
        blocks = []
        if index == last_user and request.attachments:
            blocks.extend(attachment_blocks(request.attachments))
        for part_index, part in enumerate(message.parts):
            if not part:
                continue
            block = {"type": "text", "text": part}
            if (index, part_index) in marks:
                block["cache_control"] = {"type": "ephemeral"}
            blocks.append(block)
        if not blocks:
            blocks.append({"type": "text", "text": "(empty)"})
        messages.append({"role": message.role, "content": blocks})
    return messages


def _options(request, settings):
    options = {"model": settings.model,
               "max_tokens": request.max_output_tokens or settings.llm.max_output_tokens,
               "messages": build_messages(request)}
    if request.stop:
        options["stop_sequences"] = list(request.stop[: settings.provider.max_stop_sequences or 8])
    return options


def call(client, request, settings):
    return read_reply(_result, client.messages.create(**_options(request, settings)))


USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens",
                "cache_creation_input_tokens")


def stream(client, request, settings, on_text):
    texts, usage, model, stop, done, seen = [], {}, None, (None, None), False, 0
    # Read as JSON (nagent_llm.sse_events); the request, its retries and errors stay the SDK's.
    response = client.messages.with_raw_response.create(
        stream=True, **_options(request, settings)).http_response
    try:
        for name, data in sse_events(response.iter_lines()):
            if name in (None, "ping"):
                continue
            if name == "error":   # raised as the SDK's stream raises it
                try:
                    body = json.loads(data)
                    message = f"{body}"
                except ValueError:
                    body, message = data, data or f"Error code: {response.status_code}"
                raise client._make_status_error(message, body=body, response=response)
            if not data:
                continue
            event = json.loads(data)
            if not isinstance(event, dict):
                raise MalformedResponse(f"stream event is not an object: {data[:80]}")
            seen += 1
            kind = event.get("type")
            if kind == "content_block_delta":
                delta = event.get("delta") or {}
                text = delta.get("text")
                if delta.get("type") == "text_delta" and text:
                    texts.append(text)
                    on_text(text)
            elif kind == "message_start":
                message = event.get("message") or {}
                model = message.get("model")
                _take_usage(usage, message.get("usage"))
            elif kind == "message_delta":
                delta = event.get("delta") or {}
                stop = (delta.get("stop_reason"), delta.get("stop_sequence"))
                _take_usage(usage, event.get("usage"))
            elif kind == "message_stop":
                done = True
    finally:
        response.close()
    if not done:
        raise stream_cut(settings.provider.name, seen)
    return read_reply(_fields, ("".join(texts), model, usage, stop[0], stop[1]))


def _take_usage(usage, reported):
    """message_delta usage is cumulative: a field it reports replaces message_start's."""
    for name in USAGE_FIELDS:
        value = reported.get(name) if isinstance(reported, dict) else None
        if value is not None:
            usage[name] = value


def _result(response):
    text = "".join(block.text for block in (response.content or [])
                   if getattr(block, "type", None) == "text")
    usage = {name: getattr(response.usage, name, None) for name in USAGE_FIELDS}
    return _fields((text, response.model, usage, response.stop_reason,
                    getattr(response, "stop_sequence", None)))


def _fields(parts):
    text, model, usage, raw, stop_sequence = parts
    read = usage.get("cache_read_input_tokens") or 0
    write = usage.get("cache_creation_input_tokens") or 0
    uncached = usage.get("input_tokens")
    finish = {"end_turn": "stop", "max_tokens": "length", "stop_sequence": "stop_sequence",
              "refusal": "content_filter"}.get(raw, "other" if raw else "stop")
    return {
        "text": text, "model": model,
        "input_tokens": None if uncached is None else uncached + read + write,
        "output_tokens": usage.get("output_tokens"),
        "cache_read_tokens": read, "cache_write_tokens": write,
        "finish_reason": finish, "stop_sequence": stop_sequence, "raw_finish": raw,
    }


def classify(error, settings):
    import anthropic
    name = settings.provider.name
    if is_malformed(error):
        return malformed_error(name, error)
    problem = transport_problem(name, error)
    if problem is not None:
        return problem
    if isinstance(error, anthropic.APITimeoutError):
        return transport_problem(name, error.__cause__) or network_error(
            name, "timeout", "no answer within the read timeout")
    if isinstance(error, anthropic.APIConnectionError):
        return network_error(name, "connection", type(error.__cause__ or error).__name__)
    if isinstance(error, anthropic.APIStatusError):
        body = error.body if isinstance(error.body, dict) else {}
        detail = body.get("error") if isinstance(body.get("error"), dict) else {}
        return status_error(name, error.status_code, detail.get("message") or error.message,
                            detail.get("type", ""), error.response.headers)
    if isinstance(error, anthropic.AnthropicError):
        return status_error(name, None, str(error), type(error).__name__)
    return None


def list_models(client, settings):
    return [model.id for model in client.models.list()]
