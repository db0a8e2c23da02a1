"""The fake vendor server's answers (tests/fakes.py): scripted items, the route table and the
per-vendor route handlers.

Data contract:
- `ReplySpec`, `Fault`: scripted items (see tests/fakes.py); `Answer`: what a handler returns
  (status, headers, body; `delay`, `drop`; a chunked stream: `chunks` `gap` seconds apart from
  chunk `first` on, reset before chunk `drop_at`, silent from chunk `stall_at` on).
- `ROUTES`: (method, path regex, vendor or None = told apart by headers, handler name,
  generation?) rows, in match order.
- `VendorRoutes`: the handlers named in ROUTES (OpenAI Responses/chat/files, Anthropic
  messages/count_tokens, Gemini generate/count/upload, shared models and files listing) and
  the answer helpers they share, as a mixin of FakeVendor: they use its lock, id counter, script
  (`_next`), caches, `files`, `models` and `url`.
- `_json(status, data, delay)`, `_stream(events, spec, first)` build answers; `_body_of(record,
  *required)` checks a JSON request body (BadRequest); `_model_object(vendor, name)`.
"""
import hashlib
import json
import time
from dataclasses import dataclass

from fake_caches import anthropic_blocks, serialize, tokens
from fake_wire import FINISH, BadRequest, error_body, parse_multipart, pieces, render_usage, sse


@dataclass(frozen=True)
class ReplySpec:
    text: str
    finish: str = "stop"
    usage: dict = None
    vendor: str = None
    delay: float = 0.0
    chunk: int = 0            # streamed: text deltas of this many characters (0: two halves)
    gap: float = 0.0          # streamed: seconds between events, each sent as its own HTTP chunk
    drop_after: int = None    # streamed: reset the connection after this many text deltas
    stall_after: int = None   # streamed: fall silent (connection open) after this many deltas
    path = None  # replies are never path-targeted


@dataclass(frozen=True)
class Fault:
    status: int
    headers: dict = None
    body: object = None
    vendor: str = None
    delay: float = 0.0
    drop: bool = False
    path: str = None


@dataclass(frozen=True)
class Answer:
    status: int
    headers: dict
    body: bytes
    delay: float = 0.0
    drop: bool = False
    chunks: tuple = None      # streamed in chunked transfer encoding, `gap` seconds apart
    gap: float = 0.0
    drop_at: int = None       # reset the connection before chunk number drop_at
    stall_at: int = None      # send nothing more from chunk number stall_at until the server stops
    first: int = 0            # chunks before this one (the stream's preamble) are not delayed


ROUTES = [  # (method, path regex, vendor or None = told apart by headers, handler, generation?)
    ("POST", r"/v1/responses", "openai", "_openai_responses", True),
    ("POST", r"/v1/chat/completions", "openai", "_openai_chat", True),
    ("POST", r"/v1/files", "openai", "_openai_upload", False),
    ("POST", r"/v1/messages", "anthropic", "_anthropic_messages", True),
    ("POST", r"/v1/messages/count_tokens", "anthropic", "_anthropic_count", False),
    ("POST", r"/v1(?:beta)?/models/(?P<model>[^/:]+):(?P<op>generateContent|streamGenerateContent)",
     "google", "_google_generate", True),
    ("POST", r"/v1(?:beta)?/models/(?P<model>[^/:]+):countTokens", "google", "_google_count", False),
    ("POST", r"/upload/v1(?:beta)?/files", "google", "_google_upload", False),
    ("GET", r"/v1(?:beta)?/models", None, "_models_list", False),
    ("GET", r"/v1(?:beta)?/models/(?P<model>[^:]+)", None, "_model_get", False),
    ("GET", r"/v1(?:beta)?/files", None, "_files_list", False),
    ("GET", r"/v1(?:beta)?/files/(?P<file_id>[^/]+)", None, "_file_get", False),
    ("DELETE", r"/v1(?:beta)?/files/(?P<file_id>[^/]+)", None, "_file_delete", False),
]


