"""Skills: directories with a SKILL.md, listed one line each; bodies are read on demand.

Data contract:
- A skill is a directory `~/.nagent/skills/NAME/` or `<project>/.nagent/skills/NAME/` holding a
  `SKILL.md` whose YAML front matter (between `---` lines at the top) has `name`,
  `description` and optionally `requires: {bins: [...], env: [...]}` (the format of Claude
  Code, nanobot and Anthropic's agent skills).
- `Skill(name, description, path, source, bins, env, missing, problems, shadows)`: `path` is the
  SKILL.md, `source` "user" or "project", `missing` the unmet requirements ("bin X", "env Y"),
  `problems` what is wrong with the skill (it is still listed, never an error), `shadows` the
  SKILL.md paths of skills with the same name it hides.
- `find_skills(environ, project_root)` -> tuple of Skills sorted by name. The project's skill
  wins over the user's of the same name; within one place the first directory (by name) wins.
  A project skill must resolve (links, "..") inside the project (nagent_paths.within); one that
  points outside is listed with a problem and not read. Only regular files are read, opened
  non-blocking, at most HEAD_BYTES; at most MAX_SKILLS directories per place are read. The YAML parser is imported only when some SKILL.md has
  front matter. Names and descriptions are cleaned to one safe line (capped) by
  nagent_terminal_text.one_line, since they come from files anyone may have written.
- `skills_text(skills)` -> the context section: one line per skill (name, description, path,
  whether its requirements are met or its problem), capped at LIST_CAP bytes with a line
  saying how many more there are; "" for no skills.
- `skill_dicts(skills)` -> JSON-ready dicts for `nagent --list-skills --json`.
"""
import os
from collections import namedtuple

from nagent_context_layers import read_regular
from nagent_paths import nagent_home, within
from nagent_terminal_text import escape, one_line

HEAD_BYTES = 64 * 1024
NAME_CAP = 64
DESCRIPTION_CAP = 300
LIST_CAP = 16 * 1024
MAX_SKILLS = 500   # per place: a repository with thousands of skill folders cannot stall the start

Skill = namedtuple("Skill", "name description path source bins env missing problems shadows")


def split_front_matter(text):
    """(front matter text or None, body)."""
    if text.startswith("\ufeff"):
        text = text[1:]
    lines = text.split("\n")
    if not lines or lines[0].rstrip("\r") != "---":
        return None, text
    for index in range(1, len(lines)):
        if lines[index].rstrip("\r") in ("---", "..."):
            return "\n".join(lines[1:index]), "\n".join(lines[index + 1:])
    return None, text


def _string_list(value):
    if isinstance(value, list) and all(isinstance(item, str) and item.strip() for item in value):
        return tuple(item.strip() for item in value)
    return None


def parse_skill(path, directory, source, environ, real=None):
    """One Skill from its SKILL.md (`real`: the resolved path that was checked, read only if it
    is still the file opened); every problem becomes a `problems` line."""
    fallback = one_line(os.path.basename(directory), NAME_CAP)
    problems, name, description, bins, env = [], fallback, "", (), ()
    data, size = read_regular(os.path.realpath(path) if real is None else real, HEAD_BYTES)
    if data is None:
        return Skill(fallback, "", path, source, (), (), (), (f"SKILL.md is {size}",), ())
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Skill(fallback, "", path, source, (), (), (), ("SKILL.md is not UTF-8 text",), ())
    front, _ = split_front_matter(text)
    meta = None
    if front is None:
        problems.append("no front matter (---, name, description, ---) at the top of SKILL.md")
    else:
        import yaml  # costly: only when some SKILL.md has front matter
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        try:
            meta = yaml.load(front, Loader=loader)
        except yaml.YAMLError as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            problems.append("front matter is not valid YAML: " + one_line(first, 120))
        else:
            if not meta:
                problems.append("front matter is empty")
            elif not isinstance(meta, dict):
                problems.append("front matter is not a mapping of name, description, requires")
        meta = meta if isinstance(meta, dict) else None
    if meta:
        if isinstance(meta.get("name"), str) and meta["name"].strip():
            name = one_line(meta["name"], NAME_CAP)
        else:
            problems.append("front matter has no name")
        if isinstance(meta.get("description"), str) and meta["description"].strip():
            description = one_line(meta["description"], DESCRIPTION_CAP)
        else:
            problems.append("front matter has no description")
        requires = meta.get("requires")
        if requires is not None:
            if not isinstance(requires, dict):
                problems.append("requires must be {bins: [...], env: [...]}")
            else:
                bins = _string_list(requires.get("bins", []))
                env = _string_list(requires.get("env", []))
                if bins is None or env is None:
                    problems.append("requires.bins and requires.env must be lists of names")
                bins, env = bins or (), env or ()
    path_value = environ.get("PATH", os.defpath)
    if bins:
        import shutil  # not at the top: shutil imports bz2, lzma and fnmatch, --config lists skills
    missing = tuple([f"bin {one_line(b, NAME_CAP)}" for b in bins if not shutil.which(b, path=path_value)]
                    + [f"env {one_line(e, NAME_CAP)}" for e in env if not environ.get(e)])
    return Skill(name, description, path, source, bins, env, missing, tuple(problems), ())


