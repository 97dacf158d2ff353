"""Gears at run time: the graph runner of a model compiled with gears, one GraphRunner per gear.

Each job goes to the gear whose input shapes equal the job's (ATC's runtime picks the gear
the same way); an input matching no gear is refused with the list of gears. The gears share
their weights (one read-only array each), so a gear adds its own device runners, execution
plans and activation buffers, not another copy of the weights.
`create_graph_runner` returns this runner for a graph whose `get_gears()` is not empty.

    runner = xgraph.create_graph_runner(xgraph.load("bert.gears.xmodel"))
    runner.run({"input_ids": ids_1x16, "attention_mask": mask_1x16})   # gear of shape (1, 16)

One runner for every gear (`GearRunner.shared`, made by `serve_gears`) when the gears are one
onnxruntime session but for shapes. The past-length gears of a KV-cache decoder are one graph
specialised to G input shapes: each gear is one device subgraph, and all of them run one shared
onnxruntime session (`ort_session.sessions_take_turns`). A decoding loop steps through a
different gear every token, and running each step through that gear's own GraphRunner touches a
different set of runner objects every time (job table, schedule, device runner, checks): with
50 gears that cold state cost more per step than the dispatch code itself (a stubbed step
measured 37-53 us on one gear's runner and 63-108 us cycling through 50). So `run` goes through
the shared runner, and a decoding loop steps through one warm runner.

The shared runner is one GraphRunner over gear 0's graph. Its checks are every gear's own: the
input check accepts exactly the gears' input signatures (any other input goes through the gear
`select_gear` picks, whose own checks convert or refuse it), and the subgraph's results are
checked against the tensors of the gear the inputs belong to (`GearResults`). Its subgraph
runner uses onnxruntime only (kernels="onnxruntime"): a run onnxruntime fails raises instead
of re-planning on numpy kernels for gear 0's shapes, and the GearRunner then runs the gears on
their own runners, which may fall back per gear.
"""
from __future__ import annotations

import itertools
import operator
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from xgraph.errors import KernelError, RunnerError
from xgraph.ir.files import write_text
from xgraph.ir.gears import describe_gears
from xgraph.runners.device_values import DeviceMemory, DeviceValue
from xgraph.runners.io_checks import DTYPE_SHAPE, ONLY_ARRAYS, check_inputs
from xgraph.runners.lifetime import close_all
from xgraph.runners.ort_session import sessions_take_turns
from xgraph.runners.result_check import ResultCheck

if TYPE_CHECKING:
    from xgraph.ir import Graph, Tensor
    from xgraph.ir.gears import Gear
    from xgraph.kernels.resolution import KernelChoice
    from xgraph.runners.graph_runner import GraphRunner
    from xgraph.runners.runner import Runner


#: Job ids remembered for wait/get_error/get_outputs (oldest forgotten first, as the graph runner's job table does).
MAX_TRACKED_JOBS = 10_000


def _shape_of(value: Any) -> tuple[int, ...] | None:
    """The shape an input value has (arrays, nested lists, scalars), None when it has none (a ragged sequence)."""
    if isinstance(value, (np.ndarray, DeviceValue)):
        return value.shape
    try:
        return tuple(np.shape(value))
    except (ValueError, TypeError):
        return None


_SHAPE = operator.attrgetter("shape")


