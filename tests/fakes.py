"""Fake OpenAI / Anthropic / Google Gemini servers speaking the real wire formats, for hermetic tests.

Data contract:
- `FakeVendor().start()` serves all three vendors on http://127.0.0.1:PORT (stdlib
  ThreadingHTTPServer, HTTP/1.1 keep-alive, daemon threads); `stop()` closes every open
  connection and wakes delayed answers. `env()` gives the base-URL and key variables the SDKs read.
- Routes: OpenAI POST /v1/responses, /v1/chat/completions, /v1/files (multipart), GET/DELETE
  /v1/files/{id}; Anthropic POST /v1/messages, /v1/messages/count_tokens; Gemini POST
  /v1[beta]/models/{m}:generateContent|streamGenerateContent|countTokens, resumable upload
  POST /upload/v1[beta]/files (start, then bytes to the X-Goog-Upload-URL), GET/DELETE
  /v1[beta]/files/{name}. GET /v1/models[/{id}] is shared: the vendor is told apart by headers
  (x-goog-api-key or ?key= → google, anthropic-version or x-api-key → anthropic, else openai).
- Script: one FIFO of ReplySpec/Fault items. Generation endpoints take the first item whose
  `vendor` is None or theirs; items queued with `path=` are taken only by requests whose path
  contains it (any endpoint). Empty queue → the vendor's (or the catch-all) `reply_fn(record)`,
  else the text "fake reply". `record["reply"]` keeps what was served.
- Normalised finish: stop | length | stop_sequence | content_filter, mapped to chat finish_reason,
  Responses status/incomplete_details, Anthropic stop_reason (+stop_sequence = first requested
  stop string), Gemini finishReason. Normalised usage keys: input (uncached prompt), cache_read,
  cache_write, output, reasoning; any other key in `usage=` is deep-merged into the vendor's own
  usage object; a normalised key scripted as None drops the usage object from the answer (as
  servers that report no usage do). Token estimate everywhere: ceil(utf8 bytes / 4) (non-text Anthropic blocks: of
  their sorted JSON); output = estimate of the text. `reply(..., delay=s)` delays a good answer.
- `stream: true` (or Gemini :streamGenerateContent) → the complete SSE stream in one response
  (Anthropic and Responses events carry `event:` lines; chat ends with `data: [DONE]`).
  `reply(..., chunk=n, gap=s, drop_after=k)` streams slowly instead: text deltas of n characters,
  every event its own chunk of a chunked body, each from the first text delta on sent s seconds
  after the previous one, and with `drop_after` the connection is reset after k text deltas (a
  stream cut off mid-way).
- Faults: status + headers + body (dict/bytes; default the vendor's real error JSON), `delay`
  seconds before answering, `drop=True` resets the connection (RST) without an answer.
- Inspection: `requests` (dicts: vendor, method, path, query, headers, key_headers, json, body,
  form, status, reply, defaulted, received: the wall-clock time it arrived),
  `requests_for(vendor)`, `pending()` (unconsumed script items),
  `files` (uploads by OpenAI id / Gemini name), `errors` (bugs inside the fake, answered as 500).
  `google_processing_polls = n` makes the first n reads of a new Gemini file say PROCESSING.
- Keys: with `require_key` (default) a request without the vendor's key → 401 in its format;
  `valid_keys` (a set) also rejects other keys. Records keep key header *names* and redacted
  values; the key values themselves go only to `seen_keys`.
- Caching and token estimates: see tests/fake_caches.py; error bodies, usage objects, finish
  mapping, SSE and multipart: tests/fake_wire.py. Every name tests imported from here before
  the split is still importable from here.
"""
import hashlib
import json
import re
import socket
import struct
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from base import HermeticTestCase
from fake_caches import (LOOKBACK, MAX_BREAKPOINTS, AnthropicCache, PrefixCache,  # noqa: F401
                         anthropic_blocks, common_prefix_len, serialize, tokens)
from fake_wire import FINISH, BadRequest, error_body, parse_multipart, pieces, render_usage, sse

VENDORS = ("openai", "anthropic", "google")
DEFAULT_TEXT = "fake reply"
DEFAULT_MODELS = {"openai": ["gpt-5.5", "gpt-5-mini", "gpt-4.1-mini"],
                  "anthropic": ["claude-sonnet-4-6", "claude-haiku-4-5"],
                  "google": ["gemini-2.5-flash", "gemini-2.5-pro"]}
KEY_SOURCES = {"openai": ("authorization",), "anthropic": ("x-api-key", "authorization"),
               "google": ("x-goog-api-key", "?key")}
SECRET_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")


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


def detect_vendor(path, headers, query) -> str:
    if "x-goog-api-key" in headers or "key" in query or path.startswith(("/upload/", "/v1beta/")) \
            or "x-goog-api-client" in headers:
        return "google"
    if "anthropic-version" in headers or "x-api-key" in headers:
        return "anthropic"
    return "openai"


def find_key(vendor, headers, query):
    for source in KEY_SOURCES[vendor]:
        value = query.get("key") if source == "?key" else headers.get(source)
        if value:
            return value[7:] if value.lower().startswith("bearer ") else value
    return None


