"""Run events: what a run reports as it goes, as plain data, and the sinks that consume them.

Data contract
-------------
* An event is a flat JSON-ready dict: "type" (a key of EVENT_FIELDS), "t" (seconds since the
  run's origin, 3 decimals) and the fields EVENT_FIELDS lists for its type. Fields may be
  added in later versions, never removed or renamed (docs/scripting.md's "Events" section is the
  schema).
* `Events(sinks, origin)` hands each `emit(type, **fields)` to every sink's `handle(event)`, in
  order; `close()` calls each sink's `close()` (a display stops its status line). Sinks are code,
  not data: one that raises is a bug and ends the run. `Events()` (no sinks) is the quiet bus.
  `wants_deltas` is True when a sink consumes `reply_delta` events: only then does the loop
  pass the text of model calls on as it arrives (every reply is read as a stream anyway).
* `JsonLines(stream, deltas=True)` writes each event as one JSON object on one line, flushed at once (the
  `--events` output); `event_line(event)` is that line.
* `ActionLog()` keeps what `--json` reports: provider and model (from run_start), one entry
  per finished action: {kind, summary, ok, outcome}, and `changed_files`: one entry per file a
  file_change event named, in the order first changed: {path, added, removed, changes} (the
  counts summed over its changes).
The loop and the run emit; display, JSON lines and the stdout printer only consume.
"""
import json
import time

EVENT_FIELDS = {
    "run_start": ("conversation", "provider", "model", "invocation"),
    "prompt": ("text", "source"),
    "model_call_start": ("call", "purpose", "provider", "model"),
    "reply_delta": ("call", "text"),
    "retry": ("call", "attempt", "max_attempts", "delay", "reason", "error"),
    "model_call_end": ("call", "purpose", "provider", "model", "finish", "elapsed", "attempts",
                       "streamed", "first_text", "usage", "cost_usd"),
    "reply": ("calls", "valid", "final", "actions", "error", "asking_again"),
    "note": ("text",),
    "action_start": ("index", "kind", "summary"),
    "action_end": ("index", "kind", "summary", "ok", "outcome", "seconds"),
    "agents": ("running", "total"),
    "file_change": ("index", "path", "added", "removed", "diff", "truncated", "sha256_before",
                    "sha256_after"),
    "response": ("text", "valid", "accepted"),
    "snapshot": ("id", "files", "phase", "turn"),
    "error": ("error", "value", "fix", "kind", "exit_code"),
    "run_end": ("exit_code", "calls", "totals", "conversation", "budget"),
}
DELTA_TYPES = ("reply_delta",)


class Events:
    """Fans events out to sinks; see the module docstring."""

    def __init__(self, sinks=(), origin=None, clock=time.monotonic):
        self.sinks = tuple(sinks)
        self.clock = clock
        self.origin = clock() if origin is None else origin
        self.wants_deltas = any(getattr(sink, "wants_deltas", False) for sink in self.sinks)

    def emit(self, kind, /, **fields):
        if not self.sinks:
            return None
        event = {"type": kind, "t": round(self.clock() - self.origin, 3)}
        event.update(fields)
        for sink in self.sinks:
            sink.handle(event)
        return event

    def close(self):
        for sink in self.sinks:
            closer = getattr(sink, "close", None)
            if closer:
                closer()


def event_line(event):
    return json.dumps(event, ensure_ascii=False, separators=(",", ":"), default=str)


class JsonLines:
    """The --events sink: one JSON object per line on `stream`, flushed as it happens. With
    `deltas` False (a response hook gates the answer) the run is not streamed for it."""

    def __init__(self, stream, deltas=True):
        self.stream = stream
        self.wants_deltas = deltas

    def handle(self, event):
        self.stream.write(event_line(event) + "\n")
        self.stream.flush()


class ActionLog:
    """What --json reports about the run besides its outcome: provider, model, actions."""
    wants_deltas = False

    def __init__(self, provider=None, model=None):
        self.provider, self.model = provider, model
        self.actions = []
        self.files = {}

    def handle(self, event):
        kind = event["type"]
        if kind == "run_start":
            self.provider, self.model = event.get("provider"), event.get("model")
        elif kind == "action_end":
            self.actions.append({"kind": event["kind"], "summary": event["summary"],
                                 "ok": event["ok"], "outcome": event["outcome"]})
        elif kind == "file_change":
            entry = self.files.setdefault(event["path"], {"path": event["path"], "added": 0,
                                                          "removed": 0, "changes": 0})
            entry["added"] += event["added"]
            entry["removed"] += event["removed"]
            entry["changes"] += 1

    def as_dict(self):
        return {"provider": self.provider, "model": self.model, "actions": list(self.actions),
                "changed_files": list(self.files.values())}
