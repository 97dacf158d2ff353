"""A runner's run counters (runs, failures, total_s, last_s, bytes_in, bytes_out), cheap to record.

Every run of every subgraph runner records its time and bytes, and a decoding loop runs one
small subgraph per token, where a lock and five dict updates per run are a measurable part of
the step. A run is recorded with one list append instead (atomic, no lock); the records are
folded into the totals when the counters are read, and every `FOLD_EVERY` records so that the
log stays small.

    stats = RunStats()
    stats.ran(elapsed, inputs, results)   # one list append; folded when FOLD_EVERY have come
    stats.failed()
    stats.snapshot()   # {"runs": 1, "failures": 1, "total_s": ..., "last_s": ..., "bytes_in": ..., "bytes_out": ...}

A graph runner's own counters (jobs by status, copies between memory domains and the copies
values kept on the device saved) are kept the same way (`GraphCounts`): a decoding step on
the caller's thread records its end and what it saved with one list append.
"""
from __future__ import annotations

import threading
from typing import Sequence

from xgraph.runners.jobs import nbytes_of

#: records kept before they are folded into the totals
FOLD_EVERY = 256


class RunStats:
    """Totals plus the log of runs recorded since the last fold (read only through `snapshot`)."""

    __slots__ = ("_totals", "_log", "_lock")

    def __init__(self) -> None:
        self._totals = {"runs": 0, "failures": 0, "total_s": 0.0, "last_s": 0.0, "bytes_in": 0, "bytes_out": 0}
        #: (elapsed seconds, bytes in, bytes out) per run since the last fold
        self._log: list[tuple[float, int, int]] = []
        self._lock = threading.Lock()

    def ran(self, elapsed: float, inputs: list, results: list) -> None:
        """One successful run of `elapsed` seconds from `inputs` to `results`: their bytes recorded with
        one call (a decoding step's subgraph runs once per token), folded when due."""
        log = self._log
        log.append((elapsed, nbytes_of(inputs), nbytes_of(results)))
        if len(log) >= FOLD_EVERY:
            self.fold()

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


#: the copy counters of `GraphCounts`, in the order its records hold them
COPY_COUNTERS = ("count", "bytes", "seconds", "saved", "saved_bytes")


class GraphCounts:
    """A graph runner's jobs by status and its copies: count, bytes, seconds, and the copies values
    kept on the device saved (saved, saved_bytes). Recorded from any thread by list appends, folded
    into the totals when read (`snapshot`) and every `FOLD_EVERY` records."""

    __slots__ = ("_jobs", "_copies", "_log", "_lock")

    def __init__(self, statuses: "Sequence[str]") -> None:
        self._jobs = dict.fromkeys(statuses, 0)
        self._copies = dict.fromkeys(COPY_COUNTERS, 0)
        self._copies["seconds"] = 0.0
        #: (status or None, copies, bytes, seconds, saved, saved bytes) per record
        self._log: list[tuple] = []
        self._lock = threading.Lock()

    def record(self, status: "str | None", count: int = 0, nbytes: int = 0, seconds: float = 0.0,
               saved: int = 0, saved_bytes: int = 0) -> None:
        """A job that ended with `status` (None: no job ended), and copies made or saved."""
        log = self._log
        log.append((status, count, nbytes, seconds, saved, saved_bytes))
        if len(log) >= FOLD_EVERY:
            with self._lock:
                self._fold()

    def ended(self, copied: list, seconds: float, status: str, saved: int = 0, saved_bytes: int = 0) -> None:
        """A run on the caller's thread ended with `status`, having copied the values `copied` in `seconds`
        and saved `saved` copies of `saved_bytes` (values kept on the device): one call per run."""
        self.record(status, len(copied), nbytes_of(copied), seconds, saved, saved_bytes)

    def count_copy(self, nbytes: int, seconds: float) -> None:
        """One copy of `nbytes` made in `seconds` (a DeviceValue's `.numpy()`)."""
        self.record(None, 1, nbytes, seconds)

    def _fold(self) -> None:
        log = self._log
        taken = log[:]
        del log[:len(taken)]  # records appended meanwhile (other threads) stay for the next fold
        jobs, copies = self._jobs, self._copies
        for status, count, nbytes, seconds, saved, saved_bytes in taken:
            if status is not None:
                jobs[status] += 1
            if count:
                copies["count"] += count
                copies["bytes"] += nbytes
                copies["seconds"] += seconds
            if saved or saved_bytes:
                copies["saved"] += saved
                copies["saved_bytes"] += saved_bytes

    def snapshot(self) -> "tuple[dict, dict]":
        """(jobs by status, copies), every record included."""
        with self._lock:
            self._fold()
            return dict(self._jobs), dict(self._copies)


__all__ = ["COPY_COUNTERS", "FOLD_EVERY", "GraphCounts", "RunStats"]
