"""RayScheduler: the graph runner's scheduler interface, with each stage of a job a call to a Ray actor.

It replaces `ThreadScheduler` behind the same three calls (`submit`, `abandon`, `close`).
`submit` sends all of a job's stages at once, each actor call taking the object refs of the
stages it reads from, so tensors go from actor to actor through Ray's object store and the
driver only ever fetches the results. An actor runs calls one at a time in the order they
were sent (Ray's rule for one caller), so each actor is a device stream: consecutive jobs
overlap on different actors, as they do on the local runner's threads.

Completion is event driven: every call's receipt and every result has a future whose
callback posts to one queue; one thread takes events off it, records stats and spans,
finishes jobs, and tells the actor set when an actor died.
"""
from __future__ import annotations

import queue
import threading
import time
from typing import Any, Callable

import numpy as np

from xgraph.errors import RunnerError, XGraphError
from xgraph.ray.actors import ActorSet, ActorSlot, death_reason
from xgraph.ray.errors import ActorLostError
from xgraph.ray.session import require_ray
from xgraph.ray.stages import Stage
from xgraph.ray.worker import nbytes
from xgraph.runners.jobs import Job
from xgraph.runners.scheduler import TaskPlan

#: Seconds the event thread sleeps at most before checking restarts that take too long.
POLL_S = 0.2


class _Sized:
    """Stands in for a tensor that stayed in an actor: the graph runner's observer reads only its size."""

    __slots__ = ("nbytes",)

    def __init__(self, n: int) -> None:
        self.nbytes = n


def _own(value: Any) -> Any:
    """A result the caller may keep and write: read-only views into the object store are copied."""
    if isinstance(value, list):
        return [_own(v) for v in value]
    if isinstance(value, np.ndarray) and not value.flags.writeable:
        return value.copy()
    return value


class _RemoteRun:
    """One job in flight: the futures it waits for and the results gathered so far."""

    __slots__ = ("job", "done", "targets", "results", "left", "over")

    def __init__(self, job: Job, done: Callable) -> None:
        self.job, self.done = job, done
        self.targets: list[tuple[Stage, ActorSlot, int, dict]] = []   # per stage: slot, generation, info
        self.results: list[Any] = []
        self.left = 0
        self.over = False


