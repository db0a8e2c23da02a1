"""What the loop's own bookkeeping records mean, in one place for the loop, the request
builder and the window rebuild: failed-run markers and output-limit continuation notes.

Data contract (records are nagent_conversation.Record):
- A failed run is marked by a "system" record with attribute run="failed", appended when the
  run fails (provider error, protocol failure, any other error after its prompt was written);
  its body is a <system> note the model reads between the failed prompt and the next one. An
  "interrupt" record (Ctrl-C, an exit signal) marks a run the same way.
- `is_user_prompt(record)`: a prompt the user started a turn with (any source but "next", a
  model's continuation, and "inbox", a message sent into a run with `nagent --send`, which
  belongs to the turn it arrived in); `is_inbox_message(record)`: such a message.
- `failed_prompt(records)` is the prompt a `nagent --retry` re-runs: the last user prompt
  when its run is marked failed; else None. `retry_prompt(records, path)` is that prompt, or a
  UsageError when there is none.
- `interrupt_record(cut_off, text)` -> (body, attrs) of an interrupt record: `text`, naming the
  sub-agents the interruption cut off (`cut_off`, their conversation names), if any.
- A prompt of a plan-mode run carries mode="plan". `mode_note(records, mode)` is the <system>
  note a run appends before its prompt when its mode is not the one of the previous user
  prompt (the initial context's session facts only tell the mode a conversation started in);
  None when it is the same, or for the first prompt.
- A continuation note is a "system" record with continuation="true" (older files: the same
  text without the attribute) between a reply cut by the output limit (valid="partial") and
  the call that continues it.
"""
from nagent_errors import UsageError

FAILED_RUN = "failed"
CONTINUE_TEXT = ("<system>Your reply was cut off by the output limit. Continue exactly where it "
                 "stopped, without repeating anything.</system>")
CUT_TEXT = ("<system>Your reply was cut off: the connection to you ended before it was "
            "complete. Continue exactly where it stopped, without repeating anything.</system>")
CONTINUATION_ATTRS = {"continuation": "true"}
_REASONS = {"provider": "the model provider returned an error",
            "protocol": "the replies were not in the nagent tag protocol",
            "input": "a file or conversation error", "refused": "a safety check refused it",
            "limit": "a loop guard stopped it",
            "gate": "the response hook did not accept the final response"}


MODE_NOTES = {
    "build": ("<system>The session is now in build mode: you may change files again, under the "
              "write rules above. Carry out the plan above if the user asks for it.</system>"),
    "plan": ("<system>The session is now in plan mode: read, run read-only commands and plan; "
             "change nothing (commands that would change the project are refused, and so are "
             "writes and edits outside the temp roots). Your final <nagent-response> is the "
             "plan.</system>"),
}


def mode_note(records, mode):
    last = next((record for record in reversed(records) if is_user_prompt(record)), None)
    if last is None or (last.attr("mode") or "build") == mode:
        return None
    return MODE_NOTES[mode]


def failure_marker(kind):
    """(body, attrs) of the record marking a failed run; `kind` is NagentError.kind."""
    reason = _REASONS.get(kind, "an error")
    return (f"<system>The run for the prompt above failed before it was answered ({reason}).</system>",
            {"run": FAILED_RUN})


def is_failure_marker(record):
    return record.kind == "interrupt" or (record.kind == "system" and record.attr("run") == FAILED_RUN)


def is_user_prompt(record):
    return record.kind == "prompt" and record.attr("source") not in ("next", "inbox")


def is_inbox_message(record):
    return record.kind == "prompt" and record.attr("source") == "inbox"


def failed_prompt(records):
    last, failed = None, False
    for record in records:
        if is_user_prompt(record):
            last, failed = record, False
        elif last is not None and is_failure_marker(record):
            failed = True
    return last.body if failed else None


def is_continuation_note(record):
    return record.kind == "system" and (record.attr("continuation") == "true"
                                        or record.body.startswith(CONTINUE_TEXT[:50]))


def retry_prompt(records, path):
    prompt = failed_prompt(records)
    if prompt is None:
        raise UsageError("no failed prompt to retry", path, "nagent --retry re-runs the last "
                         "prompt when its run failed; the last run finished or there is none")
    return prompt


def interrupt_record(cut_off, text):
    if not cut_off:
        return text, None
    names = ", ".join(cut_off)
    return (f"{text} Sub-agents cut off (their conversations keep what they did): {names}.",
            {"cut_off": " ".join(cut_off)})
