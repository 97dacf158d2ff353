"""Runs a graph runner's task DAG: one worker thread per stream (device or copy engine).

The interface is deliberately small, so a second implementation (e.g. Ray actors, one per
device, with tensors in the object store) can replace `ThreadScheduler` without touching the
graph runner:

    scheduler = ThreadScheduler(plan, observer)
    scheduler.submit(job, feeds, done)   # returns at once; done(job, results, error) once
    scheduler.close(timeout)             # True when every stream stopped

A task becomes ready when every value it reads exists; it then goes to its stream's queue.
Streams work in FIFO order across jobs, so consecutive jobs overlap on different devices and
device instances (pipelining) while each stream runs one task at a time, or as many as its
device has queues (`TaskPlan.queues`, from `max_concurrency`: that many workers serve the stream,
so several jobs overlap on it; the tasks of one job still wait for what they read). A job
whose record is already final (failed, cancelled, timed out) has its remaining tasks skipped.

A synchronous run (`GraphRunner.run`) with no other job in flight need not use the streams at all:
`claim_inline` hands it the plan's `InlineSchedule`, which runs the tasks in dependency order on
the calling thread, each holding its stream,
which is the same schedule without a thread hand-off per task and per job (a KV-cache decoding
step is a chain of small subgraphs, where those hand-offs cost more than the subgraphs).

One shortcut: when a thread makes a task of another stream ready, has nothing else to do, and
that stream has nothing running or queued, it runs the task itself (holding the stream, so
the stream still runs one task at a time) instead of waking the stream's thread. Only tasks
whose runner says it may be called from any thread (`Runner.any_thread`) are taken over.
"""
from __future__ import annotations

import queue
import threading
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import numpy as np

from xgraph.runners.inline import InlineSchedule
from xgraph.runners.jobs import Job
from xgraph.runners.lifetime import serve, start_thread

Key = Hashable  # (tensor name, memory kind)


@dataclass(eq=False)
class Task:
    """One unit of work on one stream: a device subgraph or a host<->device copy."""

    index: int
    name: str
    stream: str
    kind: str  # "subgraph" | "copy"
    fn: Callable[[list[np.ndarray]], list[np.ndarray]]
    inputs: tuple[Key, ...]
    outputs: tuple[Key, ...]
    successors: tuple[int, ...] = ()
    num_deps: int = 0
    device: str = ""
    distinct_inputs: tuple[Key, ...] = ()  # inputs without repeats, for reader counting
    any_thread: bool = False  # may run on another stream's thread when its own stream is idle


@dataclass
class TaskPlan:
    """A graph runner's task plan, made once: tasks, where the feeds and results live, how often values are read.

    The graph-level counterpart of a subgraph's `xgraph.runners.plan.ExecutionPlan`: both are a
    runner's `plan`, fixed when the runner is made and run by every job."""

    tasks: list[Task]
    feeds: list[Key]
    results: list[Key]
    constants: dict[Key, np.ndarray] = field(default_factory=dict)
    readers: dict[Key, int] = field(default_factory=dict)  # tasks reading each value (results excluded)
    queues: dict[str, int] = field(default_factory=dict)  # workers of a stream, where more than one

    def link(self) -> None:
        """Fill successors, dependency counts and reader counts from the tasks' inputs and outputs."""
        producer = {k: t.index for t in self.tasks for k in t.outputs}
        successors: dict[int, set[int]] = {t.index: set() for t in self.tasks}
        self.readers = {}
        keep = set(self.results)
        for t in self.tasks:
            deps = {producer[k] for k in t.inputs if k in producer}
            t.num_deps = len(deps)
            for d in deps:
                successors[d].add(t.index)
            t.distinct_inputs = tuple(dict.fromkeys(t.inputs))
            for k in t.distinct_inputs:
                if k not in keep:
                    self.readers[k] = self.readers.get(k, 0) + 1
        for t in self.tasks:
            t.successors = tuple(sorted(successors[t.index]))

    def streams(self) -> list[str]:
        """Stream names in first-use order."""
        return list(dict.fromkeys(t.stream for t in self.tasks))

    def stream_stats(self, subgraph_stats: dict[str, dict]) -> dict[str, dict[str, Any]]:
        """stream -> {"queues", "subgraphs" (names), "runs", "total_s" and, where the runners estimate
        device time ("sim" mode), "estimated_device_s"}, summed from each subgraph runner's stats; how
        the load falls on the device instances. Copy streams are left out (the "copies" stats)."""
        out: dict[str, dict[str, Any]] = {}
        for task in self.tasks:
            if task.kind != "subgraph":
                continue
            entry = out.setdefault(task.stream, {"queues": self.queues_of(task.stream), "subgraphs": [],
                                                 "runs": 0, "total_s": 0.0})
            entry["subgraphs"].append(task.name)
            stats = subgraph_stats.get(task.name, {})
            for key in ("runs", "total_s", "estimated_device_s"):
                if isinstance(stats.get(key), (int, float)):
                    entry[key] = entry.get(key, 0) + stats[key]
        return out

    def queues_of(self, stream: str) -> int:
        """How many workers serve `stream` (tasks of it that run at once): its device's max_concurrency."""
        return self.queues.get(stream, 1)


