"""Summarise a text file with a model: inline when small, split-and-combine when large.

Data contract:
- `summarize_text` is any callable `(prompt: str) -> str` (the shims build it from the provider
  helper with `provider_text_callable`; tests pass a fake). This module never imports a
  provider SDK.
- `summarize_file(path, summarize_text) -> dict`:
    {"source": realpath, "size": bytes, "split_type": name, "mode": "inline" | "split" |
     "empty", "calls": model calls made, "summary": str,
     "segments": [{"first_line", "last_line", "bytes", "summary"}] (split mode only)}
  A file up to READ_SPLIT_THRESHOLD_BYTES is one call. A larger one is split (temp directory,
  removed afterwards) into ~SUMMARY_TARGET_BYTES segments, one call per segment, then combined:
  one call when the segment summaries fit the inline limit, else in batches, repeatedly. An
  empty file makes no call. Non-UTF-8 input is an InputError (from the split library).
- `provider_text_callable(settings)` -> (callable, usage): usage counts calls, tokens and
  `truncated_calls` (replies cut off by the output limit: the summary is then incomplete;
  `truncation_warning(usage)` is the line to say so).
- `segment_summarizer(summarize_text, source_name)` adapts a prompt callable to the
  `(segment_text, segment_meta) -> str` callable `split_file(..., summarize=...)` takes.
"""
import os
import tempfile

import nagent_llm
from nagent_config import api_key_for
from nagent_file_split_lib import (READ_SPLIT_THRESHOLD_BYTES, decode_text, detect_split_type,
                                   read_source, split_file)

SUMMARY_TARGET_BYTES = 32 * 1024


def file_prompt(name, split_type, text):
    return (f"Summarize the file `{name}` ({split_type}). Say what it is for, its main parts "
            "(functions, classes, sections or keys) and anything notable, in a few short "
            "paragraphs or bullet points.\n\n"
            f"<file name=\"{name}\">\n{text}\n</file>")


def segment_prompt(name, text, meta):
    return (f"This is segment {meta.get('number', '?')} of {meta.get('count', '?')} of the file "
            f"`{name}` ({meta.get('split_type', 'text')}), lines {meta['first_line']}-"
            f"{meta['last_line']}. Summarize what this segment contains (definitions, sections, "
            "purpose) in 2-5 sentences; name the important identifiers.\n\n"
            f"<segment lines=\"{meta['first_line']}-{meta['last_line']}\">\n{text}\n</segment>")


def combine_prompt(name, pieces):
    body = "\n\n".join(f"[lines {first}-{last}] {summary}" for first, last, summary in pieces)
    return (f"Below are summaries of consecutive parts of the file `{name}`, in order. Combine "
            "them into one summary of the whole file: its purpose, structure and the notable "
            "parts, in a few short paragraphs or bullet points.\n\n" + body)


def segment_summarizer(summarize_text, source_name):
    """A `split_file` summarize callable built on a prompt callable."""
    def summarize(segment_text, meta):
        return summarize_text(segment_prompt(source_name, segment_text, meta)).strip()
    return summarize


def _batches(pieces, limit):
    batch, size = [], 0
    for piece in pieces:
        cost = len(piece[2].encode("utf-8")) + 32
        if batch and size + cost > limit:
            yield batch
            batch, size = [], 0
        batch.append(piece)
        size += cost
    if batch:
        yield batch


def combine_summaries(name, pieces, summarize_text, limit=READ_SPLIT_THRESHOLD_BYTES):
    """(summary, calls): one combining call when the pieces fit `limit`, else batch-wise."""
    calls = 0
    while True:
        batches = list(_batches(pieces, limit))
        if len(batches) <= 1:
            calls += 1
            return summarize_text(combine_prompt(name, pieces)).strip(), calls
        merged = []
        for batch in batches:
            calls += 1
            merged.append((batch[0][0], batch[-1][1],
                           summarize_text(combine_prompt(name, batch)).strip()))
        if len(merged) >= len(pieces):  # summaries that do not shrink: stop after one call
            calls += 1
            return summarize_text(combine_prompt(name, merged)).strip(), calls
        pieces = merged


def summarize_file(path, summarize_text, target_bytes=SUMMARY_TARGET_BYTES):
    real, data = read_source(path)
    text = decode_text(data, path)
    name = os.path.basename(real)
    split_type = detect_split_type(path)
    result = {"source": real, "size": len(data), "split_type": split_type, "calls": 0,
              "segments": []}
    if not data:
        return dict(result, mode="empty", summary="The file is empty.")
    if len(data) <= READ_SPLIT_THRESHOLD_BYTES:
        summary = summarize_text(file_prompt(name, split_type, text)).strip()
        return dict(result, mode="inline", calls=1, summary=summary)
    with tempfile.TemporaryDirectory(prefix="nagent-summarize-") as scratch:
        index = split_file(real, scratch, target_bytes, split_type,
                           summarize=segment_summarizer(summarize_text, name))
    segments = [{"first_line": record["first_line"], "last_line": record["last_line"],
                 "bytes": record["bytes"], "summary": record["summary"]}
                for record in index["segments"]]
    pieces = [(seg["first_line"], seg["last_line"], seg["summary"]) for seg in segments]
    summary, combine_calls = combine_summaries(name, pieces, summarize_text)
    return dict(result, mode="split", calls=len(segments) + combine_calls, summary=summary,
                segments=segments)


def provider_text_callable(settings):
    """(callable, usage) backed by the provider helper for resolved `settings` (the caller
    resolves them: nagent_cli.load_settings); `usage` accumulates calls and tokens."""

    api_key_for(settings)  # a missing key fails now, not after the file was split
    usage = {"provider": settings.provider.name, "model": settings.model, "calls": 0,
             "input_tokens": 0, "output_tokens": 0, "truncated_calls": 0}

    def call(prompt):
        result = nagent_llm.generate_text(prompt, settings)
        usage["model"] = result.model or usage["model"]
        usage["calls"] += 1
        usage["input_tokens"] += result.input_tokens
        usage["output_tokens"] += result.output_tokens
        usage["truncated_calls"] += result.truncated
        return result.text
    return call, usage


def truncation_warning(usage):
    """The stderr line for a summary some of whose model replies were cut off, or None."""
    cut = usage.get("truncated_calls", 0)
    if not cut:
        return None
    return (f"warning: {cut} of {usage['calls']} model replies {'was' if cut == 1 else 'were'} cut "
            "off by the output limit (max_output_tokens) or by the connection; the summary is "
            "incomplete")
