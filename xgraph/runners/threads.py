"""Starting the runtime's worker threads: each once, and a failure to start one as an XGraphError.

A runner's worker threads (a Runner's worker, a graph runner's streams and watchdog) hold only
a weak reference to their runner while they wait for work, so a runner dropped without
`close()` is collected and its threads end (the runner's `weakref.finalize` wakes them).

`start` is safe to call again after a start a KeyboardInterrupt cut short: `Thread.start`
waits for the new thread to announce itself, and Ctrl-C can end that wait after the thread
was created. The caller calls `start` again on its next job: a thread that runs already is not
started again, and one still on its way (listed by `threading.enumerate` without an ident yet)
is given a moment to announce itself first.
"""
from __future__ import annotations

import threading
import time

from xgraph.errors import RunnerError


def start(thread: threading.Thread, owner: str) -> None:
    """Start `thread` unless it was started already; RunnerError naming `owner` when no thread can be started."""
    if thread.ident is None and thread in threading.enumerate():  # a start Ctrl-C cut short
        for _ in range(100):
            time.sleep(0.001)
            if thread.ident is not None:
                return
    if thread.ident is not None:
        return
    try:
        thread.start()
    except RuntimeError as e:
        if thread.ident is not None or thread.is_alive():
            return  # "threads can only be started once": an interrupted start had started it
        raise RunnerError(f"{owner}: cannot start thread {thread.name!r} ({e}); close the runners no longer in "
                          f"use (each holds a thread per device stream) or raise the process's thread and "
                          f"memory limits") from e


__all__ = ["start"]