class GearRunner:
    """Runs a graph with gears: `run`/`execute_async` pick the gear equal to the inputs' shapes."""

    def __init__(self, graph: "Graph", mode: str = "run", kernels: str = "auto", *,
                 runner_class: "type[GraphRunner]", **options: Any) -> None:
        """Create a `runner_class` (GraphRunner) for every gear, with the same mode, kernels and options."""
        self.graph, self.mode, self.kernels = graph, mode, kernels
        self.gears: list[Gear] = graph.get_gears()
        if not self.gears:
            raise RunnerError(f"graph {graph.name!r} has no gears; use xgraph.create_graph_runner(graph)")
        self._owner = f"graph runner for {graph.name!r}"
        self.gear_runners: "dict[str, GraphRunner]" = {}
        #: runs every gear's `run` when the gears are one onnxruntime session (`serve_gears`)
        self.shared: "GraphRunner | None" = None
        self._retired: "GraphRunner | None" = None  # a shared runner given up on: its stats still count
        #: one memory for every gear's DeviceValues: a decoding loop's cache goes from gear to gear
        self.device_memory = DeviceMemory(self._owner)
        options = {**options, "device_memory": self.device_memory}
        try:
            whole = [g.graph.get_root_subgraph() for g in self.gears]
            whole = [r.toposort_child_subgraph()[0] if r.get_children_num() == 1 else None for r in whole]
            with sessions_take_turns(whole):  # gears that are one graph but for shapes share a session
                for gear in self.gears:  # one pool of job slots: max_jobs_in_flight holds for the whole model
                    runner = self.gear_runners[gear.name] = runner_class(gear.graph, mode, kernels, **options)
                    options = {**options, "job_slots": runner.job_slots}
                if getattr(runner_class, "shares_gears", False) and len(self.gears) > 1:
                    self.shared = self._shared_runner(runner_class, options)
        except BaseException:
            for runner in (*self.gear_runners.values(), *([self.shared] if self.shared else [])):
                runner.close()
            raise
        first = self.gear_runners[self.gears[0].name]
        self.registries, self.max_jobs_in_flight = first.registries, first.max_jobs_in_flight
        self._names = [t.name for t in first.get_input_tensors()]
        #: (shape of each input, in input order) -> gear: one dict lookup per job
        self._by_shapes = {tuple(tuple(g.input_shapes[n]) for n in self._names): g for g in self.gears}
        self._jobs: "dict[int, tuple[GraphRunner, int]]" = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def _shared_runner(self, runner_class: "type[GraphRunner]", options: dict) -> "GraphRunner | None":
        """One runner for every gear's `run` when each gear runner is one subgraph runner on one shared
        onnxruntime session (`one_session_runners`); None otherwise."""
        device_runners = one_session_runners([self.gear_runners[g.name] for g in self.gears])
        if device_runners is None:
            return None
        shared = runner_class(self.gears[0].graph, "run", "onnxruntime", **options)
        try:
            return serve_gears(shared, self.gears, device_runners, self._route)
        except BaseException:
            shared.close()
            raise

    def _route(self, inputs: "Sequence | dict") -> list[np.ndarray]:
        """Inputs the shared runner does not take as they are: checked (and converted) by the gear
        `select_gear` picks, as that gear's own runner checks them."""
        runner = self.runner_for(inputs)
        return check_inputs(self._owner, runner.get_input_tensors(), inputs)

    # -- which gear -----------------------------------------------------------------------------
    def gear_list(self) -> str:
        """The gears as errors list them: "gear0 (x:1,8), gear1 (x:1,16)" (`describe_gears`)."""
        return describe_gears(self.gears)

    def select_gear(self, inputs: "Sequence | dict") -> "Gear":
        """The gear whose input shapes equal `inputs`'; RunnerError listing the gears when none does."""
        if type(inputs) is dict and len(inputs) == len(self._names):  # the decoding loop's call: arrays by name
            try:
                gear = self._by_shapes.get(tuple(map(_SHAPE, map(inputs.__getitem__, self._names))))
            except (KeyError, AttributeError):  # a name missing, a value that is no array: the checks below
                gear = None
            if gear is not None:
                return gear
        if isinstance(inputs, dict):
            values = [inputs.get(n) for n in self._names]
            if set(inputs) != set(self._names):
                check_inputs(self._owner, self.gear_runners[self.gears[0].name].get_input_tensors(), inputs)
        elif isinstance(inputs, (list, tuple)) and len(inputs) == len(self._names):
            values = list(inputs)
        else:  # the gear 0 runner's checks say what is wrong with the structure
            check_inputs(self._owner, self.gear_runners[self.gears[0].name].get_input_tensors(), inputs)
            raise RunnerError(f"{self._owner}: inputs must be a list in input order or a dict name -> array")
        shapes = {n: _shape_of(v) for n, v in zip(self._names, values)}
        gear = self._by_shapes.get(tuple(shapes.values()))
        if gear is not None:
            return gear
        shown = ", ".join(f"{n}:{'?' if s is None else ','.join(map(str, s))}" for n, s in shapes.items())
        raise RunnerError(f"{self._owner}: input shapes {shown} match no gear; the gears are: {self.gear_list()}. "
                          "Pad or cut the inputs to a gear's shapes, or compile with a gear of these shapes")

    def runner_for(self, inputs: "Sequence | dict") -> "GraphRunner":
        """The GraphRunner of the gear `select_gear` picks."""
        return self.gear_runners[self.select_gear(inputs).name]

    # -- tensors --------------------------------------------------------------------------------
    def get_input_tensors(self) -> "list[Tensor]":
        """Gear 0's graph inputs (every gear has these names, in this order; shapes per gear)."""
        return self.gear_runners[self.gears[0].name].get_input_tensors()

    def get_output_tensors(self) -> "list[Tensor]":
        """Gear 0's graph outputs (every gear has these names, in this order)."""
        return self.gear_runners[self.gears[0].name].get_output_tensors()

    @property
    def runners(self) -> dict[str, Any]:
        """Every gear's device runners, keyed "<gear>/<subgraph>" (the shared runner's: "shared/<subgraph>")."""
        found = {f"{gear}/{name}": r for gear, gr in self.gear_runners.items() for name, r in gr.runners.items()}
        if self.shared is not None:
            found.update({f"shared/{name}": r for name, r in self.shared.runners.items()})
        return found

    def kernel_choices(self) -> "dict[str, KernelChoice]":
        """Gear 0's op name -> what runs it (each gear's own: `gear_runners[name].kernel_choices()`)."""
        return self.gear_runners[self.gears[0].name].kernel_choices()

    # -- jobs -----------------------------------------------------------------------------------
    def execute_async(self, inputs: "Sequence | dict", outputs: Sequence[np.ndarray] | None = None,
                      keep_on_device: "Sequence[str] | None" = None) -> tuple[int, int]:
        """Start a job on the gear matching the inputs; returns (job_id, 0) at once (see GraphRunner.execute_async)."""
        runner = self.runner_for(inputs)
        inner, status = runner.execute_async(inputs, outputs, keep_on_device)
        with self._lock:
            job_id = next(self._ids)
            self._jobs[job_id] = (runner, inner)
            if len(self._jobs) > MAX_TRACKED_JOBS:
                del self._jobs[next(iter(self._jobs))]
        return job_id, status

    def _job(self, job: "tuple[int, int] | int") -> "tuple[GraphRunner, int]":
        job_id = job[0] if isinstance(job, tuple) else job
        with self._lock:
            found = self._jobs.get(job_id)
        if found is None:
            raise RunnerError(f"{self._owner}: unknown job {job_id!r}")
        return found

    def wait(self, job: "tuple[int, int] | int", timeout: float | None = None) -> int:
        """Block until the job is done (RunnerError after `timeout` s); 0 = ok, non-zero = failed."""
        runner, inner = self._job(job)
        return runner.wait(inner, timeout)

    def get_error(self, job: "tuple[int, int] | int") -> BaseException | None:
        """Why a job failed, timed out or was cancelled (None while pending or after success)."""
        runner, inner = self._job(job)
        return runner.get_error(inner)

    def get_outputs(self, job: "tuple[int, int] | int") -> list[np.ndarray] | None:
        """The results of a finished job submitted without preallocated outputs, handed over once."""
        runner, inner = self._job(job)
        results = runner.get_outputs(inner)
        if results is not None:
            with self._lock:
                self._jobs.pop(job[0] if isinstance(job, tuple) else job, None)
        return results

    def run(self, feeds: "dict[str, np.ndarray] | Sequence", keep_on_device: "Sequence[str] | None" = None
            ) -> list[np.ndarray]:
        """Run once on the matching gear and return the outputs in graph output order (`keep_on_device`:
        outputs returned as DeviceValues, valid in every gear, as in GraphRunner.run).

        With a shared runner (gears that are one session) every gear runs there; when onnxruntime
        fails a run there, the gears run on their own runners from then on (which may fall back
        to xgraph's kernels per gear), this run included."""
        shared = self.shared
        if shared is not None:
            try:
                return shared.run(feeds, keep_on_device)
            except KernelError:
                self._retire(shared)
            except RunnerError:
                if self.shared is shared:
                    raise  # refused inputs or results: what the gear's own runner would say
                # another run's onnxruntime failure retired the shared runner meanwhile: run on the gear's own
        return self.runner_for(feeds).run(feeds, keep_on_device)

    def _retire(self, shared: "GraphRunner") -> None:
        """The gears run on their own runners from now on; the shared runner is closed, its stats kept."""
        with self._lock:
            if self.shared is not shared:
                return
            self.shared, self._retired = None, shared
        shared.close()

    # -- stats and profiling --------------------------------------------------------------------
    def get_stats(self) -> dict[str, Any]:
        """Jobs and copies summed over the gears (and the shared runner), each device runner's stats,
        each gear's own runner's stats under "gears" and the shared runner's under "shared"."""
        per_gear = {name: r.get_stats() for name, r in self.gear_runners.items()}
        shared = self.shared or self._retired
        every = {**per_gear, **({"shared": shared.get_stats()} if shared is not None else {})}
        jobs: dict[str, int] = {}
        copies = {"count": 0, "bytes": 0, "seconds": 0.0, "saved": 0, "saved_bytes": 0}
        subgraphs: dict[str, Any] = {}
        for name, stats in every.items():
            for k, v in stats["jobs"].items():
                jobs[k] = jobs.get(k, 0) + v
            for k in copies:
                copies[k] += stats["copies"][k]
            subgraphs.update({f"{name}/{sg}": s for sg, s in stats["subgraphs"].items()})
        result = {"jobs": jobs, "copies": copies, "subgraphs": subgraphs, "gears": per_gear}
        if shared is not None:
            result["shared"] = every["shared"]
        return result

    def export_chrome_trace(self, path: "str | Path") -> None:
        """The recorded spans of every gear as one Chrome trace (one process per gear)."""
        import json
        events: list[dict[str, Any]] = []
        for pid, (name, runner) in enumerate(self.gear_runners.items(), start=1):
            for event in runner.trace_events():
                events.append({**event, "pid": pid, **({"args": {"name": f"xgraph {self.graph.name} {name}"}}
                                                       if event.get("name") == "process_name" else {})})
        write_text(path, json.dumps({"traceEvents": events, "displayTimeUnit": "ms"}), "trace")

    # -- lifetime -------------------------------------------------------------------------------
    def close(self, timeout: float = 5.0) -> None:
        """Close every gear's runner and the shared one (jobs in flight are cancelled), within `timeout`
        seconds in all (a stuck kernel in every gear does not make it a timeout per gear)."""
        shared = [self.shared] if self.shared is not None else []
        self.device_memory.close()
        close_all([*self.gear_runners.values(), *shared], deadline=time.perf_counter() + timeout)

    def __enter__(self) -> "GearRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()



