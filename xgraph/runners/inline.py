"""A scheduler plan flattened for running one job on the calling thread (`GraphRunner.run`).

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
submits jobs meanwhile. Such a run needs no job record either: the graph runner counts it and
raises its error itself (`GraphRunner.run`), and `ended()` tells the schedule that the runner
was closed meanwhile.

    schedule = InlineSchedule(plan, locks)
    ran = schedule.run(feeds, ended, on_end)   # (results, copied, copy seconds); None if ended() said so
"""
from __future__ import annotations

import itertools
import time
from collections import deque
from typing import TYPE_CHECKING, Callable, Mapping, Sequence

from numpy import ndarray

from xgraph.runners.io_checks import ONLY_ARRAYS, picker

_NONES = itertools.repeat(None)


#: runs an iterator to its end in C (a zero-length deque keeps nothing)
_consume = deque(maxlen=0).extend

if TYPE_CHECKING:
    import threading

    from xgraph.runners.scheduler import Key, Task, TaskPlan


def dependency_order(plan: "TaskPlan") -> "list[Task]":
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
    """Consecutive copy tasks of one copy stream, run as one step: one lock, one clock pair.

    Each value counts as one copy (the stats are what per-task copies would give)."""

    __slots__ = ("tasks", "stream", "kind")

    def __init__(self, tasks: "list[Task]") -> None:
        self.tasks, self.stream, self.kind = tuple(tasks), tasks[0].stream, "copies"


class InlineSchedule:
    """The plan's tasks as flat steps over a list of value slots (built once, then read-only).

    `locks`: each stream's lock (the scheduler's, so a task run here and one run by a stream
    thread never overlap on one stream); a lock per stream of its own when not given."""

    __slots__ = ("size", "constant_slots", "constant_values", "feeds", "results", "steps", "fused", "chain")

    def __init__(self, plan: "TaskPlan", locks: "Mapping[str, threading.Lock] | None" = None) -> None:
        import threading
        order = dependency_order(plan)
        if locks is None:
            locks = {s: threading.Lock() for s in plan.streams()}
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
        #: (task, its stream's lock, slots read, slots written, slots freed after it), in dependency order
        self.steps = tuple((task, locks[task.stream], tuple(slot(k) for k in task.inputs),
                            tuple(slots[k] for k in task.outputs), tuple(frees.get(i, ())))
                           for i, task in enumerate(order))
        self.fused = _fuse_copies(self.steps)
        self.results = tuple(slot(k) for k in plan.results)
        self.size = len(slots)
        #: the plan as one subgraph between its inputs' and its results' copies, when it is that
        self.chain = Chain.of(self)

    def run(self, feeds: list, ended: "Callable[[], bool]", on_end: "Callable[[list, float, str], None]",
            on_span: "Callable[[Task | CopyRun, float, float, list], None] | None" = None) -> tuple | None:
        """Run every step: (the results in plan order, every value copied, the copies' total time), or
        None when `ended()` says the run was ended meanwhile (asked before each step: the runner was
        closed). A task's exception propagates.

        A run that does not finish calls `on_end(copied, seconds, status)` as it ends, with what it
        copied until then and "CANCELLED" (ended) or "FAILED" (raising); a finished run returns
        them (the caller counts them with what else it did). With `on_span`, every task is its own
        step and `on_span(task, start, end, outs)` is called as it ends; without, consecutive
        copies on one stream are one step (`CopyRun`)."""
        if on_span is None and self.chain is not None:
            return self.chain.run(feeds, ended, on_end)
        values: list = [None] * self.size
        put, take = values.__setitem__, values.__getitem__
        _consume(map(put, self.constant_slots, self.constant_values))
        _consume(map(put, self.feeds, feeds))
        clock = time.perf_counter
        copied: list = []
        copy_seconds = 0.0
        try:
            for task, lock, reads, writes, frees in (self.fused if on_span is None else self.steps):
                with lock:  # the stream still runs one task at a time
                    if ended():
                        on_end(copied, copy_seconds, "CANCELLED")
                        return None
                    start = clock()
                    outs = list(map(take, reads))
                    if task.kind == "subgraph":
                        outs = task.fn(outs)
                    else:
                        outs = copy_values(task, outs)
                        copy_seconds += clock() - start
                        copied += outs
                    _consume(map(put, writes, outs))
                    if on_span is not None:
                        on_span(task, start, clock(), outs)
                if frees:
                    _consume(map(put, frees, _NONES))
            results = list(map(take, self.results))
        except BaseException:
            on_end(copied, copy_seconds, "FAILED")
            raise
        return results, copied, copy_seconds


def copy_values(task: "Task | CopyRun", values: "list | tuple") -> list:
    """The copies a copy step (one copy task or a `CopyRun`) makes of `values`, one per task."""
    if {*map(type, values)} == ONLY_ARRAYS:
        return list(map(ndarray.copy, values))
    # a sequence or an empty optional among them: each copy task knows its value
    tasks = task.tasks if task.kind == "copies" else (task,)
    return [v.copy() if type(v) is ndarray else t.fn([v])[0] for t, v in zip(tasks, values)]


