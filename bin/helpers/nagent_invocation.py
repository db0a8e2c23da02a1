"""The parsed command line of `nagent` (and of `nagent-file-edit`'s session), as one frozen value.

Data contract: `Invocation` (frozen: a namedtuple class) holds every flag of `nagent --help` by its argparse
dest, except: `continue_latest` is -c/--continue (`continue` is a keyword), `prompt` is a tuple
of words, and the setting flags (--provider, --model, --max-calls ...: the schema rows with a
flag) are one read-only mapping `overrides` {dest: value}, only the ones given, which is what
nagent_config.resolve_settings takes. `started` is the monotonic origin of the run's event
times (None: the run's start).
`Invocation.from_options(values, started=None)` builds one from argparse's dict (`vars(args)`);
keys no field names (another tool's own flags, e.g. nagent-file-edit's --old) are left out, and
`options()` gives the dict back (dests as argparse names them), so that a command line parsed
later (the interactive session's) can be laid over it.
This type lives in the command layer (nagent_main*, nagent_commands, the *_commands modules, the
interactive session). What lies below gets typed fields of it, never the whole command line:
`selection` (nagent_conversation_layout.Selection: which conversation), `origin()` (the keyword
arguments of nagent_session.build_session that say who started the run: invocation,
parent_conversation, depth, a parent's budget), `overrides`, and single values (a turn, an
instruction, --force).
"""
from collections import namedtuple
from types import MappingProxyType

from nagent_config_schema import SCHEMA
from nagent_conversation_layout import Selection

SETTING_DESTS = frozenset(key.dest for key in SCHEMA if key.dest)
RENAMED = {"continue": "continue_latest"}

# (field, default): argparse's defaults, grouped as nagent --help groups the flags.
FIELDS = (
    ("prompt", ()), ("new", False),
    # output
    ("json", False), ("events", False), ("output_format", None), ("quiet", False),
    ("verbose", False), ("stream", None), ("description", False),
    # which conversation
    ("conversation", None), ("with_conversation", False), ("pid", None), ("file_edit", None),
    ("continue_latest", False), ("resume", None),
    # lifecycle commands and the flags that go with them
    ("status", False), ("clear", False), ("save_conversation", None), ("force", False),
    ("load_conversation", None), ("branch_conversation", None), ("turn", None),
    ("list_conversations", False), ("summarize", False), ("edit_conversation", None),
    ("compact", False), ("list_models", False), ("list_file_edits", False), ("config", False),
    ("changes", False), ("rewind", False), ("last", False), ("action", None), ("diff", False),
    ("dry_run", False), ("ps", False), ("send", None), ("trust", False), ("list_skills", False),
    ("retry", False),
    # set by a parent nagent for its children
    ("invocation", "user"), ("parent_conversation", None), ("depth", 0), ("budget", None),
    # the setting flags given {dest: value}, and the origin of event times
    ("overrides", MappingProxyType({})), ("started", None),
)


class Invocation(namedtuple("Invocation", [name for name, _ in FIELDS],
                            defaults=[default for _, default in FIELDS])):
    """The parsed command line (see the module's data contract). A namedtuple, not a dataclass:
    commands such as --status must not pay for dataclass generation (as Settings and the
    schema's Key)."""
    __slots__ = ()

    @classmethod
    def from_options(cls, values, started=None):
        known = set(cls._fields) - {"overrides", "started"}
        given = {RENAMED.get(name, name): value for name, value in values.items()}
        typed = {name: value for name, value in given.items() if name in known}
        if "prompt" in typed:
            typed["prompt"] = tuple(typed["prompt"] or ())
        for flag in ("new", "clear"):   # nagent-file-edit's --new is a list of texts, not -n
            if flag in typed:
                typed[flag] = typed[flag] is True
        typed["depth"] = int(typed.get("depth") or 0)
        typed["invocation"] = typed.get("invocation") or "user"
        overrides = {name: value for name, value in values.items()
                     if name in SETTING_DESTS and value is not None}
        return cls(**typed, overrides=MappingProxyType(overrides), started=started)

    def options(self):
        """The dict argparse would give for this command line (dests as argparse names them)."""
        back = {value: name for name, value in RENAMED.items()}
        values = {back.get(name, name): getattr(self, name) for name in self._fields
                  if name not in ("overrides", "started")}
        values["prompt"] = list(self.prompt)
        return dict(values, **self.overrides)

    def but(self, **changes):
        return self._replace(**changes)

    @property
    def selection(self):
        return Selection(conversation=self.conversation, pid=self.pid, file_edit=self.file_edit)

    def origin(self):
        return {"invocation": self.invocation, "parent_conversation": self.parent_conversation,
                "depth": self.depth, "budget": self.budget}

    @property
    def delegated(self):
        return self.invocation == "delegated"

    def given(self, name):
        """Is flag `name` (a dest) given: neither None nor False."""
        return getattr(self, RENAMED.get(name, name)) not in (None, False)
