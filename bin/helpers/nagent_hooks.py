"""Hooks: user commands that gate the final response and each action.

Data contract:
- `response_gated(settings)` -> True when a response hook (`hooks.response`, or
  `--hook-per-response`) is configured: then nothing of a final response may reach the user
  before the hook accepted it, so no streaming of final responses to stdout.
"""


def response_gated(settings):
    return bool(settings.hooks.response)
