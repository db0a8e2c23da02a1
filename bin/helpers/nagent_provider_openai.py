"""OpenAI adapter: the Responses API for `openai`, Chat Completions for OpenAI-compatible
endpoints (rows with api == "chat": ollama, vllm, lmstudio, llama-cpp, openrouter ...).

Data contract: `make_client(settings, key)`, `call(client, request, settings) -> dict` (text,
model, usage fields, finish_reason, stop_sequence), `stream(client, request, settings, on_text)
-> the same dict` (text deltas handed to on_text as they arrive: Responses stream events, read
as JSON from the raw stream (nagent_llm.sse_events), or Chat Completions chunks with the usage
chunk requested), `classify(error, settings) ->
ProviderError | None`, `list_models(client, settings) -> [names]`. The SDK is imported inside
these calls.
OpenAI reports cached prompt tokens in *_tokens_details.cached_tokens (cache writes are not
reported: its prefix cache is automatic); reasoning tokens in output/completion details.
"""
import base64
import json

from nagent_llm import (MalformedResponse, base_url_for, is_malformed, malformed_error,
                        network_error, read_reply, require_package, sse_events, status_error,
                        stream_cut, transport_problem)
from nagent_upload import read_text_attachment, unsupported


def make_client(settings, key):
    openai = require_package(settings.provider)
    import httpx2
    timeout = httpx2.Timeout(settings.timeouts.read, connect=settings.timeouts.connect)
    return openai.OpenAI(api_key=key, base_url=base_url_for(settings),
                         max_retries=0, timeout=timeout)


def _data_url(attachment):
    with open(attachment.path, "rb") as handle:
        encoded = base64.b64encode(handle.read()).decode("ascii")
    return f"data:{attachment.mime};base64,{encoded}"


def attachment_parts(attachments, api):
    parts = []
    for item in attachments:
        if item.category == "text":
            text = read_text_attachment(item)
            parts.append({"type": "input_text" if api == "responses" else "text", "text": text})
        elif item.category == "image":
            if api == "responses":
                parts.append({"type": "input_image", "image_url": _data_url(item)})
            else:
                parts.append({"type": "image_url", "image_url": {"url": _data_url(item)}})
        elif api == "responses" and item.category in ("pdf", "office"):
            parts.append({"type": "input_file", "filename": item.name, "file_data": _data_url(item)})
        else:
            raise unsupported(item, "openai-compatible chat endpoints",
                              "images and text files" if api == "chat" else "")
    return parts


def _messages(request, api):
    messages = []
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=-1)
    for index, message in enumerate(request.messages):
        if index == last_user and request.attachments:
            text_type = "input_text" if api == "responses" else "text"
            content = attachment_parts(request.attachments, api) + [{"type": text_type,
                                                                     "text": message.text}]
        else:
            content = message.text
        messages.append({"role": message.role, "content": content})
    return messages


def _options(request, settings):
    """(create() keyword arguments, api) for this request. The conversation goes to the SDK as
    `extra_body`, which it sends as given: as a create() argument it would first walk every
    message through its type-driven transform, about 0.13 ms of CPU per message on every call
    (8 ms at 60 messages, growing with the conversation), for plain role/content dicts that it
    leaves as they are. The JSON body is the same either way (tests/test_run_ends.py)."""
    row = settings.provider
    max_tokens = request.max_output_tokens or settings.llm.max_output_tokens
    if row.api == "chat":
        options = {"model": settings.model, "messages": [], "max_tokens": max_tokens,
                   "extra_body": {"messages": _messages(request, "chat")}}
        if request.stop:
            options["stop"] = list(request.stop[: row.max_stop_sequences or 4])
        return options, "chat"
    options = {"model": settings.model, "max_output_tokens": max_tokens, "store": False,
               "extra_body": {"input": _messages(request, "responses")}}
    if request.cache_key:
        options["prompt_cache_key"] = request.cache_key
    return options, "responses"


def call(client, request, settings):
    options, api = _options(request, settings)
    if api == "chat":
        return read_reply(_chat_result, client.chat.completions.create(**options))
    return read_reply(_responses_result, client.responses.create(**options))


def stream(client, request, settings, on_text):
    options, api = _options(request, settings)
    if api == "chat":
        return _stream_chat(client, options, settings, on_text)
    import openai
    final, seen = None, 0
    # Read as JSON (nagent_llm.sse_events); the request, its retries and errors stay the SDK's.
    response = client.responses.with_raw_response.create(stream=True, **options).http_response
    try:
        for _, data in sse_events(response.iter_lines()):
            if data.startswith("[DONE]"):
                break
            event = json.loads(data)
            if not isinstance(event, dict):
                raise MalformedResponse(f"stream event is not an object: {data[:80]}")
            if event.get("error"):   # what the SDK raises for an error payload in a stream
                error = event["error"]
                message = error.get("message") if isinstance(error, dict) else None
                raise openai.APIError(message if isinstance(message, str) and message else
                                      "An error occurred during streaming",
                                      request=response.request, body=error)
            seen += 1
            kind = event.get("type")
            if kind == "response.output_text.delta":
                on_text(event.get("delta") or "")
            elif kind in ("response.completed", "response.incomplete"):
                final = event.get("response")
            elif kind in ("response.failed", "error"):
                raise _stream_failure(event, settings.provider.name)
    finally:
        response.close()
    if final is None:
        raise stream_cut(settings.provider.name, seen)
    return read_reply(_responses_result, final)


