"""GraphRunner: runs a compiled graph, every device subgraph on its runner, as a pipelined DAG.

Built once per graph: a runner per depth-1 subgraph, and a plan of tasks (subgraphs and the
copies between memory domains) for the scheduler. Each device instance is a stream
("AICORE", or "AICORE:0", "AICORE:1" for a device compiled with several instances) served by
its device's queues (`max_concurrency`). A tensor crossing between "host" memory (CPU) and a
card's memory (AICORE, AICPU, DVPP of one card share it), or between two cards, is really
copied, once per memory domain that reads it, on a copy-engine stream ("H2D" / "D2H", per
card with several, "D2D:0>1" between cards); copies are counted and timed. Graph inputs
arrive in host memory and graph outputs are returned from host memory, except values kept on
the device between runs (`keep_on_device`, `DeviceValue`: xgraph/runners/device_values.py,
docs/runtime.md), which skip those copies.

    runner = create_graph_runner(xgraph.compile("net.onnx"))
    (logits,) = runner.run({"input": x})
"""
from __future__ import annotations

import functools
import json
import os
import queue
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Sequence

import numpy as np

from xgraph.errors import RunnerError, XGraphError
from xgraph.devices import get_devices
from xgraph.devices.instances import HOST, copy_stream, residences
from xgraph.devices.settings import compiled_devices
from xgraph.ir.files import write_text
from xgraph.registries import resolve
from xgraph.runners.binding import Binding, Bindings
from xgraph.runners.device_values import DeviceMemory, has_device_values, keep_as_handles
from xgraph.runners.jobs import (STATUS_NAMES, Job, JobSlots, JobStatus, JobTable, acquire_slot, check_timeout,
                                 interrupted, nbytes_of, undo_submission)
from xgraph.runners.io_checks import InputCheck, check_outputs, fill_outputs, fits_input
from xgraph.runners.lifetime import close_all, start_thread
from xgraph.runners.run_stats import GraphCounts
from xgraph.runners.runner import Runner
from xgraph.runners.scheduler import Task, TaskPlan, ThreadScheduler

if TYPE_CHECKING:
    from xgraph.devices import DeviceSpec
    from xgraph.ir import Graph, Subgraph, Tensor
    from xgraph.kernels.resolution import KernelChoice
    from xgraph.registries import Registries



def device_subgraphs(graph: "Graph") -> "list[Subgraph]":
    """The root's depth-1 children in dependency order; XGraphError saying to compile first if unplaced."""
    root = graph.get_root_subgraph()
    children = root.toposort_child_subgraph() if root.get_children_num() else []
    unplaced = [c.name for c in children if not c.has_attr("device")]
    if not children and not graph.get_ops():
        return []  # nothing to run: every output is a graph input or a weight
    if not children or unplaced:
        what = (f"has subgraphs without a device ({', '.join(unplaced[:5])})" if children
                else "has no device subgraphs")
        raise XGraphError(f"graph {graph.name!r} {what}; compile it first: runner = "
                          f"xgraph.create_graph_runner(xgraph.compile(graph))")
    return children


def _copy_value(value):
    """A copy of a tensor, of each tensor of a sequence (list), or None (an empty optional)."""
    if isinstance(value, list):
        return [_copy_value(v) for v in value]
    return None if value is None else np.copy(value)


def _copy(args: list[np.ndarray]) -> list[np.ndarray]:
    return [_copy_value(args[0])]


def _subgraph_task(runner: Runner, overlap: bool = False):
    """The runner's timed execute (what it raises names the runner and its subgraph); with `overlap`,
    calls from several queues of its stream run at once when the runner is `reentrant`."""
    return functools.partial(runner.timed_execute, exclusive=not overlap)


