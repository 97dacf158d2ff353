"""What runs an execution plan: numpy kernels, one onnxruntime session, or the ONNX reference evaluator.

Every backend has the same small interface (`Backend`): made from a plan once, then
``run(inputs, on_step=None) -> outputs`` any number of times (inputs and outputs in the
subgraph's tensor order), ``stats()`` and ``release()``. `make_backend(plan, registries)` picks
the one the plan names.
"""
from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

import numpy as np

from xgraph.errors import KernelError, RunnerError, XGraphError
from xgraph.kernels.blas import configure_blas_once
from xgraph.kernels.parallel import intra_op_threads
from xgraph.runners.buffers import BufferFrames
from xgraph.runners.ort_session import left_out_weights
from xgraph.runners.plan import ExecutionPlan

if TYPE_CHECKING:
    from xgraph.kernels import KernelRegistry


class Backend(Protocol):
    """Runs one plan: `run` any number of times (from any thread), then `release` once."""

    name: str

    def run(self, inputs: Sequence[Any], on_step: Callable | None = None) -> list[Any]:
        """Run once; `on_step(step, args, results)` after each step where the backend has steps."""

    def stats(self) -> dict[str, Any]:
        """What the backend holds (e.g. reused buffer bytes)."""

    def release(self) -> None:
        """Free what it holds (sessions, buffers)."""


class NumpyBackend:
    """The plan's steps, one kernel call each, over a fresh value table per run."""

    name = "numpy"

    def __init__(self, plan: ExecutionPlan) -> None:
        configure_blas_once()
        intra_op_threads()  # a bad XGRAPH_INTRA_OP_THREADS fails here, when the runner is made
        self.plan = plan
        self._template = list(plan.template)
        self._frames = BufferFrames(plan.buffers)
        self._escaping = tuple(sorted(plan.escaping_buffers))

    def run(self, inputs: Sequence[Any], on_step: Callable | None = None) -> list[Any]:
        """Run once; `on_step(step, args, results)` is called after each step when given."""
        plan = self.plan
        values = self._template.copy()
        storage = plan.storage_dtype
        for slot, x in zip(plan.input_slots, inputs):
            values[slot] = x.astype(storage) if storage is not None and isinstance(x, np.ndarray) \
                and x.dtype == np.float32 else x
        frame = self._frames.take() if plan.buffers else None
        untyped = plan.untyped_slots
        step = None
        try:
            for step in plan.steps:
                args = [values[s] for s in step.inputs]
                if step.buffer is None:
                    result = step.fn(*args, **step.attrs)
                else:
                    result = step.fn(*args, into=self._frames.array(frame, step.buffer), **step.attrs)
                outs = step.outputs
                if type(result) is np.ndarray:
                    values[outs[0]] = result
                else:
                    if not isinstance(result, (tuple, list)):
                        result = (result,)
                    if len(result) < step.needed:
                        raise KernelError(f"the kernel returned {len(result)} outputs, {step.needed} are used")
                    for s, r in zip(outs, result):
                        if isinstance(r, np.ndarray) or r is None or (type(r) is list and s in untyped):
                            values[s] = r
                        else:
                            values[s] = np.asarray(r)
                if on_step is not None:
                    on_step(step, args, [values[s] for s in outs])
                for s in step.release:
                    values[s] = None
            results = [values[s] for s in plan.output_slots]
            if self._escaping:
                results = [self._out_of_buffers(r, frame) for r in results]
        except Exception as e:
            if step is None:
                raise
            detail = str(e) if isinstance(e, XGraphError) else f"{type(e).__name__}: {e}"
            raise KernelError(f"{plan.where}: {step.describe()} failed: {detail}") from e
        finally:
            del values
            if frame is not None:
                self._frames.give_back(frame)
        if storage is not None:
            results = [r if c is None else r.astype(c) for r, c in zip(results, plan.output_casts)]
        return results

    def _out_of_buffers(self, value: Any, frame: list) -> Any:
        """`value`, copied when it is (a view of) a buffer the next run will write into."""
        if isinstance(value, np.ndarray) and any(
                frame[b] is not None and np.may_share_memory(value, frame[b]) for b in self._escaping):
            return value.copy()
        return value

    def stats(self) -> dict[str, Any]:
        """Reused buffers: their count per frame, the frames made, the bytes held between runs."""
        return {"buffers": len(self.plan.buffers), "buffer_frames": self._frames.frames(),
                "buffer_bytes": self._frames.nbytes()}

    def release(self) -> None:
        """Drop the reused buffers."""
        self._frames.clear()


def _released(*_args) -> None:
    raise RunnerError("the onnxruntime session was released: the runner is closed")


