"""Anthropic adapter (Messages API).

Data contract: as every adapter — `make_client`, `call` → dict, `classify`, `list_models`.
Request parts become separate text blocks; `request.cache_breakpoints` (message index, part
index) get `cache_control: {"type": "ephemeral"}` (at most 4, the API's limit). Anthropic
reports input_tokens WITHOUT cached tokens, so input = input + cache read + cache creation.
"""
import base64

from nagent_llm import (base_url_for, is_malformed, malformed_error, network_error, read_reply,
                        require_package, status_error)

MAX_BREAKPOINTS = 4


def make_client(settings, key):
    anthropic = require_package(settings.provider)
    import httpx2
    timeout = httpx2.Timeout(settings.timeouts.read, connect=settings.timeouts.connect)
    return anthropic.Anthropic(api_key=key, base_url=base_url_for(settings),
                               max_retries=0, timeout=timeout)


def attachment_blocks(attachments):
    from nagent_upload import read_text_attachment, unsupported
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


def call(client, request, settings):
    options = {}
    if request.stop:
        options["stop_sequences"] = list(request.stop[: settings.provider.max_stop_sequences or 8])
    response = client.messages.create(model=settings.model,
                                      max_tokens=request.max_output_tokens or settings.llm.max_output_tokens,
                                      messages=build_messages(request), **options)
    return read_reply(_result, response)


def _result(response):
    text = "".join(block.text for block in (response.content or [])
                   if getattr(block, "type", None) == "text")
    usage = response.usage
    read = getattr(usage, "cache_read_input_tokens", None) or 0
    write = getattr(usage, "cache_creation_input_tokens", None) or 0
    uncached = getattr(usage, "input_tokens", None)
    raw = response.stop_reason
    finish = {"end_turn": "stop", "max_tokens": "length", "stop_sequence": "stop_sequence",
              "refusal": "content_filter"}.get(raw, "other" if raw else "stop")
    return {
        "text": text, "model": response.model,
        "input_tokens": None if uncached is None else uncached + read + write,
        "output_tokens": getattr(usage, "output_tokens", None),
        "cache_read_tokens": read, "cache_write_tokens": write,
        "finish_reason": finish, "stop_sequence": getattr(response, "stop_sequence", None),
        "raw_finish": raw,
    }


def classify(error, settings):
    import anthropic
    name = settings.provider.name
    if is_malformed(error):
        return malformed_error(name, error)
    if isinstance(error, anthropic.APITimeoutError):
        return network_error(name, "timeout", "no answer within the read timeout")
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
