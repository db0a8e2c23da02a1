"""The agent loop: main → run_agent_loop → call_llm → parse_response → process_tags.

Data contract: `run_agent_loop(session, prompt, source) -> RunOutcome`. `session` (see
nagent_session) names the conversation file, settings, action context and loop limits;
`prompt` None with source "retry" re-runs the last prompt whose run failed
(nagent_run_records.retry_prompt: a UsageError when there is none), as a new prompt record.
Every prompt, reply (valid or not), result, correction, provider error and interruption is
appended as one record before anything else happens, so the file is always the whole truth
and a killed run loses nothing it had accepted. A run that fails after its prompt was
written appends a failed-run marker, so the next prompt never reads as part of it.
Ctrl-C (130), SIGTERM (143) and SIGHUP (129) end the running shell command's process group
(and every running sub-agent's tree) and append an interrupt record naming them and the
sub-agents they cut off (attribute cut_off: their conversation names).
The configured MCP servers the run's shell commands call through `nagent-mcp` are started once,
on first use, and stay up until the run ends (nagent_mcp_channel.run_channel); they end with it,
however it ends.
- Actions run in reply order; consecutive <nagent-agent> tags are one batch run concurrently,
  a barrier for what follows, results in tag order (nagent_loop_actions.process_tags).
- Before each model call (a turn boundary, never inside a call or an action), messages sent
  with `nagent --send` (or typed in an interactive session) are appended as prompts with
  source="inbox"; the run keeps its run file (nagent_run_presence) up to date at call and
  action boundaries.
- A user's main conversation (`follows_project`: not a sub-agent's, not a per-file edit
  session's) starts with an origin in its meta record, and every run of it records its use in
  the project index (nagent_project_conversations) when it ends, for -c and --resume.
- A reply cut off by the output limit, or by the connection after it had started (a timeout
  between chunks, a dropped stream: nagent_llm keeps what arrived, finish "cut"), is continued
  only while its text so far parses (valid, or invalid only because it is unfinished), at most
  `max_continuations` times; a stop at a stop sequence is a cut at the reply's end
  (nagent_protocol.parse_response `stopped_at`).
- A call that fails or is interrupted (Ctrl-C, a signal) is still counted, with the usage the
  provider may bill for it (nagent_llm.spent), before the error goes on.
- The model calls made since the last valid reply, continuations included, never exceed
  `max_format_retries + 1`: then the run stops with exit 8.
The outcome is plain data: the final response (cleaned; at exit 8 the last invalid reply's
text, with `valid` False), exit code, model calls, this run's and the conversation's token totals.
As it goes the run emits events (nagent_events; `events` None is quiet): run_start, prompt,
model_call_start/end, reply_delta (only when a sink wants deltas: the calls are then
streamed), retry, reply (valid, final), note, action_start/end, agents (the running children of a
batch, whenever they or what they do change; an empty list when the batch is over) and
response (once a response hook, if any, accepted it), and snapshot (nagent_run_snapshots: the
project tree is snapshotted at the turn's start, while its first model call runs, and before
and after each action that can change files; each user prompt record carries a `turn_id`
naming the turn for them). The caller emits error and run_end. Nothing here prints but the
initial context's warnings.
Once the run's first reply starts to arrive (its first text: the request is out, and the model is
still writing), a thread imports what handling the reply needs (FIRST_STEP_MODULES), so the
first step does not wait for those imports after the answer.

A dispatch point (tests/test_architecture.py): the parser, the reply's action handling and the
MCP channel (for a run with MCP servers) load where first needed, not before the first request.
"""
import contextlib
import json
import os
import sys
from dataclasses import dataclass, replace

import nagent_llm
from nagent_accounting import TokenStats
from nagent_conversation import ConversationWriter, utc_now
from nagent_errors import (EXIT_CODES, BudgetError, ExitSignal, LimitError, NagentError,
                           ProtocolFailure, ProviderError)
from nagent_hooks import gate_response, refusal_view
from nagent_preload import preload
from nagent_procs import exit_signals
from nagent_project_conversations import new_origin, origin_in, record_use
from nagent_requests import build_request
from nagent_run import DeltaRedactor, Run
from nagent_run_presence import deliver_inbox, late_messages, progress, registered
from nagent_run_records import (CONTINUATION_ATTRS, CONTINUE_TEXT, CUT_TEXT, failure_marker,
                                interrupt_record, mode_note, retry_prompt)
from nagent_run_snapshots import RunSnapshots
from nagent_window import maybe_compact


