"""The one provider helper: `generate(request, settings) -> Result` for every provider.

Data contract:
- `Request` is plain data: `messages`, an ordered tuple of `Message(role, parts)` with role
  "user" or "assistant" and parts a tuple of texts (separate parts let cache-aware adapters
  mark block boundaries); `stop` sequences; `cache_key` (a per-conversation prompt-cache key);
  `cache_breakpoints` ((message index, part index) pairs Anthropic marks with cache_control);
  providers that take one string per message get the parts joined by a blank line;
  `attachments` (for uploads, sent with the last user message); `max_output_tokens`.
  `text_request(text)` is the one-message form `nagent-llm-text --file` sends.
- `Result` is plain data: text, provider, model, input/output tokens (input counts every
  prompt token, cached or not), cache-read/cache-write tokens, reasoning tokens, finish reason
  normalised to stop | length | stop_sequence | content_filter | other, the matched stop
  sequence, elapsed seconds, attempts, and `estimated` (True when the provider reported no
  usage and tokens were estimated from characters).
- Replies are read as a stream whenever the adapter can (`stream(client, request, settings,
  on_text)`, same dict as `call`), shown live or not: the read timeout then bounds the silence
  between chunks, never the whole generation. `generate(..., on_text=fn)` hands every text
  delta to `fn` as it arrives; the Result is still the whole reply. `Result.streamed` says the
  reply was read as a stream and `first_text` is the seconds from the call's start to its first
  text.
- A stream that ends early (a timeout or a dropped connection, or one that ends before the
  provider's final event) before any text arrived is a retryable error: the retry starts
  afresh, and `on_retry` is the caller's signal that anything handed out is superseded. One
  that ends early AFTER text arrived is not run again: what arrived comes back as the Result,
  with finish_reason "cut" and `cut` saying why, for the caller to continue or report
  (`Result.truncated`: cut here or by the output limit).
- What a provider may bill is counted, estimated from characters (`estimated` True): the
  partial output of a cut reply, attempts that timed out or ended after text arrived, and a
  call interrupted by Ctrl-C or a signal. A call that fails or is interrupted carries that
  estimate as a Result on the exception (`spent(error)`, None when nothing may be billed).
- One retry policy governs every provider (SDK retries are off): 408/409/429/5xx/529,
  timeouts and refused/reset connections are retried with exponential backoff + jitter,
  honouring retry-after / retry-after-ms up to `retry_after_cap`; never 400/401/403/404.
  Failures raise ProviderError carrying status, error type, retryable and retry_after.
  A 2xx body that is not JSON or not the API's shape (the SDKs do not validate) is a
  retryable ProviderError with error_type "malformed" (adapters parse via `read_reply`).
SDKs are imported only inside the adapter modules' functions, at call time.
"""
import importlib
import random
import time
from dataclasses import asdict, dataclass, field, replace

from nagent_config import api_key_for, key_source
from nagent_config_checks import resolve_checked
from nagent_errors import EXIT_CODES, ProviderError, SetupError
from nagent_install import install_command
from nagent_secrets import redact, redactable

RETRYABLE_STATUS = frozenset({408, 409, 429, 529})
FINISH_REASONS = ("stop", "length", "stop_sequence", "content_filter", "cut", "other")
CUT_BY = ("timeout", "connection")   # error types that may end a stream after text arrived


# Every dataclass on the way to the first request has a docstring: without one, dataclass
# computes one from inspect.signature at import (about 70 us each).
@dataclass(frozen=True)
class Message:
    """One message of a request: a role and its text parts."""

    role: str
    parts: tuple

    @property
    def text(self):
        # Parts are separate records; one blank line between them reads naturally as one string.
        return "\n\n".join(part for part in self.parts if part)


@dataclass(frozen=True)
class Attachment:
    """A file sent with a request: path, name, MIME type, category and size."""

    path: str
    name: str
    mime: str
    category: str          # image | pdf | office | text
    size: int


@dataclass(frozen=True)
class Request:
    """What a provider adapter sends: messages, stop sequences, cache hints, attachments."""

    messages: tuple
    stop: tuple = ()
    cache_key: str | None = None
    cache_breakpoints: tuple = ()
    attachments: tuple = ()
    max_output_tokens: int | None = None


@dataclass(frozen=True)
class Result:
    """One model call's answer: text, usage, finish reason, timing."""

    text: str
    provider: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    finish_reason: str = "stop"
    stop_sequence: str | None = None
    elapsed: float = 0.0
    attempts: int = 1
    estimated: bool = False
    raw_finish: str | None = field(default=None, compare=False)
    streamed: bool = False
    first_text: float | None = None
    cut: str | None = None   # why a reply ended early after text arrived (finish "cut")

    @property
    def truncated(self):
        """The reply is incomplete: cut by the output limit or by the connection."""
        return self.finish_reason in ("length", "cut")

    def as_dict(self):
        return asdict(self)