def _stream_failure(event, name):
    """A `response.failed` or `error` stream event as a ProviderError (server errors retry)."""
    error = _get(event, "response", "error") or event
    code = str(_field(error, "code") or "stream_error")
    message = _field(error, "message") or "the stream reported an error"
    status = 429 if "rate_limit" in code else 500 if code in ("server_error", "stream_error") else 400
    return status_error(name, status, message, code)


def _stream_chat(client, options, settings, on_text):
    texts, finish, usage, model, seen = [], None, None, None, 0
    events = client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                            **options)
    with events:
        for chunk in events:
            seen += 1
            model = getattr(chunk, "model", None) or model
            usage = getattr(chunk, "usage", None) or usage
            choices = getattr(chunk, "choices", None) or []
            if not choices:
                continue
            text = _get(choices[0], "delta", "content")
            if text:
                texts.append(text)
                on_text(text)
            finish = getattr(choices[0], "finish_reason", None) or finish
    if finish is None:
        raise stream_cut(settings.provider.name, seen)
    return read_reply(_chat_fields, ("".join(texts), model, finish, usage))


def _field(obj, name):
    """A field of an SDK object, or of the same object as parsed JSON (a streamed reply)."""
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _get(obj, *names):
    for name in names:
        obj = _field(obj, name) if obj is not None else None
    return obj


def _responses_result(response):
    texts = []
    for item in _field(response, "output") or []:
        if _field(item, "type") == "message":
            for part in _field(item, "content") or []:
                if _field(part, "type") == "output_text" and _field(part, "text"):
                    texts.append(_field(part, "text"))
    usage = _field(response, "usage")
    status = _field(response, "status")
    reason = _get(response, "incomplete_details", "reason")
    finish = "stop"
    if status == "incomplete":
        finish = "length" if reason == "max_output_tokens" else (
            "content_filter" if reason == "content_filter" else "other")
    return {
        "text": "".join(texts), "model": _field(response, "model"),
        "input_tokens": _get(usage, "input_tokens"), "output_tokens": _get(usage, "output_tokens"),
        "cache_read_tokens": _get(usage, "input_tokens_details", "cached_tokens"),
        "reasoning_tokens": _get(usage, "output_tokens_details", "reasoning_tokens"),
        "finish_reason": finish, "raw_finish": reason or status,
    }


def _chat_result(response):
    choices = getattr(response, "choices", None) or []
    choice = choices[0] if choices else None
    return _chat_fields((_get(choice, "message", "content") or "", getattr(response, "model", None),
                         getattr(choice, "finish_reason", None), getattr(response, "usage", None)))


def _chat_fields(parts):
    text, model, raw, usage = parts
    finish = {"stop": "stop", "length": "length", "content_filter": "content_filter"}.get(raw, "other"
                                                                                          if raw else "stop")
    return {
        "text": text, "model": model,
        "input_tokens": _get(usage, "prompt_tokens"), "output_tokens": _get(usage, "completion_tokens"),
        "cache_read_tokens": _get(usage, "prompt_tokens_details", "cached_tokens"),
        "reasoning_tokens": _get(usage, "completion_tokens_details", "reasoning_tokens"),
        "finish_reason": finish, "raw_finish": raw,
    }


def classify(error, settings):
    import openai
    name = settings.provider.name
    if is_malformed(error):
        return malformed_error(name, error)
    problem = transport_problem(name, error)
    if problem is not None:
        return problem
    if isinstance(error, openai.APITimeoutError):
        return transport_problem(name, error.__cause__) or network_error(
            name, "timeout", "no answer within the read timeout")
    if isinstance(error, openai.APIConnectionError):
        return network_error(name, "connection", type(error.__cause__ or error).__name__)
    if isinstance(error, openai.APIStatusError):
        body = error.body if isinstance(error.body, dict) else {}
        detail = body.get("error", body) if isinstance(body.get("error", body), dict) else {}
        message = detail.get("message") or getattr(error, "message", "")
        return status_error(name, error.status_code, message, detail.get("type") or
                            detail.get("code") or "", error.response.headers)
    if isinstance(error, openai.OpenAIError):
        return status_error(name, None, str(error), type(error).__name__)
    return None


def list_models(client, settings):
    return [model.id for model in client.models.list()]
