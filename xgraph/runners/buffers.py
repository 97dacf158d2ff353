"""Buffers reused across runs: one frame of arrays per run in flight, laid out by the plan.

A fresh multi-megabyte array costs a page fault per 4 KiB the first time it is written, and
the allocator gives large blocks back to the system when they are freed; writing into the
arrays of a previous run avoids both. Which steps share an array is the plan's decision
(`xgraph.runners.liveness`); at run time a frame (one array per planned buffer, made on
first use) is taken for the run and given back when it ends. Runs at the same time take
different frames, so nothing here depends on who else still refers to an array.
"""
from __future__ import annotations

import threading
from typing import Sequence

import numpy as np


class BufferFrames:
    """Frames of arrays with the plan's `layouts` ((shape, dtype) each), handed out one per run."""

    def __init__(self, layouts: Sequence[tuple]) -> None:
        self.layouts = tuple((tuple(shape), np.dtype(dtype)) for shape, dtype in layouts)
        self._free: list[list[np.ndarray | None]] = []
        self._made = 0
        self._lock = threading.Lock()

    def take(self) -> list[np.ndarray | None]:
        """A frame for one run: a list with one entry per layout (None until `array` makes it)."""
        with self._lock:
            if self._free:
                return self._free.pop()
            self._made += 1
        return [None] * len(self.layouts)

    def array(self, frame: list[np.ndarray | None], index: int) -> np.ndarray:
        """The frame's array for buffer `index` (made on first use; contents undefined)."""
        a = frame[index]
        if a is None:
            shape, dtype = self.layouts[index]
            a = frame[index] = np.empty(shape, dtype=dtype)
        return a

    def give_back(self, frame: list[np.ndarray | None]) -> None:
        """Return a frame after its run; the next run reuses its arrays."""
        with self._lock:
            self._free.append(frame)

    def nbytes(self) -> int:
        """Bytes held in the frames not in use."""
        with self._lock:
            return sum(a.nbytes for frame in self._free for a in frame if a is not None)

    def frames(self) -> int:
        """How many frames were made (the most runs that overlapped)."""
        with self._lock:
            return self._made

    def clear(self) -> None:
        """Forget the free frames (arrays still referenced elsewhere live on there)."""
        with self._lock:
            self._free.clear()


__all__ = ["BufferFrames"]
