"""Google Gen AI adapter (Gemini generateContent, Files API for large uploads).

Data contract: as every adapter — `make_client`, `call` → dict, `stream` → dict
(streamGenerateContent chunks: text parts to on_text; the last chunk's finish reason and usage),
`classify`, `list_models`.
Assistant messages are sent with role "model". Gemini's promptTokenCount already includes
cachedContentTokenCount (implicit prefix caching); thoughtsTokenCount is reasoning.
The client object is kept by the caller for the whole call: a temporary client is garbage
collected and closes its connection mid-call (measured, see design notes). It is this module's
`Client`: the SDK's client, and the SDK's reply models being built while the first request is
on the wire (ReplyModels).
"""
import json
import threading
from dataclasses import dataclass

from nagent_llm import (base_url_for, is_malformed, malformed_error, read_reply, require_package,
                        status_error, stream_cut, transport_problem)
from nagent_upload import read_text_attachment, unsupported

INLINE_LIMIT = 20 * 1024 * 1024   # larger uploads go through the Files API
STAND_IN = "."                    # contents the SDK converts, then replaced by extra_body


# A reply as Gemini sends one: its parse builds the models a real reply's parse needs. JSON
# text, parsed for each use: the SDK's parse edits the dict it is given.
SAMPLE_REPLY = (
    '{"candidates": [{"content": {"parts": [{"text": "."}], "role": "model"}, '
    '"finishReason": "STOP", "index": 0}], "usageMetadata": {"promptTokenCount": 1, '
    '"candidatesTokenCount": 1, "totalTokenCount": 2, "cachedContentTokenCount": 0, '
    '"thoughtsTokenCount": 0, "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 1}]}, '
    '"modelVersion": "gemini", "responseId": "r"}')


class ReplyModels:
    """The SDK defers building its pydantic models to their first use: parsing the first reply
    builds the response models, 45-60 ms between the reply and the run's first action. They
    are built in a thread that starts once the first request is sent and the HTTP client waits
    for the response's headers (its connection's trace of that step, set in the client's
    request hook), and is joined in the response hook, before the SDK reads the reply, and
    after every call. The main thread meanwhile only waits: two threads building or using the
    same deferred model at once can validate with the wrong schema (pydantic 2.13 has no lock),
    and a thread started before the request is out holds the GIL while the request is written
    (the first request then left 50-70 ms later). An HTTP stack without the trace simply
    builds them on the first reply, as before."""

    def __init__(self, types):
        self.types = types
        self.thread = None
        self.lock = threading.Lock()

    def start(self):
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self.build, name="nagent-gemini-models",
                                               daemon=True)
                self.thread.start()

    def wait(self):
        with self.lock:
            thread = self.thread
        if thread is not None:
            thread.join()

    def build(self):
        try:
            self.types.GenerateContentResponse._from_response(response=json.loads(SAMPLE_REPLY),
                                                              kwargs={})
        except Exception:   # noqa: BLE001 - only time is lost: the real reply builds them
            pass

    def hooks(self):
        """The HTTP client's event hooks: the request hook adds the connection trace that starts
        the thread (keeping a trace already set), the response hook waits for it."""
        def traced(request):
            earlier = request.extensions.get("trace")

            def trace(name, info):
                if name.endswith("receive_response_headers.started"):
                    self.start()
                return earlier(name, info) if earlier is not None else None
            request.extensions = {**request.extensions, "trace": trace}
        return {"request": [traced], "response": [lambda response: self.wait()]}


@dataclass(frozen=True)
class Client:
    sdk: object              # google.genai.Client
    reply_models: ReplyModels


def make_client(settings, key):
    genai = require_package(settings.provider)
    from google.genai import types
    base_url = base_url_for(settings)
    reply_models = ReplyModels(types)
    options = {"timeout": int(settings.timeouts.read * 1000),
               "client_args": {"event_hooks": reply_models.hooks()}}
    if base_url:
        options["base_url"] = base_url
    return Client(genai.Client(api_key=key, http_options=types.HttpOptions(**options)),
                  reply_models)


def attachment_parts(client, attachments):
    from google.genai import types
    parts = []
    for item in attachments:
        if item.category == "text":
            parts.append(types.Part(text=read_text_attachment(item)))
        elif item.category not in ("image", "pdf"):
            raise unsupported(item, "google", "images, PDF and text files")
        elif item.size > INLINE_LIMIT:
            uploaded = client.sdk.files.upload(file=item.path,
                                           config=types.UploadFileConfig(mime_type=item.mime))
            parts.append(types.Part.from_uri(file_uri=uploaded.uri, mime_type=item.mime))
        else:
            with open(item.path, "rb") as handle:
                parts.append(types.Part.from_bytes(data=handle.read(), mime_type=item.mime))
    return parts


