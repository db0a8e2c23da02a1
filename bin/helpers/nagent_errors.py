"""Typed errors and the exit-code table shared by every nagent command.

Data contract: every library in bin/helpers raises a NagentError subclass (never prints,
never exits). Each carries `what` (a short noun phrase), `value` (the offending input),
`fix` (a hint or ""), and `exit_code` (from EXIT_CODES). Only bin/ mains turn them into
one stderr line `Error: <what>: <value>` (+ ` (<fix>)`) and that exit code. The line is safe
for a terminal: line breaks become spaces, other control, format and bidi characters escapes
(nagent_terminal_text.escape), since values carry file, model and server text.
"""
from nagent_terminal_text import escape

# The one table of exit codes: kind, code, and what it means. EXIT_CODES (kind -> code) and the
# "exit codes:" part of every executable's --help (nagent_cli.help_epilog) are read from it, and
# tests check docs/scripting.md against it, so help and docs cannot drift from the code.
EXIT_TABLE = (
    ("ok", 0, "success"),
    ("failure", 1, "failure: the run, a child or a tool reported failure, or an internal error (a bug)"),
    ("usage", 2, "usage error: bad flags or arguments (argparse uses 2 too)"),
    ("config", 3, "configuration error: malformed config file, unknown provider, bad value"),
    ("setup", 4, "setup error: missing API key, SDK package or program"),
    ("provider", 5, "provider error: the model call (or MCP server) failed after retries or was rejected"),
    ("input", 6, "input error: a file is missing, unreadable, too large or unsupported"),
    ("busy", 7, "busy: another run holds the conversation's lock"),
    ("protocol", 8, "the model kept replying outside the tag protocol"),
    ("limit", 9, "a loop guard stopped the run (max_calls, a repeated action)"),
    ("refused", 10, "refused by a safety check (hash mismatch, write boundary, a permission rule)"),
    ("incomplete", 11, "incomplete: a reply was cut off; what arrived is printed, with a warning"),
    ("gate", 12, "the response hook refused the final response max_gate_refusals times"),
    ("budget", 13, "the budget is spent (--max-cost, --max-tokens, --max-time)"),
    ("hangup", 129, "ended by SIGHUP (the terminal went away): 128 + 1"),
    ("interrupted", 130, "interrupted (Ctrl-C, SIGINT)"),
    ("terminated", 143, "ended by SIGTERM (kill, a parent's timeout): 128 + 15"),
)
EXIT_CODES = {kind: code for kind, code, _ in EXIT_TABLE}
EXIT_MEANINGS = {kind: meaning for kind, _, meaning in EXIT_TABLE}


class ExitSignal(BaseException):
    """SIGTERM or SIGHUP arrived during a run (raised by nagent_procs.exit_signals). Like
    KeyboardInterrupt it is not a NagentError, so no `except Exception` swallows it."""
    NAMES = {1: "SIGHUP", 15: "SIGTERM"}

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum
        self.name = self.NAMES.get(signum, f"signal {signum}")
        self.exit_code = 128 + signum


class NagentError(Exception):
    kind = "failure"

    def __init__(self, what, value="", fix=""):
        super().__init__(what, value, fix)
        self.what = what
        self.value = value
        self.fix = fix

    @property
    def exit_code(self):
        return EXIT_CODES[self.kind]

    def line(self):
        text = f"Error: {self.what}"
        if self.value not in ("", None):
            text += f": {self.value}"
        if self.fix:
            text += f" ({self.fix})"
        return escape(" ".join(text.splitlines()), keep="\t")

    def as_dict(self):
        return {"error": self.what, "value": str(self.value), "fix": self.fix,
                "kind": self.kind, "exit_code": self.exit_code}


class UsageError(NagentError):
    kind = "usage"


class ConfigError(NagentError):
    kind = "config"


class SetupError(NagentError):
    kind = "setup"


class InputError(NagentError):
    kind = "input"


class BusyError(NagentError):
    kind = "busy"


class ProtocolFailure(NagentError):
    kind = "protocol"


class LimitError(NagentError):
    kind = "limit"


class BudgetError(LimitError):
    """The run tree's budget is spent: no new model call starts (nagent_budget)."""
    kind = "budget"


class RefusedError(NagentError):
    kind = "refused"


class GateRefused(NagentError):
    kind = "gate"


class ProviderError(NagentError):
    """A failed provider call, as plain data: status, error type, retryable, retry_after."""
    kind = "provider"

    def __init__(self, what, value="", fix="", *, provider="", status=None, error_type="",
                 retryable=False, retry_after=None):
        super().__init__(what, value, fix)
        self.provider = provider
        self.status = status
        self.error_type = error_type
        self.retryable = retryable
        self.retry_after = retry_after

    def as_dict(self):
        data = super().as_dict()
        data.update(provider=self.provider, status=self.status, error_type=self.error_type,
                    retryable=self.retryable, retry_after=self.retry_after)
        return data
