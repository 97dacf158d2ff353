"""Pausing Python's cyclic garbage collector around bulk work on large graphs."""
from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector for the duration of a bulk build, plan or capture.

    Creating many small objects makes the collector run full passes over every object of the
    graph (ops, tensors, subgraphs); on a 100k-op graph those passes cost more than the work
    itself. Reference counting still frees everything; the collector resumes (if it was on)
    when the block ends.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
