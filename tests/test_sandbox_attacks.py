"""Issue 16: the bwrap sandbox attacked from inside, through the real loop, as root and as an
unprivileged user (when this machine can drop privileges; skipped with the reason otherwise).

Each test starts bin/nagent --shell-sandbox bwrap against the fake vendor, whose scripted reply is
one <nagent-shell> full of probes; every probe prints `name=ok|fail` or `name=value`. The checks
then look at both sides: what the probe saw inside, and what changed (or did not) on the host.
- escapes: capabilities, remount, umount /proc, nsenter, unshare, mount -t tmpfs;
- the next run's trust: ~/.nagent, the NAGENT_CONFIG file and the code nagent imports cannot be
  changed, also by renaming a parent (`mv home home.moved && mkdir -p home/.nagent/bin`), with
  HOME under /tmp and HOME inside the project; a second run executes nothing planted; what
  cannot be protected is refused before any model call (exit 10, one line naming the path);
- host Unix sockets (/run, temp dirs) are unreachable with the network off, reachable with it on;
- keys: config files hidden, environment an allowlist, nagent's own /proc invisible;
- /var/tmp is writable like the other temp roots; a warning when working from $HOME.
"""
import base64
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import unittest
import uuid

from base import BIN
from fakes import FakeVendorTestCase
from unprivileged import give_to_nobody, outside_dir, unprivileged_argv

import nagent_conversation
import nagent_sandbox
from nagent_errors import RefusedError
from nagent_shell import ShellPolicy

HAVE_BWRAP = shutil.which("bwrap") is not None
PROBE_HEAD = ('probe() { n=$1; shift; if "$@" >/dev/null 2>&1; then echo "$n=ok"; '
              'else echo "$n=fail"; fi; }\n')


def parse(body):
    out = body.split("stdout:\n", 1)[1].split("\nstderr:\n", 1)[0]
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


