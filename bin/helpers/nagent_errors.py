"""Typed errors and the exit-code table shared by every nagent command.

Data contract: every library in bin/helpers raises a NagentError subclass (never prints,
never exits). Each carries `what` (a short noun phrase), `value` (the offending input),
`fix` (a hint or ""), and `exit_code` (from EXIT_CODES). Only bin/ mains turn them into
one stderr line `Error: <what>: <value>` (+ ` (<fix>)`) and that exit code. The line is safe
for a terminal: line breaks become spaces, other control, format and bidi characters escapes
(nagent_terminal_text.escape), since values carry file, model and server text.
"""
from nagent_terminal_text import escape

EXIT_CODES = {
    "ok": 0,
    "failure": 1,        # a run finished but reported failure (e.g. a child agent failed)
    "usage": 2,          # bad command line (argparse uses 2 too)
    "config": 3,         # malformed config file, unknown provider, bad setting
    "setup": 4,          # missing API key or missing SDK package
    "provider": 5,       # the provider call failed (after retries) or was rejected
    "input": 6,          # a file argument is missing, unreadable, too large or unsupported
    "busy": 7,           # another run holds the conversation lock
    "protocol": 8,       # the model kept replying outside the tag protocol
    "limit": 9,          # a loop guard stopped the run (call cap, repeated action)
    "refused": 10,       # a safety check refused (hash mismatch, write boundary)
    "incomplete": 11,    # a result was produced but is incomplete (a reply cut by the output limit)
    "gate": 12,          # the response hook refused the final response max_gate_refusals times
    "budget": 13,        # the run tree reached --max-cost, --max-tokens or --max-time
    "interrupted": 130,  # Ctrl-C / SIGINT
    "hangup": 129,       # SIGHUP (the terminal went away): 128 + 1
    "terminated": 143,   # SIGTERM (kill, a parent's timeout): 128 + 15
}


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
