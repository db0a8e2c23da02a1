"""`nagent --compact`: start a new window of the selected conversation now.

Data contract: `compact_now(path, selection, settings) -> (data, text)`: for the conversation at
`path` (what nagent_conversation_layout.Selection `selection` selects) under its lock,
one checkpoint call and a rebuild (nagent_window.rebuild_window with reason "requested").
`data` is the rebuild's facts (archived, window, reason, records, side_files, bytes_before,
bytes_after) plus the conversation path and its token totals; `text` one human line. A
missing or empty conversation is an InputError.
"""
import os

from nagent_conversation import ConversationWriter, utc_now
from nagent_errors import InputError
from nagent_run import Run
from nagent_session import build_session
from nagent_window import io_error, rebuild_window


def compact_now(path, selection, settings):
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        raise InputError("no conversation to compact", path, "run a prompt first")
    session = build_session(selection, dict(os.environ), os.getcwd(), settings)
    with ConversationWriter(session.path, lock_timeout=session.limits.lock_timeout) as writer:
        run = Run(session, writer)
        try:
            info = rebuild_window(run, utc_now(), reason="requested")
        except OSError as error:
            raise io_error(session.path, error) from None
    info["conversation"] = session.path
    info["totals"] = run.conv_stats.as_dict()
    return info, (f"window {info['window']} started; previous window archived at {info['archived']}"
                  f" ({len(info['side_files'])} large results moved to side files)")
