"""`nagent-batch`: run nagent over a JSON Lines file of tasks, each in its own workspace and
conversation, on a local pool (default), a Dask cluster, or as printed commands for any runner.

Data contract: `build_parser()` is the argparse parser; `main(argv) -> exit code`; `run()` is
main under the shared error convention (nagent_cli.run_main; with --json an error is one JSON
object on stdout too). Modes, one per invocation:
- run (default): nagent_batch_pool.prepare + run_batch on the local pool (-j N) or, with
  `--engine dask --scheduler ADDR`, nagent_batch_dask (imported only then). Prints a summary
  (stdout; stderr with --events, whose JSON lines own stdout) and the progress line on a
  terminal; with --json the summary is one JSON object. Exit 0 when every task's result is
  ok, 1 when one failed or has none, 9 when --max-cost kept tasks from starting, 7 when
  another process was running one.
- `--print-commands`: one self-contained line per task still to run (shell-quoted; the task
  itself travels as JSON in `--task`, so the task file is not needed where it runs).
- `--run-one ID --task JSON --out DIR`: one attempt here, stored in DIR/tasks/ID/ATTEMPT
  (not appended to results.jsonl: `--collect` does that); --json prints its results line.
  Exit 0 ok or already done, 1 failed, 7 running elsewhere.
- `--collect`: append the stored attempts results.jsonl lacks; summary as for a run.
The output folder (`--out`, default TASKS without .jsonl plus ".out") must be new, empty, or
a batch folder already (results.jsonl, tasks/, work/ or locks/ in it): a batch never
scatters its files into an unrelated directory.
"""
import os
import sys

from nagent_cli import argument_parser, early_exit, run_main
from nagent_errors import UsageError

PROG = "nagent-batch"
DESCRIPTION = ("Run nagent over a JSON Lines file of tasks, each in its own git workspace and "
               "conversation, on a local pool, a Dask cluster, or as plain commands.")
EXAMPLES = (("nagent-batch tasks.jsonl -j 4", "a local pool; run it again to resume"),
            "nagent-batch tasks.jsonl --engine dask --scheduler tcp://HOST:8786",
            ("nagent-batch tasks.jsonl --print-commands | xargs -d '\\n' -n 1 -P 4 sh -c", "any runner"),
            ("nagent-batch tasks.jsonl --collect", "the results so far"))
EXITS = ("ok", "failure", "usage", "config", "setup", "input", "busy", "interrupted", "terminated")
BATCH_MARKERS = ("results.jsonl", "tasks", "work", "locks")


def build_parser():
    parser = argument_parser(prog=PROG, description=DESCRIPTION, examples=EXAMPLES, exits=EXITS,
                             epilog="Task keys: id, prompt, repo (path or git URL), ref, setup, "
                                    "check, max_cost, model. See docs/batch.md.")
    parser.add_argument("tasks", nargs="?", metavar="TASKS.jsonl", help="the task file")
    parser.add_argument("--description", action="store_true", help="print a one-line description")
    parser.add_argument("--out", metavar="DIR",
                        help="the batch's output folder (default: TASKS without .jsonl, plus .out)")
    parser.add_argument("-j", "--jobs", type=int, metavar="N",
                        help="tasks at once (local default: the number of CPUs; dask default: the "
                             "cluster's threads)")
    parser.add_argument("--max-cost", type=float, metavar="USD",
                        help="start no task once the folder's results and running tasks cost this much")
    parser.add_argument("--retry-failed", action="store_true", help="run failed tasks again")
    parser.add_argument("--events", action="store_true",
                        help="JSON Lines on stdout: batch_start, task_start, task_end, batch_end")
    parser.add_argument("--json", action="store_true",
                        help="print the summary (or --run-one's result) as one JSON object")
    engine = parser.add_argument_group("engine")
    engine.add_argument("--engine", choices=("local", "dask"), default="local",
                        help="local: a pool on this machine (default); dask: a Dask cluster")
    engine.add_argument("--scheduler", metavar="tcp://HOST:PORT", help="the dask scheduler")
    engine.add_argument("--workdir", metavar="DIR",
                        help="where workspaces are made (default: OUT/work; on dask workers, "
                             "their temporary directory)")
    limits = parser.add_argument_group("time limits (seconds)")
    limits.add_argument("--setup-timeout", type=float, default=600.0, metavar="S", help="default 600")
    limits.add_argument("--check-timeout", type=float, default=600.0, metavar="S", help="default 600")
    limits.add_argument("--task-timeout", type=float, default=3600.0, metavar="S",
                        help="one nagent run; default 3600")
    plain = parser.add_argument_group("without an engine")
    plain.add_argument("--print-commands", action="store_true",
                       help="print one self-contained `nagent-batch --run-one` line per task to run")
    plain.add_argument("--run-one", metavar="ID", help="run task ID here (with --task and --out)")
    plain.add_argument("--task", metavar="JSON", help="with --run-one: the task itself")
    plain.add_argument("--collect", action="store_true",
                       help="add the results --run-one commands stored to results.jsonl")
    return parser


