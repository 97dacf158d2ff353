"""Runner: executes one device subgraph (VART's vart::Runner), plus the runner registry.

A subclass implements `__init__(self, subgraph, mode)` and a synchronous `execute(inputs)`;
this base class adds job ids, `execute_async`/`wait` on a per-runner worker thread with a
bounded number of jobs in flight, preallocated outputs filled in place, stats and `close()`.

Runner names in a subgraph's "runner" attr resolve only through the runner table of the
session's registries (`xgraph.registries`; the default one unless ``registries=`` is given):
runners added with `register_runner`, then those contributed by the `xgraph_runners` hook
(the built-ins and installed packages). Nothing is ever imported from a name found in a
model file.
"""
from __future__ import annotations

import contextlib
import inspect
import queue
import sys
import threading
import time
import weakref
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from xgraph.errors import RunnerError, XGraphError
from xgraph.modes import KERNEL_CHOICES, MODES  # noqa: F401 - MODES re-exported for existing importers
from xgraph.ir.blob import BLOB_ATTR
from xgraph.plugins.blobs import check_subgraph_blob
from xgraph.registries import resolve
from xgraph.runners.io_checks import check_inputs, check_outputs, fill_outputs
from xgraph.runners.jobs import (Job, JobSlots, JobStatus, JobTable, acquire_slot, interrupted,
                                 undo_submission)
from xgraph.runners.lifetime import serve, start_thread
from xgraph.runners.result_check import ResultCheck
from xgraph.runners.run_stats import RunStats
from xgraph.plugins.location import DEBUG_HINT, at, code_location, module_roots

if TYPE_CHECKING:
    from xgraph.ir import Subgraph, Tensor
    from xgraph.registries import Registries

#: stands in for the runner's lock where calls may overlap
_NO_LOCK = contextlib.nullcontext()


def register_runner(name: str, runner_class: type["Runner"], *, registries: "Registries | None" = None) -> None:
    """Make `runner_class` available under `name` for subgraphs whose "runner" attr names it.

    It goes into the default registries unless `registries` is given; it takes effect on the
    next `create_runner`.
    """
    if not isinstance(name, str) or not name:
        raise RunnerError(f"register_runner needs a non-empty str name, got {name!r}")
    if not (isinstance(runner_class, type) and issubclass(runner_class, Runner)):
        raise RunnerError(f"register_runner({name!r}, ...): {runner_class!r} is not a subclass of xgraph.Runner")
    resolve(registries).register_runner(name, runner_class)


def registered_runners(registries: "Registries | None" = None) -> dict[str, type["Runner"]]:
    """Every resolvable runner name and its class (explicit registrations win over hooks)."""
    return resolve(registries).runners


def get_runner_class(name: str, where: str = "", registries: "Registries | None" = None) -> type["Runner"]:
    """The class registered as `name`; RunnerError listing the registered names otherwise."""
    if not isinstance(name, str):
        raise RunnerError(f"{where}runner name {name!r} is not a str; a subgraph's 'runner' attr maps modes to "
                          "registered runner names")
    runners = registered_runners(registries)
    if name in runners:
        klass = runners[name]
        if not issubclass(klass, Runner):
            raise RunnerError(f"{where}runner {name!r} is {klass!r}, which is not a subclass of xgraph.Runner")
        return klass
    raise RunnerError(f"{where}no runner is registered as {name!r}; registered runners: "
                      f"{', '.join(sorted(runners)) or 'none'}. Register it with xgraph.register_runner"
                      f"({name!r}, RunnerClass) or load the plugin that provides it")


def describe(subgraph: "Subgraph") -> str:
    """'subgraph NAME (device DEVICE)' for error messages."""
    device = subgraph.get_attr("device") if subgraph.has_attr("device") else "no device"
    return f"subgraph {subgraph.name!r} (device {device})"


class _Runtime:
    """The base class's job machinery, created on first use so subclasses need not call super()."""

    def __init__(self, owner: str, max_jobs: int):
        self.slots = JobSlots(max_jobs)
        self.jobs = JobTable(owner, slots=self.slots)
        self.queue: queue.SimpleQueue = queue.SimpleQueue()
        self.exec_lock = threading.Lock()
        self.worker: threading.Thread | None = None
        self.io: tuple[list, list] | None = None
        self.result_check: ResultCheck | None = None
        self.closed = False
        self.stats = RunStats()