# What handling the first reply imports (parser, actions, shell, snapshots, the response hook):
# loaded in a thread while the first reply arrives, not after it is in (the first step of a run).
FIRST_STEP_MODULES = ("nagent_protocol", "nagent_loop_actions", "nagent_action_view",
                      "nagent_actions", "nagent_shell", "nagent_run_snapshots", "nagent_hooks")


def _protocol():
    """The parser and its text helpers, imported when the first reply is in: compiling its
    patterns is start-up cost the first request need not wait for."""
    import nagent_protocol
    return nagent_protocol


def _reply_handling():
    """nagent_loop_actions (process_tags, repeated_too_often), imported when a reply is in."""
    import nagent_loop_actions
    return nagent_loop_actions


def _mcp_channel(session):
    """The run's MCP channel (nagent_mcp_channel.run_channel); a run whose settings name no
    server never loads that module."""
    if not session.settings.mcp_servers:
        return contextlib.nullcontext()
    from nagent_mcp_channel import run_channel
    return run_channel(session)


@dataclass(frozen=True)
class RunOutcome:
    response: str | None
    exit_code: int
    conversation: str
    model_calls: int
    run_stats: TokenStats
    conversation_stats: TokenStats
    error: dict | None = None
    valid: bool = True  # False: `response` is the text of a reply outside the tag protocol
    accepted: bool = True  # False: the response hook refused `response` (exit 12)
    budget: dict | None = None  # the run tree's caps and what it spent (nagent_budget.report)

    def as_dict(self):
        data = {"response": self.response, "valid": self.valid, "accepted": self.accepted,
                "exit_code": self.exit_code,
                "conversation": self.conversation, "model_calls": self.model_calls,
                "totals": self.run_stats.as_dict(), "conversation_totals": self.conversation_stats.as_dict(),
                "error": self.error}
        if self.budget is not None:
            data["budget"] = self.budget
        return data


@dataclass(frozen=True)
class Reply:
    """A whole model reply, possibly continued over several calls."""
    text: str
    result: object      # the last call's nagent_llm.Result
    calls: int
    stopped_at: str | None  # see nagent_protocol.parse_response

    @property
    def continued(self):
        return self.calls > 1


def call_llm(run, purpose="reply"):
    """One model call over the request derived from the file; usage folded into totals.
    Returns (result, the stop sequences the request carried)."""
    session = run.session
    if run.calls >= session.limits.max_calls:
        raise LimitError("model call limit reached for this invocation", session.limits.max_calls,
                         "raise it with --max-calls N or max_calls in the config, or continue "
                         "with another prompt")
    request = build_request(run.writer.records(), session.settings.provider,
                            cache_key=session.cache_key)
    number = run.call_started(purpose)
    deltas = None
    if run.events.wants_deltas:
        deltas = DeltaRedactor(session.secrets,
                               lambda text: run.emit("reply_delta", call=number, text=text))

    def on_retry(problem, attempt, delay):
        run.append("error", f"{problem.line()} — retrying in {delay:.1f} s (attempt {attempt + 1})",
                   {"status": str(problem.status or problem.error_type)})
        if deltas:
            deltas.reset()
        run.emit("retry", call=number, attempt=attempt + 1,
                 max_attempts=session.settings.retry.max_attempts, delay=round(delay, 3),
                 reason=retry_reason(problem), error=run.redact(problem.line()[len("Error: "):]))

    run.calls += 1
    progress(run, f"model call {run.calls}")
    first_call, loading = run.snapshots is None, []

    def on_text(text):
        if first_call and not loading:   # the request is out and the model is answering
            loading.append(preload(FIRST_STEP_MODULES))
        if deltas:
            deltas.feed(text)
    try:
        client = run.provider_client()
        turn_snapshots(run).model_call()   # the turn's first snapshot runs while the model works
        try:
            result = nagent_llm.generate(request, session.settings, on_retry=on_retry,
                                         client=client, on_text=on_text)
        finally:   # done before any action can fork a child (a thread mid-import must not be)
            for thread in loading:
                thread.join()
    except ProviderError as error:
        run.append("error", error.line(), {"status": str(error.status or error.error_type)})
        run.count_spent(error, purpose)
        raise
    except BaseException as error:   # Ctrl-C or a signal mid-call: what it cost still counts
        run.count_spent(error, purpose)
        raise
    if deltas:
        deltas.flush()
    run.count_call(result, purpose)
    return result, request.stop


