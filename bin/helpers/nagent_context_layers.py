"""Context layers after the built-in one: the user's, the project's and the directory's files.

Data contract:
- `Layer(name, text, files, problems)`: `name` is "user", "project" or "directory"; `text`
  the layer's documents, each under a marker line naming its layer and path; `files` one
  {"layer", "path", "bytes", "cut"} per document read (`bytes`: its size on disk, `cut`: only
  part of it is shown); `problems` one line each (missing files, refusals, cuts).
- `load_layers(cwd, environ, project, options)` -> the non-empty Layers in the fixed order
  user, project, directory. `options` is settings.context (user, project, directory,
  max_bytes) or None (all on, MAX_BYTES); `project` a nagent_project.Project or None.
  * user: ~/.nagent/context.md verbatim, then what ~/.nagent/context.yaml lists (a list of
    paths or {paths: [...]}; a listed .yaml/.yml is itself a list, a directory gives its
    regular files, sorted, not recursive; relative to the listing file, ~ is HOME). Anywhere
    the user points. All of it together is capped at USER_CAP.
  * project: <root>/AGENTS.md, or <root>/CLAUDE.md when there is no AGENTS.md; then
    <root>/.nagent/context.md and what <root>/.nagent/context.yaml lists.
  * directory: the nearest AGENTS.md in the directories from cwd up to, not including, the root.
  Each file a project or directory layer starts from (AGENTS.md or CLAUDE.md, .nagent/context.md,
  the .nagent/context.yaml list, the nested AGENTS.md) is capped, with everything it includes,
  at `max_bytes`.
- Containment: every file of the project and directory layers (includes and listed files too)
  must resolve (links, "..", "~") inside the project root (nagent_paths.within); one that
  points outside is named and never read, so a cloned repository's `AGENTS.md -> ~/.ssh/id_rsa`
  sends nothing. Only regular files are read, opened non-blocking (a FIFO never blocks the
  start); a file with NUL bytes is skipped as binary. A file appears once across all layers
  (by realpath): include cycles end, and a project at $HOME reads ~/.nagent/context.md once.
- @includes (project and directory layers only): `@path` at a line start or after whitespace,
  outside code fences and `inline code`, trailing punctuation dropped, relative to the
  including file. Followed depth-first up to INCLUDE_DEPTH levels; an included file comes
  right after its includer, under its own marker. A missing one is a problem line.
- Cuts: the document that reaches its cap is cut there and a problem line names the file, its
  size, the cap and how to read the rest (<nagent-read>); later documents under the same cap
  are skipped and named.
- `render_layers(layers)` -> the text for the session part of the initial context: paths and
  problem lines through nagent_terminal_text.escape (a newline in a directory name cannot start
  a line of its own), documents through nagent_protocol_blocks.frame_data (a file cannot end
  the initial context or open a <system> note), at most MAX_PROBLEMS problem lines per layer.
"""
import os
import re
import stat
from collections import namedtuple

from nagent_fs import opened_path
from nagent_paths import home_dir, nagent_home, within
from nagent_protocol_blocks import frame_data
from nagent_terminal_text import escape

USER_CAP = 256 * 1024
MAX_BYTES = 32 * 1024
INCLUDE_DEPTH = 5
MAX_PROBLEMS = 20
YAML_SUFFIXES = (".yaml", ".yml")
PROJECT_FILES = ("AGENTS.md", "CLAUDE.md")
_INCLUDE = re.compile(r"(?:^|(?<=\s))@([^\s`]+)")
_INLINE_CODE = re.compile(r"`+[^`]*`+")
_TRAILING = ".,;:!?)]}'\""


Layer = namedtuple("Layer", "name text files problems")


def _size_text(cap):
    return f"{cap // 1024} KiB" if cap % 1024 == 0 else f"{cap} bytes"


def _expand_home(path, home):
    if path == "~" or path.startswith("~/"):
        return home + path[1:]
    return path


def include_targets(text):
    """The `@path` tokens of a document, in order, outside code fences and inline code."""
    found, seen, fence = [], set(), None
    for line in text.splitlines():
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            mark = stripped[:3]
            fence = None if fence == mark else (fence or mark)
            continue
        if fence:
            continue
        for match in _INCLUDE.finditer(_INLINE_CODE.sub(" ", line)):
            token = match.group(1).rstrip(_TRAILING)
            if token and token not in seen:
                seen.add(token)
                found.append(token)
    return found


