"""The agent loop: main → run_agent_loop → call_llm → parse_response → process_tags.

Data contract: `run_agent_loop(session, prompt, source) -> RunOutcome`. `session` (see
nagent_session) names the conversation file, settings, action context and loop limits.
Every prompt, reply (valid or not), result, correction, provider error and interruption is
appended as one record before anything else happens, so the file is always the whole truth
and a killed run loses nothing it had accepted. The outcome is plain data: the final
response (cleaned), exit code, turns, this run's and the conversation's token totals.
"""
import json
from dataclasses import dataclass, replace

from nagent_accounting import TokenStats, add_child, status_line
from nagent_actions import process_action
from nagent_cli import Spinner
from nagent_conversation import ConversationWriter, utc_now
from nagent_errors import EXIT_CODES, LimitError, NagentError, ProtocolFailure, ProviderError
from nagent_protocol import clean_user_output, correction_text, kept_reply, parse_response
from nagent_requests import build_request
from nagent_run import Run
from nagent_window import maybe_compact


@dataclass(frozen=True)
class RunOutcome:
    response: str | None
    exit_code: int
    conversation: str
    turns: int
    run_stats: TokenStats
    conversation_stats: TokenStats
    error: dict | None = None

    def as_dict(self):
        return {"response": self.response, "exit_code": self.exit_code,
                "conversation": self.conversation, "turns": self.turns,
                "totals": self.run_stats.as_dict(), "conversation_totals": self.conversation_stats.as_dict(),
                "error": self.error}


def call_llm(run, spinner):
    """One model call over the request derived from the file; usage folded into totals."""
    session = run.session
    if run.calls >= session.limits.max_calls:
        raise LimitError("model call limit reached for this invocation", session.limits.max_calls,
                         "raise max_calls in the config or continue with another prompt")
    request = build_request(run.writer.records(), session.settings.provider,
                            cache_key=session.cache_key)

    def on_retry(problem, attempt, delay):
        run.append("error", f"{problem.line()} — retrying in {delay:.1f} s (attempt {attempt + 1})",
                   {"status": str(problem.status or problem.error_type)})

    import nagent_llm
    run.calls += 1
    try:
        result = nagent_llm.generate(request, session.settings, on_retry=on_retry,
                                     client=run.provider_client())
    except ProviderError as error:
        run.append("error", error.line(), {"status": str(error.status or error.error_type)})
        raise
    run.count_call(result)
    spinner.set_label(status_line(run.run_stats))
    return result


def action_key(action):
    return (action.kind, action.attrs, action.body)


def repeated_too_often(run, actions, limit):
    """True when the same action has now run `limit` times in a row."""
    for action in actions:
        key = action_key(action)
        if run.recent_actions and run.recent_actions[-1][0] == key:
            run.recent_actions[-1] = (key, run.recent_actions[-1][1] + 1)
        else:
            run.recent_actions.append((key, 1))
    return bool(run.recent_actions) and run.recent_actions[-1][1] >= limit


def process_tags(run, actions):
    """Run each action in order, appending its result (and any continuation prompt)."""
    for action in actions:
        outcome = process_action(action, run.session.action_context)
        if outcome.block:
            run.append("result", outcome.block, {"action": action.kind})
        if outcome.prompt is not None:
            run.append("prompt", outcome.prompt, {"source": "next"})
        if outcome.child:
            run.run_stats = add_child(run.run_stats, outcome.child)
            run.conv_stats = add_child(run.conv_stats, outcome.child)
            run.record_stats()


def next_reply(run, spinner):
    """A whole reply: a reply cut off by the output limit is continued a bounded number of times."""
    limits = run.session.limits
    parts = []
    for _ in range(limits.max_continuations + 1):
        result = call_llm(run, spinner)
        parts.append(result.text)
        if result.finish_reason != "length":
            break
        run.append("reply", result.text, {"valid": "partial", "finish": "length",
                                          "provider": result.provider, "model": result.model})
        run.append("system", "<system>Your reply was cut off by the output limit. Continue exactly "
                   "where it stopped, without repeating anything.</system>")
    return "".join(parts), result, len(parts) > 1


def run_agent_loop(session, prompt, source="argv"):
    with ConversationWriter(session.path, lock_timeout=session.limits.lock_timeout) as writer:
        run = Run(session, writer)
        try:
            return _loop(run, prompt, source)
        except KeyboardInterrupt:
            run.append("interrupt", "The user interrupted the previous run (Ctrl-C).")
            return outcome(run, None, EXIT_CODES["interrupted"], error={"error": "interrupted"})