class RayScheduler:
    """Runs a plan's stages on Ray actors; `observer` sees every task as the local scheduler reports it."""

    def __init__(self, plan: TaskPlan, stages: list[Stage], actors: ActorSet, observer: Callable,
                 record: Callable[[str, float, int, int], None], name: str) -> None:
        """Take started actors and the stage plan; start the event thread."""
        self.ray = require_ray()
        self.plan, self.stages, self.actors = plan, stages, actors
        self._observer, self._record = observer, record
        self._events: queue.SimpleQueue = queue.SimpleQueue()
        self._submit_lock = threading.Lock()
        self._runs: dict[int, _RemoteRun] = {}
        self._runs_lock = threading.Lock()
        self._stats_lock = threading.Lock()
        self._transfers = {"count": 0, "bytes": 0}
        self._calls = 0
        self._shared_feeds = {k for k in plan.feeds if sum(k in s.inputs for s in stages) > 1}
        self._clock = time.time() - time.perf_counter()  # actor wall clock -> this process's perf_counter
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=f"{name}-ray-events", daemon=True)
        self._thread.start()

    def post(self, event: tuple) -> None:
        """Queue an event for the event thread (called from Ray's callback threads)."""
        self._events.put(event)

    # -- submitting -----------------------------------------------------------------------------
    def submit(self, job: Job, feeds: list[np.ndarray], done: Callable[[Job, list | None, BaseException | None], None]
               ) -> None:
        """Send every stage of `job`; `done(job, results, error)` is called once, from the event thread."""
        run = _RemoteRun(job, done)
        ray = self.ray
        values: dict[Any, Any] = dict(self.plan.constants)
        values.update(zip(self.plan.feeds, feeds))
        sent = sum(nbytes(v) for v in feeds)
        try:
            with self._submit_lock:  # one job's stages all go to the same generation of each actor
                targets = {s.actor: self.actors.target(s.actor) for s in self.stages}  # may refuse: send nothing
                for key in self._shared_feeds:
                    values[key] = ray.put(values[key])
                refs = []
                for stage in self.stages:
                    handle, generation, slot = targets[stage.actor]
                    returns = len(stage.outputs) + 1
                    out = handle.run_stage.options(num_returns=returns).remote(
                        stage.index, job.id, *[values[k] for k in stage.inputs])
                    out = list(out) if returns > 1 else [out]
                    values.update(zip(stage.outputs, out[:-1]))
                    refs.append(out[-1])
                    run.targets.append((stage, slot, generation, dict(slot.info)))
        except RunnerError as e:
            done(job, None, e)
            return
        results = [values[k] for k in self.plan.results]
        run.results = list(results)
        waiting = [(i, r) for i, r in enumerate(results) if isinstance(r, ray.ObjectRef)]
        run.left = len(refs) + len(waiting)
        with self._stats_lock:
            self._transfers["count"] += len(feeds)
            self._transfers["bytes"] += sent
            self._calls += len(refs)
        with self._runs_lock:
            self._runs[job.id] = run
        for i, ref in enumerate(refs):
            ref.future().add_done_callback(lambda f, i=i: self.post(("stage", run, i, f)))
        for i, ref in waiting:
            ref.future().add_done_callback(lambda f, i=i: self.post(("result", run, i, f)))

    def abandon(self, job: Job) -> None:
        """Forget a job that ended early (timed out, cancelled); its actor calls finish unobserved."""
        with self._runs_lock:
            run = self._runs.pop(job.id, None)
        if run is not None:
            run.over = True
            run.results = []

    # -- events ---------------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            try:
                event = self._events.get(timeout=POLL_S)
            except queue.Empty:
                event = ()
            if event is None:
                return
            if event:
                self._handle(event)
            self.actors.poll()

    def _handle(self, event: tuple) -> None:
        kind = event[0]
        if kind == "ready":
            self.actors.on_ready(*event[1:])
            return
        run = event[1]
        try:
            if kind == "stage":
                self._stage_done(*event[1:])
            else:
                self._result_done(*event[1:])
        except Exception as e:  # this thread serves every job: one job's surprise must not stop it
            if not run.over:
                self._fail(run, RunnerError(f"job {run.job.id}: its results could not be handled: "
                                            f"{type(e).__name__}: {e}"))

    def _stage_done(self, run: _RemoteRun, position: int, future) -> None:
        error = future.exception()
        if error is not None and isinstance(error, self.ray.exceptions.RayActorError):
            death = self._death(run, position, error)  # noted even for a job that already failed
            if not run.over:
                self._fail(run, death)
            return
        if run.over:
            return
        if error is not None:
            self._fail(run, self._job_error(run, position, error))
            return
        receipt = future.result()
        tasks = self.plan.tasks
        for index, start, end, bytes_in, bytes_out in receipt["spans"]:
            task = tasks[index]
            if task.kind == "subgraph":
                self._record(task.name, end - start, bytes_in, bytes_out)
            self._observer(run.job, task, start - self._clock, end - self._clock, [_Sized(bytes_out)])
        with self._stats_lock:
            self._transfers["count"] += len(receipt["out_bytes"])
            self._transfers["bytes"] += sum(receipt["out_bytes"])
        self._progress(run)

    def _result_done(self, run: _RemoteRun, index: int, future) -> None:
        if run.over:
            return
        error = future.exception()
        if error is not None:
            self._fail(run, self._job_error(run, len(run.targets) - 1, error))
            return
        run.results[index] = _own(future.result())
        self._progress(run)

    def _progress(self, run: _RemoteRun) -> None:
        run.left -= 1
        if run.left == 0 and not run.over:
            run.over = True
            with self._runs_lock:
                self._runs.pop(run.job.id, None)
            run.done(run.job, run.results, None)

    def _fail(self, run: _RemoteRun, error: BaseException) -> None:
        run.over = True
        with self._runs_lock:
            self._runs.pop(run.job.id, None)
        run.done(run.job, None, error)

    def _death(self, run: _RemoteRun, position: int, error: BaseException) -> ActorLostError:
        """Tell the actor set which actor died (it restarts it) and say so in the job's error.

        The error names the actor that died, which is not always the stage's own: a stage
        whose input came from a dead actor fails with that actor's id in the error.
        """
        stage, slot, generation, info = run.targets[position]
        owner = self.actors.owner_of(getattr(error, "actor_id", None))
        if owner is not None:
            slot, generation = owner
            stage, info = next(((s, i) for s, sl, g, i in run.targets if sl is slot), (stage, info))
        elif isinstance(error, self.ray.exceptions.RayTaskError):
            return ActorLostError(f"job {run.job.id}: an actor it needed died ({death_reason(error)})")
        next_step = self.actors.died(slot, generation, error)
        subgraphs = ", ".join(repr(s) for s in stage.subgraphs) or "its copies"
        where = f"node {info['node_ip']} ({info['node_id'][:8]}), pid {info['pid']}" if info else slot.where()
        return ActorLostError(f"job {run.job.id}: subgraph {subgraphs} on {slot.spec.device}: its Ray actor on "
                              f"{where} died before the job finished ({death_reason(error)}); {next_step}")

    def _job_error(self, run: _RemoteRun, position: int, error: BaseException) -> BaseException:
        """The job's error: the task's own, which names subgraph, device and node, or Ray's, wrapped."""
        stage, slot, _, _ = run.targets[position]
        if isinstance(error, self.ray.exceptions.RayActorError):
            return self._death(run, position, error)
        cause = getattr(error, "cause", None)
        if isinstance(cause, XGraphError):
            if getattr(cause, "subgraph", None) in stage.subgraphs:
                self._record(cause.subgraph, None, 0, 0)
            return cause
        if isinstance(error, self.ray.exceptions.ObjectLostError):
            return ActorLostError(f"job {run.job.id}: a value of subgraph(s) {', '.join(stage.subgraphs)} on "
                                  f"{slot.spec.device} was lost with its node ({death_reason(error)})")
        return RunnerError(f"job {run.job.id}: stage {stage.index} on {slot.spec.device} "
                           f"({', '.join(stage.subgraphs)}) failed: {type(error).__name__}: {error}")

    # -- stats and lifetime ---------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """Actors (where, state, restarts), stages per job, actor calls and values moved through Ray."""
        with self._stats_lock:
            transfers, calls = dict(self._transfers), self._calls
        return {"actors": self.actors.describe(), "stages_per_job": len(self.stages), "calls": calls,
                "transfers": transfers}

    def close(self, timeout: float = 5.0) -> bool:
        """Kill every actor and stop the event thread; True when the thread stopped within `timeout`."""
        if self._closed:
            return True
        self._closed = True
        self.actors.close()
        self._events.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        return not self._thread.is_alive()
