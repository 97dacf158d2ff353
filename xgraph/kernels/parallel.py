"""Intra-op parallelism for the heavy numpy kernels: split one op's work into independent chunks.

BLAS runs single-threaded under the numpy kernels (see `xgraph.kernels.blas`: its spinning
threads collapse when the cores are shared). Large kernels (convolutions, matrix products, pools)
instead cut their output into as many disjoint blocks as there are intra-op threads and run
one block per thread; numpy releases the GIL inside BLAS and its loops, so the blocks really
run side by side. The workers block on a queue between ops, so an idle or oversubscribed
pool costs nothing.

`XGRAPH_INTRA_OP_THREADS=N` sets the thread count (default: the CPUs this process may use,
at most `MAX_DEFAULT_THREADS`; 1 turns the pool off); `set_intra_op_threads(n)` does the same
from Python.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Sequence

from xgraph.errors import RunnerError

ENV = "XGRAPH_INTRA_OP_THREADS"
#: The default never uses more threads than this, whatever the machine has.
MAX_DEFAULT_THREADS = 8
#: Work below this many multiply-adds runs on the calling thread: handing it over costs more.
MIN_PARALLEL_MACS = 4_000_000
#: Memory-bound work (pooling, element-wise passes) below this many element visits stays on the caller.
MIN_PARALLEL_ELEMENTS = 1 << 19

_lock = threading.Lock()
_threads: int | None = None
_pool: ThreadPoolExecutor | None = None


def _default_threads() -> int:
    raw = os.environ.get(ENV, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise RunnerError(f"{ENV}={raw!r} is not a whole number; use e.g. 1 (off), 2 or 4") from None
        if value < 1:
            raise RunnerError(f"{ENV}={raw!r} must be at least 1")
        return value
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, MAX_DEFAULT_THREADS))


def intra_op_threads() -> int:
    """How many threads one op may use (the caller included)."""
    global _threads
    if _threads is None:
        with _lock:
            if _threads is None:
                _threads = _default_threads()
    return _threads


def set_intra_op_threads(threads: int) -> None:
    """Let each op use `threads` threads (1: run every kernel on its caller's thread)."""
    global _threads, _pool
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise RunnerError(f"intra-op threads must be an int >= 1, got {threads!r}")
    with _lock:
        old, _pool = _pool, None
        _threads = threads
    if old is not None:
        old.shutdown(wait=False)


def _get_pool(workers: int) -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="xgraph-intra-op")
        return _pool


def _forget_pool_in_child() -> None:
    """A forked child has none of the parent's pool threads: it starts a fresh pool when it needs one."""
    global _pool, _lock
    _pool = None
    _lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_in_child)


def chunks(total: int, parts: int) -> list[tuple[int, int]]:
    """`total` items cut into at most `parts` contiguous (start, stop) ranges of near-equal size."""
    parts = max(1, min(parts, total))
    bounds = [total * i // parts for i in range(parts + 1)]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def run_parallel(tasks: Sequence[Callable[[], None]]) -> None:
    """Run `tasks` (independent, each writing its own output block): the first on this thread, the rest
    on the pool. Returns when all are done; the first task's error (in task order) is raised."""
    if len(tasks) <= 1:
        for task in tasks:
            task()
        return
    pool = _get_pool(max(1, intra_op_threads() - 1))
    futures = [pool.submit(task) for task in tasks[1:]]
    error: BaseException | None = None
    try:
        tasks[0]()
    except BaseException as e:  # re-raised after the other blocks finish (they write into shared buffers)
        error = e
    for future in futures:
        try:
            future.result()
        except BaseException as e:  # noqa: BLE001 - the first error wins, in task order
            error = error or e
    if error is not None:
        raise error


def split_count(macs: int) -> int:
    """How many blocks an op of `macs` multiply-adds should be cut into."""
    threads = intra_op_threads()
    if threads <= 1 or macs < MIN_PARALLEL_MACS:
        return 1
    return threads


def split_count_elements(visits: int) -> int:
    """How many blocks memory-bound work touching `visits` elements should be cut into."""
    threads = intra_op_threads()
    if threads <= 1 or visits < MIN_PARALLEL_ELEMENTS:
        return 1
    return threads
