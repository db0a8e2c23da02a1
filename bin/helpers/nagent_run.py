"""One invocation's mutable run state, shared by the loop, the window keeper and --compact.

Data contract: `Run(session, writer)` holds the session (see nagent_session), the
ConversationWriter that owns the conversation file while the lock is held, this run's and
the conversation's token totals (the latter continued from the file's last "stats" record),
the window chain, the number of model calls made, and one provider client for the whole run.
Everything durable goes through `append`, which redacts the session's secrets first; every
model call, whoever makes it, is counted with `count_call`, which appends a "stats" record.
It sits below nagent_loop and nagent_window so both (and nagent_compact) use it without
importing each other.
"""
import json

import nagent_llm
from nagent_accounting import TokenStats, add_result
from nagent_cli import redact
from nagent_conversation_tail import last_stats

LAST_CALL_FIELDS = ("provider", "model", "input_tokens", "output_tokens", "cache_read_tokens",
                    "cache_write_tokens", "finish_reason", "elapsed", "attempts", "estimated")


class Run:
    """Mutable state of one invocation; everything durable goes through `writer`."""

    def __init__(self, session, writer):
        self.session = session
        self.writer = writer
        self.run_stats = TokenStats()
        previous = last_stats(writer.records())
        self.conv_stats = TokenStats.from_dict((previous or {}).get("conversation", {}))
        self.windows = list((previous or {}).get("windows") or [])
        self.calls = 0
        self.recent_actions = []
        self.gate_refusals = 0  # final responses the response hook refused in this run
        self.client = None  # one provider client for the whole run (see nagent_llm.make_client)

    def redact(self, text):
        return redact(text, self.session.secrets)

    def append(self, kind, body, attrs=None):
        return self.writer.append(kind, self.redact(body), attrs)

    def record_stats(self, result=None):
        body = {"conversation": self.conv_stats.as_dict(), "run": self.run_stats.as_dict(),
                "windows": self.windows}
        if result is not None:
            body["last_call"] = {key: getattr(result, key) for key in LAST_CALL_FIELDS}
        self.append("stats", json.dumps(body, sort_keys=True))

    def provider_client(self):
        if self.client is None:
            self.client = nagent_llm.make_client(self.session.settings)
        return self.client

    def count_call(self, result):
        prices = self.session.settings.prices
        self.run_stats = add_result(self.run_stats, result, prices)
        self.conv_stats = add_result(self.conv_stats, result, prices)
        self.record_stats(result)
