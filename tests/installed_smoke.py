"""Smoke test of an installed nagent (CI runs it after installing the wheel into a fresh venv):
`python3 tests/installed_smoke.py PATH/TO/bin/nagent`.

Starts the fake vendor (tests/fakes.py), then runs the installed `nagent --version` and one
scripted fake-model run through the installed entry point: the model reads a file over 64 KiB
(the installed nagent-file-split runs as a child process) and asks a sub-agent (the installed
nagent runs as a child), then answers. Prints one line per check and exits non-zero on the
first failure. Everything runs under a temporary HOME; nothing of the user's is read.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from base import clean_environ  # noqa: E402
from fakes import FakeVendor  # noqa: E402


def check(ok, what, detail=""):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        sys.stderr.write(detail[-3000:] + "\n")
        sys.exit(1)


def main(argv):
    if len(argv) != 1:
        sys.stderr.write("usage: installed_smoke.py PATH/TO/bin/nagent\n")
        return 2
    nagent = os.path.abspath(argv[0])
    root = os.path.realpath(tempfile.mkdtemp(prefix="nagent-smoke-"))
    fake = FakeVendor().start()
    try:
        home, work = os.path.join(root, "home"), os.path.join(root, "work")
        os.makedirs(home)
        os.makedirs(work)
        config = os.path.join(root, "config.json")
        with open(config, "w", encoding="utf-8") as handle:
            json.dump({"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0}}, handle)
        env = clean_environ()
        env.update(fake.env())
        env.update(HOME=home, NAGENT_CONFIG=config, NAGENT_NO_SPINNER="1", TMPDIR=root)

        version = subprocess.run([nagent, "--version"], capture_output=True, text=True, env=env)
        check(version.returncode == 0 and version.stdout.startswith("nagent "),
              f"nagent --version: {version.stdout.strip()}", version.stderr)

        with open(os.path.join(work, "big.txt"), "w", encoding="utf-8") as handle:
            handle.write("".join(f"line {i} of a large file\n" for i in range(5000)))
        fake.reply('<nagent-file-read path="big.txt"/>\n<nagent-agent>say hi</nagent-agent>')
        fake.reply("<nagent-response>hi from the child</nagent-response>")
        fake.reply("<nagent-response>installed nagent works</nagent-response>")
        run = subprocess.run([nagent, "--json", "read big.txt and ask a sub-agent"], cwd=work,
                             capture_output=True, text=True, env=env, timeout=300)
        check(run.returncode == 0, "fake-model run exits 0", run.stderr)
        data = json.loads(run.stdout)
        check(data.get("response") == "installed nagent works", "final response printed", run.stdout)
        with open(data["conversation"], encoding="utf-8") as handle:
            text = handle.read()
        check('split="true"' in text and "0001-big.txt" in text,
              "the installed nagent-file-split ran as a child process", text[-3000:])
        check("output:\nhi from the child" in text, "the installed nagent ran as a sub-agent", text[-3000:])
        check(not fake.pending(), "every scripted reply was used", repr(fake.pending()))
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