def build_plan(graph: "Graph", runners: "dict[Subgraph, Runner]", devices: "Mapping[str, DeviceSpec] | None" = None,
               *, input_memory: "Mapping[str, str] | None" = None, keep: "Collection[str]" = ()) -> TaskPlan:
    """Tasks for every device subgraph plus the copies its inputs and the graph outputs need.

    Each device instance is its own stream, served by its device's `max_concurrency` queues,
    and each card its own memory domain (`xgraph.devices.instances`), with the instance counts
    and queues the graph was compiled for (its recorded "devices" settings over `devices`).
    Graph inputs arrive in host memory, or in the memory domain `input_memory` names for them;
    graph outputs leave from host memory, except those in `keep`, which stay where they are made.
    """
    devices = compiled_devices(graph, get_devices() if devices is None else devices)
    where_runs = residences(runners, devices)
    tasks: list[Task] = []
    arriving = input_memory or {}
    location: dict[str, str] = {t.name: arriving.get(t.name, HOST) for t in graph.get_input_tensors()}
    feeds = list(location.items())
    have: set[tuple[str, str]] = set(feeds)
    constants = {(t.name, HOST): t.data for t in graph.get_output_tensors() if t.is_const}
    queues: dict[str, int] = {}

    def need(name: str, memory: str) -> tuple[str, str]:
        key = (name, memory)
        if key in have or key in constants:
            return key
        if name not in location:
            raise RunnerError(f"graph {graph.name!r}: tensor {name!r} is read before any subgraph produces it")
        stream = copy_stream(location[name], memory)
        tasks.append(Task(len(tasks), f"copy {name} {stream}", stream, "copy", _copy,
                          ((name, location[name]),), (key,), device=stream, any_thread=True))
        have.add(key)
        return key

    for subgraph, runner in runners.items():
        runs = where_runs[subgraph]
        memory = runs.memory
        inputs = tuple(need(t.name, memory) for t in runner.get_input_tensors())
        outputs = []
        for t in runner.get_output_tensors():
            location[t.name] = memory
            have.add((t.name, memory))
            outputs.append((t.name, memory))
        queues[runs.stream] = runs.queues
        tasks.append(Task(len(tasks), subgraph.name, runs.stream, "subgraph", _subgraph_task(runner, runs.queues > 1),
                          inputs, tuple(outputs), device=runs.device,
                          any_thread=bool(getattr(runner, "any_thread", False))))
    results = [(t.name, location[t.name]) if t.name in keep and t.name in location else need(t.name, HOST)
               for t in graph.get_output_tensors()]
    plan = TaskPlan(tasks, feeds, results, constants, queues={s: n for s, n in queues.items() if n > 1})
    plan.link()
    return plan