# -- one runner for every gear of one onnxruntime session ------------------------------------------

def _signature(tensors) -> tuple:
    return tuple((t.dtype, tuple(t.shape)) for t in tensors)


def one_session_runners(runners: "Sequence[GraphRunner]") -> "list[Runner] | None":
    """Each gear runner's one subgraph runner when every gear is one onnxruntime session but for
    shapes (same runner class, one shared session, same input and output names); else None."""
    found = []
    for runner in runners:
        if runner.mode != "run" or runner.profile or len(runner.runners) != 1:
            return None
        (device_runner,) = runner.runners.values()
        executor = getattr(device_runner, "_executor", None)
        if executor is None or executor.backend != "onnxruntime":
            return None
        found.append(device_runner)
    first = found[0]
    names = ([t.name for t in first.get_input_tensors()], [t.name for t in first.get_output_tensors()])
    session = first._executor._backend._session
    if all(type(r) is type(first) and r._executor._backend._session is session
           and ([t.name for t in r.get_input_tensors()], [t.name for t in r.get_output_tensors()]) == names
           for r in found):
        return found
    return None


class GearInputs:
    """The shared runner's input check: a dict (or list) of arrays whose dtypes and shapes are one
    gear's passes with one set lookup; anything else is `route`d to that gear's own check."""

    __slots__ = ("names", "by_keys", "accepted", "route")

    def __init__(self, names: Sequence[str], signatures: "Sequence[tuple]",
                 route: "Callable[[Sequence | dict], list[np.ndarray]]") -> None:
        self.names = tuple(names)
        self.by_keys = frozenset(self.names)
        self.accepted = frozenset(signatures)
        self.route = route

    def __call__(self, inputs: "Sequence | dict") -> list[np.ndarray]:
        kind = type(inputs)
        if kind is dict and inputs.keys() == self.by_keys:
            values = list(map(inputs.__getitem__, self.names))
        elif (kind is list or kind is tuple) and len(inputs) == len(self.names):
            values = list(inputs)
        else:
            return self.route(inputs)
        if {*map(type, values)} == ONLY_ARRAYS and tuple(map(DTYPE_SHAPE, values)) in self.accepted:
            return values
        return self.route(inputs)