def text_request(text, **options):
    return Request(messages=(Message("user", (text,)),), **options)


def estimate_tokens(text):
    # ~4 characters per token is the usual rule of thumb for English and code.
    return (len(text) + 3) // 4 if text else 0


def load_adapter(settings):
    return importlib.import_module(settings.provider.adapter)


def require_package(row):
    """Import the provider's SDK or raise SetupError with the line that installs it here."""
    try:
        return importlib.import_module(row.package)
    except ImportError:
        raise SetupError(f"the {row.name} SDK is not installed", row.package.replace(".", "-")
                         if row.package != "google.genai" else "google-genai",
                         install_command(row.requirement))


def base_url_for(settings):
    """The endpoint: a config base_url, else the SDK's own variable from the settings' environment."""
    row = settings.provider
    if row.base_url:
        return row.base_url
    return settings.environ.get(row.base_url_env) if row.base_url_env else None


def backoff_delay(attempt, settings, retry_after=None, rand=random.random):
    """Seconds to wait before retry `attempt` (1-based): the server's hint when given, capped."""
    if retry_after is not None:
        return max(0.0, min(float(retry_after), settings.retry.retry_after_cap))
    base = settings.retry.base_delay * (2 ** (attempt - 1))
    return min(settings.retry.max_delay, base) * (0.5 + rand() / 2)


def parse_retry_after(headers):
    """retry-after-ms (milliseconds) or retry-after (seconds or an HTTP date) → seconds."""
    if not headers:
        return None
    getter = headers.get
    value = getter("retry-after-ms")
    if value:
        try:
            return float(value) / 1000.0
        except ValueError:
            pass
    value = getter("retry-after")
    if value:
        try:
            return float(value)
        except ValueError:
            from email.utils import parsedate_to_datetime
            try:
                moment = parsedate_to_datetime(value)
                return max(0.0, moment.timestamp() - time.time())
            except (TypeError, ValueError):
                return None
    return None


def status_error(provider, status, message, error_type="", headers=None):
    """A ProviderError for an HTTP status, with the retry decision and a fix hint."""
    retryable = status in RETRYABLE_STATUS or (status is not None and status >= 500)
    fix = ""
    if status == 401:
        fix = "check the API key"
    elif status == 403:
        fix = "the key lacks permission for this model or endpoint"
    elif status == 404:
        fix = "check the model name with --list-models, or the base URL"
    elif status == 429:
        fix = "rate limited; wait and retry"
    what = f"{provider} request failed with HTTP {status}"
    return ProviderError(what, message or error_type or "no message", fix, provider=provider,
                         status=status, error_type=error_type or "", retryable=retryable,
                         retry_after=parse_retry_after(headers))


def sse_events(lines):
    """(event name or None, data) of each server-sent event, from a stream's text lines: `data:`
    lines joined by newlines, a blank line ending the event, comments (`:`) and other fields
    skipped. The adapters read their streams with it as JSON, not as the SDKs' typed event
    objects: those are built on a process's first reply (0.1-0.3 s of CPU between the answer and
    the first action) and cost milliseconds a call after that."""
    name, data = None, []
    for line in lines:
        if not line:
            if data or name is not None:
                yield name, "\n".join(data)
            name, data = None, []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
        elif line.startswith("event:"):
            value = line[6:]
            name = value[1:] if value.startswith(" ") else value
    if data or name is not None:
        yield name, "\n".join(data)


def stream_cut(provider, events=1):
    """A stream that ended before the provider's final event: the connection went away; one
    that ended without any event was no event stream at all (a proxy's page, wrong JSON)."""
    if not events:
        return MalformedResponse("the answer was not an event stream")
    return network_error(provider, "connection", "the stream ended before the reply was complete")


def network_error(provider, kind, detail):
    """Timeouts and refused/reset connections: retryable, no status."""
    what = {"timeout": f"{provider} request timed out",
            "connection": f"cannot reach {provider}"}.get(kind, f"{provider} request failed")
    fix = "raise --read-timeout" if kind == "timeout" else "check the network or the base URL"
    return ProviderError(what, detail, fix, provider=provider, error_type=kind, retryable=True)


def transport_problem(provider, error):
    """A raw transport exception (httpx2, under every SDK; None passes) as a ProviderError, or
    None. A connect timeout never reached the server: "connection", never billed as a call."""
    import httpx2  # loaded with the SDK already: only a failed call asks
    if isinstance(error, httpx2.ConnectTimeout):
        return network_error(provider, "connection", "ConnectTimeout")
    if isinstance(error, httpx2.TimeoutException):  # raised raw while reading a stream
        return network_error(provider, "timeout", "no answer within the read timeout")
    if isinstance(error, httpx2.TransportError):
        return network_error(provider, "connection", type(error).__name__)
    return None