def retry_reason(problem):
    """"HTTP 429", "timeout", "connection" ...: why a call is retried, in a few words."""
    return f"HTTP {problem.status}" if problem.status else (problem.error_type or "error")


def stopped_at(result, stops):
    """How the provider ended the reply, as parse_response's `stopped_at`: the driver block of
    a reported stop sequence, "" for a plain stop of a request that carried stop sequences
    (OpenAI chat and Gemini do not say which stop ended a reply), else None."""
    if result.finish_reason == "stop_sequence":
        return _protocol().stop_block(result.stop_sequence)
    return "" if stops and result.finish_reason == "stop" else None


def continuable(text):
    """A reply cut by the output limit is continued only if what it has so far parses."""
    parsed = _protocol().parse_response(text)
    return parsed.cut_at is None and (parsed.valid or parsed.truncated)


def next_reply(run, budget, purpose="reply"):
    """A whole reply in at most `budget` calls (and `max_continuations` continuations)."""
    limits = run.session.limits
    parts = []
    while True:
        result, stops = call_llm(run, purpose if not parts else "continuation")
        parts.append(result.text)
        text = "".join(parts)
        if not result.truncated or len(parts) > limits.max_continuations \
                or len(parts) >= budget or not continuable(text):
            return Reply(text, result, len(parts), stopped_at(result, stops))
        # Recorded only when another call follows: after the last one, only the correction.
        run.append("reply", result.text, {"valid": "partial", "finish": result.finish_reason,
                                          "provider": result.provider, "model": result.model})
        if result.cut:
            run.emit("note", text=f"reply cut off after {len(result.text)} characters "
                                  f"({result.cut}); asking for the rest")
        run.append("system", CUT_TEXT if result.cut else CONTINUE_TEXT, CONTINUATION_ATTRS)


def run_agent_loop(session, prompt, source="argv", events=None):
    settings = session.settings
    if events is not None:
        events.emit("run_start", conversation=session.path, provider=settings.provider.name,
                    model=settings.model, invocation=session.meta.get("invocation", "user"))
    with ConversationWriter(session.path, lock_timeout=session.limits.lock_timeout) as writer, \
            exit_signals(), registered(session) as instance, _mcp_channel(session) as channel:
        if prompt is None:
            prompt = retry_prompt(writer.records(), session.path)
        run = Run(session, writer, events)
        run.instance = instance
        run.mcp = channel
        try:
            return _run(run, prompt, source)
        finally:   # after the run, off the first request's path: -c and --resume find it
            if run.origin is not None:
                record_use(session.path, run.origin, session.environ or None)


def _run(run, prompt, source):
    try:
        done = _loop(run, prompt, source)
    except KeyboardInterrupt:
        text, attrs = interrupt_record(run.cut_off, "The user interrupted the previous run (Ctrl-C).")
        run.append("interrupt", text, attrs)
        end_snapshot(run)
        return outcome(run, None, EXIT_CODES["interrupted"], error={"error": "interrupted"})
    except ExitSignal as stop:
        # A running shell command's group (and a sub-agent's tree) was ended on the way out.
        text, attrs = interrupt_record(run.cut_off, f"The previous run was ended by {stop.name}.")
        run.append("interrupt", text, attrs)
        end_snapshot(run)
        return outcome(run, None, stop.exit_code, error={"error": f"ended by {stop.name}"})
    end_snapshot(run)
    late = late_messages(run)
    if late:
        run.emit("note", text=f"{late} message(s) for this conversation (--send, or typed in a "
                              "session) arrived after the last model call; they are delivered "
                              "at the start of the next run")
    return done


def turn_snapshots(run):
    """The turn's snapshots (nagent_run_snapshots), made as its first model call goes out: their
    modules are not needed before the first request."""
    if run.snapshots is None:
        run.snapshots = RunSnapshots(run.session, run.emit, run.append, run.turn_id, run.prompts)
    return run.snapshots


def end_snapshot(run):
    """Close an action a Ctrl-C cut short; a second Ctrl-C or signal meanwhile only skips it."""
    if run.snapshots is None:
        return
    try:
        run.snapshots.end_turn()
    except (KeyboardInterrupt, ExitSignal):
        pass