class GearResults:
    """The shared subgraph runner's result check: the check of the gear whose inputs the run has
    (each gear's own `ResultCheck`, static, so one comparison of lists).

    The gear is found by the shape of one input whose shape differs from gear to gear (`at`: a
    past key of a decoder), when there is one; by the whole input signature otherwise. The shared
    runner's inputs have passed `GearInputs`, so they are exactly one gear's."""

    __slots__ = ("at", "by_key", "exact", "fallback", "size")

    def __init__(self, by_inputs: "dict[tuple, ResultCheck]", fallback: ResultCheck) -> None:
        self.fallback, self.size = fallback, fallback.size
        signatures = list(by_inputs)
        width = len(signatures[0]) if signatures else 0
        #: an input whose shape alone tells the gears apart, else None (the whole signature)
        self.at = next((i for i in range(width) if len({sig[i][1] for sig in signatures}) == len(signatures)), None)
        #: key (that input's shape, or the whole signature) -> the gear's check
        self.by_key = {self._key_of(sig): check for sig, check in by_inputs.items()}
        #: key -> the [(dtype, shape), ...] the gear's outputs have (its check's own list)
        self.exact = {key: check.exact for key, check in self.by_key.items() if check.exact is not None}

    def _key_of(self, signature: tuple) -> tuple:
        return signature if self.at is None else signature[self.at][1]

    def __call__(self, inputs: Sequence, results: Sequence) -> None:
        at = self.at
        if at is not None and len(inputs) > at and type(inputs[at]) is np.ndarray:
            key = inputs[at].shape
        elif at is None and {*map(type, inputs)} <= ONLY_ARRAYS:
            key = tuple(map(DTYPE_SHAPE, inputs))
        else:
            key = None
        if {*map(type, results)} == ONLY_ARRAYS and list(map(DTYPE_SHAPE, results)) == self.exact.get(key):
            return  # the common case, as the gear's ResultCheck decides it
        (self.by_key.get(key) or self.fallback)(inputs, results)


