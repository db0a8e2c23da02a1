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
  `reply(..., chunk=n, gap=s, drop_after=k, stall_after=k)` streams slowly instead: text deltas
  of n characters, every event its own chunk of a chunked body, each from the first text delta
  on sent s seconds after the previous one; with `drop_after` the connection is reset after k
  text deltas (a stream cut off mid-way), with `stall_after` nothing more is sent after k text
  deltas while the connection stays open (a server that stalls). A slow reply asked for without
  streaming answers after the time its stream would take (gap per text delta), as a slow
  server's does.
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
  mapping, SSE and multipart: tests/fake_wire.py; the scripted items, route table and per-vendor
  route handlers: tests/fake_routes.py; the HTTP request handler: tests/fake_http.py. Every name
  tests imported from here before a split is still importable from here.
"""
import json
import re
import socket
import threading
import time
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from base import HermeticTestCase
from fake_caches import (LOOKBACK, MAX_BREAKPOINTS, AnthropicCache, PrefixCache,  # noqa: F401
                         anthropic_blocks, common_prefix_len, serialize, tokens)
from fake_http import _Handler
from fake_routes import (ROUTES, Answer, Fault, ReplySpec, VendorRoutes, _body_of,  # noqa: F401
                         _json, _model_object, _stream)
from fake_wire import (FINISH, BadRequest, error_body, parse_multipart, pieces,  # noqa: F401
                       render_usage, sse)

VENDORS = ("openai", "anthropic", "google")
DEFAULT_TEXT = "fake reply"
DEFAULT_MODELS = {"openai": ["gpt-5.5", "gpt-5-mini", "gpt-4.1-mini"],
                  "anthropic": ["claude-sonnet-4-6", "claude-haiku-4-5"],
                  "google": ["gemini-2.5-flash", "gemini-2.5-pro"]}
KEY_SOURCES = {"openai": ("authorization",), "anthropic": ("x-api-key", "authorization"),
               "google": ("x-goog-api-key", "?key")}
SECRET_HEADERS = ("authorization", "x-api-key", "x-goog-api-key")


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


class FakeVendor(VendorRoutes):
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
              drop_after=None, stall_after=None):
        if finish not in FINISH:
            raise ValueError(f"finish must be one of {sorted(FINISH)}: {finish!r}")
        self._enqueue(ReplySpec(text, finish, usage, vendor, delay, chunk, gap, drop_after,
                                stall_after))

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


class FakeVendorTestCase(HermeticTestCase):
    """HermeticTestCase plus a running FakeVendor in self.fake; self.env points every SDK at it."""

    def setUp(self):
        super().setUp()
        self.fake = FakeVendor().start()
        self.addCleanup(self.fake.stop)
        self.env.update(self.fake.env())
