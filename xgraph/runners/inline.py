"""A scheduler plan flattened for running one job on the calling thread (`ThreadScheduler.run_here`).

A synchronous `GraphRunner.run` with nothing else in flight has no pipelining to gain from the
stream threads, only hand-offs to pay: a wake-up per task and one per job, each tens of
microseconds on a busy host. A KV-cache decoding step is exactly that case, a chain of small
subgraphs (AI Core and AI CPU alternating per layer) run once per token, where the hand-offs
and the per-task bookkeeping cost more than the subgraphs themselves.

`InlineSchedule` is built once per plan: the tasks in dependency order, each value given a
slot in a flat list, and per task the slots it reads, writes and frees (a value is dropped
after its last reader, as the streams drop it). Running a job is then one loop over the steps
with list indexing, no dicts keyed by (tensor, memory) and no reader counting. Each task
still holds its stream's lock, so a stream runs one task at a time even when another thread
submits jobs meanwhile.

    schedule = InlineSchedule(plan)
    results = schedule.run(job, feeds, locks, observer)   # None if the job ended meanwhile
"""
from __future__ import annotations

import itertools
import time
from collections import deque
from typing import TYPE_CHECKING, Callable, Mapping

from numpy import ndarray

from xgraph.runners.io_checks import ONLY_ARRAYS

_NONES = itertools.repeat(None)


#: runs an iterator to its end in C (a zero-length deque keeps nothing)
_consume = deque(maxlen=0).extend

if TYPE_CHECKING:
    import threading

    from xgraph.runners.jobs import Job
    from xgraph.runners.scheduler import Key, Plan, Task


def dependency_order(plan: "Plan") -> "list[Task]":
    """The plan's tasks, each after every task it reads from (Kahn's algorithm, O(V + E))."""
    waiting = [t.num_deps for t in plan.tasks]
    ready = deque(t for t in plan.tasks if t.num_deps == 0)
    order = []
    while ready:
        task = ready.popleft()
        order.append(task)
        for s in task.successors:
            waiting[s] -= 1
            if waiting[s] == 0:
                ready.append(plan.tasks[s])
    return order


class CopyRun:
    """Consecutive copy tasks of one copy stream, run as one step: one lock, one clock pair, one report.

    The observer sees it as one task of kind "copies" whose `outs` are every copied value; the
    graph runner counts each value as a copy (its stats are what per-task copies would give)."""

    __slots__ = ("tasks", "stream", "kind")

    def __init__(self, tasks: "list[Task]") -> None:
        self.tasks, self.stream, self.kind = tuple(tasks), tasks[0].stream, "copies"


class InlineSchedule:
    """The plan's tasks as flat steps over a list of value slots (built once, then read-only)."""

    __slots__ = ("size", "constant_slots", "constant_values", "feeds", "results", "steps", "fused", "all_copies")

    def __init__(self, plan: "Plan") -> None:
        order = dependency_order(plan)
        slots: dict[Key, int] = {}

        def slot(key: "Key") -> int:
            return slots.setdefault(key, len(slots))

        self.constant_slots = tuple(slot(k) for k in plan.constants)
        self.constant_values = tuple(plan.constants.values())
        self.feeds = tuple(slot(k) for k in plan.feeds)
        for task in order:
            for k in task.outputs:
                slot(k)
        kept = set(plan.results)
        last_reader: dict[Key, int] = {}
        for i, task in enumerate(order):
            for k in task.inputs:
                if k not in kept:
                    last_reader[k] = i
        frees: dict[int, list[int]] = {}
        for k, i in last_reader.items():
            frees.setdefault(i, []).append(slots[k])
        self.steps = tuple((task, tuple(slot(k) for k in task.inputs), tuple(slots[k] for k in task.outputs),
                            tuple(frees.get(i, ()))) for i, task in enumerate(order))
        self.fused = _fuse_copies(self.steps)
        self.results = tuple(slot(k) for k in plan.results)
        self.size = len(slots)
        copy_tasks = [t for t in order if t.kind != "subgraph"]
        self.all_copies = CopyRun(copy_tasks) if copy_tasks else None

    def run(self, job: "Job", feeds: list, locks: "Mapping[str, threading.Lock]",
            observer: "Callable[[Job, Task, float, float, list], None] | None", profile: bool = False) -> list | None:
        """Run every step for `job`; its results in plan order, or None when the job ended meanwhile
        (cancelled or timed out: its record is final already). A task's exception propagates.

        The observer sees every copy; subgraph tasks only when `profile` (their runners keep
        their own stats). With `profile` every task is its own step, reported as it ends (one
        span per copy); without, consecutive copies on one stream are one step (`CopyRun`) and
        all the copies of the run are reported once, as it ends (also when it fails): the task
        is `all_copies`, `outs` every copied value and end - start their total time."""
        values: list = [None] * self.size
        put, take = values.__setitem__, values.__getitem__
        _consume(map(put, self.constant_slots, self.constant_values))
        _consume(map(put, self.feeds, feeds))
        clock = time.perf_counter
        copied: list = []  # without profile, the copies are reported once, when the run ends
        copy_seconds = 0.0
        try:
            for task, reads, writes, frees in (self.steps if profile else self.fused):
                with locks[task.stream]:  # the stream still runs one task at a time
                    if job.done:
                        return None
                    start = clock()
                    outs = list(map(take, reads))
                    if task.kind == "copies":
                        if {*map(type, outs)} == ONLY_ARRAYS:
                            outs = list(map(ndarray.copy, outs))
                        else:  # a sequence or an empty optional among them: each copy task knows its value
                            outs = [v.copy() if type(v) is ndarray else t.fn([v])[0] for t, v in zip(task.tasks, outs)]
                    else:
                        outs = task.fn(outs)
                    _consume(map(put, writes, outs))
                    if observer is not None and (profile or task.kind != "subgraph"):
                        if profile:
                            observer(job, task, start, clock(), outs)
                        else:
                            copy_seconds += clock() - start
                            copied += outs
                _consume(map(put, frees, _NONES))
            return list(map(take, self.results))
        finally:
            if copied:
                observer(job, self.all_copies, 0.0, copy_seconds, copied)


def _fuse_copies(steps: tuple) -> tuple:
    """`steps` with each run of consecutive single-value copies on one stream as one `CopyRun` step."""
    fused: list = []
    run: list = []

    def flush() -> None:
        if len(run) == 1:
            fused.append(run[0])
        elif run:
            fused.append((CopyRun([s[0] for s in run]), tuple(s[1][0] for s in run), tuple(s[2][0] for s in run),
                          tuple(i for s in run for i in s[3])))
        run.clear()

    for step in steps:
        task, reads, writes = step[0], step[1], step[2]
        single = task.kind == "copy" and len(reads) == 1 and len(writes) == 1
        if not single or (run and run[0][0].stream != task.stream):
            flush()
        if single:
            run.append(step)
        else:
            fused.append(step)
    flush()
    return tuple(fused)


__all__ = ["CopyRun", "InlineSchedule", "dependency_order"]