def read_regular(path, limit):
    """(data of at most `limit` bytes, size on disk) of the regular file at the resolved `path`,
    or (None, problem): the file opened must be the one `path` named when it was checked."""
    try:
        # Callers pass resolved paths: a link swapped in afterwards is refused, not followed.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as error:
        return None, f"unreadable ({error.strerror or error})"
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None, "not a regular file"
        if opened_path(fd) not in (None, path):
            # A directory on the way was swapped for a link after the path was checked.
            return None, "changed while being opened (a link on the way), not read"
        chunks, left = [], min(limit, info.st_size)
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks), info.st_size
    except OSError as error:
        return None, f"unreadable ({error.strerror or error})"
    finally:
        os.close(fd)


class _Part:
    """One cap: a file a layer starts from with everything it includes or lists."""

    def __init__(self, loader, cap):
        self.loader, self.cap, self.used, self.full = loader, cap, 0, False


class _Loader:
    """One layer being read: its documents, files and problems; `root` confines it (None: the
    user's own files, anywhere); `visited` realpaths are shared by all layers of a build."""

    def __init__(self, name, root, visited, home):
        self.name, self.root, self.visited, self.home = name, root, visited, home
        self.documents, self.files, self.problems = [], [], []

    # -- one document ------------------------------------------------------------------
    def resolve(self, path, shown, where=""):
        """realpath of `path` when it may be read, else None (the problem is noted)."""
        suffix = f" (in {where})" if where else ""
        if "\x00" in path:
            self.problems.append(f"{shown}: not a path{suffix}")
            return None
        real = os.path.realpath(path)
        if self.root is not None and not within(real, self.root):
            self.problems.append(f"{shown}: outside the project, not read{suffix}")
            return None
        if not os.path.lexists(path):
            self.problems.append(f"{shown}: not found{suffix}" if where else f"missing: {shown}")
            return None
        return real

    def add(self, real, part, shown, included_by=None):
        """Read one document under `part`'s cap; returns its text, or None."""
        if real in self.visited:
            return None
        if part.full:  # the cut note already says that later documents are not read
            return None
        self.visited.add(real)
        left = part.cap - part.used
        data, size = read_regular(real, left + 1)
        if data is None:
            self.problems.append(f"{shown}: {size}")
            return None
        if b"\x00" in data[:8192]:
            self.problems.append(f"{shown}: binary file, not read")
            return None
        cut = size > left
        if cut:
            data = data[:left]
            part.full = True
            self.problems.append(
                f"{real} is {size} bytes: cut after {left} bytes (the {self.name} context is capped "
                f"at {_size_text(part.cap)}; later files under that cap are not read); read the "
                f"rest with <nagent-read path=\"{real}\"/> (<nagent-file-read> past 64 KiB)")
        part.used += len(data)
        text = data.decode("utf-8", "replace").rstrip("\n")
        marker = f"=== {self.name} context: {escape(real)}" + (
            f" (included by {escape(included_by)})" if included_by else "") + " ==="
        self.documents.append(marker + "\n" + frame_data(text))
        self.files.append({"layer": self.name, "path": real, "bytes": size, "cut": cut})
        return text

    # -- @includes ---------------------------------------------------------------------
    def add_with_includes(self, real, part, shown, depth=0, included_by=None):
        text = self.add(real, part, shown, included_by)
        if text is None:
            return
        for token in include_targets(text):
            if depth >= INCLUDE_DEPTH:
                self.problems.append(f"@{token}: not followed, the include depth limit "
                                     f"({INCLUDE_DEPTH}) was reached (in {real})")
                continue
            target = os.path.join(os.path.dirname(real), _expand_home(token, self.home))
            resolved = self.resolve(target, f"@{token}", where=real)
            if resolved is not None and resolved not in self.visited:
                self.add_with_includes(resolved, part, f"@{token} (in {real})", depth + 1, real)

    # -- context.yaml lists --------------------------------------------------------------
    def add_listed(self, path, part, as_list=None):
        real = self.resolve(path, path)
        if real is None or real in self.visited:
            return
        if os.path.isdir(real):
            self.visited.add(real)
            try:
                names = sorted(os.listdir(real))
            except OSError as error:
                self.problems.append(f"{path}: unreadable ({error.strerror or error})")
                return
            for name in names:
                child = os.path.join(real, name)
                if not name.startswith(".") and os.path.isfile(child):
                    self.add_listed(child, part, as_list=False)
        elif as_list or (as_list is None and real.lower().endswith(YAML_SUFFIXES)):
            self.visited.add(real)
            self.load_list(real, part)
        elif self.root is not None:
            self.add_with_includes(real, part, path)
        else:
            self.add(real, part, path)

    def load_list(self, path, part):
        data, size = read_regular(path, 1 << 20)
        if data is None:
            self.problems.append(f"{path}: {size}")
            return
        import yaml  # only paid when a yaml context list exists
        try:
            listing = yaml.safe_load(data.decode("utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError) as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            self.problems.append(f"malformed context list: {path} ({first})")
            return
        if isinstance(listing, dict) and isinstance(listing.get("paths"), list):
            entries = listing["paths"]
        elif isinstance(listing, list):
            entries = listing
        elif listing is None:
            entries = []
        else:
            self.problems.append(f"malformed context list: {path} "
                                 "(expected a list of paths or {paths: [...]})")
            return
        for entry in entries:
            if not isinstance(entry, str) or not entry.strip():
                self.problems.append(f"not a path in {path}: {entry!r}")
                continue
            self.add_listed(os.path.join(os.path.dirname(path),
                                         _expand_home(entry.strip(), self.home)), part)

    def layer(self):
        return Layer(self.name, "\n\n".join(self.documents), self.files, self.problems)


# -- the layers -------------------------------------------------------------------------------

def _option(options, name, default):
    return default if options is None else getattr(options, name)


def user_layer(environ, visited):
    loader = _Loader("user", None, visited, home_dir(environ))
    state = nagent_home(environ)
    part = _Part(loader, USER_CAP)
    markdown, listing = os.path.join(state, "context.md"), os.path.join(state, "context.yaml")
    if os.path.lexists(markdown):
        loader.add_listed(markdown, part, as_list=False)
    if os.path.lexists(listing):
        loader.add_listed(listing, part, as_list=True)
    return loader.layer()


def project_layer(root, environ, visited, cap):
    loader = _Loader("project", root, visited, home_dir(environ))
    for name in PROJECT_FILES:
        path = os.path.join(root, name)
        if os.path.lexists(path):
            real = loader.resolve(path, path)
            if real is not None:
                loader.add_with_includes(real, _Part(loader, cap), path)
            break
    own = os.path.join(root, ".nagent")
    markdown, listing = os.path.join(own, "context.md"), os.path.join(own, "context.yaml")
    if os.path.lexists(markdown):
        loader.add_listed(markdown, _Part(loader, cap), as_list=False)
    if os.path.lexists(listing):
        loader.add_listed(listing, _Part(loader, cap), as_list=True)
    return loader.layer()


def nearest_agents(cwd, root):
    """The nearest AGENTS.md from cwd up to, not including, the root; None if there is none."""
    current = os.path.realpath(cwd)
    if not within(current, root):
        return None
    while current != root and within(current, root):
        candidate = os.path.join(current, PROJECT_FILES[0])
        if os.path.lexists(candidate):
            return candidate
        current = os.path.dirname(current)
    return None


def directory_layer(cwd, root, environ, visited, cap):
    loader = _Loader("directory", root, visited, home_dir(environ))
    path = nearest_agents(cwd, root)
    if path is not None:
        real = loader.resolve(path, path)
        if real is not None:
            loader.add_with_includes(real, _Part(loader, cap), path)
    return loader.layer()


def load_layers(cwd, environ, project, options=None):
    visited = set()
    cap = _option(options, "max_bytes", MAX_BYTES)
    layers = []
    if _option(options, "user", True):
        layers.append(user_layer(environ, visited))
    if project is not None and _option(options, "project", True):
        layers.append(project_layer(project.root, environ, visited, cap))
        if _option(options, "directory", True):
            layers.append(directory_layer(cwd, project.root, environ, visited, cap))
    return tuple(layer for layer in layers if layer.text or layer.problems)


def render_layers(layers):
    if not layers:
        return ""
    parts = ["Context layers (from files, in this order: user, project, directory; a later, "
             "more specific layer refines an earlier one):"]
    for layer in layers:
        if layer.text:
            parts.append(layer.text)
        if layer.problems:
            shown = [escape(line) for line in layer.problems[:MAX_PROBLEMS]]
            if len(layer.problems) > MAX_PROBLEMS:
                shown.append(f"... and {len(layer.problems) - MAX_PROBLEMS} more")
            parts.append(f"Notes on the {layer.name} context:\n"
                         + "\n".join(f"- {line}" for line in shown))
    return "\n\n".join(parts)