def start_conversation(run):
    if run.writer.torn:
        run.append("system", f"<system>The previous run was killed mid-write; its partial record was "
                   f"moved to {run.writer.torn}.</system>")
    if not any(record.kind == "context" for record in run.writer.records()):
        context = run.session.initial_context()
        run.append("context", "<initial_context>\n" + context.static, {"part": "static"})
        run.append("context", context.session + "\n</initial_context>", {"part": "session"})
        if run.session.meta:
            run.append("meta", json.dumps(run.session.meta, sort_keys=True))


def outcome(run, response, code, error=None):
    return RunOutcome(response, code, run.session.path, run.run_stats.turns, run.run_stats,
                      run.conv_stats, error)


def reply_notes(parsed, actions, responses):
    """What the model should hear about how its (valid) reply was taken."""
    notes = []
    if parsed.cut_at is not None:
        notes.append(f"Your reply wrote the driver's <{parsed.cut_tag}> block; everything from "
                     "there on was discarded unrun. Never write result blocks: the driver appends them.")
    if parsed.duplicates_dropped:
        notes.append(f"{parsed.duplicates_dropped} repeated identical action(s) in your reply ran once.")
    if actions and responses:
        notes.append("Your <nagent-response> was not final because the reply also asked for "
                     "actions; respond again after reading their results.")
    return notes


def record_invalid(run, text, attrs, parsed, failures):
    """Keep the invalid reply and its correction; a ProtocolFailure once retries run out."""
    record = run.append("reply", text, dict(attrs, valid="false"))
    run.append("system", correction_text(f"{parsed.error.rstrip('.')} (your reply is kept as "
                                         f"record {record.seq} and not repeated here)."))
    if failures > run.session.limits.max_format_retries:
        return ProtocolFailure("the model kept replying outside the nagent tag protocol",
                               f"{failures} invalid replies in a row",
                               "the conversation file holds every reply; try again or switch model")
    return None


def _loop(run, prompt, source):
    limits = run.session.limits
    start_conversation(run)
    run.append("prompt", prompt, {"source": source})
    format_failures = 0
    with Spinner("waiting for model") as spinner:
        while True:
            try:
                maybe_compact(run, utc_now())
                text, result, continued = next_reply(run, spinner)
            except LimitError as error:
                return final_summary(run, spinner, error)
            except NagentError as error:
                return outcome(run, None, error.exit_code, error.as_dict())
            attrs = {"provider": result.provider, "model": result.model, "finish": result.finish_reason}
            if continued:
                attrs["continued"] = "true"
            parsed = parse_response(text)
            if not parsed.valid:
                format_failures += 1
                failure = record_invalid(run, text, attrs, parsed, format_failures)
                if failure:
                    return outcome(run, None, failure.exit_code, failure.as_dict())
                continue
            format_failures = 0
            if parsed.cut_at is not None:
                attrs["cut"] = str(len(kept_reply(text, parsed)))
            run.append("reply", text, dict(attrs, valid="true"))
            actions = [a for a in parsed.actions if a.kind != "response"]
            responses = [a for a in parsed.actions if a.kind == "response"]
            notes = reply_notes(parsed, actions, responses)
            if notes:
                run.append("system", "<system>" + " ".join(notes) + "</system>")
            if not actions:
                final = clean_user_output(responses[-1].body) if responses else ""
                return outcome(run, final, EXIT_CODES["ok"])
            repeated = repeated_too_often(run, actions, limits.repeat_limit)
            if repeated and run.recent_actions[-1][1] > limits.repeat_limit:
                # Past the warning: stop without running the same thing yet again.
                return final_summary(run, spinner, LimitError(
                    "the model repeated the same action", run.recent_actions[-1][1],
                    "the conversation keeps every step; rephrase the task"))
            process_tags(run, actions)
            if repeated:
                run.append("system", f"<system>You have run the same action "
                           f"{run.recent_actions[-1][1]} times in a row with the same result. Do "
                           "something different or give your final <nagent-response>.</system>")


def final_summary(run, spinner, reason):
    """Stop spinning: ask once for a final summary, print it, and exit with the limit code."""
    run.append("system", f"<system>Stop here ({reason.what}). Reply now with only a "
               "<nagent-response> summarising what was done, what is left, and why you stopped."
               "</system>")
    response = None
    try:
        limits = run.session.limits
        run.session = replace(run.session, limits=replace(limits, max_calls=run.calls + 1))
        text, result, _ = next_reply(run, spinner)
        parsed = parse_response(text)
        run.append("reply", text, {"valid": "true" if parsed.valid else "false",
                                   "provider": result.provider, "model": result.model,
                                   "finish": result.finish_reason})
        responses = [a for a in parsed.actions if a.kind == "response"]
        if responses:
            response = clean_user_output(responses[-1].body)
    except NagentError:
        pass
    return outcome(run, response, reason.exit_code, reason.as_dict())

