"""RayGraphRunner: the graph runner with each device's subgraphs in a Ray actor, placed by Ray resources.

    runner = xgraph.ray.create_graph_runner("net.xmodel", resources={"AICORE": {"AICORE": 1}})
    (logits,) = runner.run({"input": x})

It is the local GraphRunner (same jobs, waits, timeouts, stats, trace and close) with the
scheduler swapped for RayScheduler: the plan of subgraphs and host<->device copies is the
same, cut into stages, one actor call each. Only the `.xmodel` bytes go to the actors, once,
through the object store; jobs carry tensors only.

Each actor runs the subgraphs of one device (`group_by="device"`, the default: a device is one
stream, as locally) or of one subgraph (`group_by="subgraph"`). `resources` maps a device or
subgraph name to its Ray resource demand; without one an actor goes on any node with a CPU
and reserves nothing, so the runner works on a laptop as it does on a cluster.
"""
from __future__ import annotations

import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from xgraph.errors import RunnerError
from xgraph.ray.actors import ActorSet, ActorSpec
from xgraph.ray.scheduler import RayScheduler
from xgraph.ray.session import check_demand, connect, require_ray
from xgraph.ray.stages import cut_stages
from xgraph.runners.graph_runner import GraphRunner, build_plan, device_subgraphs

if TYPE_CHECKING:
    from xgraph.ir import Graph, Subgraph, Tensor
    from xgraph.runners.scheduler import TaskPlan

GROUP_BY = ("device", "subgraph")


class RemoteRunner:
    """Stands in, on the driver, for a subgraph runner living in a Ray actor: its tensors and its stats."""

    any_thread = False

    def __init__(self, subgraph: "Subgraph") -> None:
        """Start empty stats for `subgraph`; the scheduler fills them from the actors' receipts."""
        self.subgraph = subgraph
        self._lock = threading.Lock()
        self._stats = {"runs": 0, "failures": 0, "total_s": 0.0, "last_s": 0.0, "bytes_in": 0, "bytes_out": 0}

    def get_input_tensors(self) -> "list[Tensor]":
        """The subgraph's inputs, in the order its actor's runner takes them."""
        return self.subgraph.get_input_tensors()

    def get_output_tensors(self) -> "list[Tensor]":
        """The subgraph's outputs, in the order its actor's runner returns them."""
        return self.subgraph.get_output_tensors()

    def timed_execute(self, inputs: list, job_id: int | None = None, *, exclusive: bool = True) -> list:
        """Never called: the scheduler sends the subgraph's tasks to its actor, whose runner executes them."""
        raise RunnerError(f"subgraph {self.subgraph.name!r} runs in its Ray actor, not on the driver")

    def record(self, seconds: float | None, bytes_in: int, bytes_out: int) -> None:
        """Count one run that took `seconds` in the actor (None: a failed run)."""
        with self._lock:
            s = self._stats
            if seconds is None:
                s["failures"] += 1
                return
            s["runs"] += 1
            s["total_s"] += seconds
            s["last_s"] = seconds
            s["bytes_in"] += bytes_in
            s["bytes_out"] += bytes_out

    def get_stats(self) -> dict[str, Any]:
        """Runs, failures, seconds and bytes, as the local runner's `get_stats()` has them."""
        with self._lock:
            return dict(self._stats)

    def close(self) -> None:
        """Nothing to free here: the actor holds the real runner, and the scheduler kills it."""


def model_bytes(graph: "Graph | str | Path | bytes") -> bytes:
    """The .xmodel bytes the actors load: a file's content, or the graph serialized once."""
    from xgraph.ir import Graph
    if isinstance(graph, bytes):
        return graph
    if isinstance(graph, (str, Path)):
        from xgraph.ir.onnx.side_file import side_files
        if side_files(graph):  # weights in a side file
            from xgraph.ir.graph import load
            graph = load(graph)
    if isinstance(graph, (str, Path)):
        try:
            return Path(graph).read_bytes()
        except OSError as e:
            raise RunnerError(f"cannot read the model {str(graph)!r}: {e.strerror or e}") from None
    if not isinstance(graph, Graph):
        raise RunnerError(f"the Ray graph runner needs a compiled Graph, an .xmodel path or its bytes, "
                          f"got {type(graph).__name__}")
    with tempfile.TemporaryDirectory(prefix="xgraph-ray-") as folder:
        path = Path(folder) / f"{graph.name or 'model'}.xmodel"
        graph.serialize(path, external_data_threshold=1 << 62)  # actors get bytes: weights inline (< 2 GiB)
        return path.read_bytes()