class MalformedResponse(Exception):
    """An adapter could not read a 2xx answer: the SDKs do not validate bodies (design notes)."""


def malformed_error(provider, error):
    """A body that is not JSON or not the API's shape. Retryable: gateways and proxies answer
    with such pages under load; the policy still bounds the attempts."""
    detail = " ".join(str(error).split())[:200] or type(error).__name__
    return ProviderError(f"{provider} returned a malformed response", detail,
                         "the endpoint did not answer in the API's format; check the base URL",
                         provider=provider, error_type="malformed", retryable=True)


def read_reply(parse, response):
    """parse(response) -> dict; a wrong-shaped answer raises MalformedResponse, never a traceback."""
    try:
        return parse(response)
    except (AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
        raise MalformedResponse(f"{type(error).__name__}: {error}") from None


def is_malformed(error):
    import json
    # json.loads of a body that is not UTF-8/16/32 raises UnicodeDecodeError, not JSONDecodeError.
    if isinstance(error, (MalformedResponse, json.JSONDecodeError, UnicodeDecodeError)):
        return True
    # google-genai validates answers with pydantic inside the SDK call; its ValidationError
    # (a ValueError) means the body did not have the API's shape.
    return isinstance(error, ValueError) and type(error).__module__.startswith("pydantic")


def endpoint_url(settings):
    """The URL the provider's SDK talks to (without any user:password part)."""
    row = settings.provider
    url = row.base_url or (settings.environ.get(row.base_url_env) if row.base_url_env else None) \
        or row.default_base_url or "the SDK's default endpoint"
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}{sep}{host.rpartition('@')[2]}{slash}{path}" if sep else url


def explain(problem, settings):
    """`problem` worded for its user: a rejected key names the variable it came from, a network
    failure names the URL, and "after N attempts" joins the value without parentheses."""
    status = getattr(problem, "status", None)
    provider = settings.provider.name
    if status == 401:
        source = key_source(settings)
        problem.what = f"{source} rejected by {provider} with HTTP 401"
        problem.fix = f"set a valid {provider} key in {source}"
    elif status == 403:
        problem.fix = f"the key in {key_source(settings)} lacks permission for this model or endpoint"
    elif getattr(problem, "error_type", "") in ("connection", "timeout"):
        problem.what = f"{problem.what} at {endpoint_url(settings)}"
    return problem


def make_client(settings):
    """A provider client for `settings`. A loop keeps one for all its calls: building one
    costs 50-250 ms (TLS context, SDK setup) and a new one opens a new connection."""
    return load_adapter(settings).make_client(settings, api_key_for(settings))


def without_key(problem, settings):
    """`problem` with the key it was sent with blanked: 401 texts may echo it (OpenAI's do)."""
    try:
        key = api_key_for(settings)
    except SetupError:
        return problem
    values = redactable((key,))
    for name in ("what", "value", "fix"):
        text = getattr(problem, name, None)
        if isinstance(text, str):
            setattr(problem, name, redact(text, values))
    return problem


def generate(request, settings, sleep=time.sleep, on_retry=None, client=None, on_text=None):
    """Send `request` with the provider in `settings`; retry per the one policy. `client`
    (from make_client with the same settings) is reused when given. The reply is read as a
    stream when the adapter can, and each text delta is passed to `on_text` as it arrives."""
    adapter = load_adapter(settings)
    if client is None:
        client = adapter.make_client(settings, api_key_for(settings))
    streaming = hasattr(adapter, "stream")
    attempts, billed = 0, [0, 0]   # estimated input and output tokens of failed attempts
    started = time.monotonic()
    while True:
        attempts += 1
        got = []
        try:
            if streaming:
                raw = adapter.stream(client, request, settings, _collector(got, on_text, started))
            else:
                raw = adapter.call(client, request, settings)
            break
        except BaseException as error:  # noqa: BLE001 - classified, or re-raised with its cost
            problem = error if isinstance(error, ProviderError) else (
                adapter.classify(error, settings) if isinstance(error, Exception) else None)
            text = "".join(piece for _, piece in got)
            if problem is None:
                # Ctrl-C, a signal, or a bug: the request was out, so it may be billed.
                _bill(billed, request, text)
                error.spent = _spent(settings, attempts, started, billed)
                raise
        problem = explain(without_key(problem, settings), settings)
        if text and problem.error_type in CUT_BY:
            # Output had started: keep it rather than generate (and pay for) it all again.
            raw = {"text": text, "finish_reason": "cut", "cut": cut_reason(problem, settings)}
            break
        if text or problem.error_type == "timeout":
            _bill(billed, request, text)   # the server ran it, or may have
        if not problem.retryable or attempts >= settings.retry.max_attempts:
            if attempts > 1:
                problem.value = f"{problem.value}, after {attempts} attempts"
            problem.spent = _spent(settings, attempts, started, billed)
            raise problem from None
        delay = backoff_delay(attempts, settings, problem.retry_after)
        if on_retry:
            on_retry(problem, attempts, delay)
        try:
            sleep(delay)
        except BaseException as error:  # an interruption between attempts keeps their cost
            error.spent = _spent(settings, attempts, started, billed)
            raise
    result = finish_result(raw, request, settings, attempts, time.monotonic() - started)
    if streaming:
        result = replace(result, streamed=True, first_text=round(got[0][0], 3) if got else None)
    if any(billed):
        result = replace(result, input_tokens=result.input_tokens + billed[0],
                         output_tokens=result.output_tokens + billed[1], estimated=True)
    return result