class Chain:
    """A plan that is one subgraph between the copies of its inputs and of its results (a model
    placed on one device, each gear of a decoder), run as straight-line code: the same locks,
    copies and results as `InlineSchedule.run`'s loop over the same steps, without the loop and
    the value table. Each of `feed_order`, `reads`, `picks` and `results` picks the values a step
    takes from those before it, in its order (an itemgetter), None when it takes them as they are.

    Either copy step may be absent (a subgraph in host memory reads the inputs as they are). It
    applies when the subgraph reads only the (copied) inputs and the results are only its (copied)
    outputs; `of` returns None for any other plan. Values kept in device memory between runs
    (`xgraph.runners.binding`) make the subgraph read some inputs as they are, beside the copied
    ones (`with_feeds`: it reads from the copies followed by the feeds), and leave some results
    uncopied (`with_outputs`: the results come from the copies followed by its outputs)."""

    __slots__ = ("copy_in", "lock_in", "feed_order", "with_feeds", "task", "lock", "reads", "copy_out", "lock_out",
                 "picks", "with_outputs", "results")

    @classmethod
    def of(cls, schedule: "InlineSchedule") -> "Chain | None":
        steps = list(schedule.fused)
        copy_in = steps.pop(0) if steps and steps[0][0].kind != "subgraph" else None
        copy_out = steps.pop() if len(steps) > 1 and steps[-1][0].kind != "subgraph" else None
        if len(steps) != 1 or steps[0][0].kind != "subgraph" or schedule.constant_slots:
            return None
        chain = cls()
        task, chain.lock, reads, writes, _ = steps[0]
        chain.task = task
        chain.with_feeds = chain.with_outputs = False
        if copy_in is not None:
            chain.copy_in, chain.lock_in, in_reads, before, _ = copy_in
            if not set(in_reads) <= set(schedule.feeds):
                return None
            feed_at = {s: i for i, s in enumerate(schedule.feeds)}
            chain.feed_order = _unless_identity(tuple(feed_at[s] for s in in_reads), len(schedule.feeds))
            if not set(reads) <= set(before):
                chain.with_feeds = True
                before = tuple(before) + tuple(schedule.feeds)
        else:
            chain.copy_in = chain.lock_in = chain.feed_order = None
            before = schedule.feeds
        at: dict = {}
        for i, s in enumerate(before):
            at.setdefault(s, i)
        if not set(reads) <= set(at):
            return None
        chain.reads = _unless_identity(tuple(at[s] for s in reads), len(before))
        made = {s: i for i, s in enumerate(writes)}
        if copy_out is not None:
            chain.copy_out, chain.lock_out, out_reads, after, _ = copy_out
            if not set(out_reads) <= set(made):
                return None
            chain.picks = _unless_identity(tuple(made[s] for s in out_reads), len(writes))
            if not set(schedule.results) <= set(after):
                chain.with_outputs = True
                after = tuple(after) + tuple(writes)
            made = {}
            for i, s in enumerate(after):
                made.setdefault(s, i)
        else:
            chain.copy_out = chain.lock_out = chain.picks = None
        if not set(schedule.results) <= set(made):
            return None
        chain.results = _unless_identity(tuple(made[s] for s in schedule.results), len(made))
        return chain

    def run(self, feeds: list, ended: "Callable[[], bool]", on_end: "Callable[[list, float, str], None]"
            ) -> tuple | None:
        """`InlineSchedule.run` for this plan (without spans). `ended()` is asked once, before the
        subgraph: the copies around it take no time worth cancelling."""
        clock = time.perf_counter
        copied: list = []
        seconds = 0.0
        try:
            if self.copy_in is not None:
                with self.lock_in:
                    start = clock()
                    values = copy_values(self.copy_in, feeds if self.feed_order is None else self.feed_order(feeds))
                    seconds = clock() - start
                copied = values
                if self.with_feeds:
                    values = values + feeds
            else:
                values = feeds
            with self.lock:
                if ended():
                    on_end(copied, seconds, "CANCELLED")
                    return None
                values = self.task.fn(values if self.reads is None else list(self.reads(values)))
            if self.copy_out is not None:
                outputs = values
                with self.lock_out:
                    start = clock()
                    values = copy_values(self.copy_out, values if self.picks is None else self.picks(values))
                    seconds += clock() - start
                copied = copied + values
                if self.with_outputs:
                    values = values + outputs
            results = values if self.results is None else list(self.results(values))
        except BaseException:
            on_end(copied, seconds, "FAILED")
            raise
        return results, copied, seconds


def _unless_identity(order: tuple, size: int) -> "Callable[[list], Sequence] | None":
    """What picks the values at `order` (indices into a list of `size` values) in that order, in one C
    call, or None when it takes the whole list as it is."""
    return None if order == tuple(range(size)) else picker(order)


def _fuse_copies(steps: tuple) -> tuple:
    """`steps` with each run of consecutive single-value copies on one stream as one `CopyRun` step."""
    fused: list = []
    run: list = []

    def flush() -> None:
        if len(run) == 1:
            fused.append(run[0])
        elif run:
            fused.append((CopyRun([s[0] for s in run]), run[0][1], tuple(s[2][0] for s in run),
                          tuple(s[3][0] for s in run), tuple(i for s in run for i in s[4])))
        run.clear()

    for step in steps:
        task, reads, writes = step[0], step[2], step[3]
        single = task.kind == "copy" and len(reads) == 1 and len(writes) == 1
        if not single or (run and run[0][0].stream != task.stream):
            flush()
        if single:
            run.append(step)
        else:
            fused.append(step)
    flush()
    return tuple(fused)


__all__ = ["Chain", "CopyRun", "InlineSchedule", "copy_values", "dependency_order"]