class FakeVendor:
    def __init__(self):
        self.url = None
        self.models = {vendor: list(names) for vendor, names in DEFAULT_MODELS.items()}
        self.requests, self.seen_keys, self.errors = [], [], []
        self.require_key, self.valid_keys = True, None
        self.cache_min_tokens, self.openai_cache_step = 1024, 128
        self.google_processing_polls = 0  # reads of a new Gemini file (upload answer first) saying PROCESSING
        self.files = {}  # OpenAI id / Gemini name -> {"vendor", "meta", "data", "polls"}
        self._queue, self._fns, self._uploads = [], {}, {}
        self._lock, self._stopping, self._conns = threading.Lock(), threading.Event(), set()
        self._serial = 0
        self._anthropic_cache, self._prefix_caches = AnthropicCache(), {"openai": PrefixCache(),
                                                                        "google": PrefixCache()}
        self._server = self._thread = None

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> "FakeVendor":
        handler = type("FakeHandler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-vendor", daemon=True)
        self._thread.start()
        return self

    def stop(self):
        if self._server is None:
            return
        self._stopping.set()
        self._server.shutdown()
        with self._lock:
            conns = list(self._conns)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._server.server_close()
        self._thread.join()
        self._server = None

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    def env(self) -> dict:
        return {"OPENAI_BASE_URL": self.url + "/v1", "ANTHROPIC_BASE_URL": self.url,
                "GOOGLE_GEMINI_BASE_URL": self.url, "OPENAI_API_KEY": "test-openai-key",
                "ANTHROPIC_API_KEY": "test-anthropic-key", "GOOGLE_API_KEY": "test-google-key"}

    # -- scripting -----------------------------------------------------------------
    def reply(self, text, *, finish="stop", usage=None, vendor=None, delay=0.0, chunk=0, gap=0.0,
              drop_after=None):
        if finish not in FINISH:
            raise ValueError(f"finish must be one of {sorted(FINISH)}: {finish!r}")
        self._enqueue(ReplySpec(text, finish, usage, vendor, delay, chunk, gap, drop_after))

    def reply_fn(self, fn, vendor=None):
        """fn(record) -> str | ReplySpec | Fault | None, used when the queue has nothing for the call."""
        self._check_vendor(vendor)
        self._fns[vendor] = fn

    def fault(self, status, *, headers=None, body=None, vendor=None, delay=0.0, drop=False, times=1,
              path=None):
        for _ in range(times):
            self._enqueue(Fault(status, headers, body, vendor, delay, drop, path))

    def requests_for(self, vendor) -> list:
        with self._lock:
            return [record for record in self.requests if record["vendor"] == vendor]

    def pending(self) -> list:
        with self._lock:
            return list(self._queue)

    def _check_vendor(self, vendor):
        if vendor not in (None,) + VENDORS:
            raise ValueError(f"vendor must be one of {VENDORS}: {vendor!r}")

    def _enqueue(self, item):
        self._check_vendor(item.vendor)
        with self._lock:
            self._queue.append(item)

    def _take(self, vendor, path, generation):
        with self._lock:
            for index, item in enumerate(self._queue):
                if item.vendor not in (None, vendor):
                    continue
                if (item.path in path) if item.path is not None else generation:
                    return self._queue.pop(index)
        return None

    def _next(self, record):
        item = self._take(record["vendor"], record["path"], True)
        if item is None:
            fn = self._fns.get(record["vendor"]) or self._fns.get(None)
            item = fn(record) if fn else None
        if item is None:
            item, record["defaulted"] = ReplySpec(DEFAULT_TEXT), True
        if isinstance(item, str):
            item = ReplySpec(item)
        record["reply"] = item
        return item

    def _id(self, prefix):
        with self._lock:
            self._serial += 1
            return f"{prefix}{self._serial}"

    # -- request handling (called from server threads) ----------------------------------
    def _handle(self, method, target, headers, body) -> Answer:
        split = urlsplit(target)
        path, query = split.path, {k: v[-1] for k, v in parse_qs(split.query).items()}
        route = match = None
        for candidate in ROUTES:
            match = re.fullmatch(candidate[1], path) if candidate[0] == method else None
            if match:
                route = candidate
                break
        vendor = route[2] if route and route[2] else detect_vendor(path, headers, query)
        record = {"vendor": vendor, "method": method, "path": path,
                  "query": {k: ("<redacted>" if k == "key" else v) for k, v in query.items()},
                  "headers": {k: ("<redacted>" if k in SECRET_HEADERS else v) for k, v in headers.items()},
                  "key_headers": [k for k in SECRET_HEADERS if k in headers] + (["?key"] if "key" in query
                                                                                 else []),
                  "json": None, "body": body, "form": None, "received": time.time()}
        if "json" in headers.get("content-type", "") and body:
            try:
                record["json"] = json.loads(body)
            except ValueError:
                pass
        key = find_key(vendor, headers, query)
        with self._lock:
            self.requests.append(record)
            if key:
                self.seen_keys.append(key)
        if route is None:
            answer = self._error(vendor, 404, f"Unknown route: {method} {path}")
        elif "upload_id" in query and path.startswith("/upload/"):
            answer = self._dispatch(route, match, record)  # the session URL is the credential
        elif self.require_key and not key or self.valid_keys is not None and key not in self.valid_keys:
            answer = self._error(vendor, 401, "Invalid or missing API key (fake)")
        else:
            answer = self._dispatch(route, match, record)
        record["status"] = None if answer.drop else answer.status
        request_id = {"openai": "x-request-id", "anthropic": "request-id"}.get(vendor)
        if request_id:
            answer.headers.setdefault(request_id, f"req_fake_{len(self.requests)}")
        return answer

    def _dispatch(self, route, match, record) -> Answer:
        try:
            if not route[4]:
                item = self._take(record["vendor"], record["path"], False)
                if item is not None:
                    record["reply"] = item
                    return self._answer(record["vendor"], item)
            return getattr(self, route[3])(record, **match.groupdict())
        except BadRequest as exc:
            return self._error(record["vendor"], 400, str(exc))
        except Exception as exc:  # a fake bug must surface in the test, not hang the client
            self.errors.append(f"{type(exc).__name__}: {exc}")
            return self._error(record["vendor"], 500, f"fake server bug: {type(exc).__name__}: {exc}")

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
                {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]), spec.delay)
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
            return _json(200, response, spec.delay)
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
            return _json(200, message, spec.delay)
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
            return _json(200, chunk(spec.text, True), spec.delay)
        parts = pieces(spec.text, spec.chunk)
        chunks = [chunk(part, index == len(parts) - 1) for index, part in enumerate(parts)]
        if record["query"].get("alt") == "sse":
            return _stream([(None, item) for item in chunks], spec)
        return _json(200, chunks, spec.delay)

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