class _RuntimeOnFirstUse:
    """`Runner._rt`: the runner's `_Runtime`, made on first use (under a lock, so two threads make one)
    and kept under the same name in the runner's own attributes, where every later read finds it as
    a plain attribute (a descriptor without `__set__` yields to them): a decoding step reads it on
    every run."""

    def __get__(self, runner: "Runner | None", owner: type | None = None) -> "_Runtime | _RuntimeOnFirstUse":
        if runner is None:
            return self
        with Runner._rt_init_lock:
            rt = runner.__dict__.get("_rt")
            if rt is None:
                rt = runner.__dict__["_rt"] = _Runtime(runner._owner(), runner.max_jobs_in_flight)
        return rt


class Runner:
    """Executes one subgraph; subclasses provide `__init__(subgraph, mode)` and `execute(inputs)`."""

    #: Jobs accepted by `execute_async` before it blocks (or raises, see `block_when_full`).
    max_jobs_in_flight: int = 16
    #: True: `execute_async` waits for a free slot; False: it raises RunnerError at once.
    block_when_full: bool = True
    #: Seconds `close()` waits for a job that is already executing before giving up on it.
    close_timeout: float = 5.0
    #: True when `execute` may be called from any thread (one call at a time). The graph runner
    #: then lets an idle stream's task run on the thread that made it ready, skipping a thread
    #: wake-up. Leave False for runners bound to a thread (e.g. a device context per thread).
    any_thread: bool = False
    #: What the subgraph's plugin said of its compiled blob when `create_runner` made this runner
    #: (`xgraph.plugins.blobs.BlobCheck`), or None when the subgraph has no blob.
    blob_check: Any = None
    #: True when `execute` may run in several threads at once. A graph runner stream with several
    #: queues (a device's `max_concurrency`) then overlaps jobs on it; otherwise they take turns.
    reentrant: bool = False

    _rt_init_lock = threading.Lock()

    def __init__(self, subgraph: "Subgraph", mode: str = "run") -> None:
        """Remember the subgraph and mode (subclasses load their kernels here)."""
        self.subgraph = subgraph
        self.mode = mode

    # -- creation --------------------------------------------------------------------------------
    @classmethod
    def create_runner(cls, subgraph: "Subgraph", mode: str = "run", kernels: str = "auto", *,
                      registries: "Registries | None" = None, plugin_path: "list[str] | None" = None) -> "Runner":
        """The runner registered for `subgraph`'s "runner" attr in `mode`, created for it.

        A runner class whose `__init__` takes `kernels` and/or `registries` receives them. A subgraph with a
        compiled blob is first checked by its plugin (found by name, on `plugin_path` or installed), which
        may recompile it or refuse it (`xgraph.plugins.blobs`); the verdict is the runner's `blob_check`.
        """
        from xgraph.ir import Subgraph
        if not isinstance(subgraph, Subgraph):
            raise RunnerError(f"create_runner needs an xgraph Subgraph, got {type(subgraph).__name__}")
        where = describe(subgraph)
        if kernels not in KERNEL_CHOICES:
            raise RunnerError(f"{where}: kernels={kernels!r} is not one of {', '.join(KERNEL_CHOICES)}")
        if not subgraph.has_attr("runner"):
            raise RunnerError(f"{where} has no 'runner' attr, so nothing can run it; compile the graph with "
                              f"xgraph.compile first, or set_attr('runner', {{'run': NAME}})")
        runners = subgraph.get_attr("runner")
        if not isinstance(runners, dict):
            raise RunnerError(f"{where}: its 'runner' attr must be a dict mode -> runner name, got {runners!r}")
        if mode not in runners:
            plugin = subgraph.get_attr("plugin") if subgraph.has_attr("plugin") else None
            if plugin:
                raise RunnerError(f"{where}: plugin {plugin!r} registered no runner for mode {mode!r} (its modes: "
                                  f"{', '.join(sorted(runners)) or 'none'}), so this subgraph compiles but cannot "
                                  f"run; register one with xgraph.register_runner and name it in the plugin's "
                                  f"get_runner()")
            raise RunnerError(f"{where} has no runner for mode {mode!r}; it has modes: "
                              f"{', '.join(sorted(runners)) or 'none'}")
        name = runners[mode]
        registries = resolve(registries)
        klass = get_runner_class(name, f"{where}, mode {mode!r}: ", registries)
        blob_check = check_subgraph_blob(subgraph, plugin_path) if subgraph.has_attr(BLOB_ATTR) else None
        try:
            parameters = inspect.signature(klass.__init__).parameters
            extra: dict[str, Any] = {}
            if "kernels" in parameters:
                extra["kernels"] = kernels
            if "registries" in parameters:
                extra["registries"] = registries
            runner = klass(subgraph, mode, **extra)
        except (XGraphError, KeyboardInterrupt):
            raise
        except BaseException as e:  # even SystemExit: a plugin's runner must not end the host application
            raise RunnerError(f"{where}: runner {name!r} ({klass.__name__}) failed to start in mode {mode!r}: "
                              f"{type(e).__name__}: {e}") from e
        if getattr(runner, "subgraph", None) is None:
            runner.subgraph = subgraph
        if getattr(runner, "mode", None) is None:
            runner.mode = mode
        runner.blob_check = blob_check
        return runner

    # -- what subclasses implement ----------------------------------------------------------------
    def execute(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run the subgraph once, synchronously; outputs in `get_output_tensors()` order."""
        raise NotImplementedError(f"{type(self).__name__} must implement execute(inputs)")

    def release(self) -> None:
        """Free what the runner holds (sessions, device memory); called once by `close()`."""

    # -- tensors ----------------------------------------------------------------------------------
    def get_input_tensors(self) -> "list[Tensor]":
        """The subgraph's input tensors, in the order `execute` takes them."""
        return self.subgraph.get_input_tensors()

    def get_output_tensors(self) -> "list[Tensor]":
        """The subgraph's output tensors, in the order `execute` returns them."""
        return self.subgraph.get_output_tensors()

    # -- jobs -------------------------------------------------------------------------------------
    _rt = _RuntimeOnFirstUse()

    def _io(self) -> tuple[list, list]:
        """(input tensors, output tensors), asked of the subclass once."""
        rt = self._rt
        if rt.io is None:
            rt.io = (list(self.get_input_tensors()), list(self.get_output_tensors()))
        return rt.io

    def _owner(self) -> str:
        sg = getattr(self, "subgraph", None)
        where = describe(sg) if sg is not None else "no subgraph"
        return f"{type(self).__name__} for {where}"

    def timed_execute(self, inputs: list[np.ndarray], job_id: int | None = None, *,
                      exclusive: bool = True) -> list[np.ndarray]:
        """`execute` under the runner's lock (a `reentrant` runner's calls with `exclusive=False` skip it:
        the queues of a graph runner stream), recording time and bytes in the stats.

        Whatever `execute` raises other than an XGraphError or KeyboardInterrupt (a ValueError,
        even SystemExit) becomes a RunnerError naming the runner, its subgraph and the job.
        """
        rt = self._rt
        with rt.exec_lock if exclusive or not self.reentrant else _NO_LOCK:
            start = time.perf_counter()
            try:
                results = self.execute(inputs)
            except BaseException as e:
                rt.stats.failed()
                if isinstance(e, (XGraphError, KeyboardInterrupt)):
                    raise
                # anything else a runner or kernel raises (ValueError, even SystemExit) is this
                # runner's failure: it must fail the job, not end the caller or a worker thread
                what = "execute" if job_id is None else f"job {job_id}"
                place = code_location(e, module_roots(sys.modules.get(type(self).__module__)))
                raise RunnerError(f"{self._owner()}: {what} failed: {type(e).__name__}: {e}{at(place)} "
                                  f"{DEBUG_HINT}") from e
            elapsed = time.perf_counter() - start
        check = rt.result_check
        try:
            if check is not None and type(results) is list and len(results) == check.size:
                check(inputs, results)  # the common case: the check is built and the count is right
            else:
                self._check_results(inputs, results)
        except RunnerError:
            rt.stats.failed()
            raise
        rt.stats.ran(elapsed, inputs, results)
        return list(results)

    def _check_results(self, inputs: list, results: Any) -> None:
        """One value per output tensor, each of its tensor's dtype and shape (see result_check.py)."""
        rt = self._rt
        expected = len(self._io()[1])
        if not isinstance(results, (list, tuple)) or len(results) != expected:
            got = f"{len(results)} values" if isinstance(results, (list, tuple)) else type(results).__name__
            raise RunnerError(f"{self._owner()}: execute returned {got}; it must return a list of "
                              f"{expected} arrays (one per output tensor)")
        if rt.result_check is None:
            inputs_declared, outputs_declared = self._io()
            rt.result_check = ResultCheck.of(f"{self._owner()}, runner {type(self).__name__}",
                                             outputs_declared, inputs_declared)
        rt.result_check(inputs, results)

    def execute_async(self, inputs: "Sequence | dict", outputs: Sequence[np.ndarray]) -> tuple[int, int]:
        """Queue a run that fills the preallocated `outputs` in place; returns (job_id, 0) at once."""
        rt = self._rt
        owner = self._owner()
        if rt.closed:
            raise RunnerError(f"{owner}: the runner is closed; create a new one")
        input_tensors, output_tensors = self._io()
        arrays = check_inputs(owner, input_tensors, inputs)
        buffers = check_outputs(owner, output_tensors, outputs)
        held: list = []  # the job slot, once taken (`JobSlots.take_into`)
        job = None
        try:  # whatever cuts the hand-over short (Ctrl-C, no thread to start) gives the slot back
            acquire_slot(rt.slots, held, limit=self.max_jobs_in_flight, block=self.block_when_full,
                         is_closed=lambda: rt.closed, owner=owner)
            job = rt.jobs.new(arrays, buffers)
            self._start_worker(rt, owner)
            rt.queue.put(job)
        except BaseException as e:
            raised = undo_submission(self._undo_submit, job, held, e, owner)
            if raised is e:
                raise
            raise raised from e
        if rt.closed:  # close() ran meanwhile and may have missed this job
            self._finish(job, JobStatus.CANCELLED,
                         RunnerError(f"{owner}: job {job.id} cancelled: the runner was closed"))
        return job.id, 0

    def _undo_submit(self, job: Job | None, held: list, error: BaseException) -> None:
        """Cancel a job whose submission `error` cut short (the worker skips it) or give back its slot."""
        if job is None:
            self._rt.slots.give_back(held)
        else:
            self._finish(job, JobStatus.CANCELLED, interrupted(self._owner(), job, error))

    def _start_worker(self, rt: _Runtime, owner: str) -> None:
        """Start the worker thread on the first job (again after a start Ctrl-C cut short).

        The worker holds the runner weakly while it waits; a runner dropped without close() is
        collected and its finalizer wakes the worker to end."""
        if rt.worker is not None and rt.worker.ident is not None:
            return
        with Runner._rt_init_lock:
            if rt.worker is None:
                rt.worker = threading.Thread(target=serve, args=(weakref.ref(self), rt.queue, Runner._run_job),
                                             name=f"xgraph-runner-{owner}", daemon=True)
                weakref.finalize(self, rt.queue.put, None)
            start_thread(rt.worker, owner)

    def _finish(self, job: Job, status: JobStatus, error: BaseException | None = None) -> None:
        self._rt.jobs.finish(job, status, error)  # gives the job's slot back

    def _run_job(self, job: Job) -> None:
        """Run one queued job on the worker thread and record how it ended."""
        if job.done:
            return
        job.started = time.perf_counter()
        try:
            results = self.timed_execute(job.inputs, job.id)
            fill_outputs(self._owner(), self._io()[1], job.outputs, results)
        except XGraphError as e:
            self._finish(job, JobStatus.FAILED, e)
        except BaseException as e:  # the worker outlives whatever a job raises, so later jobs still run
            self._finish(job, JobStatus.FAILED, RunnerError(
                f"{self._owner()}: job {job.id} failed: {type(e).__name__}: {e}"))
        else:
            self._finish(job, JobStatus.OK)

    def wait(self, job: "tuple[int, int] | int", timeout: float | None = None) -> int:
        """Block until the job is done (RunnerError after `timeout` s); 0 = ok, non-zero = failed."""
        return int(self._rt.jobs.wait(job, timeout).status)

    def get_error(self, job: "tuple[int, int] | int") -> BaseException | None:
        """Why a job failed or was cancelled (None while pending or when it succeeded)."""
        return self._rt.jobs.get(job).error

    def run(self, inputs: "Sequence | dict") -> list[np.ndarray]:
        """Run once in the calling thread; inputs as a list or {name: array}; returns the outputs."""
        rt = self._rt
        if rt.closed:
            raise RunnerError(f"{self._owner()}: the runner is closed; create a new one")
        return self.timed_execute(check_inputs(self._owner(), self._io()[0], inputs))

    def get_stats(self) -> dict[str, Any]:
        """Counters: runs, failures, total_s, last_s, bytes_in, bytes_out (plus subclass extras)."""
        return self._rt.stats.snapshot()

    # -- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Cancel queued and running jobs (their status becomes non-zero), stop the worker, release."""
        rt = self._rt
        if rt.closed:
            return
        rt.closed = True
        for job in rt.jobs.pending():
            self._finish(job, JobStatus.CANCELLED, RunnerError(f"{self._owner()}: job {job.id} cancelled: "
                                                               f"the runner was closed"))
        rt.queue.put(None)
        if rt.worker is not None and rt.worker.ident is not None and rt.worker is not threading.current_thread():
            rt.worker.join(self.close_timeout)
            if rt.worker.is_alive():
                return  # a kernel is stuck; its daemon thread still uses what release() would free
        try:
            self.release()
        except (XGraphError, KeyboardInterrupt):
            raise
        except BaseException as e:  # as in execute: a plugin's runner must not end the host application
            raise RunnerError(f"{self._owner()}: release() failed while closing: {type(e).__name__}: {e}") from e

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
