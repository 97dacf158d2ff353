"""Keeping Python's cyclic garbage collector from re-walking large graphs during bulk work.

Two tools:

* `collector_paused()` pauses the collector around one bulk build, plan or capture; with
  `keeps=True` (a graph read from a file) what the block leaves alive goes straight to the
  oldest generation.
* `objects_frozen()` spans a long multi-stage job on one graph (a compile): each paused block
  that ends inside it moves the objects alive then out of the collector's sight (`gc.freeze`),
  and the scope hands them all back when it ends (`gc.unfreeze`).

Why: objects made while the collector is paused all stay in its youngest generation, so the
first collection after the pause walks every one of them, the next older collection walks
them again, and so on; on a 100k-op graph (ops, tensors, subgraphs, snapshot columns) those
passes cost more than the work that made the objects. Reference counting still frees
everything that is not in a cycle at once; cyclic garbage among frozen objects waits until
the scope ends, and is collected as usual after it.
"""
from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Iterator

_lock = threading.Lock()
#: how many `objects_frozen` scopes are open that own the freeze (threads and nested compiles share it)
_owners = 0


@contextmanager
def collector_paused(keeps: bool = False) -> Iterator[None]:
    """Pause the cyclic collector for the duration of a bulk build, plan or capture.

    Creating many small objects makes the collector run full passes over every object of the
    graph (ops, tensors, subgraphs); on a 100k-op graph those passes cost more than the work
    itself. Reference counting still frees everything; the collector resumes (if it was on)
    when the block ends. Inside `objects_frozen`, what is alive when the block ends is frozen.

    `keeps`: the block builds something its caller keeps (a graph read from a file). Then, when
    the block turns the collector back on and nothing is frozen, what is alive moves to the
    oldest generation in one step (`gc.freeze` then `gc.unfreeze`, two list splices): else the
    first young collection after the block walks every object it made (a 100k-op graph: about
    a million), and the middle generation's next collection walks them again.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _owners:
            gc.freeze()
        elif keeps and was_enabled:
            _promote()
        if was_enabled:
            gc.enable()


def _promote() -> None:
    """Move every tracked object to the oldest generation without a collection, unless objects are frozen
    (by a caller, or an `objects_frozen` scope that started meanwhile: their freeze is not ours to lift)."""
    with _lock:
        if not _owners and gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()


@contextmanager
def objects_frozen() -> Iterator[None]:
    """Freeze what each `collector_paused` block leaves alive until this scope ends, then unfreeze everything.

    Does nothing of its own when objects were frozen before by someone else (their freeze is left
    as it is: unfreezing would hand their objects back too); nested and concurrent scopes share one
    freeze, lifted when the last of them ends.
    """
    global _owners
    with _lock:
        owner = _owners > 0 or gc.get_freeze_count() == 0
        if owner:
            _owners += 1
    try:
        yield
    finally:
        if owner:
            with _lock:
                _owners -= 1
                if not _owners:
                    gc.unfreeze()
