"""MCP tool calls through `nagent-mcp` (issue 25): a cold start per call outside a run, against
the run's live session inside one (nagent_mcp_channel, nagent_main_mcp_host, nagent_mcp_pool).

Rows, for each server measured (the SDK test server tests/mcp_server.py, tool `counter`; and
`mcp-server-time`, tool get_current_time, when its command is found: --time-command, PATH):
- "server's own time": one tools/call on a session held open in this process (nagent_mcp_pool
  with no channel and no `nagent-mcp` process), median of --calls after a first unmeasured one:
  what the server and the JSON-RPC round trip cost.
- "cold call, outside a run": `nagent-mcp call` with no run: start the server, call, stop it;
  median of --cold runs.
- "first call in a run": the first `nagent-mcp call` of a run's shell action (the host and the
  server start), one per run, median of --runs runs.
- "later calls in a run": every later call of the same action (the live session), median.
- "over the server's own time": later calls minus the server's own time. Target: <= 50 ms.
- "channel": the same call sent straight on the run's channel from the shell action's timing
  process (nagent_mcp_wire.ask: no `nagent-mcp` process start): the channel and host's share.
- "python3 -c pass": the interpreter's floor, timed in the same shell action (later calls
  minus channel is about this floor plus nagent-mcp's own imports).
- CPU time (user + sys) of a later call's `nagent-mcp` process and of `python3 -c pass`: on a
  loaded machine wall times grow with the load, CPU times much less.
The runs are real `nagent` runs against the fake vendor (tests/fakes.py): the model's one shell
action runs a timing script that starts `nagent-mcp call` --calls times and writes the wall
times to a file. Prints figures; asserts nothing.

Usage: python3 benchmarks/mcp_calls.py [--calls N] [--runs N] [--cold N] [--time-command PATH]
`main(argv) -> [row dicts]` for benchmarks/run_all.py.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(REPO, "bin")
sys.path.insert(0, os.path.join(REPO, "tests"))
sys.path.insert(0, os.path.join(REPO, "bin", "helpers"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from base import clean_environ  # noqa: E402
from bench_env import make_workspace  # noqa: E402
from fakes import FakeVendor  # noqa: E402

TARGET_MS = 50.0
TEST_SERVER = os.path.join(REPO, "tests", "mcp_server.py")
TIMER = r'''
import json, os, resource, subprocess, sys, time
out, calls, helpers, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
sys.path.insert(0, helpers)
from nagent_mcp_wire import CHANNEL_VAR, ask
cpu = {}
def wall(command):
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode:
        sys.exit(f"{command} failed: {proc.stderr}")
    ms = (time.perf_counter() - started) * 1000
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu.setdefault(command[-1] == "pass", []).append(
        (after.ru_utime + after.ru_stime - used.ru_utime - used.ru_stime) * 1000)
    return ms
calls_ms = [wall(argv) for _ in range(calls)]
floor_ms = [wall([sys.executable, "-c", "pass"]) for _ in range(5)]
request = {"op": "call", "server": argv[2], "tool": argv[3], "arguments": json.loads(argv[5]), "timeout": 60}
wire_ms = []
for _ in range(calls):
    started = time.perf_counter()
    answer = ask(os.environ[CHANNEL_VAR], request, 60)
    wire_ms.append((time.perf_counter() - started) * 1000)
    if "result" not in answer:
        sys.exit(f"channel call failed: {answer}")
with open(out, "w") as handle:
    json.dump({"calls": calls_ms, "floor": floor_ms, "wire": wire_ms, "calls_cpu": cpu[False][1:],
               "floor_cpu": cpu[True]}, handle)
'''


def servers(args):
    found = {"test": ({"command": sys.executable, "args": [TEST_SERVER]}, "counter", {})}
    time_command = args.time_command or shutil.which("mcp-server-time")
    if time_command:
        found["time"] = ({"command": time_command, "args": []}, "get_current_time", {"timezone": "UTC"})
    return found


def own_time_ms(entry, tool, arguments, calls, env):
    """Median tools/call on a session held open here (the pool the run's host uses)."""
    import anyio
    from nagent_mcp_config import ServerSpec
    from nagent_mcp_pool import Pool
    spec = ServerSpec(name="s", transport="stdio", command=entry["command"], args=tuple(entry["args"]))

    async def measure():
        async with anyio.create_task_group() as group:
            pool = Pool((spec,), (), env, env, group)
            await pool.call("s", tool, arguments, 60)
            times = []
            for _ in range(calls):
                started = time.perf_counter()
                await pool.call("s", tool, arguments, 60)
                times.append((time.perf_counter() - started) * 1000)
            group.cancel_scope.cancel()
        return statistics.median(times)
    return anyio.run(measure)


def nagent_mcp_call(name, tool, arguments):
    return [sys.executable, os.path.join(BIN, "nagent-mcp"), "call", name, tool, "--args", json.dumps(arguments)]


def run_once(fake, env, work, name, tool, arguments, calls, number):
    out = os.path.join(work, f"times-{name}-{number}.json")
    timer = os.path.join(work, "timer.py")
    with open(timer, "w", encoding="utf-8") as handle:
        handle.write(TIMER)
    command = subprocess.list2cmdline([sys.executable, timer, out, str(calls), os.path.join(BIN, "helpers"),
                                       "nagent-mcp", "call", name, tool, "--args", json.dumps(arguments)])
    fake.reply(f"<nagent-shell>{command}</nagent-shell>")
    fake.reply("<nagent-response>done</nagent-response>")
    proc = subprocess.run([sys.executable, os.path.join(BIN, "nagent"), "-n", f"time {name} calls"],
                          env=env, cwd=work, capture_output=True, text=True, timeout=600)
    if proc.returncode or not os.path.exists(out):
        raise RuntimeError(f"the run failed ({proc.returncode}): {proc.stderr[-500:]}")
    with open(out, encoding="utf-8") as handle:
        return json.load(handle)


def measure(fake, env, work, name, server, args):
    entry, tool, arguments = server
    own = own_time_ms(entry, tool, arguments, args.calls, env)
    cold = []
    for _ in range(args.cold):
        started = time.perf_counter()
        proc = subprocess.run(nagent_mcp_call(name, tool, arguments), env=env, cwd=work,
                              capture_output=True, text=True, timeout=120)
        if proc.returncode:
            raise RuntimeError(f"cold call failed: {proc.stderr[-500:]}")
        cold.append((time.perf_counter() - started) * 1000)
    firsts, later, floor, wire, later_cpu, floor_cpu = [], [], [], [], [], []
    for number in range(args.runs):
        times = run_once(fake, env, work, name, tool, arguments, args.calls, number)
        firsts.append(times["calls"][0])
        later += times["calls"][1:]
        floor += times["floor"]
        wire += times["wire"]
        later_cpu += times["calls_cpu"]
        floor_cpu += times["floor_cpu"]
    later_ms = statistics.median(later)
    return {"server": name, "own_ms": round(own, 1), "cold_ms": round(statistics.median(cold)),
            "first_ms": round(statistics.median(firsts)), "later_ms": round(later_ms, 1),
            "over_own_ms": round(later_ms - own, 1), "floor_ms": round(statistics.median(floor), 1),
            "wire_ms": round(statistics.median(wire), 1),
            "later_cpu_ms": round(statistics.median(later_cpu), 1),
            "floor_cpu_ms": round(statistics.median(floor_cpu), 1),
            "target_ms": TARGET_MS}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10, help="calls per run (the first is cold)")
    parser.add_argument("--runs", type=int, default=3, help="nagent runs per server")
    parser.add_argument("--cold", type=int, default=3, help="cold calls outside a run per server")
    parser.add_argument("--time-command", help="the mcp-server-time command (default: from PATH)")
    args = parser.parse_args(argv)
    found = servers(args)
    fake = FakeVendor().start()
    config = {"provider": "openai", "mcp_servers": {name: entry for name, (entry, _, _) in found.items()}}
    root, home, work, config_path = make_workspace("nagent-bench-mcp-", config)
    env = dict(clean_environ(), HOME=home, NAGENT_CONFIG=config_path, NAGENT_NO_SPINNER="1", **fake.env())
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    rows = []
    try:
        for name, server in found.items():
            rows.append(measure(fake, env, work, name, server, args))
    finally:
        fake.stop()
        shutil.rmtree(root, ignore_errors=True)
    if "time" not in found:
        print("mcp-server-time not found (pass --time-command): only the test server measured")
    print(f"{'server':8} {'own':>8} {'cold':>8} {'first':>8} {'later':>8} {'over own':>9} {'channel':>8} "
          f"{'py floor':>9}")
    for row in rows:
        print(f"{row['server']:8} {row['own_ms']:>6}ms {row['cold_ms']:>6}ms {row['first_ms']:>6}ms "
              f"{row['later_ms']:>6}ms {row['over_own_ms']:>7}ms {row['wire_ms']:>6}ms {row['floor_ms']:>7}ms")
    for row in rows:
        print(f"{row['server']}: CPU of a later call {row['later_cpu_ms']} ms (nagent-mcp's process), "
              f"of python3 -c pass {row['floor_cpu_ms']} ms")
    print(f"target: later calls <= {TARGET_MS:g} ms over the server's own time")
    return rows


if __name__ == "__main__":
    main()