class RayGraphRunner(GraphRunner):
    """A GraphRunner whose device subgraphs run in Ray actors; `get_stats()["ray"]` says where."""

    shares_gears = False  # each gear's actors run its jobs

    def __init__(self, graph: "Graph | str | Path | bytes", mode: str = "run", kernels: str = "auto", *,
                 group_by: str = "device", resources: Mapping[str, Mapping[str, float]] | None = None,
                 address: str | None = None, start_timeout: float = 120.0, runtime_env: dict | None = None,
                 worker_setup: Callable[[], Any] | None = None, max_jobs_in_flight: int = 8,
                 **options: Any) -> None:
        """Join (or start) Ray, start the actors and wait until each reports its node."""
        if group_by not in GROUP_BY:
            raise RunnerError(f"group_by must be one of {', '.join(GROUP_BY)}, got {group_by!r}")
        if not isinstance(start_timeout, (int, float)) or start_timeout <= 0:
            raise RunnerError(f"start_timeout must be > 0 seconds, got {start_timeout!r}")
        require_ray()
        import xgraph
        self._model = model_bytes(graph)
        if not isinstance(graph, xgraph.Graph):
            graph = xgraph.load(self._model)
        from xgraph.runners.runner import KERNEL_CHOICES, MODES
        if mode not in MODES or kernels not in KERNEL_CHOICES:
            raise RunnerError(f"mode must be one of {', '.join(MODES)} and kernels one of "
                              f"{', '.join(KERNEL_CHOICES)}; got mode={mode!r}, kernels={kernels!r}")
        connect(address)
        self._ray_owner = f"Ray graph runner for {graph.name!r}"
        self._group_by, self._resources = group_by, dict(resources or {})
        self._start_timeout, self._runtime_env, self._setup = float(start_timeout), runtime_env, worker_setup
        super().__init__(graph, mode, kernels, max_jobs_in_flight=max_jobs_in_flight, **options)

    def _create_runners(self, graph: "Graph", mode: str, kernels: str) -> "tuple[dict[str, Any], TaskPlan]":
        """Stand-ins for the subgraph runners (the real ones start in the actors) and the usual plan."""
        proxies = {sg: RemoteRunner(sg) for sg in device_subgraphs(graph)}
        return {sg.name: p for sg, p in proxies.items()}, build_plan(graph, proxies)

    def _specs(self) -> list[ActorSpec]:
        """One actor per device (or subgraph), with its resource demand checked."""
        subgraphs = [r.subgraph for r in self.runners.values()]
        devices = {str(sg.get_attr("device")) for sg in subgraphs}
        known = devices | {sg.name for sg in subgraphs}
        unknown = sorted(set(self._resources) - known)
        if unknown:
            raise RunnerError(f"{self._ray_owner}: resources name {unknown[0]!r}, which is neither a device nor a "
                              f"subgraph of the graph; devices: {', '.join(sorted(devices))}")
        specs: dict[str, ActorSpec] = {}
        for sg in subgraphs:
            device = str(sg.get_attr("device"))
            key = device if self._group_by == "device" else sg.name
            demand = self._resources.get(sg.name, self._resources.get(device, {})) \
                if self._group_by == "subgraph" else self._resources.get(device, {})
            if key not in specs:
                specs[key] = ActorSpec(key, device, [], check_demand(demand, f"{self._ray_owner}, {key}"))
            specs[key].subgraphs.append(sg.name)
        return list(specs.values())

    def _create_scheduler(self) -> RayScheduler:
        """Cut the plan into stages, start an actor per device (or subgraph), and schedule over them."""
        ray = require_ray()
        specs = self._specs()
        stages = cut_stages(self.plan, {name: spec.key for spec in specs for name in spec.subgraphs})
        for spec in specs:
            spec.stages = [s for s in stages if s.actor == spec.key]
        scheduler: list[RayScheduler] = []
        actors = ActorSet(specs, ray.put(self._model), self.mode, self.kernels, owner=self._ray_owner,
                          start_timeout=self._start_timeout, runtime_env=self._runtime_env, setup=self._setup,
                          post=lambda event: scheduler[0].post(event))
        scheduler.append(RayScheduler(self.plan, stages, actors, self._observe, self._record,
                                      name=f"xgraph-{self.graph.name}"))
        try:
            actors.start()
        except BaseException:
            scheduler[0].close()
            raise
        return scheduler[0]

    def _record(self, subgraph: str, seconds: float | None, bytes_in: int, bytes_out: int) -> None:
        self.runners[subgraph].record(seconds, bytes_in, bytes_out)

    def get_stats(self) -> dict[str, Any]:
        """The graph runner's stats plus "ray": actors (node, pid, state, restarts), calls, bytes moved."""
        stats = super().get_stats()
        stats["ray"] = self._scheduler.stats()
        return stats

    def __enter__(self) -> "RayGraphRunner":
        return self


def create_graph_runner(graph: "Graph | str | Path | bytes", mode: str = "run", kernels: str = "auto",
                        **options: Any) -> RayGraphRunner:
    """A graph runner with each device's subgraphs in a Ray actor (options: see RayGraphRunner).

    A model compiled with gears gets a `GearRunner` over one RayGraphRunner per gear (each gear
    its own actors, as each gear has its own device runners locally), picking the gear by the
    inputs' shapes as the local runner does."""
    import xgraph
    if not isinstance(graph, xgraph.Graph) and isinstance(graph, (str, Path, bytes)):
        data = model_bytes(graph)  # read (or, with a side file, loaded and inlined) once
        loaded = xgraph.load(data)
        graph = loaded if loaded.get_gears() else data
    if isinstance(graph, xgraph.Graph) and graph.get_gears():
        from xgraph.runners.gears import GearRunner
        require_ray()
        return GearRunner(graph, mode, kernels, runner_class=RayGraphRunner, **options)  # type: ignore[return-value]
    return RayGraphRunner(graph, mode, kernels, **options)