def serve_gears(runner: "GraphRunner", gears: "Sequence[Gear]", gear_runners: "Sequence[Runner]",
                route: "Callable[[Sequence | dict], list[np.ndarray]]") -> "GraphRunner":
    """`runner` (a GraphRunner over gear 0's graph, kernels="onnxruntime", made inside the gears'
    `sessions_take_turns()` block so that its subgraph runner has the session the gears share),
    made to run the jobs of every gear: its input check takes each gear's signature (`route` checks
    anything else: the GearRunner's gear selection and that gear's input check), and its subgraph's
    results are checked against the gear the inputs belong to (`gear_runners`: each gear's one
    subgraph runner, `one_session_runners`)."""
    names = [t.name for t in runner.get_input_tensors()]
    runner._check_inputs = GearInputs(  # type: ignore[assignment]
        names, [_signature(g.graph.get_input_tensors()) for g in gears], route)
    (device_runner,) = runner.runners.values()
    checks = {}
    for own in gear_runners:
        inputs, outputs = own.get_input_tensors(), own.get_output_tensors()
        checks[_signature(inputs)] = ResultCheck.of(f"{own._owner()}, runner {type(own).__name__}", outputs, inputs)
    device_runner._rt.result_check = GearResults(checks, next(iter(checks.values())))  # type: ignore[assignment]
    return runner


__all__ = ["GearInputs", "GearResults", "GearRunner", "one_session_runners", "serve_gears"]