@unittest.skipUnless(HAVE_BWRAP, "bwrap not installed")
class SandboxCase(FakeVendorTestCase):
    unprivileged = False

    def setUp(self):
        super().setUp()
        self.key = f"sk-MARKER-{uuid.uuid4().hex}"
        self.env["OPENAI_API_KEY"] = self.key
        self.env["GITHUB_TOKEN"] = f"ghp_{uuid.uuid4().hex}"
        self.env["UNLISTED_SETTING"] = "should-not-pass"
        self.config = {"provider": "openai", "retry": {"base_delay": 0, "max_delay": 0},
                       "shell": {"sandbox": "bwrap"},
                       "providers": {"openai": {"api_key": "${OPENAI_API_KEY}"}}}
        self.write_config(self.config)
        self.outside = outside_dir(self)   # neither temp nor project: read-only inside
        self.replies, self.proc = [], None
        self.fake.reply_fn(self._next_reply)
        if self.unprivileged:
            os.chmod(self.tmp, 0o755)
            os.chmod(self.outside, 0o755)
            check = unprivileged_argv(["bwrap", "--unshare-all", "--unshare-user", "--disable-userns",
                                       "--ro-bind", "/", "/", "--proc", "/proc", "true"], self.tmp)
            if subprocess.run(check, capture_output=True, timeout=60).returncode != 0:
                self.skipTest("bwrap cannot create a user namespace as an unprivileged user here")

    def _next_reply(self, _record):
        text = self.replies.pop(0) if self.replies else "done"
        if callable(text):
            text = text()
        return text if text.startswith("<nagent-") else f"<nagent-response>{text}</nagent-response>"

    def shell(self, script):
        self.replies.append(lambda: f"<nagent-shell>\n{PROBE_HEAD}{script()}\n</nagent-shell>")

    def nagent(self, name, *flags, cwd=None):
        argv = [sys.executable, os.path.join(BIN, "nagent"), "--conversation", name, *flags, "go"]
        if self.unprivileged:
            for path in {self.tmp, self.outside, os.path.dirname(self.env["HOME"])}:
                give_to_nobody(path)
            argv = unprivileged_argv(argv, self.tmp)
        self.proc = subprocess.Popen(argv, env=self.env, cwd=cwd or self.cwd, text=True,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        out, err = self.proc.communicate(timeout=120)
        self.assertNotIn("Traceback", err)
        return subprocess.CompletedProcess(argv, self.proc.returncode, out, err)

    def results(self, name):
        path = os.path.join(self.env["HOME"], ".nagent", "conversations", name)
        return [r.body for r in nagent_conversation.read_records(path) if r.kind == "result"]

    def probes(self, name):
        [body] = self.results(name)
        return parse(body)

    def host_pid(self):
        return self.proc.pid


class Escapes(SandboxCase):
    def test_capabilities_mounts_namespaces_and_proc(self):
        witness = os.path.join(self.outside, "escaped")
        self.shell(lambda: f"""
echo "capeff=$(awk '/^CapEff/{{print $2}}' /proc/self/status)"
probe remount_root mount -o remount,bind,rw /
probe remount_state mount -o remount,bind,rw "$HOME/.nagent"
probe write_outside touch {witness}
probe umount_proc umount -l /proc
probe host_pid_visible test -e /proc/{self.host_pid()}/environ
probe nsenter_host nsenter -t {self.host_pid()} -n true
probe nsenter_1 nsenter -t 1 -n true
probe unshare_user unshare -r true
probe unshare_mount unshare -m true
probe unshare_net unshare -n true
probe mount_tmpfs mount -t tmpfs none {self.outside}
probe chroot chroot / true
echo "environ_b64=$(cat /proc/[0-9]*/environ 2>/dev/null | base64 -w0)"
echo "uid=$(id -u)"
""")
        proc = self.nagent("escapes")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        seen = self.probes("escapes")
        self.assertEqual(seen["capeff"], "0000000000000000")
        for name in ("remount_root", "remount_state", "write_outside", "umount_proc",
                     "host_pid_visible", "nsenter_host", "nsenter_1", "unshare_user",
                     "unshare_mount", "unshare_net", "mount_tmpfs", "chroot"):
            self.assertEqual(seen[name], "fail", name)
        self.assertFalse(os.path.exists(witness))
        self.assertNotIn(self.key.encode(), base64.b64decode(seen["environ_b64"]))
        self.assertEqual(seen["uid"], "65534" if self.unprivileged else "0")


class NextRunTrust(SandboxCase):
    """A sandboxed command cannot change nagent's config, state or the code it runs next time."""

    def plant_attack(self, home_parent):
        tool = "#!/bin/sh\necho planted > " + os.path.join(self.outside, "ran") + "\n"
        return f"""
probe plant_tool sh -c 'mkdir -p "$HOME/.nagent/bin" && printf "{tool}" > "$HOME/.nagent/bin/zz"'
probe parent_rename sh -c 'cd {home_parent} && mv "$(basename "$HOME")" home.moved && mkdir -p "$HOME/.nagent/bin" && printf "{tool}" > "$HOME/.nagent/bin/zz" && chmod +x "$HOME/.nagent/bin/zz" && echo {{\\"shell\\":{{\\"sandbox\\":\\"none\\"}}}} > "$HOME/.nagent/config.json"'
probe state_rename mv "$HOME/.nagent" "$HOME/.nagent.moved"
probe config_write sh -c 'echo "{{}}" > {self.config_path}'
probe config_rename mv {self.config_path} {self.config_path}.moved
probe config_parent_rename mv {os.path.dirname(self.config_path)} {os.path.dirname(self.config_path)}.moved
echo "config_bytes=$(cat {self.config_path} 2>/dev/null | wc -c)"
echo "state_listing=$(ls -A "$HOME/.nagent" | tr '\\n' ,)"
"""

    def check_untouched(self, name, seen, next_run=True):
        for probe in ("plant_tool", "parent_rename", "state_rename", "config_write",
                      "config_rename", "config_parent_rename"):
            self.assertEqual(seen[probe], "fail", probe)
        self.assertEqual(seen["config_bytes"], "0")            # hidden, not merely read-only
        self.assertEqual(seen["state_listing"], "conversations,")  # this command's script only
        with open(self.config_path, encoding="utf-8") as handle:
            self.assertEqual(json.load(handle), self.config)
        home = self.env["HOME"]
        self.assertFalse(os.path.exists(os.path.join(os.path.dirname(home), "home.moved")))
        self.assertFalse(os.path.exists(os.path.join(home, ".nagent", "bin")))
        if not next_run:
            return
        # The next run builds a new context (tool discovery): nothing planted runs.
        self.replies.append("second run")
        proc = self.nagent(name + "-next")
        self.assertEqual((proc.returncode, proc.stdout), (0, "second run\n"), proc.stderr)
        self.assertFalse(os.path.exists(os.path.join(self.outside, "ran")))

    def test_home_under_tmp_parent_rename(self):
        # The hermetic HOME lives under /tmp, which the sandbox may write.
        home_parent = os.path.dirname(self.env["HOME"])
        self.shell(lambda: self.plant_attack(home_parent))
        proc = self.nagent("trust-tmp")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.check_untouched("trust-tmp", self.probes("trust-tmp"))

    def test_home_inside_the_project(self):
        home = os.path.join(self.cwd, "home")
        os.makedirs(home)
        self.env["HOME"] = home
        self.shell(lambda: self.plant_attack(self.cwd))
        proc = self.nagent("trust-project")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.check_untouched("trust-project", self.probes("trust-project"), next_run=False)

    def test_code_nagent_imports_and_programs_is_read_only(self):
        lib, tools = os.path.join(self.cwd, "lib"), os.path.join(self.cwd, "tools")
        os.makedirs(lib)
        os.makedirs(tools)
        # A fake bwrap already waits in a PATH directory the sandbox can write: never used.
        fake = os.path.join(tools, "bwrap")
        with open(fake, "w") as handle:
            handle.write(f"#!/bin/sh\necho fake > {self.outside}/fake-bwrap-ran\nexec \"$@\"\n")
        os.chmod(fake, 0o755)
        self.env["PYTHONPATH"] = lib
        self.env["PATH"] = tools + os.pathsep + self.env["PATH"]
        self.shell(lambda: f"probe plant_module sh -c 'echo \"raise SystemExit(99)\" > {lib}/nagent_evil.py'\n"
                   f"probe rename_lib mv {lib} {lib}.moved\n"
                   f"probe plant_git sh -c 'printf \"#!/bin/sh\\n\" > {tools}/git'\n"
                   "probe project_write sh -c 'echo ok > project-file'")
        proc = self.nagent("trust-imports")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        seen = self.probes("trust-imports")
        self.assertEqual((seen["plant_module"], seen["rename_lib"], seen["plant_git"],
                          seen["project_write"]), ("fail", "fail", "fail", "ok"))
        self.assertEqual(os.listdir(lib), [])
        self.assertEqual(os.listdir(tools), ["bwrap"])
        self.assertFalse(os.path.exists(os.path.join(self.outside, "fake-bwrap-ran")))

    def test_unprotectable_layouts_are_refused_before_any_model_call(self):
        linked_home = os.path.join(self.tmp, "home-link")
        os.symlink(self.env["HOME"], linked_home)
        cases = [({"HOME": linked_home}, None, linked_home)]
        state = os.path.join(self.env["HOME"], ".nagent", "work")
        os.makedirs(state)
        cases.append(({}, state, os.path.join(self.env["HOME"], ".nagent")))
        saved = dict(self.env)
        for change, cwd, named in cases:
            with self.subTest(change=change, cwd=cwd):
                self.env = dict(saved, **change)
                proc = self.nagent("refused", "--shell-sandbox", "bwrap", cwd=cwd)
                self.assertCleanError(proc, code=10, contains=named)
                self.assertIn("cannot protect nagent's own files", proc.stderr)
        self.env = saved
        self.assertEqual(self.fake.requests, [])

    def test_config_file_that_could_be_created_is_refused(self):
        # The config layer already refuses a NAGENT_CONFIG naming a missing file at start (exit
        # 3); the sandbox checks again before every command, in case it was removed meanwhile.
        missing = os.path.join(self.tmp, "missing-config.json")
        os.makedirs(os.path.join(self.env["HOME"], ".nagent"), exist_ok=True)
        policy = ShellPolicy(sandbox="bwrap")
        with self.assertRaises(RefusedError) as caught:
            nagent_sandbox.plan(self.cwd, policy, dict(self.env, NAGENT_CONFIG=missing))
        self.assertEqual(caught.exception.value, missing)
        self.assertIn("could create it", caught.exception.fix)
        nagent_sandbox.plan(self.cwd, policy, self.env)   # the existing one is fine


class SocketsAndKeys(SandboxCase):
    def listen(self, path):
        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
        os.chmod(path, 0o666)
        server.listen(8)
        self.addCleanup(lambda: (server.close(), os.path.exists(path) and os.unlink(path)))

        def serve():
            while True:
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                conn.sendall(b"answered\n")
                conn.close()
        threading.Thread(target=serve, daemon=True).start()
        client = socket.socket(socket.AF_UNIX)   # it does answer outside
        client.connect(path)
        self.assertEqual(client.recv(16), b"answered\n")
        client.close()

    def probe_sockets(self, paths):
        lines = [f"probe sock{n} python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); "
                 f"s.connect('{path}'); assert s.recv(16)\"" for n, path in enumerate(paths)]
        return "\n".join(lines)

    def test_host_sockets_unreachable_without_network(self):
        if not os.access("/run", os.W_OK):
            self.skipTest("cannot create a socket under /run")
        paths = [f"/run/nagent-probe-{uuid.uuid4().hex[:8]}.sock",
                 os.path.join(self.tmpdir, "agent.sock"),
                 os.path.join("/tmp", f"nagent-probe-{uuid.uuid4().hex[:8]}", "s.sock")]
        os.makedirs(os.path.dirname(paths[2]))
        self.addCleanup(shutil.rmtree, os.path.dirname(paths[2]), True)
        for path in paths:
            self.listen(path)
        self.shell(lambda: self.probe_sockets(paths))
        proc = self.nagent("sockets-off")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertEqual(self.probes("sockets-off"), {"sock0": "fail", "sock1": "fail", "sock2": "fail"})
        self.config["shell"]["network"] = True
        self.write_config(self.config)
        self.shell(lambda: self.probe_sockets(paths))
        proc = self.nagent("sockets-on")
        self.assertEqual(self.probes("sockets-on"), {"sock0": "ok", "sock1": "ok", "sock2": "ok"})

    def test_keys_config_and_environment(self):
        os.makedirs(os.path.join(self.env["HOME"], ".nagent"), exist_ok=True)
        with open(os.path.join(self.env["HOME"], ".nagent", "config.json"), "w") as handle:
            json.dump({"providers": {"corp": {"base_url": "http://x", "api_key": self.key}}}, handle)
        # shell.env passes a listed variable; a secret stays out even when listed.
        self.env["LISTED_SETTING"] = "passes"
        self.config["shell"]["env"] = ["LISTED_SETTING", "GITHUB_TOKEN"]
        self.write_config(self.config)
        self.shell(lambda: f"""
echo "state_b64=$(base64 -w0 "$HOME/.nagent/config.json" 2>/dev/null)"
echo "config_b64=$(base64 -w0 {self.config_path} 2>/dev/null)"
echo "names=$(env | cut -d= -f1 | sort | tr '\\n' ,)"
echo "tmp=$(echo x > /var/tmp/.nagent-sbx-$$ && rm /var/tmp/.nagent-sbx-$$ && echo writable)"
""")
        proc = self.nagent("keys")
        self.assertEqual(proc.returncode, 0, proc.stderr)
        seen = self.probes("keys")
        self.assertEqual(seen["state_b64"], "")
        self.assertEqual(seen["config_b64"], "")
        names = set(seen["names"].strip(",").split(","))
        for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "UNLISTED_SETTING", "NAGENT_CONFIG",
                     "OPENAI_BASE_URL"):
            self.assertNotIn(name, names)
        self.assertLessEqual({"PATH", "HOME", "TMPDIR", "LISTED_SETTING"}, names)
        self.assertEqual(seen["tmp"], "writable")

    def test_working_from_home_warns_and_keeps_state(self):
        home = self.env["HOME"]
        self.shell(lambda: "probe state_rename mv .nagent nagent.moved\n"
                   "probe bashrc sh -c 'echo x >> .bashrc'")
        proc = self.nagent("from-home", cwd=home)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertIn(f"warning: the shell sandbox lets commands write everything under {home}",
                      proc.stderr)
        self.assertEqual(self.probes("from-home"), {"state_rename": "fail", "bashrc": "ok"})
        self.assertTrue(os.path.isdir(os.path.join(home, ".nagent", "conversations")))


class UnprivilegedEscapes(Escapes):
    unprivileged = True


class UnprivilegedNextRunTrust(NextRunTrust):
    unprivileged = True


class UnprivilegedSocketsAndKeys(SocketsAndKeys):
    unprivileged = True


if __name__ == "__main__":
    unittest.main()