def skill_dirs(base, root=None):
    """[(directory, SKILL.md path, refusal or None, its realpath)] under `base`, sorted; `root`
    confines them (the realpath checked is the one read: nagent_context_layers.read_regular)."""
    try:
        names = sorted(os.listdir(base))
    except OSError:
        return []
    found = []
    for name in names:
        if name.startswith("."):
            continue
        if len(found) >= MAX_SKILLS:
            break
        directory = os.path.join(base, name)
        path = os.path.join(directory, "SKILL.md")
        real = os.path.realpath(path)
        if root is not None and not within(real, root):
            found.append((directory, path, "outside the project, not read", real))
        elif os.path.isdir(directory) and os.path.lexists(path):
            found.append((directory, path, None, real))
    return found


def find_skills(environ=None, project_root=None):
    environ = os.environ if environ is None else environ
    user_base = os.path.join(nagent_home(environ), "skills")
    places = [("user", user_base, None)]
    if project_root:
        project_base = os.path.join(project_root, ".nagent", "skills")
        if os.path.realpath(project_base) != os.path.realpath(user_base):
            places.append(("project", project_base, os.path.realpath(project_root)))
    chosen = {}
    for source, base, root in places:
        seen_here = set()
        for directory, path, refusal, real in skill_dirs(base, root):
            if refusal:
                skill = Skill(one_line(os.path.basename(directory), NAME_CAP), "", path, source,
                              (), (), (), (refusal,), ())
            else:
                skill = parse_skill(path, directory, source, environ, real)
            earlier = chosen.get(skill.name)
            if earlier is None:
                chosen[skill.name] = skill
            elif skill.name in seen_here:   # same place, same name: the first directory wins
                chosen[skill.name] = earlier._replace(shadows=earlier.shadows + (skill.path,))
            else:                           # the project's wins over the user's
                chosen[skill.name] = skill._replace(shadows=(earlier.path,) + earlier.shadows)
            seen_here.add(skill.name)
    return tuple(chosen[name] for name in sorted(chosen))


def skill_line(skill):
    if skill.problems:
        state = "problem: " + "; ".join(skill.problems)
    elif skill.missing:
        state = "requirements not met: " + ", ".join(skill.missing)
    else:
        state = "requirements met"
    description = f" {skill.description}" if skill.description else ""
    return f"- {skill.name}:{description} ({escape(skill.path)}; {escape(state)})"


def skills_text(skills):
    if not skills:
        return ""
    lines = ["Skills (one line each; before following a skill, read its SKILL.md with "
             "<nagent-read>; a skill whose requirements are not met may not work):"]
    used = len(lines[0])
    for index, skill in enumerate(skills):
        line = skill_line(skill)
        if used + len(line) + 1 > LIST_CAP:
            lines.append(f"- ... {len(skills) - index} more skills not listed "
                         "(the user can list them all with nagent --list-skills)")
            break
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)


def skill_dicts(skills):
    return [{"name": s.name, "description": s.description, "path": s.path, "source": s.source,
             "requires": {"bins": list(s.bins), "env": list(s.env)},
             "requirements_met": not s.missing, "missing": list(s.missing),
             "problems": list(s.problems), "shadows": list(s.shadows)} for s in skills]
