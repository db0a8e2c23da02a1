"""What each nagent-batch mode does, as functions returning exit codes (the command module).

Data contract: `run(tasks, args, out, run_options)`, `print_commands(tasks, args, out)`,
`run_one(args, out, run_options)` and `collect(tasks, args, out)` take the parsed command line
(argparse namespace), print what their mode prints (see nagent_main_batch) and return its
exit code. Warnings go to stderr as `warning: ...` lines. The --json summary also carries
`coordinator_cpu_s`: the CPU time of nagent-batch itself (its threads, none of the processes it
started).
"""
import json
import os
import queue
import resource
import shlex
import sys

import nagent_batch_store as store
from nagent_batch_pool import BatchOptions, LocalEngine, Summary, prepare, run_batch, run_here, tally
from nagent_batch_progress import Reporter, progress_stream
from nagent_batch_tasks import parse_task, task_json
from nagent_cli import emit_json
from nagent_errors import BusyError, UsageError
from nagent_install import tool_argv
from nagent_terminal_text import one_line


def warn(lines):
    for line in lines:
        sys.stderr.write(f"warning: {line}\n")


def summary_document(summary, out, **extra):
    own = resource.getrusage(resource.RUSAGE_SELF)   # this process's threads, not its children
    return dict({"total": summary.total, "ok": summary.ok,
                 "failed": [{"id": task_id, "reason": reason} for task_id, reason in summary.failed],
                 "missing": summary.missing, "not_started": summary.not_started, "busy": summary.busy,
                 "ran": summary.ran, "cost_usd": round(summary.cost, 6), "wall_s": summary.seconds,
                 "results": os.path.join(out, store.RESULTS), "exit_code": summary.exit_code,
                 "coordinator_cpu_s": round(own.ru_utime + own.ru_stime, 3)}, **extra)


def report(summary, out, args, **extra):
    if args.json:
        emit_json(summary_document(summary, out, **extra))
    else:
        text = "".join(f"{key} {value} new result(s)\n" for key, value in extra.items())
        (sys.stderr if args.events else sys.stdout).write(text + summary_text(summary, out))
    return summary.exit_code


def summary_text(summary, out):
    head = (f"nagent-batch: {summary.total} tasks · {summary.ok} ok · {len(summary.failed)} failed"
            f" · {len(summary.missing)} without a result")
    if summary.not_started:
        head += f" · {len(summary.not_started)} not started (--max-cost reached)"
    if summary.busy:
        head += f" · {len(summary.busy)} running elsewhere"
    head += f" · ran {summary.ran} · ${summary.cost:.4f}"
    if summary.seconds:
        head += f" · {summary.seconds:.1f} s"
    lines = [head]
    lines += [f"  failed {task_id}: {one_line(reason, 200)}" for task_id, reason in summary.failed]
    for label, ids in (("without a result", summary.missing), ("not started", summary.not_started),
                       ("running elsewhere", summary.busy)):
        if ids:
            lines.append(f"  {label}: {' '.join(ids)}")
    lines.append(f"results: {os.path.join(out, store.RESULTS)}")
    return "\n".join(lines) + "\n"


def run(tasks, args, out, run_options):
    options = BatchOptions(out=out, jobs=args.jobs or (0 if args.engine == "dask" else os.cpu_count() or 2),
                           run=run_options, max_cost=args.max_cost, retry_failed=args.retry_failed)
    events = queue.Queue()

    def push(kind, fields):
        events.put((kind, fields))

    if args.engine == "dask":   # first: an unreachable scheduler changes nothing in the folder
        from nagent_batch_dask import DaskEngine
        engine = DaskEngine(options, push, args.scheduler)
    else:
        engine = LocalEngine(options, push)
    try:
        results, todo, notes = prepare(tasks, options)
    except BaseException:
        engine.close()
        raise
    warn(notes)
    latest = [results.latest[task.id] for task in tasks if task.id in results.latest]
    done = sum(1 for line in latest if line["status"] != "interrupted")
    reporter = Reporter(len(tasks), done, sum(1 for line in latest if line["status"] == "failed"),
                        results.cost, events=sys.stdout if args.events else None,
                        progress=progress_stream(os.environ))
    summary = run_batch(tasks, todo, options, engine, reporter, events)
    reporter.finish(ok=summary.ok, failed=[task_id for task_id, _ in summary.failed],
                    not_started=summary.not_started, cost_usd=round(summary.cost, 6),
                    wall_s=summary.seconds, results=os.path.join(out, store.RESULTS))
    return report(summary, out, args)


def print_commands(tasks, args, out):
    results = store.read_results(out, stored=True)
    warn(results.warnings)
    todo, notes = store.pending(tasks, results, args.retry_failed)
    warn(notes)
    common = ["--out", out, "--setup-timeout", f"{args.setup_timeout:g}",
              "--check-timeout", f"{args.check_timeout:g}", "--task-timeout", f"{args.task_timeout:g}"]
    if args.workdir:
        common += ["--workdir", os.path.abspath(args.workdir)]
    if args.retry_failed:
        common.append("--retry-failed")
    for task in todo:
        sys.stdout.write(shlex.join([*tool_argv("nagent-batch"), "--run-one", task.id,
                                     "--task", task_json(task), *common]) + "\n")
    return 0


def run_one(args, out, run_options):
    try:
        data = json.loads(args.task)
    except ValueError as error:
        raise UsageError("--task is not JSON", error.msg) from None
    task = parse_task(data, os.getcwd(), "--task")
    if task.id != args.run_one:
        raise UsageError("--run-one and the task's id differ", f"{args.run_one} != {task.id}")
    os.makedirs(out, exist_ok=True)
    results = store.read_results(out, stored=True)
    todo, _ = store.pending((task,), results, args.retry_failed)
    if not todo:
        if args.json:
            emit_json(dict(results.latest[task.id], skipped="already has its result"))
        else:
            sys.stdout.write(f"task {task.id}: already has its result in {out}\n")
        return 0
    line = run_here(task, out, run_options, append=False, patience=0)
    if line is None:
        raise BusyError("the task is running elsewhere", task.id,
                        f"its lock is {os.path.join(out, 'locks', task.id + '.lock')}")
    if args.json:
        emit_json(line)
    else:
        text = f"task {task.id}: {line['status']}"
        if line["reason"]:
            text += f": {one_line(line['reason'], 200)}"
        sys.stdout.write(f"{text} ({line['folder']})\n")
    return 0 if line["status"] == "ok" else 1


def collect(tasks, args, out):
    if not os.path.isdir(out):
        raise UsageError("no batch folder to collect from", out)
    added = store.collect(out)
    results = store.read_results(out)
    warn(results.warnings)
    summary = tally(Summary(total=len(tasks), ran=len(added), cost=results.cost), tasks, results.latest)
    return report(summary, out, args, collected=len(added))
