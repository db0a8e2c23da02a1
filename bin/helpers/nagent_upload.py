"""Upload classification for nagent-llm-upload: what a file is and whether it may be sent.

Data contract: `classify_upload(path) -> Attachment` checks existence, regular-file-ness,
readability, the 50 MB cap and archive rejection BEFORE any network call, and returns the
category (image | pdf | office | text) and MIME type from the extension confirmed by the
file's first bytes (magic numbers): a ".png" that is really a zip is rejected as an archive.
Adapters call `unsupported(...)` to name what a provider does take.
"""
import os

from nagent_errors import InputError
from nagent_llm import Attachment

MAX_UPLOAD_BYTES = 50 * 1024 * 1024
IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
               ".gif": "image/gif", ".webp": "image/webp"}
OFFICE_TYPES = {
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    ".pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    ".doc": "application/msword", ".xls": "application/vnd.ms-excel",
    ".ppt": "application/vnd.ms-powerpoint", ".rtf": "application/rtf",
    ".odt": "application/vnd.oasis.opendocument.text",
    ".ods": "application/vnd.oasis.opendocument.spreadsheet",
    ".odp": "application/vnd.oasis.opendocument.presentation",
}
TEXT_TYPES = {".txt": "text/plain", ".md": "text/markdown", ".markdown": "text/markdown",
              ".csv": "text/csv", ".tsv": "text/tab-separated-values", ".json": "application/json",
              ".yaml": "application/yaml", ".yml": "application/yaml", ".xml": "application/xml",
              ".html": "text/html", ".htm": "text/html", ".log": "text/plain", ".ini": "text/plain",
              ".toml": "text/plain", ".rst": "text/plain", ".tex": "text/plain"}
CODE_EXTENSIONS = {".py", ".js", ".ts", ".tsx", ".jsx", ".c", ".h", ".cc", ".cpp", ".hpp", ".go",
                   ".rs", ".java", ".kt", ".rb", ".php", ".sh", ".bash", ".zsh", ".sql", ".css",
                   ".scss", ".swift", ".scala", ".lua", ".pl", ".r", ".m", ".cs", ".vue", ".svelte"}
ARCHIVE_EXTENSIONS = (".zip", ".tar", ".gz", ".tgz", ".bz2", ".tbz2", ".xz", ".txz", ".7z", ".rar",
                      ".zst", ".lz", ".lzma", ".z")
MAGIC = (  # (prefix, kind) — the first bytes decide when the extension lies
    (b"\x89PNG\r\n\x1a\n", "image/png"), (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"), (b"GIF89a", "image/gif"), (b"%PDF-", "application/pdf"),
    (b"PK\x03\x04", "zip"), (b"\x1f\x8b", "gzip"), (b"BZh", "bzip2"), (b"\xfd7zXZ\x00", "xz"),
    (b"7z\xbc\xaf\x27\x1c", "7z"), (b"Rar!\x1a\x07", "rar"), (b"\x28\xb5\x2f\xfd", "zstd"),
)
SUPPORTED = "images (png, jpg, gif, webp), PDF, office documents (docx, xlsx, pptx, odt ...) and text files"


def sniff(head):
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if len(head) > 262 and head[257:262] == b"ustar":
        return "tar"
    for prefix, kind in MAGIC:
        if head.startswith(prefix):
            return kind
    return None


def classify_upload(path):
    if not path:
        raise InputError("no file given", "", "pass --file PATH")
    if not os.path.exists(path):
        raise InputError("file not found", path)
    if os.path.isdir(path):
        raise InputError("is a directory, not a file", path)
    if not os.path.isfile(path):
        raise InputError("not a regular file", path)
    size = os.path.getsize(path)
    if size > MAX_UPLOAD_BYTES:
        raise InputError("file is larger than the 50 MB upload limit", f"{path} ({size} bytes)")
    try:
        with open(path, "rb") as handle:
            head = handle.read(8192)
    except OSError as error:
        raise InputError("cannot read file", f"{path}: {error.strerror}")
    name = os.path.basename(path)
    lower = name.lower()
    ext = os.path.splitext(lower)[1]
    sniffed = sniff(head)
    if lower.endswith(ARCHIVE_EXTENSIONS) or (sniffed in ("gzip", "bzip2", "xz", "7z", "rar",
                                                          "zstd", "tar")):
        raise InputError("archives are not accepted", path, "extract the file you mean and upload it")
    if sniffed == "zip" and ext not in OFFICE_TYPES:
        raise InputError("archives are not accepted", path, "extract the file you mean and upload it")
    if ext in IMAGE_TYPES:
        if sniffed not in (IMAGE_TYPES[ext], "image/jpeg" if ext in (".jpg", ".jpeg") else None):
            raise InputError("file content does not match its image extension", path)
        return Attachment(path, name, IMAGE_TYPES[ext], "image", size)
    if ext == ".pdf" or sniffed == "application/pdf":
        if sniffed != "application/pdf":
            raise InputError("file content is not a PDF", path)
        return Attachment(path, name, "application/pdf", "pdf", size)
    if sniffed and sniffed.startswith("image/"):
        return Attachment(path, name, sniffed, "image", size)
    if ext in OFFICE_TYPES:
        return Attachment(path, name, OFFICE_TYPES[ext], "office", size)
    if ext in TEXT_TYPES or ext in CODE_EXTENSIONS or _looks_like_text(head):
        if b"\x00" in head:
            raise InputError("unsupported binary file", path, f"supported: {SUPPORTED}")
        return Attachment(path, name, TEXT_TYPES.get(ext, "text/plain"), "text", size)
    raise InputError("unsupported file type", path, f"supported: {SUPPORTED}")


def _looks_like_text(head):
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
        return True
    except UnicodeDecodeError as error:
        return error.start >= len(head) - 4   # a multi-byte character cut by the 8 KiB window


def read_text_attachment(attachment):
    with open(attachment.path, "rb") as handle:
        data = handle.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError("text file is not UTF-8", attachment.path)
    return f"--- {attachment.name} ---\n{text}"


def unsupported(attachment, provider, accepted):
    return InputError(f"{provider} cannot take this file type", f"{attachment.name} ({attachment.mime})",
                      f"{provider} takes {accepted}" if accepted else "")
