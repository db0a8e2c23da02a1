"""The nagent-batch tests' shared world: a git repository (a space in its path, and a symlink to
it), the six tasks the issue asks for, and the fake vendor's script for them.

Data contract:
- `make_repo(path)` -> path: a git repository with one commit (a.txt).
- `six_tasks(repo, link, outside)` -> the task dicts; every prompt carries "TASK-<id>" and every
  task uses the same repository (t6 through `link`). Expected: t1, t4, t5, t6 ok; t2 fails its
  check (exit 3, "check-said-no"); t3 passes its max_cost at its first call (usage of 2M
  input tokens at gpt-5.5's price). t4 leaves symlinks to `outside` in its workspace; t5's
  setup writes setup.txt; t6 asks for model gpt-5-mini.
- `Script(fake, slow=(), delay=0)`: the fake's reply_fn. A request is told apart by its task
  marker and by how many assistant turns it carries (turn 0: a shell action, then the
  response), so a task run again gets the same answers. `slow` tasks' first call ever waits
  `delay` seconds. `script.requests(task_id)` -> the records of that task; each record also
  has "attempt", read from the workspace path nagent's context names.
- `write_tasks(path, tasks)`, `read_lines(path)` (valid JSON lines only, in order) and
  `final(lines)` (id -> its last line), `comparable(line)` (what two runs of a task must share).
"""
import json
import os
import re
import subprocess
import threading

from fakes import ReplySpec

EXPECTED = {"t1": "ok", "t2": "failed", "t3": "failed", "t4": "ok", "t5": "ok", "t6": "ok"}
MARK_RE = re.compile(r"TASK-(t\d+)")
ATTEMPT_RE = re.compile(r"/(t\d+\.\d{8}T\d{6}Z-[0-9a-f]{8})")   # the workspace's name, in nagent's context


def git(repo, *args):
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def make_repo(path):
    os.makedirs(path)
    git(path, "init", "-q")
    with open(os.path.join(path, "a.txt"), "w", encoding="utf-8") as handle:
        handle.write("a\n")
    git(path, "add", "a.txt")
    git(path, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", "init")
    return path


def six_tasks(repo, link, outside):
    def task(task_id, **extra):
        return dict({"id": task_id, "prompt": f"TASK-{task_id}: do the work", "repo": repo}, **extra)
    return [task("t1", check="test -f t1.txt"),
            task("t2", check="echo check-said-no; exit 3"),
            task("t3", max_cost=0.5),
            task("t4", check="test -L escape-dir"),
            task("t5", setup="echo prepared > setup.txt", check="grep -q prepared t5.txt"),
            task("t6", repo=link, model="gpt-5-mini")]


def actions(outside):
    return {"t1": "echo one > t1.txt", "t2": "echo two > t2.txt", "t3": "echo three > t3.txt",
            "t4": f"ln -s '{outside}' escape-dir && ln -s '{outside}/precious.txt' escape-file && "
                  "echo four > t4.txt",
            "t5": "cat setup.txt > t5.txt", "t6": "echo six > t6.txt"}


class Script:
    def __init__(self, fake, outside, slow=(), delay=0.0):
        self.actions, self.slow, self.delay = actions(outside), set(slow), delay
        self.lock, self.seen = threading.Lock(), set()
        fake.reply_fn(self)
        self.fake = fake

    def __call__(self, record):
        body = json.dumps(record.get("json"))
        found = MARK_RE.search(body)
        if not found:
            return None
        task_id = found.group(1)
        turn = body.count('"role": "assistant"')
        record["task"] = task_id
        where = ATTEMPT_RE.search(body)
        record["attempt"] = where.group(1).split(".", 1)[1] if where else None
        with self.lock:
            first = task_id not in self.seen
            self.seen.add(task_id)
        delay = self.delay if first and task_id in self.slow else 0.0
        if turn == 0:
            usage = {"input": 2_000_000} if task_id == "t3" else None
            return ReplySpec(f"<nagent-shell>{self.actions[task_id]}</nagent-shell>", usage=usage,
                             delay=delay)
        return ReplySpec(f"<nagent-response>done {task_id}</nagent-response>")

    def requests(self, task_id):
        return [record for record in list(self.fake.requests) if record.get("task") == task_id]


def write_tasks(path, tasks):
    with open(path, "w", encoding="utf-8") as handle:
        handle.write("".join(json.dumps(task) + "\n" for task in tasks))
    return path


def read_lines(path):
    lines = []
    with open(path, encoding="utf-8") as handle:
        for raw in handle:
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and "folder" in line:   # not the tests' own hand edits
                lines.append(line)
    return lines


def final(lines):
    latest = {}
    for line in lines:
        latest[line["id"]] = line
    return latest


def comparable(line):
    check = line.get("check") or {}
    return {"status": line["status"], "failure": line["failure"], "exit_code": line["exit_code"],
            "response": line["response"], "calls": line["calls"], "check": check.get("exit_code"),
            "tail": check.get("tail"), "diff": line["diff"]}