def start_conversation(run):
    if run.writer.torn:
        run.append("system", f"<system>The previous run was killed mid-write; its partial record was "
                   f"moved to {run.writer.torn}.</system>")
    follows = follows_project(run.session)
    if not any(record.kind == "context" for record in run.writer.records()):
        context = run.session.initial_context()
        run.append("context", "<initial_context>\n" + context.static, {"part": "static"})
        run.append("context", context.session + "\n</initial_context>", {"part": "session"})
        meta = dict(run.session.meta, **context.meta)
        if follows:
            meta["origin"] = new_origin(context.root)
        run.append("meta", json.dumps(meta, sort_keys=True))
        for line in context.warnings:
            sys.stderr.write(f"warning: {line}\n")
    if follows:   # recorded in the project index when the run ends
        run.origin = origin_in(run.writer.records())


def follows_project(session):
    """A user's main conversation (not a sub-agent's, not a per-file edit session's)."""
    return session.meta.get("invocation", "user") == "user" and not session.file_edit


def outcome(run, response, code, error=None, valid=True):
    return RunOutcome(response, code, run.session.path, run.run_stats.model_calls, run.run_stats,
                      run.conv_stats, error, valid, budget=run.budget_report())


def failed(run, error, response=None):
    """The run stops on `error`: mark its prompt's run failed, then the outcome."""
    body, attrs = failure_marker(error.kind)
    run.append("system", body, attrs)
    if response is not None:
        run.emit("response", text=response, valid=False, accepted=True)
    return outcome(run, response, error.exit_code, error.as_dict(), valid=response is None)


def answered(run, response, code, error=None):
    """The run ends with a final answer (None: none)."""
    if response is not None:
        response = run.redact(response)
        run.emit("response", text=response, valid=True, accepted=True)
    return outcome(run, response, code, error)


def reply_notes(parsed, actions, responses):
    """What the model should hear about how its (valid) reply was taken."""
    notes = []
    if parsed.cut_at is not None:
        block = f"the driver's <{parsed.cut_tag}> block" if parsed.cut_tag else "a driver block"
        notes.append(f"Your reply wrote {block}; everything from there on was discarded unrun. "
                     "Never write result blocks: the driver appends them.")
    if parsed.duplicates_dropped:
        notes.append(f"{parsed.duplicates_dropped} repeated identical action(s) in your reply ran once.")
    if actions and responses:
        notes.append("Your <nagent-response> was not final because the reply also asked for "
                     "actions; respond again after reading their results.")
    return notes


def record_invalid(run, reply, attrs, parsed, streak_calls):
    """Keep the invalid reply and its correction; a ProtocolFailure once the calls since the
    last valid reply reach max_format_retries + 1."""
    record = run.append("reply", reply.text, dict(attrs, valid="false"))
    run.append("system", _protocol().correction_text(f"{parsed.error.rstrip('.')} (your reply is kept as "
                                         f"record {record.seq} and not repeated here)."))
    if streak_calls > run.session.limits.max_format_retries:
        return ProtocolFailure("the model kept replying outside the nagent tag protocol",
                               f"{streak_calls} model calls without a valid reply; every reply is "
                               f"kept in {run.session.path}",
                               "try again, or a model that follows the format")
    return None


def record_valid(run, reply, attrs, parsed):
    """Append a valid reply; a cut is stored as an offset into the stored (redacted) text."""
    stored = run.redact(reply.text)
    if parsed.cut_at is not None:
        protocol = _protocol()
        at_stored = parsed if stored == reply.text else protocol.parse_response(stored,
                                                                                reply.stopped_at)
        kept = (protocol.kept_reply(stored, at_stored) if at_stored.cut_at is not None
                else run.redact(protocol.kept_reply(reply.text, parsed)))
        attrs = dict(attrs, cut=str(len(kept)))
    run.append("reply", stored, dict(attrs, valid="true"))


def reply_attrs(reply):
    attrs = {"provider": reply.result.provider, "model": reply.result.model,
             "finish": reply.result.finish_reason}
    if reply.continued:
        attrs["continued"] = "true"
    return attrs


