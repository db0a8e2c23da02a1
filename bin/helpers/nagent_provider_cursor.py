"""Cursor adapter. Cursor's Python SDK (`cursor-agent-sdk`, module `cursor_agent`) is optional.

Data contract: as every adapter. Without the SDK every call raises SetupError with the pip
line. With it, model listing works through the SDK; text generation is not offered by that
SDK (it drives repository-bound cloud agents, not single completions), so `call` raises a
SetupError that says so and points to the OpenAI-compatible route instead of pretending.
"""
from nagent_errors import SetupError
from nagent_llm import require_package, status_error


def make_client(settings, key):
    sdk = require_package(settings.provider)
    base_url = settings.provider.base_url or getattr(sdk, "DEFAULT_BASE_URL", None)
    return sdk.SyncClient(api_key=key, **({"base_url": base_url} if base_url else {}))


def call(client, request, settings):
    raise SetupError("cursor text generation is not available through cursor-agent-sdk",
                     settings.model, "add a providers entry with an OpenAI-compatible base_url for "
                     "your Cursor endpoint, or use another provider")


def classify(error, settings):
    try:
        import cursor_agent
    except ImportError:
        return None
    if isinstance(error, cursor_agent.CursorAPIError):
        status = getattr(error, "status_code", None)
        return status_error(settings.provider.name, status, str(error))
    return None


def list_models(client, settings):
    data = client.list_models()
    models = data.get("models", []) if isinstance(data, dict) else []
    return [item if isinstance(item, str) else item.get("id", "") for item in models]