def check_args(args):
    modes = [name for name in ("print_commands", "run_one", "collect") if getattr(args, name)]
    if len(modes) > 1:
        raise UsageError("choose one of --print-commands, --run-one and --collect",
                         ", ".join("--" + name.replace("_", "-") for name in modes))
    if args.run_one is not None:
        if not args.task or not args.out:
            raise UsageError("--run-one needs --task and --out", args.run_one,
                             "use the lines --print-commands prints")
    elif not args.tasks:
        raise UsageError("no task file", "", "nagent-batch TASKS.jsonl")
    if args.task and args.run_one is None:
        raise UsageError("--task only goes with --run-one", args.task[:60])
    if (args.engine == "dask") != bool(args.scheduler):
        raise UsageError("--engine dask and --scheduler go together", args.scheduler or "--engine dask",
                         "nagent-batch TASKS --engine dask --scheduler tcp://HOST:PORT")
    if modes and args.engine == "dask":
        raise UsageError("--engine dask runs the batch itself", "--" + modes[0].replace("_", "-"))
    if args.events and modes:
        raise UsageError("--events applies to a batch run", "--" + modes[0].replace("_", "-"))
    if args.json and (args.events or args.print_commands):
        raise UsageError("--json does not go with " + ("--events" if args.events else "--print-commands"),
                         "--json", "--events prints JSON lines; --print-commands prints shell lines")
    if args.jobs is not None and args.jobs < 1:
        raise UsageError("--jobs must be at least 1", str(args.jobs))
    for name in ("max_cost", "setup_timeout", "check_timeout", "task_timeout"):
        value = getattr(args, name)
        if value is not None and not 0 < value < float("inf"):
            raise UsageError(f"--{name.replace('_', '-')} must be above 0", str(value))


def out_folder(args):
    if args.out:
        out = args.out
    else:
        stem = args.tasks[:-len(".jsonl")] if args.tasks.endswith(".jsonl") else args.tasks
        out = stem + ".out"
    out = os.path.abspath(out)
    if os.path.isdir(out) and os.listdir(out) and not any(
            os.path.exists(os.path.join(out, name)) for name in BATCH_MARKERS):
        raise UsageError("--out is a directory that holds no batch", out,
                         "choose a new or empty folder")
    if os.path.exists(out) and not os.path.isdir(out):
        raise UsageError("--out is not a directory", out)
    return out


def run_options(args, out, local):
    from nagent_batch_exec import RunOptions
    workdir = os.path.abspath(args.workdir) if args.workdir else None
    if workdir is None and local:
        workdir = os.path.join(out, "work")
    from nagent_batch_store import batch_tag
    return RunOptions(workdir=workdir, setup_timeout=args.setup_timeout, check_timeout=args.check_timeout,
                      task_timeout=args.task_timeout, tag=batch_tag(out))


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if early_exit(argv, PROG, DESCRIPTION):
        return 0
    args = build_parser().parse_args(argv)
    check_args(args)
    out = out_folder(args)
    import nagent_batch_commands as commands
    if args.run_one is not None:
        return commands.run_one(args, out, run_options(args, out, True))
    from nagent_batch_tasks import load_tasks
    tasks = load_tasks(args.tasks)
    if args.print_commands:
        return commands.print_commands(tasks, args, out)
    if args.collect:
        return commands.collect(tasks, args, out)
    return commands.run(tasks, args, out, run_options(args, out, args.engine == "local"))


def run():
    return run_main(main, structured=True)


if __name__ == "__main__":
    sys.exit(run())
