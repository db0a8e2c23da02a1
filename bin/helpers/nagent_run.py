"""One invocation's mutable run state, shared by the loop, the window keeper and --compact.

Data contract: `Run(session, writer)` holds the session (see nagent_session), the
ConversationWriter that owns the conversation file while the lock is held, this run's and
the conversation's token totals (the latter continued from the file's last "stats" record),
the window chain, the number of model calls made and of user prompts in the conversation, and
one provider client for the whole run.
Everything durable goes through `append`, which redacts the session's secrets first; every model
call, whoever makes it, is announced with `call_started(purpose)` and counted with
`count_call(result, purpose)`, which appends a "stats" record (its one-line format is
nagent_stats_format's); a call that raised is counted with `count_spent(error, purpose)`;
`call_number` counts the calls the run made itself, while its totals also
count the calls of nested nagents, which the actions fold in. `caps` is the run tree's budget
(nagent_budget; the session's): no call starts past it (`call_started` raises BudgetError);
`action_context(children)` hands actions what is left of it (each of `children` nested nagents an
equal share, shell commands a deadline) and the run's MCP channel (`mcp`, nagent_mcp_channel). `events` (nagent_events.Events;
quiet by default) receives what the run reports as it goes, through `emit`; `DeltaRedactor` passes
streamed text on with the session's secrets blanked, holding back a tail that may be the start of
one.
It sits below nagent_loop and nagent_window so both (and nagent_compact) use it without
importing each other.
"""
import time
from dataclasses import replace

import nagent_llm
from nagent_accounting import TokenStats, add_result, call_cost
from nagent_budget import Caps, encode, left, over, report, share
from nagent_conversation_tail import last_stats, window_chain
from nagent_events import Events
from nagent_run_records import is_user_prompt
from nagent_secrets import redact
from nagent_stats_format import encode_stats

USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                "reasoning_tokens", "estimated")

LAST_CALL_FIELDS = ("provider", "model", "input_tokens", "output_tokens", "cache_read_tokens",
                    "cache_write_tokens", "reasoning_tokens", "finish_reason", "elapsed",
                    "attempts", "estimated")


class Run:
    """Mutable state of one invocation; everything durable goes through `writer`."""

    def __init__(self, session, writer, events=None):
        self.session = session
        self.writer = writer
        self.events = Events() if events is None else events
        self.actions_run = 0
        self.run_stats = TokenStats()
        records = writer.records()
        previous = last_stats(records)
        self.conv_stats = TokenStats.from_dict((previous or {}).get("conversation", {}))
        self.windows = window_chain(previous)
        # A new window carries every user prompt, so the current file holds them all.
        self.prompts = sum(1 for record in records if is_user_prompt(record))
        self.calls = 0          # model calls of the loop itself (max_calls counts these)
        self.call_number = 0    # every call this run made itself, checkpoints included
        self.recent_actions = []
        self.gate_refusals = 0  # final responses the response hook refused in this run
        self.client = None  # one provider client for the whole run (see nagent_llm.make_client)
        self.instance = None  # its run file (nagent_instances.RunFile), when it keeps one
        self.cut_off = []     # sub-agent conversations an interruption cut off
        self.origin = None    # where a user's conversation started (nagent_project_conversations)
        self.snapshots = None  # nagent_run_snapshots.RunSnapshots, from the first model call
        self.turn_id = ""      # the turn's id, on its prompt record (snapshots use it)
        self.caps = getattr(session, "budget", None) or Caps()   # nagent_budget, the run tree's
        self.mcp = None        # the run's MCP channel (nagent_mcp_channel), set by the loop
        self.started = time.monotonic()

    def elapsed(self):
        return time.monotonic() - self.started

    def budget_report(self):
        return report(self.caps, self.run_stats, self.elapsed())

    def action_context(self, children=1):
        """The session's action context with what is left of the budget: each of `children`
        child processes gets an equal share, shell commands end by the time cap."""
        ctx = self.session.action_context
        if self.mcp is not None:
            ctx = replace(ctx, mcp=self.mcp)
        if not self.caps.any:
            return ctx
        remaining = left(self.caps, self.run_stats, self.elapsed())
        deadline = None if remaining.seconds is None else time.monotonic() + remaining.seconds
        return replace(ctx, child_budget=encode(share(remaining, children)), deadline=deadline)

    def redact(self, text):
        return redact(text, self.session.secrets)

    def append(self, kind, body, attrs=None):
        record = self.writer.append(kind, self.redact(body), attrs)
        self.prompts += is_user_prompt(record)
        return record

    def record_stats(self, result=None):
        call = None if result is None else {key: getattr(result, key) for key in LAST_CALL_FIELDS}
        caps = self.caps
        self.append("stats", encode_stats(
            self.conv_stats.as_dict(), self.run_stats.as_dict(), call, window=len(self.windows) + 1,
            previous=self.windows[-1] if self.windows else None, prompts=self.prompts,
            budget={"max_cost": caps.cost, "max_tokens": caps.tokens, "max_time": caps.seconds}
            if caps.any else None))

    def provider_client(self):
        if self.client is None:
            self.client = nagent_llm.make_client(self.session.settings)
        return self.client

    def emit(self, kind, /, **fields):
        return self.events.emit(kind, **fields)

    def call_started(self, purpose):
        """Announce a model call (reply, continuation, summary, checkpoint); its number. Past a
        cap of the budget no call starts: BudgetError."""
        problem = over(self.caps, self.run_stats, self.elapsed()) if self.caps.any else None
        if problem:
            raise problem
        self.call_number += 1
        number = self.call_number
        settings = self.session.settings
        self.emit("model_call_start", call=number, purpose=purpose, provider=settings.provider.name,
                  model=settings.model)
        return number

    def count_call(self, result, purpose="checkpoint"):
        prices = self.session.settings.prices
        self.run_stats = add_result(self.run_stats, result, prices)
        self.conv_stats = add_result(self.conv_stats, result, prices)
        self.record_stats(result)
        cost = call_cost(result, prices)
        self.emit("model_call_end", call=self.call_number, purpose=purpose,
                  provider=result.provider, model=result.model, finish=result.finish_reason,
                  elapsed=result.elapsed, attempts=result.attempts, streamed=result.streamed,
                  first_text=result.first_text,
                  usage={key: getattr(result, key) for key in USAGE_FIELDS},
                  cost_usd=None if cost is None else round(cost, 6))

    def count_spent(self, error, purpose):
        """A call that failed or was interrupted counts with what the provider may bill for it
        (nagent_llm.spent, estimated), so totals, --status and the closing line match the
        server."""
        spent = nagent_llm.spent(error)
        if spent is not None:
            self.count_call(spent, purpose)


class DeltaRedactor:
    """Streamed text with secrets blanked: `feed` passes on what can no longer become part of a
    secret (redacted), `flush` the rest at the call's end, `reset` drops it (a retry)."""

    def __init__(self, secrets, send):
        self.secrets = tuple(secret for secret in secrets if secret)
        self.send = send
        self.pending = ""

    def feed(self, text):
        if not self.secrets:
            self.send(text)
            return
        pending = self.pending + text
        hold = 0
        for secret in self.secrets:
            for size in range(min(len(secret) - 1, len(pending)), hold, -1):
                if secret.startswith(pending[len(pending) - size:]):
                    hold = size
                    break
        self.pending = pending[len(pending) - hold:] if hold else ""
        out = pending[:len(pending) - hold]
        if out:
            self.send(redact(out, self.secrets))

    def flush(self):
        if self.pending:
            self.send(redact(self.pending, self.secrets))
        self.pending = ""

    def reset(self):
        self.pending = ""
