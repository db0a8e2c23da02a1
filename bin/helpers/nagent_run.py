"""One invocation's mutable run state, shared by the loop, the window keeper and --compact.

Data contract: `Run(session, writer)` holds the session (see nagent_session), the
ConversationWriter that owns the conversation file while the lock is held, this run's and
the conversation's token totals (the latter continued from the file's last "stats" record),
the window chain, the number of model calls made and of user prompts in the conversation, and
one provider client for the whole run.
Everything durable goes through `append`, which redacts the session's secrets first; every
model call, whoever makes it, is counted with `count_call`, which appends a "stats" record
(its one-line format is nagent_stats_format's).
It sits below nagent_loop and nagent_window so both (and nagent_compact) use it without
importing each other.
"""
import nagent_llm
from nagent_accounting import TokenStats, add_result
from nagent_cli import redact
from nagent_conversation_tail import last_stats, window_chain
from nagent_run_records import is_user_prompt
from nagent_stats_format import encode_stats

LAST_CALL_FIELDS = ("provider", "model", "input_tokens", "output_tokens", "cache_read_tokens",
                    "cache_write_tokens", "reasoning_tokens", "finish_reason", "elapsed",
                    "attempts", "estimated")


class Run:
    """Mutable state of one invocation; everything durable goes through `writer`."""

    def __init__(self, session, writer):
        self.session = session
        self.writer = writer
        self.run_stats = TokenStats()
        records = writer.records()
        previous = last_stats(records)
        self.conv_stats = TokenStats.from_dict((previous or {}).get("conversation", {}))
        self.windows = window_chain(previous)
        # A new window carries every user prompt, so the current file holds them all.
        self.prompts = sum(1 for record in records if is_user_prompt(record))
        self.calls = 0
        self.recent_actions = []
        self.gate_refusals = 0  # final responses the response hook refused in this run
        self.client = None  # one provider client for the whole run (see nagent_llm.make_client)

    def redact(self, text):
        return redact(text, self.session.secrets)

    def append(self, kind, body, attrs=None):
        record = self.writer.append(kind, self.redact(body), attrs)
        self.prompts += is_user_prompt(record)
        return record

    def record_stats(self, result=None):
        call = None if result is None else {key: getattr(result, key) for key in LAST_CALL_FIELDS}
        self.append("stats", encode_stats(
            self.conv_stats.as_dict(), self.run_stats.as_dict(), call, window=len(self.windows) + 1,
            previous=self.windows[-1] if self.windows else None, prompts=self.prompts))

    def provider_client(self):
        if self.client is None:
            self.client = nagent_llm.make_client(self.session.settings)
        return self.client

    def count_call(self, result):
        prices = self.session.settings.prices
        self.run_stats = add_result(self.run_stats, result, prices)
        self.conv_stats = add_result(self.conv_stats, result, prices)
        self.record_stats(result)
