"""Every secret nagent knows, in one place, and the process hardening that keeps them from children.

Data contract:
- `is_secret_name(name)` is the one rule for "this name holds a secret", for environment
  variables and for MCP env/header keys alike: the name, upper-cased with every run of
  characters other than letters and digits read as "_", ends with one of SECRET_SUFFIXES.
  The long words count glued on too (PGPASSWORD, GITHUBTOKEN, Authorization); the short ones
  only as a word of their own (STRIPE_KEY, X-Api-Key, NPM_AUTH, MYSQL_PWD), so PWD, OLDPWD,
  MONKEY, AUTHOR, XAUTHORITY and SSH_AUTH_SOCK are not secrets. A secret name's value is
  redacted everywhere and never enters the sandbox.
- `is_key_name(name)`: a name ending in KEY_SUFFIX ("_API_KEY"): some vendor's API key, withheld
  from every child even when no provider names it.
- `redactable(values)` -> the values worth blanking (at least MIN_SECRET_LEN characters: blanking
  "abc" everywhere would only destroy output), unique, longest first (so a secret containing
  another is blanked whole). Every list of secrets nagent redacts with goes through it.
- `key_names(rows)` -> sorted tuple of the variables a provider key may live in: every provider
  row's key variables (the table's and a config's `api_key_env`) and every variable a row's
  `api_key` refers to (one whole `${VAR}` / `${VAR:-default}` reference: nagent_env_refs). No
  shell command ever receives these.
- `secret_names(rows, environ)` -> key_names plus every variable of `environ` named with a
  SECRET_SUFFIX: all the variables whose values are secrets.
  `rows` are nagent_providers.ProviderRow values (`all_rows(config).values()`).
- `secret_values(rows, environ)` -> tuple of secret values, longest first: the values those
  names hold in `environ`, plus every literal `api_key` of a row and a reference's default.
  Passed through `redactable`.
- `redact(text, values)` -> text with each value replaced by REDACTED (longest first).
- `redacted(value, secrets, keep)` -> JSON-shaped `value` with `redact` applied to every string
  but the values of the keys in `keep`.
- `scrubbed_env(environ, secret_names)` is the one rule for the environment nagent gives a
  child outside the sandbox (shell actions, hooks, file tools, MCP servers, git, a tool's
  `--description` run): `environ` without the provider key variables (`secret_names`, the
  caller's key_names; nagent_config.child_key_names for a caller without Settings), without any
  `*_API_KEY` (is_key_name), and without nagent's internal NAGENT_* variables (NAGENT_CONFIG
  stays, resolved by nagent_paths.config_file: a child in another directory reads the same
  file; so does NAGENT_PYTHON, the interpreter a checkout's tools re-execute under). The user's other tokens (GITHUB_TOKEN ...) stay, for the tools that need them; their
  values are still redacted from what comes back. The bwrap sandbox passes an allowlist instead
  (nagent_sandbox.sandbox_env) and asks `withheld_names` for the same key names.
- `SHELL_ACTION_VAR` ("NAGENT_SHELL_ACTION") is set to "1" for every <nagent-shell> command,
  sandboxed or not (nagent_shell): nagent's model-calling tools started from one (`nagent`,
  `nagent-file-edit`) refuse at once, naming the tag the model should use instead (they would
  fail anyway: no key). A person's terminal never has it.
- `withheld_names(secret_names)` -> frozenset of the upper-cased key variable names no child
  receives.
  This module reads no config (nagent_config imports it); `nagent_config.known_secrets` and
  `configured_key_names` apply these rules to the config files' providers.
- `make_undumpable()` sets PR_SET_DUMPABLE to 0 for this process (as ssh-agent does): a child
  running as the same non-root user can then read neither /proc/<nagent>/environ nor its
  memory, nor attach a debugger. Returns True when it took effect; never raises.
What this does not cover, and docs/security.md says so: root (it reads any process and file), keys in
files on disk, and output a command transformed (base64, rev): redaction is the second line of
defence, not the first.
"""

from nagent_env_refs import whole_reference
from nagent_install import RUN_PYTHON
from nagent_paths import config_file

SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "COOKIE", "CREDENTIAL", "CREDENTIALS",
                "APIKEY", "AUTHORIZATION")
SECRET_SUFFIXES = ("_KEY", "_AUTH", "_PWD") + SECRET_WORDS
KEY_SUFFIX = "_API_KEY"
SHELL_ACTION_VAR = "NAGENT_SHELL_ACTION"
MIN_SECRET_LEN = 6
REDACTED = "[redacted]"
PR_SET_DUMPABLE = 4


def _normal(name):
    """NAME upper-cased with each run of other characters than A-Z and 0-9 as one "_" (no `re`:
    every tool imports this module at start-up)."""
    upper = str(name).upper()
    return "_".join("".join(ch if "A" <= ch <= "Z" or "0" <= ch <= "9" else " "
                            for ch in upper).split())


def is_secret_name(name):
    return _normal(name).endswith(SECRET_SUFFIXES)


def is_key_name(name):
    return _normal(name).endswith(KEY_SUFFIX)


def redactable(values):
    found = {value for value in values if isinstance(value, str) and len(value) >= MIN_SECRET_LEN}
    return tuple(sorted(found, key=lambda value: (-len(value), value)))


def key_names(rows):
    names = set()
    for row in rows:
        names.update(row.key_env)
        reference = whole_reference(row.api_key)
        if reference:
            names.add(reference[0])
    return tuple(sorted(names))


def secret_names(rows, environ):
    rows = tuple(rows)
    return tuple(sorted(set(key_names(rows)) | {name for name in environ if is_secret_name(name)}))


def secret_values(rows, environ):
    rows = tuple(rows)
    found = {environ.get(name) or "" for name in secret_names(rows, environ)}
    for row in rows:
        if isinstance(row.api_key, str):
            reference = whole_reference(row.api_key)
            found.add(row.api_key if reference is None else reference[1] or "")
    return redactable(found)


def redact(text, values):
    if not text:
        return text
    for value in values:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def redacted(value, secrets, keep=()):
    """`value` (JSON-shaped data) with every secret in `secrets` blanked in every string but the
    values of the keys in `keep` (base64 payloads: bytes, not text)."""
    if isinstance(value, str):
        return redact(value, secrets)
    if isinstance(value, dict):
        return {key: item if key in keep else redacted(item, secrets, keep)
                for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [redacted(item, secrets, keep) for item in value]
    return value


def withheld_names(secret_names):
    return frozenset(name.upper() for name in secret_names)


# NAGENT_* variables a child gets: the config file, and the interpreter a checkout's tools run
# on (nagent_install.run_python_env). The others are nagent's own channels.
PASSED_ON = ("NAGENT_CONFIG", RUN_PYTHON)


def scrubbed_env(environ, secret_names):
    withheld = withheld_names(secret_names)
    env = {}
    for name, value in environ.items():
        upper = name.upper()
        if upper in withheld or is_key_name(name):
            continue
        if upper.startswith("NAGENT_") and upper not in PASSED_ON:
            continue
        env[name] = value
    if env.get("NAGENT_CONFIG"):
        env["NAGENT_CONFIG"] = config_file(environ)
    return env


def make_undumpable():
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
