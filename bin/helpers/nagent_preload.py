"""Importing modules ahead of need, while the process waits for something else (a model's first
reply, a person typing a prompt), so the step that needs them does not wait for their import.

Data contract: `import_all(names)` imports each module of `names`, ignoring any failure: the code
that needs a module imports it again and reports what failed. `preload(names)` does that in a
daemon thread and returns the thread. The caller joins it before anything forks a child (a
thread mid-import holds a module lock the child would copy) and before CPU-bound work of its
own (the two would share the interpreter lock). Layers point one way (no import cycles), so the
thread's imports cannot deadlock against the main thread's.
"""
import importlib
import threading


def import_all(names):
    for name in names:
        try:
            importlib.import_module(name)
        except Exception:   # noqa: BLE001 - the code that needs it imports it again and reports it
            pass


def preload(names):
    thread = threading.Thread(target=import_all, args=(tuple(names),), name="nagent-preload",
                              daemon=True)
    thread.start()
    return thread
