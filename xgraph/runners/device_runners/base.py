"""What the built-in device runners share: the three modes on top of the subgraph executor.

- "run": the fastest correct path on this host (numpy kernels, or one onnxruntime session
  for a standard-ONNX subgraph, as `kernels` says);
- "sim": device-faithful numerics (fp16 storage on devices with `fp16_in_sim` when the
  graph's precision_mode asks for it) plus a roofline estimate of device time;
- "ref": the ONNX reference evaluator on the whole subgraph model (golden).

Each runner holds a frozen execution plan (`plan`: what runs every op and why, the steps,
the reused buffers) made once at creation from the subgraph, its device and the session's
registries (`xgraph.runners.executor.make_plan`).
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from xgraph.errors import RunnerError
from xgraph.devices.cost import DeviceTimeEstimate, Roofline
from xgraph.modes import KERNEL_CHOICES, MODES, NUMPY, REF, SIM
from xgraph.registries import resolve
from xgraph.runners.executor import SubgraphExecutor
from xgraph.runners.fusion import fusion_enabled
from xgraph.runners.plan import ExecutionPlan
from xgraph.runners.runner import Runner, describe

if TYPE_CHECKING:
    from xgraph.ir import Subgraph
    from xgraph.registries import Registries

#: precision_mode values (ATC's) under which AI Core computes (some) float32 work in float16.
FP16_PRECISION_MODES = frozenset({"force_fp16", "allow_fp32_to_fp16"})


def device_cost(device: str, registries: "Registries | None" = None) -> Any:
    """The cost profile of a registered device, or None when the device table does not know it."""
    spec = resolve(registries).devices.get(device)
    return None if spec is None else spec.cost


def precision_mode(subgraph: "Subgraph") -> str:
    """The graph's precision_mode attr (ATC's default when unset)."""
    graph = subgraph.graph
    return str(graph.get_attr("precision_mode")) if graph.has_attr("precision_mode") else "must_keep_origin_dtype"


class DeviceRunner(Runner):
    """A runner for one built-in device; subclasses set `device` and `fp16_in_sim`."""

    device: ClassVar[str] = "CPU"
    fp16_in_sim: ClassVar[bool] = False
    any_thread = True  # numpy kernels, onnxruntime sessions and the reference evaluator run on any thread
    reentrant = True  # and several at once: each numpy run takes its own buffer frame

    def __init__(self, subgraph: "Subgraph", mode: str = "run", kernels: str = "auto", *,
                 registries: "Registries | None" = None) -> None:
        """Plan the subgraph for `mode` once (kernels, weights, buffers)."""
        super().__init__(subgraph, mode)
        if mode not in MODES:
            raise RunnerError(f"{type(self).__name__} for {describe(subgraph)}: unknown mode {mode!r}; "
                              f"modes are {', '.join(MODES)}")
        if kernels not in KERNEL_CHOICES:
            raise RunnerError(f"{type(self).__name__} for {describe(subgraph)}: kernels={kernels!r} is not one "
                              f"of {', '.join(KERNEL_CHOICES)}")
        device = str(subgraph.get_attr("device")) if subgraph.has_attr("device") else self.device
        self.kernels = kernels
        self.last_estimate: DeviceTimeEstimate | None = None
        self._roofline: Roofline | None = None
        self._estimates: dict[tuple, DeviceTimeEstimate] = {}
        self._estimated_s = 0.0
        self._estimate_lock = threading.Lock()  # several queues may run this subgraph at once
        registries = resolve(registries)
        if mode == REF:
            self._executor = SubgraphExecutor(subgraph, device, reference=True, registries=registries)
        elif mode == SIM:
            # force_fp16: the whole subgraph in float16; allow_fp32_to_fp16: only the ops compile marked
            precision = precision_mode(subgraph)
            fp16 = self.fp16_in_sim and precision == "force_fp16"
            fp16_ops = frozenset(op.name for op in subgraph.get_ops() if op.has_attr("precision")
                                 and op.get_attr("precision") == "float16") if self.fp16_in_sim else frozenset()
            # int8 QDQ units as the device computes them: int32 accumulation, fixed-point requantization
            self._executor = SubgraphExecutor(subgraph, device, NUMPY, np.float16 if fp16 else None, fp16_ops,
                                              registries=registries, qdq_units="device")
            cost = device_cost(device, registries)
            if cost is not None:
                self._roofline = Roofline(device, cost, "float16" if fp16 else "float32")
        else:
            self._executor = SubgraphExecutor(subgraph, device, kernels, fuse=fusion_enabled(), registries=registries)
        if self._roofline is None and type(self).execute is DeviceRunner.execute:
            # nothing to estimate: `execute` is the executor's run itself (a decoding step calls it per token)
            self.execute = self._executor.run  # type: ignore[method-assign]

    @property
    def plan(self) -> ExecutionPlan:
        """The frozen execution plan: backend, per-op kernel choices, steps, reused buffers."""
        return self._executor.plan

    @property
    def backend(self) -> str:
        """What actually runs the ops: "numpy", "onnxruntime" or "reference"."""
        return self._executor.backend

    @property
    def backend_reason(self) -> str:
        """Why onnxruntime does not run the subgraph although `kernels` allowed it ('' otherwise)."""
        return self._executor.backend_reason

    @property
    def kernel_sources(self) -> dict[str, str]:
        """op name -> where its kernel came from ("numpy:AICORE", "reference", "onnxruntime", ...)."""
        return self._executor.kernel_sources

    @property
    def fused_into(self) -> dict[str, str]:
        """op name -> the op whose fused step computes it, for ops the run mode fused (docs/runtime.md)."""
        return self._executor.fused_into

    def execute(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run the planned subgraph once; in "sim" mode also update `last_estimate`."""
        if self._roofline is None:
            return self._executor.run(inputs)
        key = tuple(x.shape for x in inputs)
        estimate = self._estimates.get(key)
        if estimate is not None:
            results = self._executor.run(inputs)
        else:
            recorder = self._roofline.estimator()
            results = self._executor.run(inputs, on_step=recorder)
            estimate = self._estimates[key] = recorder.estimate
        self.last_estimate = estimate
        with self._estimate_lock:
            self._estimated_s += estimate.seconds
        return results

    def trace_steps(self, inputs: list[np.ndarray]) -> "list[tuple[str, dict[str, Any]]] | None":
        """Run once and return, per planned step in order, how the step is named and its outputs by tensor
        name (copies: the plan reuses buffers); None when the backend runs the subgraph whole (onnxruntime,
        the reference evaluator). `xgraph.bisect` names the first op that differs with it."""
        if self._executor.backend != "numpy":
            return None
        found: list[tuple[str, dict[str, Any]]] = []

        def record(step, args, results) -> None:
            op = step.fused[-1] if step.fused else step.op
            names = [t.name for t in op.get_output_tensors()]
            found.append((step.describe(), {n: np.array(v, copy=True) for n, v in zip(names, results)
                                            if isinstance(v, np.ndarray)}))
        self._executor.run(inputs, on_step=record)
        return found

    def get_stats(self) -> dict[str, Any]:
        """The base counters, the backend's (e.g. reused buffer bytes) and, in "sim" mode, estimated_device_s."""
        stats = super().get_stats()
        stats.update(self._executor.stats())
        if self._executor.backend_reason:
            stats["backend_reason"] = self._executor.backend_reason
        if self._roofline is not None:
            stats["estimated_device_s"] = self._estimated_s
        return stats

    def release(self) -> None:
        """Free the executor's session and plan."""
        self._executor.release()