class _JobRun:
    """Per-job scheduling state: values produced so far and what each task still waits for."""

    __slots__ = ("job", "plan", "values", "waiting", "readers", "left", "lock", "done")

    def __init__(self, job: Job, plan: TaskPlan, feeds: list[np.ndarray], done: Callable) -> None:
        self.job, self.plan = job, plan
        self.values: dict[Key, Any] = dict(plan.constants)
        self.values.update(zip(plan.feeds, feeds))
        self.waiting = [t.num_deps for t in plan.tasks]
        self.readers = dict(plan.readers)
        self.left = len(plan.tasks)
        self.lock = threading.Lock()
        self.done = done


Observer = Callable[[Job, Task, float, float, list], None]


class ThreadScheduler:
    """Daemon worker threads per stream (one per queue of it), fed by the stream's queue; dependencies
    counted per job."""

    def __init__(self, plan: TaskPlan, observer: Observer | None = None, name: str = "xgraph", *,
                 owner: str = "") -> None:
        """`name` prefixes the stream threads' names; `owner` (the runner) is named in errors."""
        self.plan = plan
        self._owner = owner or name
        self._observer = observer
        self._queues: dict[str, queue.SimpleQueue] = {s: queue.SimpleQueue() for s in plan.streams()}
        # taken while a task of the stream runs, by a worker of it or by a thread that took the task
        # over; as many at once as the stream has queues (a lock for one)
        self._busy: dict[str, Any] = {s: threading.Lock() if plan.queues_of(s) == 1
                                      else threading.BoundedSemaphore(plan.queues_of(s)) for s in self._queues}
        # a stream thread holds the scheduler weakly while it waits: a scheduler nobody references
        # any more is collected, and the finalizer below wakes its threads to end
        me = weakref.ref(self)
        self._threads = [threading.Thread(target=serve, args=(me, q, ThreadScheduler._work, s), daemon=True,
                                          name=f"{name}-stream-{s}" + (f".{k}" if k else ""))
                         for s, q in self._queues.items() for k in range(plan.queues_of(s))]
        #: wakes every stream worker to end, once: by close(), or when the scheduler is collected
        self._stop = weakref.finalize(self, _stop_streams, [q for s, q in self._queues.items()
                                                            for _ in range(plan.queues_of(s))])
        self._roots = [t for t in plan.tasks if t.num_deps == 0]
        # every task may run on the caller's thread: synchronous runs may skip the streams (claim_inline)
        self._inline = InlineSchedule(plan, self._busy) if all(t.any_thread for t in plan.tasks) else None
        self._runs: dict[int, _JobRun] = {}  # job id -> state, while the job runs on the streams
        self._runs_lock = threading.Lock()
        self._inline_claim = threading.Lock()  # held by the synchronous run using `_inline` (claim_inline)
        #: the synchronous run `claim_inline` allowed has ended
        self.end_inline = self._inline_claim.release
        # the stream threads start with the first job that needs them: a runner used only through
        # synchronous runs on the caller's thread (claim_inline), such as each gear of a decoding loop,
        # never starts any (64 past-length gears would hold 192 idle threads otherwise)
        self._started = False
        if self._inline is None:
            self._start_streams()

    def _start_streams(self) -> None:
        """Start every stream thread not running yet (all of them, or those an interrupted start missed)."""
        with self._runs_lock:
            for thread in self._threads:
                start_thread(thread, self._owner)
            self._started = True  # only once every thread runs: a Ctrl-C above leaves it for the next job

    def submit(self, job: Job, feeds: list[np.ndarray],
               done: Callable[[Job, list | None, BaseException | None], None], plan: TaskPlan | None = None) -> None:
        """Start `job` with `feeds` (in plan.feeds order); `done` is called once with its results or error.

        `plan`: another plan over the same runners and streams for this job (a run whose inputs or
        outputs stay in device memory, `xgraph.runners.binding`); the scheduler's own by default."""
        plan = self.plan if plan is None else plan
        run = _JobRun(job, plan, feeds, done)
        if run.left == 0:
            done(job, [run.values[k] for k in plan.results], None)
            return
        if not self._started:
            self._start_streams()  # before the job is recorded: a failure here leaves nothing behind
        with self._runs_lock:
            self._runs[job.id] = run
        for task in (self._roots if plan is self.plan else [t for t in plan.tasks if t.num_deps == 0]):
            self._queues[task.stream].put((run, task))

    def claim_inline(self) -> InlineSchedule | None:
        """The plan's `InlineSchedule`, for one synchronous run on the caller's thread, when every task
        may run on any thread, no other synchronous run holds it and no job is on the streams
        (their pipeline order stays there); None otherwise. A claim is given back with `end_inline`.

        A job submitted while a synchronous run goes on runs on the streams beside it; each task
        holds its stream's lock, so both are right."""
        if self._inline is None or not self._inline_claim.acquire(False):
            return None
        if self._runs:
            self._inline_claim.release()
            return None
        return self._inline

    def inline_schedule(self, plan: TaskPlan) -> InlineSchedule | None:
        """`plan` (another plan over the same streams) as an `InlineSchedule` on this scheduler's stream
        locks, for `claim_inline`'s runs; None when this scheduler runs nothing on the caller's thread."""
        return None if self._inline is None else InlineSchedule(plan, self._busy)

    def abandon(self, job: Job) -> None:
        """Free what a job that ended early (timed out, cancelled) still holds; its queued tasks are skipped.

        Tasks of the job may sit in a stream's queue behind a kernel that is stuck; without
        this, each such job would keep its feeds and intermediate values alive until then.
        """
        with self._runs_lock:
            run = self._runs.pop(job.id, None)
        if run is not None:
            with run.lock:
                run.values.clear()
                run.readers.clear()

    def _forget(self, run: _JobRun) -> None:
        with self._runs_lock:
            self._runs.pop(run.job.id, None)

    def _work(self, stream: str, item: tuple) -> None:
        """Run `item` (a job's task) on `stream`'s thread, then the tasks it makes ready that stay on this thread."""
        inbox = self._queues[stream]
        run, task = item
        local: deque = deque(((run, task, False),))  # (run, task, holds its stream) to run on this thread
        tasks = run.plan.tasks  # every task taken on below is of this job
        while local:
            run, task, held = local.popleft()
            busy = self._busy[task.stream]
            if not held:
                busy.acquire()
            try:
                if run.job.done:
                    continue
                args = [run.values[k] for k in task.inputs]
                start = time.perf_counter()
                outs = task.fn(args)
                end = time.perf_counter()
                if self._observer is not None:
                    self._observer(run.job, task, start, end, outs)
            except BaseException as e:  # reported through the job (even SystemExit); the stream keeps serving
                if not isinstance(e, Exception):
                    e = RuntimeError(f"task {task.name!r} raised {type(e).__name__}: {e}")
                self._forget(run)
                run.done(run.job, None, e)
                continue
            finally:
                busy.release()
            ready = []
            with run.lock:
                if run.job.done:  # ended while this task ran (timed out, cancelled): keep nothing
                    continue
                values = run.values
                for k, v in zip(task.outputs, outs):
                    values[k] = v
                for k in task.distinct_inputs:
                    n = run.readers.get(k)
                    if n is not None:
                        if n <= 1:
                            del run.readers[k]
                            values.pop(k, None)
                        else:
                            run.readers[k] = n - 1
                for s in task.successors:
                    run.waiting[s] -= 1
                    if run.waiting[s] == 0:
                        ready.append(tasks[s])
                run.left -= 1
                finished = run.left == 0
            for t in ready:
                if t.stream == stream:
                    local.append((run, t, False))
                elif self._take_idle(t, local, inbox):
                    local.append((run, t, True))
                else:
                    self._queues[t.stream].put((run, t))
            if finished:
                self._forget(run)
                try:
                    results = [run.values[k] for k in run.plan.results]
                except KeyError as e:
                    run.done(run.job, None, e)
                else:
                    run.done(run.job, results, None)

    def _take_idle(self, task: Task, local: deque, inbox: queue.SimpleQueue) -> bool:
        """Claim `task`'s stream for this thread when nothing waits here and that stream is idle.

        Handing a task to a sleeping thread costs a wake-up (tens of microseconds, more on a busy
        host); when only one job is in flight, this thread has nothing else to do and the other
        stream has nothing running or queued, running the task here is the same schedule without
        it. Only for tasks whose runner may be called from any thread.
        """
        if not task.any_thread or local or len(self._runs) > 1 or self._inline_claim.locked() \
                or not inbox.empty() or not self._queues[task.stream].empty():
            return False  # with other jobs in flight, both threads have work: keep the pipeline
        return self._busy[task.stream].acquire(blocking=False)

    def close(self, timeout: float = 5.0) -> bool:
        """Stop every stream after its current task; waits up to `timeout` s; True if all stopped."""
        self._stop()
        deadline = time.perf_counter() + timeout
        with self._runs_lock:
            started = [t for t in self._threads if t.ident is not None and t is not threading.current_thread()]
        for thread in started:
            thread.join(max(0.0, deadline - time.perf_counter()))
        return not any(t.is_alive() for t in started)


def _stop_streams(queues: "list[queue.SimpleQueue]") -> None:
    """Wake every stream thread to end (they finish the task in hand first)."""
    for q in queues:
        q.put(None)
