"""`nagent --trust`, `nagent --list-skills`, and the context part of --status and --config.

Data contract: `trust(options, settings)` and `list_skills(options, settings)` return
`(data, text)` like the other lifecycle commands (data for --json, text for people).
- trust: the project around the working directory (UsageError outside a git work tree, and
  when nagent_project refused the root) is
  recorded as trusted with the current listing of its .nagent/bin (nagent_trust); nothing runs.
- list_skills: every skill nagent would list (nagent_skills), with source, path, requirements,
  problems and the skills it shadows; `enabled` says whether the `skills` setting lists them in
  the context, `project_root` which project's skills count.
- `context_overview(settings, cwd, environ)` -> what a new conversation started here would
  read: {"project_root", "branch", "files", "skills", "project_tools": {"state", "bin",
  "tools"}, "project_refused": why the root was refused, or None}; reading files only, running
  nothing but the one git process of nagent_project.probe_project. `overview_lines(overview)` is its text.
- `recorded_context_files(path)` -> the "context_files" list the conversation's meta record
  kept when it started (see nagent_context.InitialContext.meta), or None when it kept none
  (a conversation started before they were recorded, or none yet). Reads only the head of the
  file, up to the first record that is neither context nor meta.
"""
import os

from nagent_conversation_head import session_meta
from nagent_errors import UsageError


def _probe(environ, cwd, settings):
    """nagent_project.ProjectSearch(project, warning) of `cwd`: the one validated root."""
    from nagent_project import probe_project
    from nagent_secrets import key_names
    return probe_project(cwd, environ, key_names(settings.providers.values()))


def _project(environ, cwd, settings):
    return _probe(environ, cwd, settings).project


def trust(options, settings):
    from nagent_cli import current_cwd
    from nagent_trust import trust_project
    cwd = current_cwd()
    project, refused = _probe(settings.environ, cwd, settings)
    if refused:
        raise UsageError("project root refused", refused,
                         "run nagent --trust inside a project whose work tree holds its .git")
    if project is None:
        raise UsageError("not inside a git work tree", cwd,
                         "run nagent --trust inside the project whose .nagent/bin you trust")
    data = trust_project(project, settings.environ)
    lines = [f"trusted {data['root']}: nagent may run the tools in {data['bin']} "
             f"(listing sha256 {data['hash'][:16]})"]
    for item in data["files"]:
        detail = f"sha256 {item['digest'][:16]}, {item['size']} bytes" if item["kind"] == "file" \
            else f"{item['kind']} {item['digest']}".rstrip()
        lines.append(f"  {item['path']}  ({detail})")
    if not data["files"]:
        lines.append("  (no .nagent/bin yet: tools added later need nagent --trust again)")
    if data["previous"] and data["previous"] != data["hash"]:
        lines.append(f"This replaces the trust of an earlier listing (sha256 {data['previous'][:16]}).")
    lines.append("They are described (run with --description) when a conversation starts in this "
                 "project; any change to .nagent/bin needs nagent --trust again.")
    return data, "\n".join(lines)


def list_skills(options, settings):
    from nagent_cli import current_cwd
    from nagent_skills import find_skills, skill_dicts
    environ = settings.environ
    project = _project(environ, current_cwd(), settings) if settings.context.project else None
    skills = find_skills(environ, project.root if project else None)
    data = {"skills": skill_dicts(skills), "enabled": settings.context.skills,
            "project_root": project.root if project else None}
    lines = []
    for item in data["skills"]:
        state = ("problem: " + "; ".join(item["problems"]) if item["problems"] else
                 "requirements not met: " + ", ".join(item["missing"]) if item["missing"] else
                 "requirements met")
        lines.append(f"{item['name']} ({item['source']}): {item['description']}\n  {item['path']}\n"
                     f"  {state}" + "".join(f"\n  shadows {path}" for path in item["shadows"]))
    if not lines:
        lines.append("no skills (nagent looks in ~/.nagent/skills/*/SKILL.md and "
                     "<project>/.nagent/skills/*/SKILL.md)")
    if not settings.context.skills:
        lines.append("skills are off (skills: false): the context lists none of them")
    return data, "\n".join(lines)


def context_overview(settings, cwd, environ):
    from nagent_context_layers import load_layers
    from nagent_skills import find_skills
    from nagent_trust import trust_status
    project, refused = _probe(environ, cwd, settings)
    options = settings.context
    layers = load_layers(cwd, environ, project, options)
    from_project = project is not None and options.project
    skills = find_skills(environ, project.root if from_project else None) if options.skills else ()
    overview = {"project_root": project.root if project else None,
                "branch": project.branch if project else None,
                "files": [dict(item) for layer in layers for item in layer.files],
                "skills": [skill.name for skill in skills], "project_tools": None,
                "project_refused": refused}
    if from_project:
        status = trust_status(project, environ)
        overview["project_tools"] = {"state": status.state, "bin": status.bin_dir,
                                     "tools": list(status.tools)}
    return overview


def file_list(files):
    return ", ".join(f"{item['path']} ({item['layer']}{', cut' if item.get('cut') else ''})"
                     for item in files) or "none"


def overview_lines(overview):
    root = overview["project_root"]
    lines = [f"project root: {root} (branch {overview['branch']})" if root
             else f"project root: none (refused: {overview['project_refused']})" if overview.get("project_refused")
             else "project root: none (not inside a git work tree)",
             "context files a new conversation here reads: " + file_list(overview["files"]),
             f"skills listed: {len(overview['skills'])} (nagent --list-skills)"]
    tools = overview["project_tools"]
    if tools and tools["state"] != "none":
        lines.append(f"project tools: {tools['bin']}: {tools['state']}"
                     + ("" if tools["state"] == "trusted" else " (nagent --trust)"))
    return lines


def recorded_context_files(path):
    meta = session_meta(path)
    files = meta.get("context_files") if meta else None
    return files if isinstance(files, list) else None


def status_lines(files, exists=True):
    if not exists:
        return ["context files: none yet (read when the conversation starts)"]
    if files is None:
        return ["context files: not recorded (the conversation started before nagent recorded them)"]
    return ["context files: " + file_list(files)]


def config_context(settings):
    from nagent_cli import current_cwd
    environ = dict(settings.environ) if settings.environ else dict(os.environ)
    overview = context_overview(settings, current_cwd(), environ)
    return overview, overview_lines(overview)
