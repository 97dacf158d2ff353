"""The subgraph executor every device runner holds: a frozen execution plan and the backend running it.

    executor = SubgraphExecutor(subgraph, "AICORE", kernels="numpy", fuse=True)
    executor.plan.kernels["conv"].source     # "numpy": what runs op "conv", and why
    outputs = executor.run(inputs)

`make_plan` is the pure part: `xgraph.runners.plan.plan_subgraph` from (subgraph, device, the
registries' kernel table, options), then the passes the options ask for (float16 numerics,
fusion, liveness). `SubgraphExecutor` adds the backend (`xgraph.runners.backends`). With
``kernels="auto"`` a standard-ONNX subgraph goes to onnxruntime; when onnxruntime cannot load
it, or holds an op onnxruntime is known to compute differently from the ONNX spec
(`xgraph.runners.ort_deviations`), the subgraph is planned for xgraph's kernels instead,
decided here, at creation, with the reason kept in `plan.backend_reason`. Should a session
still fail on a run, the executor re-plans for xgraph's kernels then, once, keeps that
reason, and runs the job again: "auto" never loses a case xgraph's kernels pass.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from xgraph.errors import KernelError, RunnerError
from xgraph.ir.onnx.mapped import FileWatch, mapped_files
from xgraph.modes import AUTO, NUMPY, ONNXRUNTIME
from xgraph.registries import resolve
from xgraph.runners.backends import Backend, make_backend
from xgraph.runners.int8_fusion import fuse_qdq
from xgraph.runners.fusion import fuse
from xgraph.runners.liveness import assign_liveness
from xgraph.runners.plan import ExecutionPlan, PlanOptions, Step, plan_subgraph
from xgraph.runners.precision import keep_in_float16, round_to_float16

if TYPE_CHECKING:
    from xgraph.ir import Subgraph
    from xgraph.kernels import KernelRegistry
    from xgraph.registries import Registries


def kernel_registry(registries: "Registries | None" = None) -> "KernelRegistry":
    """The kernel table of `registries` (the default registries when None)."""
    return resolve(registries).kernels


def make_plan(subgraph: "Subgraph", device: str, kernels: "KernelRegistry", options: PlanOptions = PlanOptions(),
              *, not_onnxruntime: str = "") -> ExecutionPlan:
    """The finished plan: `plan_subgraph`, then float16 numerics, fusion and liveness as the options ask (pure)."""
    plan = plan_subgraph(subgraph, device, kernels, options, not_onnxruntime=not_onnxruntime)
    if plan.backend != "numpy":
        return plan
    if options.storage_dtype is not None:
        plan = keep_in_float16(plan, options.storage_dtype)
    elif options.fp16_ops:
        plan = round_to_float16(plan, options.fp16_ops)
    else:
        if options.qdq_units:  # integer units first: they read the DQs the float fusion would not
            plan = fuse_qdq(plan, device_numerics=options.qdq_units == "device")
        if options.fuse:
            plan = fuse(plan)
    return assign_liveness(plan)


def plan_and_backend(subgraph: "Subgraph", device: str, registries: "Registries",
                     options: PlanOptions) -> tuple[ExecutionPlan, Backend]:
    """The plan and its backend; under kernels="auto" an onnxruntime that cannot load the subgraph falls back."""
    kernels = registries.kernels
    plan = make_plan(subgraph, device, kernels, options)
    try:
        return plan, make_backend(plan, kernels)
    except Exception as e:  # onnxruntime raises its own exception types for unsupported models
        if plan.backend != "onnxruntime":
            raise
        if options.kernels == ONNXRUNTIME:
            raise RunnerError(f"{plan.where}: onnxruntime cannot load this subgraph: {e}") from e
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        plan = make_plan(subgraph, device, kernels, options, not_onnxruntime=f"onnxruntime cannot load it: {first}")
        return plan, make_backend(plan, kernels)


class SubgraphExecutor:
    """Runs one subgraph: its frozen plan (`plan`) on the backend the plan names.

    `storage_dtype=np.float16` keeps every float32 value in float16 (force_fp16), `fp16_ops`
    rounds those ops to float16 (allow_fp32_to_fp16), `fuse` turns on run-mode fusion (never
    with float16 numerics), `reference` runs the whole subgraph in the ONNX reference evaluator.
    """

    def __init__(self, subgraph: "Subgraph", device: str, kernels: str = NUMPY,
                 storage_dtype: np.dtype | None = None, fp16_ops: frozenset[str] = frozenset(),
                 fuse: bool = False, *, reference: bool = False, registries: "Registries | None" = None,
                 qdq_units: str | None = None) -> None:
        if kernels not in (AUTO, NUMPY, ONNXRUNTIME):
            raise RunnerError(f"subgraph {subgraph.name!r} on {device}: kernels={kernels!r} is not one of "
                              f"{AUTO}, {NUMPY}, {ONNXRUNTIME}")
        storage = None if storage_dtype is None else np.dtype(storage_dtype)
        fp16_ops = frozenset(fp16_ops)
        options = PlanOptions(kernels=kernels, storage_dtype=storage, fp16_ops=fp16_ops,
                              fuse=fuse and storage is None and not fp16_ops, reference=reference,
                              qdq_units=("exact" if fuse else "") if qdq_units is None else qdq_units)
        self.subgraph, self.device = subgraph, device
        files = FileWatch(mapped_files(t.data for t in subgraph.get_const_tensors()))
        self._files = files if files.files else None  # none mapped: nothing to watch on each run
        self._options, self._registries = options, resolve(registries)
        self._switch = threading.Lock()
        self.plan, self._backend = plan_and_backend(subgraph, device, self._registries, options)

    @property
    def backend(self) -> str:
        """What runs the ops: "numpy", "onnxruntime" or "reference"."""
        return self.plan.backend

    @property
    def backend_reason(self) -> str:
        """Why onnxruntime does not run it, when kernels asked for it ('' otherwise)."""
        return self.plan.backend_reason

    @property
    def kernel_sources(self) -> dict[str, str]:
        """op name -> where its kernel came from ("numpy:AICORE", "reference", "onnxruntime", ...)."""
        return self.plan.kernel_sources

    @property
    def fused_into(self) -> dict[str, str]:
        """op name -> the op whose fused step computes it (ops not fused are absent)."""
        return dict(self.plan.fused_into)

    @property
    def steps(self) -> tuple[Step, ...]:
        """The plan's steps (empty for the onnxruntime and reference backends)."""
        return self.plan.steps

    def run(self, inputs: Sequence[Any], on_step: Callable | None = None) -> list[Any]:
        """Run once; `on_step(step, args, results)` is called after each step when given.

        A run whose mapped weight files were written in place since loading fails (`FileWatch`).
        """
        backend = self._backend
        try:
            results = backend.run(inputs, on_step)
        except KernelError as e:
            if backend.name != "onnxruntime" or self._options.kernels != AUTO:
                raise
            self._fall_back(backend, e)
            results = self._backend.run(inputs, on_step)
        if self._files is not None:
            self._files.check()
        return results

    def _fall_back(self, failed: Backend, error: Exception) -> None:
        """Re-plan for xgraph's kernels after onnxruntime failed a run (once; the reason is kept)."""
        with self._switch:
            if self._backend is not failed:
                return  # another thread already switched
            detail = str(error).split("onnxruntime failed: ", 1)[-1].splitlines()[0]
            plan = make_plan(self.subgraph, self.device, self._registries.kernels, self._options,
                             not_onnxruntime=f"onnxruntime failed on a run: {detail}")
            self.plan, self._backend = plan, make_backend(plan, self._registries.kernels)

    def stats(self) -> dict[str, Any]:
        """The backend's counters (e.g. reused buffers and their bytes)."""
        return {"backend": self.plan.backend, **self._backend.stats()}

    def release(self) -> None:
        """Free the backend's session or buffers."""
        self._backend.release()


__all__ = ["SubgraphExecutor", "kernel_registry", "make_plan", "plan_and_backend"]
