"""What a running batch shows: the progress line on a terminal, and --events JSON Lines.

Data contract:
- `Reporter(total, done, failed, cost, events=None, progress=None, clock=time.monotonic)`: `total`
  tasks in the file, of which `done`/`failed` already had their result before this run,
  `cost` what the folder's results spent.
  `events` is a text stream for --events (one JSON object per line, flushed; nagent_events'
  line format), `progress` a terminal stream for the progress line (redrawn in place with a
  carriage return and spaces, no escape sequence), either None.
- Events (each with "type" and "t", seconds since the batch started): "batch_start" (total,
  todo, done), "task_start" (id, attempt, worker: the host, or the dask worker's address),
  "task_end" (id, attempt, status, failure, reason, exit_code, cost_usd, wall_s,
  conversation), "batch_end" (ok, failed,
  not_started, cost_usd, wall_s, results). A task that starts again elsewhere (a lost worker)
  has a second "task_start" and still one "task_end".
- `start(fields)`, `cost_update(fields)` (a running attempt's live cost), `end(line)`, `tick()`
  (redraw: the ETA moves), `finish(summary)`. `line()` is the progress text: done/total,
  failed, running, the cost so far (results plus running attempts' live cost) and an ETA from
  this run's throughput (counted down between finished tasks).
"""
import sys
import time

from nagent_events import event_line
from nagent_terminal_text import cut, spinner_allowed, status_erase, terminal_columns


class Reporter:
    def __init__(self, total, done, failed, cost, events=None, progress=None, clock=time.monotonic):
        self.total, self.done, self.failed, self.cost = total, done, failed, cost
        self.events, self.progress, self.clock = events, progress, clock
        self.origin = clock()
        self.running = {}      # id -> (attempt, its live cost)
        self.ended = set()     # attempts whose end was seen: a late "start" report is stale
        self.finished_now = 0
        self.last_finish = None   # when this run's latest task finished
        self.drawn = 0

    def emit(self, kind, **fields):
        if self.events is not None:
            self.events.write(event_line(dict({"type": kind, "t": round(self.clock() - self.origin, 3)},
                                              **fields)) + "\n")
            self.events.flush()

    def start(self, fields):
        if fields.get("attempt") in self.ended:
            return
        self.running[fields["id"]] = (fields.get("attempt"), 0.0)
        self.emit("task_start", id=fields["id"], attempt=fields.get("attempt"),
                  worker=fields.get("address") or fields.get("worker"))
        self.tick()

    def cost_update(self, fields):
        attempt = fields.get("attempt")
        if self.running.get(fields.get("id"), (None,))[0] == attempt:
            self.running[fields["id"]] = (attempt, fields.get("cost_usd") or 0.0)
            self.tick()

    def end(self, line):
        self.ended.add(line["attempt"])
        self.running.pop(line["id"], None)
        if line["status"] != "interrupted":
            self.finished_now += 1
            self.last_finish = self.clock()
            self.done += 1
            self.failed += line["status"] == "failed"
        if isinstance(line.get("cost_usd"), (int, float)):
            self.cost += line["cost_usd"]
        self.emit("task_end", **{key: line.get(key) for key in (
            "id", "attempt", "status", "failure", "reason", "exit_code", "cost_usd", "wall_s",
            "conversation")})
        self.tick()

    def spent(self):
        return self.cost + sum(cost for _attempt, cost in self.running.values())

    def eta(self):
        """This run's throughput up to its latest finished task (workers included), over the
        tasks left, counted down from then: it does not grow while the next task runs."""
        if not self.finished_now:
            return "?"
        per_task = (self.last_finish - self.origin) / self.finished_now
        seconds = max(0, int(self.last_finish + per_task * (self.total - self.done) - self.clock()))
        return f"{seconds // 60}:{seconds % 60:02d}"

    def line(self):
        return (f"nagent-batch {self.done}/{self.total} done · {self.failed} failed · "
                f"{len(self.running)} running · ${self.spent():.4f} · ETA {self.eta()}")

    def tick(self):
        if self.progress is None:
            return
        text = cut(self.line(), terminal_columns() - 1)
        self.progress.write("\r" + text + " " * max(0, self.drawn - len(text)))
        self.progress.flush()
        self.drawn = len(text)

    def clear(self):
        if self.progress is not None and self.drawn:
            self.progress.write(status_erase(self.drawn, terminal_columns()))
            self.progress.flush()
            self.drawn = 0

    def finish(self, **summary):
        self.clear()
        self.emit("batch_end", **summary)


def progress_stream(environ, stream=None):
    """stderr when it is a terminal that allows a live line (nagent_terminal_text.spinner_allowed)."""
    stream = sys.stderr if stream is None else stream
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return stream if tty and spinner_allowed(environ) else None