def _json(status, data, delay=0.0) -> Answer:
    return Answer(status, {"Content-Type": "application/json"}, json.dumps(data).encode("utf-8"), delay)


def _stream(events, spec, first=0) -> Answer:
    """An SSE answer. By default the whole stream is sent at once with a Content-Length (clients
    parse it the same way); with `spec.gap` or `spec.drop_after` each event is its own chunk of a
    chunked body, `gap` seconds apart, and the connection is reset after `drop_after` text
    deltas (events[first:] start with the deltas)."""
    headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
    if not spec.gap and spec.drop_after is None:
        return Answer(200, headers, sse(events), spec.delay)
    chunks = tuple(sse([event]) for event in events)
    drop_at = None if spec.drop_after is None else first + spec.drop_after
    return Answer(200, headers, b"", spec.delay, chunks=chunks, gap=spec.gap, drop_at=drop_at,
                  first=first)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # small answers must not wait for delayed ACKs (~40 ms each)
    fake = None  # bound per server by FakeVendor.start

    def setup(self):
        super().setup()
        with self.fake._lock:
            self.fake._conns.add(self.connection)

    def finish(self):
        try:
            super().finish()
        except OSError:
            pass
        finally:
            with self.fake._lock:
                self.fake._conns.discard(self.connection)

    def handle(self):
        try:
            super().handle()
        except OSError:  # the client reset an idle keep-alive connection
            self.close_connection = True

    def log_message(self, *args):
        pass

    def do_GET(self):
        try:
            headers = {name.lower(): value for name, value in self.headers.items()}
            answer = self.fake._handle(self.command, self.path, headers, self._read_body(headers))
            if answer.delay and self.fake._stopping.wait(answer.delay):
                self.close_connection = True
                return
            if answer.drop:
                return self._reset()
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            if answer.chunks is not None:
                return self._send_chunks(answer)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)
        except OSError:  # client went away (timeout) or the server is stopping
            self.close_connection = True

    do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

    def _send_chunks(self, answer):
        """A chunked body sent piece by piece (a slow stream), or reset mid-way (a dropped one)."""
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.wfile.flush()
        for index, chunk in enumerate(answer.chunks):
            if answer.drop_at is not None and index >= answer.drop_at:
                return self._reset()
            if index >= answer.first and answer.gap and self.fake._stopping.wait(answer.gap):
                self.close_connection = True
                return
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        if answer.drop_at is not None and answer.drop_at >= len(answer.chunks):
            return self._reset()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _read_body(self, headers) -> bytes:
        if "chunked" not in headers.get("transfer-encoding", "").lower():
            return self.rfile.read(int(headers.get("content-length") or 0))
        chunks = []
        while True:
            size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
            chunks.append(self.rfile.read(size))
            self.rfile.readline()
            if size == 0:
                return b"".join(chunks)

    def _reset(self):
        # SO_LINGER 0 + a real close sends RST: the client sees a connection reset, no response.
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.rfile.close()
        self.connection.close()


class FakeVendorTestCase(HermeticTestCase):
    """HermeticTestCase plus a running FakeVendor in self.fake; self.env points every SDK at it."""

    def setUp(self):
        super().setUp()
        self.fake = FakeVendor().start()
        self.addCleanup(self.fake.stop)
        self.env.update(self.fake.env())