class OnnxruntimeBackend:
    """The whole subgraph as one onnxruntime session (`xgraph.runners.ort_session`)."""

    name = "onnxruntime"

    def __init__(self, plan: ExecutionPlan) -> None:
        import onnxruntime as ort

        from xgraph.runners.ort_session import ort_session
        self.plan = plan
        self._session = ort_session(plan.subgraph)  # raises onnxruntime's errors: the caller decides
        self._inputs = [t.name for t in plan.subgraph.get_input_tensors()]
        self._outputs = [t.name for t in plan.subgraph.get_output_tensors()]
        # The feeds are exactly the session's inputs, numpy arrays on the CPU provider, by construction,
        # so what the Python wrapper's `run` adds each call (feed-name, OrtValue-ownership and WebGPU
        # capture checks, GPU provider fallback) cannot apply: call the bound session under it when
        # there is one (same signature). A KV-cache decoding step runs six small sessions, where those
        # checks were ~15% of the step (benchmarks/generate.py); without it, the public run is used.
        self._run = getattr(self._session, "_sess", self._session).run
        # One RunOptions for every run: given None, the binding makes a default one per call (1 us of
        # a 2-layer decoder's 44 us step); onnxruntime only reads it, from any thread
        self._run_options = ort.RunOptions()

    def run(self, inputs: Sequence[Any], on_step: Callable | None = None) -> list[Any]:
        """Run the session once (it has no steps to report to `on_step`)."""
        try:
            return self._run(self._outputs, dict(zip(self._inputs, inputs)), self._run_options)
        except Exception as e:  # onnxruntime's own error types
            raise KernelError(f"{self.plan.where}: onnxruntime failed: {e}") from e

    def stats(self) -> dict[str, Any]:
        """Nothing beyond the session."""
        return {}

    def release(self) -> None:
        """Drop the session (and the bound run method, which would keep it alive)."""
        self._session = None
        self._run = _released


class ReferenceBackend:
    """The golden path: the ONNX ReferenceEvaluator on the whole subgraph model.

    Ops of custom domains the evaluator does not know (xgraph.dvpp, plugin domains) run
    through the kernels of `kernels` (the session's table, hook kernels included) inside it.
    """

    name = "reference"

    def __init__(self, plan: ExecutionPlan, kernels: "KernelRegistry") -> None:
        from onnx.reference import ReferenceEvaluator

        from xgraph.kernels.reference import evaluator_fixes, registry_ops, weights_as_inputs
        self.plan = plan
        subgraph = plan.subgraph
        self._inputs = [t.name for t in subgraph.get_input_tensors()]
        self._outputs = [t.name for t in subgraph.get_output_tensors()]
        try:
            custom = registry_ops(((op.domain, op.type) for op in subgraph.get_ops()), kernels)
            model = subgraph.to_onnx(external_weights=True)  # weights of 4 KiB or more left out
            #: the large weights, fed on every run as the graph's own arrays (no copy in the evaluator)
            self._weights = left_out_weights(model, subgraph)
            self._evaluator = ReferenceEvaluator(weights_as_inputs(model, self._weights),
                                                 new_ops=evaluator_fixes() + custom)
        except Exception as e:  # the evaluator raises many types; all mean "cannot run this model"
            raise RunnerError(f"{plan.where}: the ONNX reference evaluator cannot load it: {e}") from e
        self._lock = threading.Lock()

    def run(self, inputs: Sequence[Any], on_step: Callable | None = None) -> list[Any]:
        """Run the whole subgraph through the reference evaluator."""
        from xgraph.kernels.reference import plain_value
        with self._lock:
            try:
                results = self._evaluator.run(self._outputs, {**self._weights, **dict(zip(self._inputs, inputs))})
            except Exception as e:  # numpy and evaluator errors alike
                raise KernelError(f"{self.plan.where}: reference evaluator failed: {type(e).__name__}: {e}") from e
        return [plain_value(r if isinstance(r, list) or r is None else np.asarray(r)) for r in results]

    def stats(self) -> dict[str, Any]:
        """Nothing beyond the evaluator."""
        return {}

    def release(self) -> None:
        """Drop the evaluator."""
        self._evaluator = None


def make_backend(plan: ExecutionPlan, kernels: "KernelRegistry") -> Backend:
    """The backend `plan.backend` names, made for `plan` (an onnxruntime session is loaded here)."""
    if plan.backend == "reference":
        return ReferenceBackend(plan, kernels)
    if plan.backend == "onnxruntime":
        return OnnxruntimeBackend(plan)
    return NumpyBackend(plan)


__all__ = ["Backend", "NumpyBackend", "OnnxruntimeBackend", "ReferenceBackend", "make_backend"]