class GraphRunner:
    """Runs a compiled graph: `run(feeds)` or `execute_async`/`wait` with several jobs in flight."""

    #: gears that are one onnxruntime session may share one runner of this class for their runs
    #: (`xgraph.runners.gears.serve_gears`); runners that execute elsewhere (xgraph.ray's) say False
    shares_gears = True

    def __init__(self, graph: "Graph", mode: str = "run", kernels: str = "auto", *,
                 max_jobs_in_flight: int = 4, block_when_full: bool = True, job_timeout: float | None = None,
                 profile: bool = False, registries: "Registries | None" = None,
                 plugin_path: "list[str] | None" = None, job_slots: JobSlots | None = None,
                 device_memory: DeviceMemory | None = None) -> None:
        """Create a runner per device subgraph and start one stream per device and copy engine.

        Subgraphs with a compiled blob are checked by their plugin first (`plugin_path`: where to find
        it besides the installed ones); `blob_checks` lists the verdicts, recompiled blobs included.
        `job_slots`: the pool of `max_jobs_in_flight` slots to take jobs' slots from, when runners
        share one (a GearRunner's gears); a pool of this runner's own otherwise. `device_memory`:
        the memory its DeviceValues live in, when runners share one (a GearRunner's gears, which
        closes it); its own otherwise, freed by `close`."""
        from xgraph.ir import Graph
        if not isinstance(graph, Graph):
            hint = ("; load it first: xgraph.create_graph_runner(xgraph.load(path))"
                    if isinstance(graph, (str, bytes, os.PathLike)) else "")
            raise RunnerError(f"create_graph_runner needs a compiled xgraph.Graph, got {type(graph).__name__}{hint}")
        if isinstance(max_jobs_in_flight, bool) or not isinstance(max_jobs_in_flight, int) or max_jobs_in_flight < 1:
            raise RunnerError(f"max_jobs_in_flight must be an int >= 1, got {max_jobs_in_flight!r}")
        job_timeout = check_timeout(job_timeout, "job_timeout")
        self.graph, self.mode, self.kernels = graph, mode, kernels
        self.registries = registries = resolve(registries)
        self.job_timeout, self.block_when_full = job_timeout, block_when_full
        self.max_jobs_in_flight = max_jobs_in_flight
        self._owner = f"graph runner for {graph.name!r}"
        self.plugin_path = plugin_path
        self.runners, self.plan = self._create_runners(graph, mode, kernels)
        self.blob_checks = [r.blob_check for r in self.runners.values() if getattr(r, "blob_check", None)]
        self._inputs: list[Tensor] = graph.get_input_tensors()
        self._outputs: list[Tensor] = graph.get_output_tensors()
        self._check_inputs = InputCheck(self._owner, self._inputs)
        self._slots = JobSlots(max_jobs_in_flight) if job_slots is None else job_slots
        self._jobs = JobTable(self._owner, slots=self._slots)
        self._closed = False
        #: jobs by status, copies made (count, bytes, seconds) and not made because values stayed on the
        #: device (saved, saved_bytes)
        self._counts = GraphCounts([s.name for s in JobStatus if s is not JobStatus.PENDING])
        self._owns_memory = device_memory is None
        self.device_memory = DeviceMemory(self._owner) if device_memory is None else device_memory
        self._bindings: Bindings | None = None  # plans for DeviceValue inputs and kept outputs, made on first use
        #: what a DeviceValue's `.numpy()` calls: it holds the counters, not the runner
        self._count_host_copy = self._counts.count_copy
        self.profile = profile
        self._spans: list[tuple] = []
        self._epoch = time.perf_counter()
        self._scheduler = self._create_scheduler()
        #: synchronous runs on the caller's thread (`_run_inline`), for schedulers that offer them
        self._claim_inline = getattr(self._scheduler, "claim_inline", None)
        self._watchdog_stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        if job_timeout is not None:
            self._watchdog = threading.Thread(target=_watch, args=(weakref.ref(self), self._watchdog_stop),
                                              name=f"xgraph-{graph.name}-timeouts", daemon=True)
            try:
                start_thread(self._watchdog, self._owner)
            except BaseException:
                self._scheduler.close(0)
                close_all(self.runners.values())
                raise

    @property
    def job_slots(self) -> JobSlots:
        """The job slots this runner's jobs take (`max_jobs_in_flight` of them; shared by a GearRunner's gears)."""
        return self._slots

    def _create_runners(self, graph: "Graph", mode: str, kernels: str) -> "tuple[dict[str, Runner], TaskPlan]":
        """A runner per device subgraph and the task plan over them.

        Overridden (with `_create_scheduler`) by runners that execute the subgraphs elsewhere,
        such as xgraph.ray's, which keeps the job handling here and swaps only the scheduler.
        """
        runners: dict[str, Runner] = {}
        by_subgraph: dict[Subgraph, Runner] = {}
        try:
            for sg in device_subgraphs(graph):
                by_subgraph[sg] = runners[sg.name] = Runner.create_runner(sg, mode, kernels,
                                                                          registries=self.registries,
                                                                          plugin_path=self.plugin_path)
            return runners, build_plan(graph, by_subgraph, self.registries.devices)
        except BaseException:
            for r in by_subgraph.values():
                r.close()
            raise

    def _create_scheduler(self) -> ThreadScheduler:
        """The scheduler that runs the plan: one thread per device stream and copy engine."""
        return ThreadScheduler(self.plan, self._observe, name=f"xgraph-{self.graph.name}", owner=self._owner)

    # -- tensors --------------------------------------------------------------------------------
    def get_input_tensors(self) -> "list[Tensor]":
        """The graph inputs, in the order `execute_async` takes them."""
        return list(self._inputs)

    def get_output_tensors(self) -> "list[Tensor]":
        """The graph outputs, in the order results are returned."""
        return list(self._outputs)

    def kernel_choices(self) -> "dict[str, KernelChoice]":
        """op name -> what runs it (source, device, kernel, reason), from each subgraph runner's plan.

        Runners without an execution plan (plugin runners, the null runner) contribute nothing.
        """
        choices: dict[str, KernelChoice] = {}
        for runner in self.runners.values():
            plan = getattr(runner, "plan", None)
            if plan is not None:
                choices.update(plan.kernels)
        return choices

    # -- jobs -----------------------------------------------------------------------------------
    def execute_async(self, inputs: "Sequence | dict", outputs: Sequence[np.ndarray] | None = None,
                      keep_on_device: "Collection[str] | None" = None) -> tuple[int, int]:
        """Start a job; returns (job_id, 0) at once. Preallocated `outputs` are filled in place.

        `inputs` may hold DeviceValues of this runner; the outputs named in `keep_on_device` (then
        without preallocated `outputs`) come back from `get_outputs` as DeviceValues (see `run`)."""
        self._refuse_if_closed()
        binding = fed = None
        if keep_on_device is not None or has_device_values(inputs):
            inputs, binding, fed = self._bind(inputs, keep_on_device)
            if outputs is not None and binding.kept:
                raise RunnerError(f"{self._owner}: output {binding.kept[0][1]!r} cannot both stay on the device "
                                  f"(keep_on_device) and fill a preallocated output buffer; drop one of the two")
        feeds = self._check_inputs(inputs) if binding is None else binding.check(inputs)
        buffers = None if outputs is None else check_outputs(self._owner, self._outputs, outputs)
        return self._submit(feeds, buffers, collect=False, binding=binding, fed=fed).id, 0

    def _refuse_if_closed(self) -> None:
        if self._closed:
            raise RunnerError(f"{self._owner}: the runner is closed; create a new one")

    def _submit(self, feeds: list, buffers: list | None, collect: bool, binding: Binding | None = None,
                fed: int = 0) -> Job:
        """Take a job slot and hand the checked job to the scheduler's streams (on `binding`'s plan)."""
        held: list = []  # the job slot, once taken (`JobSlots.take_into`)
        job = None
        try:  # whatever cuts the hand-over short (Ctrl-C, no thread to start) gives the slot back
            acquire_slot(self._slots, held, limit=self.max_jobs_in_flight, block=self.block_when_full,
                         is_closed=self._is_closed, owner=self._owner)
            job = self._jobs.new(feeds, buffers, self.job_timeout, collect=collect)
            job.started = time.perf_counter()
            if binding is None:
                self._scheduler.submit(job, feeds, self._job_done)
            else:
                self._scheduler.submit(job, feeds, functools.partial(self._bound_job_done, binding, fed), binding.plan)
        except BaseException as e:
            raised = undo_submission(self._undo_submit, job, held, e, self._owner)
            if raised is e:
                raise
            raise raised from e
        if self._closed:  # close() ran meanwhile and may have missed this job
            self._finish(job, JobStatus.CANCELLED, RunnerError(f"{self._owner}: job {job.id} cancelled: "
                                                               f"the runner was closed"))
        return job

    def _undo_submit(self, job: Job | None, held: list, error: BaseException) -> None:
        """Cancel a job whose submission `error` cut short (it leaves the streams) or give back its slot."""
        if job is None:
            self._slots.give_back(held)
        else:
            self._finish(job, JobStatus.CANCELLED, interrupted(self._owner, job, error))

    def _run_inline(self, feeds: list, binding: Binding | None = None, fed: int = 0) -> list | None:
        """Run a checked job to the end on this thread, when a job slot is free, nothing else is in
        flight and every task may run on any thread (`ThreadScheduler.claim_inline`); its results
        (the outputs `binding` keeps as DeviceValues; `fed`: the bytes of the handles fed in device
        memory), or None (nothing done) otherwise.

        Such a run needs no job record: nobody else can wait for it. It takes a job id and a slot,
        holds each task's stream, counts in the stats (jobs by status, copies made and saved) and
        fails with the error a job on the streams would record, as a job run there does."""
        held: list = []  # the job slot, once taken (`JobSlots.take_into`: Ctrl-C cannot lose it)
        try:
            try:
                self._slots.take_into(held)
            except queue.Empty:  # every slot taken: the streams' path waits for one or refuses
                return None
            schedule = self._claim_inline()
            if schedule is None:
                return None
            if binding is not None:
                schedule = binding.schedule
            try:
                job_id = self._jobs.next_id()
                if self.profile:
                    def on_span(task, start: float, end: float, outs: list) -> None:
                        self._spans.append((task.name, task.kind, task.stream, start, end, job_id, nbytes_of(outs)))
                    ran = schedule.run(feeds, self._is_closed, self._counts.ended, on_span)
                else:  # a plan of one subgraph runs its `Chain` (what `schedule.run` would call)
                    ran = (schedule.chain or schedule).run(feeds, self._is_closed, self._counts.ended)
            except (XGraphError, KeyboardInterrupt):  # as they are (Ctrl-C: counted as a failure, let through)
                raise
            except BaseException as e:
                raise self._job_error(job_id, e) from e
            finally:
                self._scheduler.end_inline()
            if ran is None:  # close() ran meanwhile
                raise RunnerError(f"{self._owner}: job {job_id} cancelled: the runner was closed")
            results, copied, seconds = ran
            if binding is None:
                self._counts.ended(copied, seconds, "OK")
                return results
            self._counts.ended(copied, seconds, "OK", binding.saved, fed + keep_as_handles(results, binding.handles))
            return results
        finally:
            self._slots.give_back(held)

    def _is_closed(self) -> bool:
        return self._closed

    def _finish(self, job: Job, status: JobStatus, error: BaseException | None = None) -> None:
        if self._jobs.finish(job, status, error):  # gives the job's slot back
            self._count_job(STATUS_NAMES[job.status])
        if status in (JobStatus.TIMED_OUT, JobStatus.CANCELLED):
            self._scheduler.abandon(job)  # free its feeds and values now, not when a stuck stream gets to them

    def _job_error(self, job_id: int, error: BaseException) -> XGraphError:
        """What a job that raised `error` fails with: an XGraphError as it is, anything else a
        RunnerError naming the job."""
        if isinstance(error, XGraphError):
            return error
        if not isinstance(error, Exception):  # even SystemExit fails only the job
            error = RuntimeError(f"job {job_id} raised {type(error).__name__}: {error}")
        return RunnerError(f"{self._owner}: job {job_id} failed: {type(error).__name__}: {error}")

    def _count_job(self, status: str) -> None:
        self._counts.record(status)

    def _bound_job_done(self, binding: Binding, fed: int, job: Job, results: list | None,
                        error: BaseException | None) -> None:
        """`_job_done` for a job run on `binding`'s plan: its kept outputs handed over as DeviceValues."""
        if error is None:
            results = self._keep(binding, results, fed)
        self._job_done(job, results, error)

    def _job_done(self, job: Job, results: list | None, error: BaseException | None) -> None:
        """Scheduler callback (on a stream thread): hand over results or record the failure."""
        if error is not None:
            self._finish(job, JobStatus.FAILED, self._job_error(job.id, error))
            return
        try:
            if job.outputs is not None:
                fill_outputs(self._owner, self._outputs, job.outputs, results)
            else:
                job.results = results
        except XGraphError as e:
            self._finish(job, JobStatus.FAILED, e)
        else:
            self._finish(job, JobStatus.OK)

    def _expire(self) -> None:
        """Time out every job past its deadline (the watchdog calls this every few milliseconds)."""
        now = time.perf_counter()
        for job in self._jobs.pending():
            if job.deadline is not None and now > job.deadline:
                self._finish(job, JobStatus.TIMED_OUT, RunnerError(
                    f"{self._owner}: job {job.id} exceeded job_timeout={self.job_timeout} s and was abandoned"))

    def wait(self, job: "tuple[int, int] | int", timeout: float | None = None) -> int:
        """Block until the job is done (RunnerError after `timeout` s); 0 = ok, non-zero = failed."""
        return int(self._jobs.wait(job, timeout).status)

    def get_error(self, job: "tuple[int, int] | int") -> BaseException | None:
        """Why a job failed, timed out or was cancelled (None while pending or after success)."""
        return self._jobs.get(job).error

    def get_outputs(self, job: "tuple[int, int] | int") -> list[np.ndarray] | None:
        """The results of a finished job submitted without preallocated outputs, handed over once.

        The runner keeps no reference once they are collected (so memory stays flat however many
        jobs run); results never collected are kept up to `jobs.MAX_KEPT_RESULT_BYTES` in all.
        """
        return self._jobs.take_results(job)

    def run(self, feeds: "dict[str, np.ndarray] | Sequence", keep_on_device: "Collection[str] | None" = None
            ) -> list[np.ndarray]:
        """Run once and return the outputs in graph output order; raises the job's error on failure.

        With nothing else in flight (and no job_timeout, under which a stuck kernel must not hold
        the caller) the tasks run on this thread; otherwise the job goes through the streams.
        `feeds` may hold DeviceValues this runner returned, read where they live (no copy); the
        outputs named in `keep_on_device` are returned as DeviceValues, left where their subgraph
        made them (no copy to the host)."""
        if self._closed:
            self._refuse_if_closed()
        binding = fed = None
        if keep_on_device is not None or has_device_values(feeds):
            feeds, binding, fed = (self._bindings or self._make_bindings()).bind(feeds, keep_on_device)
        checked = self._check_inputs(feeds) if binding is None else binding.check(feeds)
        if self.job_timeout is None and self._claim_inline is not None and (binding is None or binding.schedule):
            results = self._run_inline(checked, binding, fed)
            if results is not None:
                return results
        job = self._submit(checked, None, collect=True, binding=binding, fed=fed)
        self._jobs.wait(job)
        if job.status is not JobStatus.OK:
            raise job.error if job.error is not None else RunnerError(f"{self._owner}: job {job.id} {job.status.name}")
        return job.results

    # -- values kept on the device ---------------------------------------------------------------
    def _bind(self, feeds: "dict | Sequence", keep_on_device: "Collection[str] | None") -> "tuple[Any, Binding, int]":
        """The feeds with DeviceValues unwrapped (checked to be this runner's, still open), their binding
        and the bytes of those in device memory (`xgraph.runners.binding`)."""
        return (self._bindings or self._make_bindings()).bind(feeds, keep_on_device)

    def _make_bindings(self) -> Bindings:
        """The runner's `Bindings`, made on the first run that feeds or keeps DeviceValues."""
        if self._bindings is None:
            if not isinstance(self._scheduler, ThreadScheduler):
                raise RunnerError(f"{self._owner}: this runner executes its subgraphs elsewhere "
                                  f"({type(self._scheduler).__name__}), so it keeps no values on the device; "
                                  f"feed arrays and leave keep_on_device out")
            by_subgraph = {r.subgraph: r for r in self.runners.values()}
            devices = self.registries.devices
            self._bindings = Bindings(
                self._owner, self.plan,
                lambda placed, kept: build_plan(self.graph, by_subgraph, devices, input_memory=placed, keep=kept),
                [t.name for t in self._inputs], [t.name for t in self._outputs], self.device_memory,
                self._scheduler.inline_schedule, self._count_host_copy, self._input_check_for)
        return self._bindings

    def _input_check_for(self, homes: tuple) -> "Callable[[Sequence | dict], list[np.ndarray]]":
        """The input check of runs fed handles kept from `homes` (per input in input order, the `KeptOutput`
        of its handle or None; () for none): a handle of an output declared to fit its input passed
        that output's result check, which is that input's check (`io_checks.fits_input`), so only
        the other inputs are checked. A check without `trusting` (the gears' shared one, which
        picks the gear by every input) checks them all."""
        trusting = getattr(self._check_inputs, "trusting", None)
        if not homes or trusting is None:
            return self._check_inputs
        outputs = {t.name: t for t in self._outputs}
        return trusting([i for i, (home, tensor) in enumerate(zip(homes, self._inputs))
                         if home is not None and home.name in outputs and fits_input(outputs[home.name], tensor)])

    def _keep(self, binding: Binding, results: list, fed: int) -> list:
        """A bound run's results, kept outputs as DeviceValues; the copies it did not make counted as saved."""
        self._counts.record(None, saved=binding.saved, saved_bytes=fed + keep_as_handles(results, binding.handles))
        return results

    # -- stats and profiling --------------------------------------------------------------------
    def _observe(self, job: Job, task: Task, start: float, end: float, outs: list) -> None:
        """A task ran on the streams: copies count in the stats; with profile, a span."""
        kind = task.kind
        if kind == "subgraph" and not self.profile:
            return  # subgraph runs are counted by their runners
        nbytes = nbytes_of(outs)
        if kind != "subgraph":
            self._counts.record(None, len(outs), nbytes, end - start)
        if self.profile:
            self._spans.append((task.name, task.kind, task.stream, start, end, job.id, nbytes))

    def get_stats(self) -> dict[str, Any]:
        """Jobs by status, copies between memory domains (count, bytes, seconds), each subgraph runner's
        stats and, per device stream (instance), its queues, subgraphs and summed run times."""
        jobs, copies = self._counts.snapshot()
        stats = {"jobs": jobs, "copies": copies}
        stats["subgraphs"] = {name: r.get_stats() for name, r in self.runners.items()}
        stats["streams"] = self.plan.stream_stats(stats["subgraphs"])
        return stats

    def export_chrome_trace(self, path: "str | Path") -> None:
        """Write the recorded spans as Chrome trace-event JSON (one track per device and copy engine)."""
        events = self.trace_events()
        write_text(path, json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}), "trace")

    def trace_events(self) -> list[dict[str, Any]]:
        """The recorded spans as Chrome trace events (RunnerError unless created with profile=True)."""
        if not self.profile:
            raise RunnerError(f"{self._owner}: nothing was recorded; create the runner with profile=True")
        streams = self.plan.streams()
        tid = {s: i + 1 for i, s in enumerate(streams)}
        events: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 1, "tid": 0,
                                         "args": {"name": f"xgraph {self.graph.name}"}}]
        events += [{"name": "thread_name", "ph": "M", "pid": 1, "tid": tid[s], "args": {"name": s}} for s in streams]
        for name, kind, stream, start, end, job_id, nbytes in list(self._spans):
            events.append({"name": name, "cat": kind, "ph": "X", "pid": 1, "tid": tid[stream],
                           "ts": round((start - self._epoch) * 1e6, 3), "dur": round((end - start) * 1e6, 3),
                           "args": {"job": job_id, "bytes": nbytes}})
        return events

    # -- lifetime -------------------------------------------------------------------------------
    def close(self, timeout: float = 5.0) -> None:
        """Cancel jobs in flight (status CANCELLED), stop the streams, close every subgraph runner."""
        if self._closed:
            return
        self._closed = True
        if self._owns_memory:
            self.device_memory.close()
        for job in self._jobs.pending():
            self._finish(job, JobStatus.CANCELLED,
                         RunnerError(f"{self._owner}: job {job.id} cancelled: the runner was closed"))
        self._watchdog_stop.set()
        stopped = self._scheduler.close(timeout)
        if self._watchdog is not None:
            self._watchdog.join(timeout)
        if stopped:  # a stream stuck in a kernel still uses its runner; leave that to the daemon thread
            close_all(self.runners.values())

    def __enter__(self) -> "GraphRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _watch(runner: "weakref.ref[GraphRunner]", stop: threading.Event) -> None:
    """The job_timeout watchdog: holds its runner weakly, so a runner dropped without close() lets it end."""
    live = runner()
    interval = min(0.05, live.job_timeout / 4) if live is not None else 0.0
    live = None
    while not stop.wait(interval):
        live = runner()
        if live is None:
            return
        live._expire()
        live = None


def create_graph_runner(graph: "Graph", mode: str = "run", kernels: str = "auto", **options: Any) -> GraphRunner:
    """A GraphRunner for a compiled graph (a `GearRunner` picking the gear by input shapes when it has gears).

    options: max_jobs_in_flight, block_when_full, job_timeout, profile, registries (the
    session's `xgraph.registries.Registries`; the default one when not given), and plugin_path
    (where the plugins that check compiled blobs are found, besides the installed ones).
    """
    if hasattr(graph, "get_gears") and graph.get_gears():  # one static partition per gear (xgraph/ir/gears.py)
        from xgraph.runners.gears import GearRunner
        return GearRunner(graph, mode, kernels, runner_class=GraphRunner, **options)  # type: ignore[return-value]
    return GraphRunner(graph, mode, kernels, **options)
