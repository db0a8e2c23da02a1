"""How MCP tool lists and tool results are shown: pure functions over the wire's plain data.

Data contract (inputs are JSON-shaped dicts as the MCP wire carries them, never SDK objects):
- A tool is `{name, description?, inputSchema}`; `tool_entry(tool)` -> {name, summary, signature,
  description, input_schema}: `summary` is the description's first paragraph on one line
  (capped), `signature` the compact argument list of the input schema, e.g.
  `path: string, depth?: integer` (required first as written, optional ones marked `?`).
- `list_text(servers)` renders [{name, tools: [tool_entry], error}] for the terminal and the model.
- A tool result is `{content: [blocks], structuredContent?, isError?}`. `render_result(result,
  label, tmpdir)` -> (text, blocks): text content verbatim; image, audio and binary resources
  decoded into new files in `tmpdir` (created exclusively, mode 0600) whose paths are shown;
  text resources inline; resource links as one line; `structuredContent` as JSON only when there
  is no content block. `blocks` is the JSON form of the same (binary data replaced by its file).
- `error_message(result)` -> the text of a failed call (isError) on one string.
Everything a server sends is untrusted: names, descriptions, signatures and errors are reduced
to one safe line by nagent_terminal_text.one_line (control, C1, format and bidi characters as
visible escapes), file names are built from sanitised parts, and a bad base64 payload is
reported, not saved.
"""
import base64
import binascii
import json
import mimetypes
import os
import re
import tempfile

from nagent_terminal_text import counted, one_line

SUMMARY_LIMIT = 200
ENUM_LIMIT = 6
UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_.-]+")
SIGNATURE_LIMIT = 2000


def summary(description):
    """The first paragraph of a description, on one line."""
    paragraphs = re.split(r"\n\s*\n", str(description or "").strip(), maxsplit=1)
    return one_line(paragraphs[0] if paragraphs else "", SUMMARY_LIMIT)


def type_text(schema, depth=0):
    if not isinstance(schema, dict) or depth > 3:
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        values = [json.dumps(value, ensure_ascii=False) for value in schema["enum"][:ENUM_LIMIT]]
        return "|".join(values) + ("|…" if len(schema["enum"]) > ENUM_LIMIT else "")
    if "const" in schema:
        return json.dumps(schema["const"], ensure_ascii=False)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return "|".join(dict.fromkeys(type_text(item, depth + 1) for item in schema[key]))
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(type_text(dict(schema, type=item), depth + 1) for item in kind) or "any"
    if kind == "array":
        item = type_text(schema.get("items"), depth + 1)
        return f"({item})[]" if "|" in item else f"{item}[]"
    if isinstance(kind, str):
        return one_line(kind, 40)
    if isinstance(schema.get("$ref"), str):
        return one_line(schema["$ref"].rsplit("/", 1)[-1], 40) or "object"
    if "properties" in schema:
        return "object"
    return "any"


def signature(input_schema):
    if not isinstance(input_schema, dict):
        return ""
    properties = input_schema.get("properties")
    if not isinstance(properties, dict):
        return ""
    required = input_schema.get("required")
    required = set(required) if isinstance(required, list) else set()
    parts = []
    for name, schema in properties.items():
        mark = "" if name in required else "?"
        parts.append(f"{one_line(name, 64)}{mark}: {type_text(schema)}")
    return ", ".join(parts)


def tool_entry(tool):
    schema = tool.get("inputSchema") if isinstance(tool.get("inputSchema"), dict) else {}
    return {"name": one_line(tool.get("name"), 128), "summary": summary(tool.get("description")),
            "signature": one_line(signature(schema), SIGNATURE_LIMIT),
            "description": str(tool.get("description") or ""),
            "input_schema": schema}


def list_text(servers):
    lines = []
    for server in servers:
        if server.get("error"):
            lines.append(f"{one_line(server['name'])}: error: {one_line(server['error'], 2000)}")
            continue
        tools = server.get("tools") or []
        name = one_line(server["name"])
        lines.append(f"{name} ({counted(len(tools), 'tool')})")
        for tool in tools:
            text = f"  {tool['name']}({tool['signature']})"
            lines.append(text + (f" — {tool['summary']}" if tool["summary"] else ""))
        if tools:
            lines.append(f"  call: nagent-mcp call {name} TOOL --args '{{...}}'")
    return "\n".join(lines) + ("\n" if lines else "")


