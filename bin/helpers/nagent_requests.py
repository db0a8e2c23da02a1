"""Conversation records → the model request, deterministically.

Data contract: `build_request(records, provider_row, cache_key=None) -> Request`.
- The model's own valid replies (as run: cut at a fabricated block) become assistant
  messages; everything else the model should see (initial context, prompts, results,
  corrections, notes, interruptions) becomes user messages, consecutive ones merged, one
  part per record so block boundaries stay stable from one request to the next.
- A reply continued after the output limit is stored whole (as run) but sent as the part
  the model wrote after its partial replies, so the model never sees itself repeat. The
  partial replies and the continuation notes between them (system records with
  continuation="true") are sent only while the continuation is in progress (they end the
  records) or once the whole reply turned out valid; the partial parts of an invalid reply,
  or of one a failure or interruption left unfinished, are never sent.
- Invalid replies are not sent back (a raw invalid turn acts as an example the model
  copies); the correction that follows them carries a pointer to the record instead.
- Records of kind stats / meta / error / hook are bookkeeping and never sent.
- A message sent into a run (a prompt record with source="inbox") is sent as the user's text
  after a <system> line saying it arrived while the model was working (INBOX_NOTE).
- Cache breakpoints: the static initial context, the end of the user turn the previous
  request ended with, and the end of this request — so each request reads back what the
  previous one wrote (Anthropic looks up whole blocks). Other providers ignore them.
- Stop sequences: nagent_protocol_blocks.STOP_SEQUENCES (driver blocks at a line start, most common
  first), as many as the provider takes.
The same records always give the same request: request N is a prefix of request N+1.
"""
from nagent_llm import Message, Request
from nagent_protocol_blocks import STOP_SEQUENCES
from nagent_run_records import is_continuation_note

NOT_SENT = frozenset({"stats", "meta", "error", "hook"})
INBOX_NOTE = ("<system>A message from the user arrived while you were working (sent with nagent "
              "--send); take it into account from here on:</system>\n")


def reply_text_as_run(record):
    """The part of a reply that was acted on (a fabricated tail is cut off)."""
    cut = record.attr("cut")
    if cut is not None and str(cut).isdigit():
        return record.body[: int(cut)]
    return record.body


def render_user_record(record):
    if record.kind == "context":
        return record.body
    if record.kind == "interrupt":
        return f"<system>{record.body}</system>" if not record.body.startswith("<system>") else record.body
    if record.kind == "prompt" and record.attr("source") == "inbox":
        return INBOX_NOTE + record.body
    return record.body


def _add(messages, role, text):
    if not text:
        return
    if messages and messages[-1][0] == role:
        messages[-1][1].append(text)
    else:
        messages.append((role, [text]))


def record_messages(records):
    """[(role, [parts])] with consecutive roles merged; the first message is always user."""
    messages = []
    pending = []  # (role, text) of partial replies and continuation notes, not yet sent
    partial = ""  # the text of those partial replies
    for record in records:
        if record.kind in NOT_SENT:
            continue
        if record.kind == "reply" and record.attr("valid") == "partial":
            pending.append(("assistant", record.body.rstrip()))
            partial += record.body
            continue
        if pending and is_continuation_note(record):
            pending.append(("user", record.body))
            continue
        if record.kind == "reply" and record.attr("continued") == "true" and \
                record.attr("valid", "true") != "false":
            for role, text in pending:
                _add(messages, role, text)
        pending, whole_partial, partial = [], partial, ""
        if record.kind == "reply":
            if record.attr("valid", "true") == "false":
                continue
            text = reply_text_as_run(record)
            if record.attr("continued") == "true" and whole_partial and text.startswith(whole_partial):
                # The model wrote only the rest; its partial replies are already above.
                text = text[len(whole_partial):]
            _add(messages, "assistant", text.rstrip())
        else:
            _add(messages, "user", render_user_record(record))
    for role, text in pending:  # a continuation in progress: this request asks for the rest
        _add(messages, role, text)
    if messages and messages[0][0] != "user":
        messages.insert(0, ("user", ["(conversation start)"]))
    return messages


def cache_breakpoints(messages):
    marks = []
    if messages:
        marks.append((0, 0))
    last = len(messages) - 1
    if last >= 2:
        # The user message just before the newest assistant reply ended the previous request.
        previous = last - 2 if messages[last][0] == "user" else last - 1
        if previous >= 0 and messages[previous][0] == "user":
            marks.append((previous, len(messages[previous][1]) - 1))
    if last >= 0:
        marks.append((last, len(messages[last][1]) - 1))
    unique = []
    for mark in marks:
        if mark not in unique:
            unique.append(mark)
    return tuple(unique)


def build_request(records, provider_row, cache_key=None, max_output_tokens=None):
    messages = record_messages(records)
    if messages and messages[-1][0] == "assistant":
        # A request must end with the user's turn; a dangling reply gets an explicit nudge.
        messages.append(("user", ["<system>Continue.</system>"]))
    stop = STOP_SEQUENCES[: provider_row.max_stop_sequences] if provider_row.max_stop_sequences else ()
    return Request(
        messages=tuple(Message(role, tuple(parts)) for role, parts in messages),
        stop=stop, cache_key=cache_key, cache_breakpoints=cache_breakpoints(messages),
        max_output_tokens=max_output_tokens,
    )


def request_fingerprint(request):
    """A canonical serialisation used to measure prefix stability between requests."""
    import json
    return json.dumps([[m.role, list(m.parts)] for m in request.messages], ensure_ascii=False)
