"""A runner's run counters (runs, failures, total_s, last_s, bytes_in, bytes_out), cheap to record.

Every run of every subgraph runner records its time and bytes, and a decoding loop runs one
small subgraph per token, where a lock and five dict updates per run are a measurable part of
the step. A run is recorded with one list append instead (atomic, no lock); the records are
folded into the totals when the counters are read, and every `FOLD_EVERY` records so that the
log stays small.

    stats = RunStats()
    stats.record((elapsed, bytes_in, bytes_out))
    stats.failed()
    stats.snapshot()   # {"runs": 1, "failures": 1, "total_s": ..., "last_s": ..., "bytes_in": ..., "bytes_out": ...}
"""
from __future__ import annotations

import threading

#: records kept before they are folded into the totals
FOLD_EVERY = 256


class RunStats:
    """Totals plus the log of runs recorded since the last fold (read only through `snapshot`)."""

    __slots__ = ("_totals", "_log", "record", "_lock")

    def __init__(self) -> None:
        self._totals = {"runs": 0, "failures": 0, "total_s": 0.0, "last_s": 0.0, "bytes_in": 0, "bytes_out": 0}
        self._log: list[tuple[float, int, int]] = []
        #: record((elapsed seconds, bytes in, bytes out)) for one successful run: one C call
        self.record = self._log.append
        self._lock = threading.Lock()

    def due(self) -> bool:
        """True when the log should be folded (`fold`): it holds `FOLD_EVERY` records or more."""
        return len(self._log) >= FOLD_EVERY

    def fold(self) -> None:
        """Move the logged runs into the totals."""
        with self._lock:
            self._fold()

    def _fold(self) -> None:
        log = self._log
        taken = log[:]
        del log[:len(taken)]  # runs recorded meanwhile (other threads) stay for the next fold
        if not taken:
            return
        seconds, bytes_in, bytes_out = zip(*taken)
        t = self._totals
        t["runs"] += len(taken)
        t["total_s"] += sum(seconds)
        t["last_s"] = seconds[-1]
        t["bytes_in"] += sum(bytes_in)
        t["bytes_out"] += sum(bytes_out)

    def failed(self) -> None:
        """Count one failed run."""
        with self._lock:
            self._totals["failures"] += 1

    def snapshot(self) -> dict:
        """The counters, every recorded run included."""
        with self._lock:
            self._fold()
            return dict(self._totals)


__all__ = ["FOLD_EVERY", "RunStats"]