def _loop(run, prompt, source):
    limits = run.session.limits
    start_conversation(run)
    mode = getattr(run.session, "mode", "build")
    note = mode_note(run.writer.records(), mode)
    if note:
        run.append("system", note, {"mode": mode})
    turn_id = os.urandom(8).hex()   # names this turn for its snapshots (--changes, --rewind)
    run.append("prompt", prompt, {"source": source, "turn_id": turn_id,
                                **({"mode": mode} if mode == "plan" else {})})
    run.emit("prompt", text=run.redact(prompt), source=source)
    run.turn_id = turn_id
    streak_calls = 0  # model calls since the last valid reply
    while True:
        deliver_inbox(run)   # a turn boundary: messages sent with --send come in here
        try:
            maybe_compact(run, utc_now(), checkpoint=streak_calls == 0)
            reply = next_reply(run, limits.max_format_retries + 1 - streak_calls)
        except LimitError as error:
            return final_summary(run, error)
        except NagentError as error:
            return failed(run, error)
        streak_calls += reply.calls
        parsed = _protocol().parse_response(reply.text, reply.stopped_at)
        if not parsed.valid:
            failure = record_invalid(run, reply, reply_attrs(reply), parsed, streak_calls)
            run.emit("reply", calls=reply.calls, valid=False, final=False, actions=0,
                     error=run.redact(parsed.error), asking_again=failure is None)
            if failure:
                return failed(run, failure, response=run.redact(reply.text))
            continue
        streak_calls = 0
        record_valid(run, reply, reply_attrs(reply), parsed)
        actions = [a for a in parsed.actions if a.kind != "response"]
        responses = [a for a in parsed.actions if a.kind == "response"]
        run.emit("reply", calls=reply.calls, valid=True, final=not actions, actions=len(actions),
                 error=None, asking_again=False)
        notes = reply_notes(parsed, actions, responses)
        if notes:
            run.append("system", "<system>" + " ".join(notes) + "</system>")
            for note in notes:
                run.emit("note", text=note)
        if not actions:
            final = _protocol().clean_user_output(responses[-1].body) if responses else ""
            gate = gate_response(run, final)  # the response hook, when one is configured
            if gate is None:
                return answered(run, final, EXIT_CODES["ok"])
            view = run.redact(refusal_view(gate.hook_run))
            if gate.stop:
                run.emit("note", text=view)
                done = replace(failed(run, gate.stop), response=run.redact(final), accepted=False)
                run.emit("response", text=done.response, valid=True, accepted=False)
                return done
            first, _, rest = view.partition("\n")
            run.emit("note", text=f"{first}; asking again\n{rest}".rstrip("\n"))
            continue
        handling = _reply_handling()
        repeated = handling.repeated_too_often(run, actions, limits.repeat_limit)
        if repeated and run.recent_actions[-1][1] > limits.repeat_limit:
            # Past the warning: stop without running the same thing yet again.
            return final_summary(run, LimitError(
                "the model repeated the same action", run.recent_actions[-1][1],
                "the conversation keeps every step; rephrase the task"))
        handling.process_tags(run, actions)
        if repeated:
            text = (f"You have run the same action {run.recent_actions[-1][1]} times in a row "
                    "with the same result. Do something different or give your final "
                    "<nagent-response>.")
            run.append("system", f"<system>{text}</system>")
            run.emit("note", text=text)


def final_summary(run, reason):
    """Stop spinning: ask once for a final summary, print it, and exit with the limit code. A
    spent budget starts no call: the run stops with what it has."""
    if isinstance(reason, BudgetError):
        text = (f"The run stopped: {reason.what} ({reason.value}). Nothing was asked of the model "
                "after that; the conversation keeps every step.")
        run.append("system", f"<system>{text}</system>")
        run.emit("note", text=f"stopping: {reason.what} ({reason.value})")
        return answered(run, None, reason.exit_code, reason.as_dict())
    run.append("system", f"<system>Stop here ({reason.what}). Reply now with only a "
               "<nagent-response> summarising what was done, what is left, and why you stopped."
               "</system>")
    run.emit("note", text=f"stopping: {reason.what}; asking the model for a final summary")
    response = None
    try:
        limits = run.session.limits
        run.session = replace(run.session, limits=limits._replace(max_calls=run.calls + 1))
        reply = next_reply(run, limits.max_continuations + 1, purpose="summary")
        parsed = _protocol().parse_response(reply.text, reply.stopped_at)
        if parsed.valid:
            record_valid(run, reply, reply_attrs(reply), parsed)
        else:
            run.append("reply", reply.text, dict(reply_attrs(reply), valid="false"))
        responses = [a for a in parsed.actions if a.kind == "response"]
        actions = [a for a in parsed.actions if a.kind != "response"]
        # A summary's answer is final even beside actions: they are not run.
        run.emit("reply", calls=reply.calls, valid=parsed.valid, final=bool(responses),
                 actions=len(actions), error=run.redact(parsed.error or "") or None,
                 asking_again=False)
        if responses:
            response = _protocol().clean_user_output(responses[-1].body)
    except NagentError:
        pass
    return answered(run, response, reason.exit_code, reason.as_dict())