def cut_reason(problem, settings):
    """Why a reply stopped early, in a few words for a warning or a note."""
    if problem.error_type == "timeout":
        return f"no data for {settings.timeouts.read:g} s, the read timeout"
    return f"the connection to {settings.provider.name} ended ({problem.value})"


def _bill(billed, request, text):
    billed[0] += request_tokens(request)
    billed[1] += estimate_tokens(text)


def _spent(settings, attempts, started, billed):
    """What a call that ends in an exception may be billed for, as a Result (None: nothing)."""
    if not any(billed):
        return None
    return Result(text="", provider=settings.provider.name, model=settings.model,
                  input_tokens=billed[0], output_tokens=billed[1], finish_reason="cut",
                  elapsed=round(time.monotonic() - started, 3), attempts=attempts, estimated=True)


def spent(error):
    """The estimated usage of a failed or interrupted `generate` call (a Result), or None."""
    return getattr(error, "spent", None)


def _collector(got, on_text, started):
    def take(text):
        if text:
            got.append((time.monotonic() - started, text))
            if on_text is not None:
                on_text(text)
    return take


def request_tokens(request):
    return sum(estimate_tokens(m.text) for m in request.messages)


def finish_result(raw, request, settings, attempts, elapsed):
    """Adapter output (a dict) → Result, estimating usage only when none was reported."""
    text = raw.get("text") or ""
    input_tokens = raw.get("input_tokens")
    output_tokens = raw.get("output_tokens")
    estimated = input_tokens is None and output_tokens is None
    if estimated:
        input_tokens = request_tokens(request)
        output_tokens = estimate_tokens(text)
    finish = raw.get("finish_reason") or "stop"
    return Result(
        text=text, provider=settings.provider.name, model=raw.get("model") or settings.model,
        input_tokens=int(input_tokens or 0), output_tokens=int(output_tokens or 0),
        cache_read_tokens=int(raw.get("cache_read_tokens") or 0),
        cache_write_tokens=int(raw.get("cache_write_tokens") or 0),
        reasoning_tokens=int(raw.get("reasoning_tokens") or 0),
        finish_reason=finish if finish in FINISH_REASONS else "other",
        stop_sequence=raw.get("stop_sequence"), elapsed=round(elapsed, 3), attempts=attempts,
        estimated=estimated, raw_finish=raw.get("raw_finish"), cut=raw.get("cut"),
    )


def incomplete_warning(result):
    """The stderr line for a reply that is incomplete (cut by the output limit or by the
    connection after it had started), or None."""
    if result.cut:
        return (f"warning: the reply was cut off after {len(result.text)} characters: "
                f"{result.cut}; it is incomplete")
    if result.truncated:
        return "warning: the reply was cut off by the output limit (max_output_tokens); it is incomplete"
    return None


def incomplete_exit_code(result):
    """A reply the connection cut is a failure its caller must see (exit 11); one cut by the
    output limit is the user's own setting (0, with the warning)."""
    return EXIT_CODES["incomplete"] if result.cut else EXIT_CODES["ok"]


def generate_text(text, settings=None, client=None, on_text=None, on_retry=None, **options):
    """The smallest primitive: one text in, one Result out (streamed to `on_text` if given)."""
    settings = resolve_checked() if settings is None else settings
    return generate(text_request(text, **options), settings, client=client, on_text=on_text,
                    on_retry=on_retry)


def list_models(settings):
    """Model names from the provider's listing API, else the table's known models."""
    adapter = load_adapter(settings)
    key = api_key_for(settings)
    client = adapter.make_client(settings, key)
    try:
        names = adapter.list_models(client, settings)
        source = "api"
    except Exception as error:
        problem = adapter.classify(error, settings) if not isinstance(error, (ProviderError,
                                                                              SetupError)) else error
        if problem is None:
            raise
        problem = explain(without_key(problem, settings), settings)
        if not settings.provider.models or getattr(problem, "status", None) in (401, 403):
            raise problem from None
        names, source = list(settings.provider.models), "table"
    return {"provider": settings.provider.name, "source": source, "models": sorted(set(names))}