# -- results ------------------------------------------------------------------------------

def _extension(mime):
    guessed = mimetypes.guess_extension(str(mime or "").split(";")[0].strip().lower()) or ".bin"
    return guessed if re.fullmatch(r"\.[A-Za-z0-9]{1,8}", guessed) else ".bin"


def save_binary(data, mime, label, tmpdir=None):
    """Write `data` to a new file in the temp dir; returns its path."""
    prefix = "nagent-mcp-" + (UNSAFE_NAME.sub("_", label).strip("._") or "result")[:80] + "-"
    fd, path = tempfile.mkstemp(prefix=prefix, suffix=_extension(mime), dir=tmpdir)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    return path


def _decode(payload):
    try:
        return base64.b64decode(str(payload or ""), validate=True)
    except (binascii.Error, ValueError):
        return None


def _binary(kind, payload, mime, label, tmpdir, extra=None):
    data = _decode(payload)
    head = f"{kind}" + (f" {extra}" if extra else "")
    if data is None:
        return f"[{head}, {mime}: invalid base64 data, not saved]", dict(
            type=kind, mime_type=mime, error="invalid base64 data", **({"uri": extra} if extra else {}))
    path = save_binary(data, mime, label, tmpdir)
    return f"[{head}, {mime}, {len(data)} bytes saved to {path}]", dict(
        type=kind, mime_type=mime, bytes=len(data), file=path, **({"uri": extra} if extra else {}))


def render_block(block, label, tmpdir=None):
    if not isinstance(block, dict):
        return one_line(block, SUMMARY_LIMIT), {"type": "unknown", "text": one_line(block, SUMMARY_LIMIT)}
    kind = block.get("type")
    if kind == "text":
        text = str(block.get("text") or "")
        return text, {"type": "text", "text": text}
    if kind in ("image", "audio"):
        return _binary(kind, block.get("data"), one_line(block.get("mimeType") or "application/octet-stream", 100),
                       label, tmpdir)
    if kind == "resource" and isinstance(block.get("resource"), dict):
        resource = block["resource"]
        uri = one_line(resource.get("uri"), 500)
        mime = one_line(resource.get("mimeType") or "", 100)
        if "blob" in resource:
            return _binary("resource", resource.get("blob"), mime or "application/octet-stream", label, tmpdir, uri)
        text = str(resource.get("text") or "")
        head = f"[resource {uri}" + (f" ({mime})" if mime else "") + "]"
        return head + "\n" + text, {"type": "resource", "uri": uri, "mime_type": mime, "text": text}
    if kind == "resource_link":
        uri, name = one_line(block.get("uri"), 500), one_line(block.get("name"), 200)
        about = summary(block.get("description"))
        line = f"[resource link {uri}" + (f" — {name}" if name else "") + (f": {about}" if about else "") + "]"
        return line, {"type": "resource_link", "uri": uri, "name": name, "description": about,
                      "mime_type": one_line(block.get("mimeType") or "", 100)}
    return f"[{one_line(kind, 40)} content not shown]", {"type": one_line(kind, 40) or "unknown"}


def render_result(result, label, tmpdir=None):
    texts, blocks = [], []
    for block in result.get("content") or []:
        text, data = render_block(block, label, tmpdir)
        texts.append(text)
        blocks.append(data)
    structured = result.get("structuredContent")
    if not blocks and structured is not None:
        texts.append(json.dumps(structured, indent=2, ensure_ascii=False))
    text = "\n".join(texts)
    return (text if text.endswith("\n") or not text else text + "\n"), blocks


def error_message(result):
    parts = [str(block.get("text") or "") for block in result.get("content") or []
             if isinstance(block, dict) and block.get("type") == "text"]
    return "\n".join(part for part in parts if part.strip()) or "the tool reported an error without a message"
