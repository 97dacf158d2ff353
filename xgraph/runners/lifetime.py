"""The lifetime of the runtime's worker threads and runners: starting, serving, closing.

A runner's worker threads (a Runner's worker, a graph runner's streams and watchdog) hold only
a weak reference to their runner while they wait for work (`serve`), so a runner dropped
without `close()` is collected and its threads end (the runner's `weakref.finalize` wakes them).

`start_thread` starts each thread once and turns a failure to start one into an XGraphError. It is safe to call again after a start a KeyboardInterrupt cut short: `Thread.start`
waits for the new thread to announce itself, and Ctrl-C can end that wait after the thread
was created. The caller calls `start_thread` again on its next job: a thread that runs already is not
started again, and one still on its way (listed by `threading.enumerate` without an ident yet)
is given a moment to announce itself first.
"""
from __future__ import annotations

import queue
import threading
import time
import weakref
from typing import Any, Callable, Iterable

from xgraph.errors import RunnerError


def start_thread(thread: threading.Thread, owner: str) -> None:
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


def serve(owner: "weakref.ref", inbox: queue.SimpleQueue, handle: Callable[..., None], *args: Any) -> None:
    """A worker thread's loop: `handle(owner, *args, item)` for each item from `inbox`, until a None
    item or until `owner` is gone. Between items it holds nothing of the owner or of its work."""
    while True:
        item = inbox.get()
        if item is None:
            return
        live = owner()
        if live is None:
            return
        handle(live, *args, item)
        live = item = None  # noqa: F841 - nothing of the last item stays alive while this thread sleeps


def close_all(runners: Iterable[Any], deadline: float | None = None) -> None:
    """Close every runner, even when one fails to, then raise the first failure. With `deadline` (a
    `time.perf_counter()` value), each is closed with the time left until then: one timeout for all."""
    failure: BaseException | None = None
    for runner in runners:
        try:
            if deadline is None:
                runner.close()
            else:
                runner.close(max(0.0, deadline - time.perf_counter()))
        except Exception as e:
            failure = failure or e
    if failure is not None:
        raise failure


__all__ = ["close_all", "serve", "start_thread"]