class VendorRoutes:
    """Route handlers and answer helpers, mixed into FakeVendor (see the module docstring)."""

    def _answer(self, vendor, fault) -> Answer:
        body = error_body(vendor, fault.status) if fault.body is None else fault.body
        if not isinstance(body, bytes):
            body = body.encode("utf-8") if isinstance(body, str) else json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json", **(fault.headers or {})}
        return Answer(fault.status, headers, body, fault.delay, fault.drop)

    def _error(self, vendor, status, message) -> Answer:
        return _json(status, error_body(vendor, status, message))

    def _usage(self, spec, base):
        usage = {"output": tokens(spec.text), "reasoning": 0, **base}
        native = {}
        for key, value in (spec.usage or {}).items():
            normalised = key in ("input", "cache_read", "cache_write", "output", "reasoning")
            (usage if normalised else native)[key] = value
        return usage, native

    def _prefix_usage(self, vendor, model, parts, spec):
        serial = serialize(parts)
        step = self.openai_cache_step if vendor == "openai" else 1
        with self._lock:
            cached = self._prefix_caches[vendor].account(model, serial, self.cache_min_tokens, step)
        return self._usage(spec, {"input": tokens(serial) - cached, "cache_read": cached, "cache_write": 0})

    # -- OpenAI --------------------------------------------------------------------
    def _openai_chat(self, record):
        req = _body_of(record, "model", "messages")
        spec = self._next(record)
        if isinstance(spec, Fault):
            return self._answer("openai", spec)
        usage, native = self._prefix_usage("openai", req["model"], [req.get("tools")] + req["messages"], spec)
        usage = render_usage("chat", usage, native)
        finish = FINISH[spec.finish][0]
        base = {"id": self._id("chatcmpl-fake"), "created": int(time.time()), "model": req["model"],
                "system_fingerprint": "fp_fake", "service_tier": "default"}
        if not req.get("stream"):
            message = {"role": "assistant", "content": spec.text, "refusal": None, "annotations": []}
            return _json(200, dict(base, object="chat.completion", usage=usage, choices=[
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]), _whole_delay(spec))
        chunk = dict(base, object="chat.completion.chunk")
        deltas = [{"role": "assistant", "content": ""}] + [{"content": part}
                                                           for part in pieces(spec.text, spec.chunk)]
        events = [dict(chunk, choices=[{"index": 0, "delta": d, "finish_reason": None}]) for d in deltas]
        events.append(dict(chunk, choices=[{"index": 0, "delta": {}, "finish_reason": finish}]))
        if (req.get("stream_options") or {}).get("include_usage"):
            events.append(dict(chunk, choices=[], usage=usage))
        return _stream([(None, event) for event in events] + [(None, "[DONE]")], spec, first=1)

    def _openai_responses(self, record):
        req = _body_of(record, "model")
        spec = self._next(record)
        if isinstance(spec, Fault):
            return self._answer("openai", spec)
        given = req.get("input") or []
        items = [{"role": "user", "content": given}] if isinstance(given, str) else list(given)
        usage, native = self._prefix_usage("openai", req["model"],
                                           [req.get("tools"), req.get("instructions")] + items, spec)
        reason = FINISH[spec.finish][1]
        status = "incomplete" if reason else "completed"
        part = {"type": "output_text", "text": spec.text, "annotations": [], "logprobs": []}
        message = {"type": "message", "id": self._id("msg_fake"), "status": status, "role": "assistant",
                   "content": [part]}
        response = {"id": self._id("resp_fake"), "object": "response", "created_at": int(time.time()),
                    "status": status, "model": req["model"], "output": [message],
                    "incomplete_details": {"reason": reason} if reason else None, "error": None,
                    "instructions": req.get("instructions"), "max_output_tokens": req.get("max_output_tokens"),
                    "parallel_tool_calls": True, "tool_choice": "auto", "tools": [], "metadata": {},
                    "text": {"format": {"type": "text"}},
                    "usage": render_usage("responses", usage, native)}
        if not req.get("stream"):
            return _json(200, response, _whole_delay(spec))
        where = {"item_id": message["id"], "output_index": 0, "content_index": 0}
        started = dict(response, status="in_progress", output=[], usage=None, incomplete_details=None)
        events = [("response.created", {"response": started}),
                  ("response.in_progress", {"response": started}),
                  ("response.output_item.added", {"output_index": 0, "item": dict(
                      message, status="in_progress", content=[])}),
                  ("response.content_part.added", dict(where, part=dict(part, text="")))]
        events += [("response.output_text.delta", dict(where, delta=p, logprobs=[]))
                   for p in pieces(spec.text, spec.chunk)]
        events += [("response.output_text.done", dict(where, text=spec.text, logprobs=[])),
                   ("response.content_part.done", dict(where, part=part)),
                   ("response.output_item.done", {"output_index": 0, "item": message}),
                   (f"response.{status}", {"response": response})]
        return _stream([(name, dict(data, type=name, sequence_number=number))
                        for number, (name, data) in enumerate(events)], spec, first=4)

    def _openai_upload(self, record):
        content_type = record["headers"].get("content-type", "")
        if "multipart/form-data" not in content_type:
            raise BadRequest("Expected a multipart/form-data upload")
        form = parse_multipart(content_type, record["body"])
        upload = form.get("file")
        if not isinstance(upload, dict) or not form.get("purpose"):
            raise BadRequest("Missing required parameters: 'file' and 'purpose'")
        record["form"] = form
        meta = {"id": self._id("file-fake"), "object": "file", "bytes": len(upload["data"]),
                "created_at": int(time.time()), "filename": upload["filename"], "purpose": form["purpose"],
                "status": "processed", "expires_at": None, "status_details": None}
        with self._lock:
            self.files[meta["id"]] = {"vendor": "openai", "meta": meta, "data": upload["data"], "polls": 0}
        return _json(200, meta)

    # -- Anthropic -----------------------------------------------------------------
    def _anthropic_messages(self, record):
        req = _body_of(record, "model", "max_tokens", "messages")
        blocks = anthropic_blocks(req)
        spec = self._next(record)
        if isinstance(spec, Fault):
            return self._answer("anthropic", spec)
        with self._lock:
            base = self._anthropic_cache.account(req["model"], blocks, self.cache_min_tokens)
        usage, native = self._usage(spec, base)
        usage = render_usage("anthropic", usage, native)
        stop_reason = FINISH[spec.finish][2]
        stop_sequence = (req.get("stop_sequences") or [None])[0] if stop_reason == "stop_sequence" else None
        message = {"id": self._id("msg_fake"), "type": "message", "role": "assistant", "model": req["model"],
                   "content": [{"type": "text", "text": spec.text}], "stop_reason": stop_reason,
                   "stop_sequence": stop_sequence, "usage": usage}
        if not req.get("stream"):
            return _json(200, message, _whole_delay(spec))
        started = dict(message, content=[], stop_reason=None, stop_sequence=None,
                       usage=usage and dict(usage, output_tokens=1))
        events = [("message_start", {"message": started}),
                  ("content_block_start", {"index": 0, "content_block": {"type": "text", "text": ""}}),
                  ("ping", {})]
        events += [("content_block_delta", {"index": 0, "delta": {"type": "text_delta", "text": part}})
                   for part in pieces(spec.text, spec.chunk)]
        events += [("content_block_stop", {"index": 0}),
                   ("message_delta", {"delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
                                      "usage": usage}),
                   ("message_stop", {})]
        return _stream([(name, dict(data, type=name)) for name, data in events], spec, first=3)

    def _anthropic_count(self, record):
        blocks = anthropic_blocks(_body_of(record, "model", "messages"))
        return _json(200, {"input_tokens": sum(tokens(block[1]) for block in blocks)})

    # -- Google --------------------------------------------------------------------
    def _google_generate(self, record, model, op):
        req = _body_of(record, "contents")
        spec = self._next(record)
        if isinstance(spec, Fault):
            return self._answer("google", spec)
        usage, native = self._prefix_usage(
            "google", model, [req.get("tools"), req.get("systemInstruction")] + req["contents"], spec)
        usage = render_usage("google", usage, native)
        response_id = self._id("fake-response-")

        def chunk(text, finish):
            candidate = {"content": {"role": "model", "parts": [{"text": text}]}, "index": 0}
            if finish:
                candidate["finishReason"] = FINISH[spec.finish][3]
            return {"candidates": [candidate], "modelVersion": model, "responseId": response_id,
                    **({"usageMetadata": usage} if finish and usage else {})}
        if op == "generateContent":
            return _json(200, chunk(spec.text, True), _whole_delay(spec))
        parts = pieces(spec.text, spec.chunk)
        chunks = [chunk(part, index == len(parts) - 1) for index, part in enumerate(parts)]
        if record["query"].get("alt") == "sse":
            return _stream([(None, item) for item in chunks], spec)
        return _json(200, chunks, _whole_delay(spec))

    def _google_count(self, record, model):
        req = _body_of(record, "contents")
        return _json(200, {"totalTokens": tokens(serialize(req["contents"]))})

    def _google_upload(self, record):
        command = record["headers"].get("x-goog-upload-command", "")
        if "start" in command:
            upload_id = self._id("upload")
            wanted = (record["json"] or {}).get("file") or {}
            with self._lock:
                self._uploads[upload_id] = {
                    "displayName": wanted.get("displayName") or wanted.get("display_name"), "data": b"",
                    "mimeType": record["headers"].get("x-goog-upload-header-content-type")
                    or wanted.get("mimeType") or wanted.get("mime_type") or "application/octet-stream"}
            return Answer(200, {"Content-Type": "application/json", "X-Goog-Upload-Status": "active",
                                "X-Goog-Upload-URL": f"{self.url}{record['path']}?upload_id={upload_id}"
                                                     "&upload_protocol=resumable",
                                "X-Goog-Upload-Chunk-Granularity": "8388608"}, b"{}")
        with self._lock:
            upload = self._uploads.get(record["query"].get("upload_id"))
        if upload is None or "upload" not in command:
            return self._error("google", 404, "Unknown upload session")
        upload["data"] += record["body"]
        if "finalize" not in command:
            return Answer(200, {"X-Goog-Upload-Status": "active"}, b"")
        name = self._id("files/fake")
        now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
        meta = {"name": name, "mimeType": upload["mimeType"], "sizeBytes": str(len(upload["data"])),
                "createTime": now, "updateTime": now, "expirationTime": now, "state": "ACTIVE",
                "sha256Hash": hashlib.sha256(upload["data"]).hexdigest(), "source": "UPLOADED",
                "uri": f"{self.url}/v1beta/{name}",
                **({"displayName": upload["displayName"]} if upload["displayName"] else {})}
        with self._lock:
            self.files[name] = {"vendor": "google", "meta": meta, "data": upload["data"],
                                "polls": self.google_processing_polls}
        return Answer(200, {"Content-Type": "application/json", "X-Goog-Upload-Status": "final"},
                      json.dumps({"file": self._file_meta(name)}).encode())

    def _file_meta(self, key):
        with self._lock:
            entry = self.files[key]
            if entry["vendor"] == "google" and entry["polls"] > 0:
                entry["polls"] -= 1
                return dict(entry["meta"], state="PROCESSING")
            return entry["meta"]

    # -- shared listing / lookup ---------------------------------------------------------
    def _models_list(self, record):
        vendor, names = record["vendor"], self.models.get(record["vendor"], [])
        if vendor == "google":
            return _json(200, {"models": [_model_object(vendor, name) for name in names]})
        data = [_model_object(vendor, name) for name in names]
        if vendor == "anthropic":
            return _json(200, {"data": data, "has_more": False, "first_id": names[0] if names else None,
                               "last_id": names[-1] if names else None})
        return _json(200, {"object": "list", "data": data})

    def _model_get(self, record, model):
        model = model[len("models/"):] if model.startswith("models/") else model
        if model not in self.models.get(record["vendor"], []):
            return self._error(record["vendor"], 404, f"model not found: {model}")
        return _json(200, _model_object(record["vendor"], model))

    def _file_key(self, record, file_id):
        key = f"files/{file_id}" if record["vendor"] == "google" else file_id
        entry = self.files.get(key)
        return key if entry and entry["vendor"] == record["vendor"] else None

    def _files_list(self, record):
        keys = [key for key, entry in list(self.files.items()) if entry["vendor"] == record["vendor"]]
        metas = [self._file_meta(key) for key in keys]
        return _json(200, {"files": metas} if record["vendor"] == "google" else
                     {"object": "list", "data": metas, "has_more": False})

    def _file_get(self, record, file_id):
        key = self._file_key(record, file_id)
        if key is None:
            return self._error(record["vendor"], 404, f"file not found: {file_id}")
        return _json(200, self._file_meta(key))

    def _file_delete(self, record, file_id):
        key = self._file_key(record, file_id)
        if key is None:
            return self._error(record["vendor"], 404, f"file not found: {file_id}")
        with self._lock:
            self.files.pop(key, None)
        return _json(200, {} if record["vendor"] == "google" else
                     {"id": file_id, "object": "file", "deleted": True})


