"""How many threads BLAS may use under the numpy kernels.

OpenBLAS threads busy-wait for work. xgraph runs device streams, copy engines and several jobs
at once, and a host often runs other processes: BLAS threads then spin against each other and
a small matmul that takes 0.1 ms alone takes 10 ms or more (measured here on 2 cores with one
other busy process). So the numpy kernels run BLAS single-threaded by default, and xgraph gets
its parallelism from its streams and jobs in flight instead.

`XGRAPH_BLAS_THREADS=N` sets another count; `XGRAPH_BLAS_THREADS=0` leaves BLAS as it is. The
limit is process-wide (BLAS has one thread pool), set once, when the first numpy-kernel runner
is planned, or explicitly with `set_blas_threads`.
"""
from __future__ import annotations

import os
import threading

from xgraph.errors import RunnerError

ENV = "XGRAPH_BLAS_THREADS"
_lock = threading.Lock()
_configured = False
_limiter = None  # keeps the threadpoolctl limit alive


def set_blas_threads(threads: int | None) -> None:
    """Cap BLAS at `threads` threads process-wide (None or 0: leave BLAS as it is)."""
    global _configured, _limiter
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 0):
        raise RunnerError(f"BLAS threads must be an int >= 0, got {threads!r}")
    with _lock:
        _configured = True
        if not threads:
            return
        from threadpoolctl import threadpool_limits
        _limiter = threadpool_limits(limits=threads, user_api="blas")


def configure_blas_once() -> None:
    """Apply XGRAPH_BLAS_THREADS (default 1) the first time a numpy-kernel runner is planned."""
    if _configured:
        return
    raw = os.environ.get(ENV, "1").strip()
    try:
        threads = int(raw)
    except ValueError:
        raise RunnerError(f"{ENV}={raw!r} is not a whole number; use e.g. 1, 2, or 0 to leave BLAS alone") from None
    set_blas_threads(threads)