def _arguments(client, request, settings):
    """generate_content() keyword arguments. A text-only conversation goes to the SDK in its wire
    form as `extra_body`, which replaces the `contents` the SDK built from a one-part stand-in:
    as typed Contents every message would pass through pydantic and the SDK's converters on
    every call (0.3 ms of CPU per message, growing with the conversation). The JSON body is the
    same either way (tests/test_runtime.py); a request with attachments goes the typed way."""
    from google.genai import types
    config = {"max_output_tokens": request.max_output_tokens or settings.llm.max_output_tokens}
    if request.stop:
        config["stop_sequences"] = list(request.stop[: settings.provider.max_stop_sequences or 5])
    if request.attachments:
        return {"model": settings.model, "contents": _typed_contents(client, request),
                "config": types.GenerateContentConfig(**config)}
    # One part per message: Gemini caches by prefix, not by part.
    contents = [{"parts": [{"text": message.text or "(empty)"}],
                 "role": "model" if message.role == "assistant" else "user"}
                for message in request.messages]
    config["http_options"] = types.HttpOptions(extra_body={"contents": contents})
    return {"model": settings.model, "contents": STAND_IN,
            "config": types.GenerateContentConfig(**config)}


def _typed_contents(client, request):
    from google.genai import types
    last_user = max((i for i, m in enumerate(request.messages) if m.role == "user"), default=-1)
    contents = []
    for index, message in enumerate(request.messages):
        parts = [types.Part(text=message.text)] if message.text else []
        if index == last_user and request.attachments:
            parts = attachment_parts(client, request.attachments) + parts
        contents.append(types.Content(role="model" if message.role == "assistant" else "user",
                                      parts=parts or [types.Part(text="(empty)")]))
    return contents


def call(client, request, settings):
    try:
        response = client.sdk.models.generate_content(**_arguments(client, request, settings))
    finally:
        client.reply_models.wait()   # a call that got no response did not join it
    return read_reply(_result, response)


def stream(client, request, settings, on_text):
    try:
        return _read_stream(client, request, settings, on_text)
    finally:
        client.reply_models.wait()


def _read_stream(client, request, settings, on_text):
    texts, finish, usage, model, seen = [], None, None, None, 0
    chunks = client.sdk.models.generate_content_stream(**_arguments(client, request, settings))
    for chunk in chunks:
        # The SDK makes an empty chunk of any JSON (a list, an object of another API): only a
        # chunk with something of a reply in it shows the answer is a stream of replies.
        seen += bool(chunk.candidates or chunk.usage_metadata or chunk.model_version)
        candidate = _candidate(chunk)
        for text in _texts(candidate):
            texts.append(text)
            on_text(text)
        finish = getattr(candidate, "finish_reason", None) or finish
        usage = getattr(chunk, "usage_metadata", None) or usage
        model = getattr(chunk, "model_version", None) or model
    if finish is None:
        raise stream_cut(settings.provider.name, seen)
    return read_reply(_fields, ("".join(texts), model, finish, usage))


def _candidate(response):
    candidates = response.candidates or []
    return candidates[0] if candidates else None


def _texts(candidate):
    if candidate is None or candidate.content is None:
        return []
    return [part.text for part in (candidate.content.parts or []) if getattr(part, "text", None)
            and not getattr(part, "thought", False)]


def _result(response):
    candidate = _candidate(response)
    return _fields(("".join(_texts(candidate)), getattr(response, "model_version", None),
                    getattr(candidate, "finish_reason", None), response.usage_metadata))


def _fields(parts):
    text, model, reason, usage = parts
    raw = getattr(reason, "name", None) or (str(reason) if reason else None)
    finish = {"STOP": "stop", "MAX_TOKENS": "length", "SAFETY": "content_filter",
              "PROHIBITED_CONTENT": "content_filter"}.get(raw, "other" if raw else "stop")
    output = getattr(usage, "candidates_token_count", None)
    thoughts = getattr(usage, "thoughts_token_count", None)
    if output is not None and thoughts:
        output += thoughts   # billed as output, as OpenAI's and Anthropic's counts include them
    return {
        "text": text, "model": model,
        "input_tokens": getattr(usage, "prompt_token_count", None),
        "output_tokens": output,
        "cache_read_tokens": getattr(usage, "cached_content_token_count", None),
        "reasoning_tokens": getattr(usage, "thoughts_token_count", None),
        "finish_reason": finish, "raw_finish": raw,
    }


def classify(error, settings):
    from google.genai import errors
    name = settings.provider.name
    if is_malformed(error) or isinstance(error, errors.UnknownApiResponseError):
        return malformed_error(name, error)   # the second: a streamed body that was not JSON
    if isinstance(error, errors.APIError):
        response = getattr(error, "response", None)
        headers = getattr(response, "headers", None)
        return status_error(name, error.code, error.message or "", error.status or "", headers)
    return transport_problem(name, error)


def list_models(client, settings):
    names = []
    try:
        models = list(client.sdk.models.list())
    finally:
        client.reply_models.wait()
    for model in models:
        name = getattr(model, "name", "") or ""
        names.append(name.split("/", 1)[1] if name.startswith("models/") else name)
    return names
