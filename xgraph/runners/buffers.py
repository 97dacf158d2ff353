"""Output buffers reused across runs: a planned step of static shape writes into an array it used before.

A fresh multi-megabyte array costs a page fault per 4 KiB the first time it is written, and
the allocator gives large blocks back to the system when they are freed; reusing the buffers
of the previous run avoids both. A buffer is free when nothing but this pool refers to it:
the executor dropped the value after its last reader, and no view of it (a Reshape's output,
say) and no caller still holds it. That test is the reference count, so it needs no
bookkeeping that a failed run or a kept view could get wrong: a buffer still referenced
anywhere is simply not handed out, and a new one is made instead.
"""
from __future__ import annotations

import sys
import threading

import numpy as np

#: Buffers kept per (shape, dtype); beyond this many in use at once, new arrays are not kept.
MAX_BUFFERS_PER_LAYOUT = 8


def _references(buffers: list, i: int) -> int:
    return sys.getrefcount(buffers[i])


def _baseline() -> int:
    """The reference count of a buffer that only the pool's list holds, measured as `take` measures it."""
    probe = [np.empty(1)]
    return _references(probe, 0)


_FREE = _baseline()


class BufferPool:
    """Arrays by (shape, dtype), each handed out again once nothing else refers to it."""

    def __init__(self) -> None:
        self._buffers: dict[tuple, list[np.ndarray]] = {}
        self._lock = threading.Lock()

    def take(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """A C-contiguous array of `shape` and `dtype` that nothing else refers to (contents undefined)."""
        key = (shape, np.dtype(dtype))
        with self._lock:
            buffers = self._buffers.setdefault(key, [])
            for i in range(len(buffers)):
                if _references(buffers, i) == _FREE:
                    return buffers[i]
            array = np.empty(shape, dtype=dtype)
            if len(buffers) < MAX_BUFFERS_PER_LAYOUT:
                buffers.append(array)
            return array

    def nbytes(self) -> int:
        """Bytes held by the pool."""
        with self._lock:
            return sum(b.nbytes for buffers in self._buffers.values() for b in buffers)

    def clear(self) -> None:
        """Forget every buffer (arrays still referenced elsewhere live on there)."""
        with self._lock:
            self._buffers.clear()