def _body_of(record, *required) -> dict:
    req = record["json"]
    if not isinstance(req, dict):
        raise BadRequest("Request body must be a JSON object")
    missing = [name for name in required if req.get(name) in (None, "", [])]
    if missing:
        raise BadRequest(f"{missing[0]}: Field required")
    return req


def _model_object(vendor, name) -> dict:
    if vendor == "google":
        return {"name": f"models/{name}", "version": "001", "displayName": name, "inputTokenLimit": 1048576,
                "outputTokenLimit": 65536, "supportedGenerationMethods": ["generateContent", "countTokens"]}
    if vendor == "anthropic":
        return {"type": "model", "id": name, "display_name": name, "created_at": "2025-01-01T00:00:00Z"}
    return {"id": name, "object": "model", "created": 1735689600, "owned_by": "openai"}


def _whole_delay(spec):
    """A server that is slow to generate is slow to answer without streaming too: the whole
    answer comes after the time its stream would take (`gap` per text delta)."""
    return spec.delay + spec.gap * len(pieces(spec.text, spec.chunk))


def _json(status, data, delay=0.0) -> Answer:
    return Answer(status, {"Content-Type": "application/json"}, json.dumps(data).encode("utf-8"), delay)


def _stream(events, spec, first=0) -> Answer:
    """An SSE answer. By default the whole stream is sent at once with a Content-Length (clients
    parse it the same way); with `spec.gap`, `spec.drop_after` or `spec.stall_after` each event
    is its own chunk of a chunked body, `gap` seconds apart, and the connection is reset (or
    falls silent, held open) after `drop_after` (`stall_after`) text deltas (events[first:]
    start with the deltas)."""
    headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    if not spec.gap and spec.drop_after is None and spec.stall_after is None:
        return Answer(200, headers, sse(events), spec.delay)
    chunks = tuple(sse([event]) for event in events)
    drop_at = None if spec.drop_after is None else first + spec.drop_after
    stall_at = None if spec.stall_after is None else first + spec.stall_after
    return Answer(200, headers, b"", spec.delay, chunks=chunks, gap=spec.gap, drop_at=drop_at,
                  stall_at=stall_at, first=first)
