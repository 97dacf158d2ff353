"""The subgraph executor every device runner shares: plan once, then run a flat list of steps.

Planning (at runner creation) toposorts the subgraph's ops, picks one kernel per op and turns
the ops into steps ``(kernel, input slots, output slots, attributes)`` over a value table:
slot 0 is always None (an omitted optional input), then the subgraph inputs, the weights
(filled once, in the table's template) and every op output. Each step also lists the slots
whose last reader it is, so intermediates are dropped as soon as they are dead and peak
memory stays close to the live set. Running is then a loop with no lookups in it.

Kernel choice per op: the numpy kernel registered for the op's device, else the host's (CPU)
numpy kernel (same numerics, on this machine), else the ONNX reference evaluator; the choice
is recorded in `kernel_sources`. With ``kernels="onnxruntime"`` or ``"auto"``, a subgraph made
only of standard ONNX ops runs instead as one onnxruntime session (`backend` says which,
`xgraph.runners.ort_session` makes it). In the run mode, `xgraph.runners.fusion` merges chains
of steps into one call, and fused convolutions of static shape write into buffers reused across
runs (`xgraph.runners.buffers`).
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from xgraph.errors import KernelError, RunnerError, XGraphError
from xgraph.kernels.blas import configure_blas_once
from xgraph.runners.buffers import BufferPool
from xgraph.runners.fusion import fuse_steps
from xgraph.kernels.parallel import intra_op_threads
from xgraph.runners.ort_session import is_standard_onnx, onnxruntime_available, ort_session, ort_unexchangeable

if TYPE_CHECKING:
    from xgraph.ir import Op, Subgraph, Tensor
    from xgraph.kernels import KernelRegistry

_registry_lock = threading.Lock()
_registry: "KernelRegistry | None" = None


def kernel_registry() -> "KernelRegistry":
    """The kernel registry filled through the `xgraph_kernels` hook (built-ins and installed packages)."""
    global _registry
    with _registry_lock:
        if _registry is None:
            from xgraph.plugins.manager import get_plugin_manager
            from xgraph.kernels import KERNELS
            get_plugin_manager().hook.xgraph_kernels(registry=KERNELS)
            _registry = KERNELS
        return _registry


def op_device(op: "Op", default: str) -> str:
    """The device an op runs on: its own "device" annotation, else its subgraph's device."""
    if op.has_attr("device") and op.is_annotation("device"):
        return str(op.get_attr("device"))
    return default


@dataclass(slots=True)
class Step:
    """One planned op: what to call, which slots it reads and writes, which slots die after it."""

    op: "Op"
    fn: Callable
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    attrs: dict[str, Any]
    needed: int  # how many of the kernel's results something reads
    release: tuple[int, ...] = ()
    source: str = "numpy"
    fused: tuple["Op", ...] = ()  # the ops this one call computes, when the run-mode fusion made it
    output_buffer: tuple | None = None  # (shape, dtype): fn takes `into=`, a buffer reused across runs

    def describe(self) -> str:
        """How error messages name the step: its op, or the chain of ops fused into it."""
        if self.fused:
            return (f"ops {', '.join(repr(op.name) for op in self.fused)} "
                    f"({'+'.join(op.type for op in self.fused)} fused, {self.source} kernel)")
        return f"op {self.op.name!r} ({self.op.type}, {self.source} kernel)"


class SubgraphExecutor:
    """Runs one subgraph's ops with numpy kernels (or one onnxruntime session), planned once.

    `storage_dtype=np.float16` keeps every float32 value (inputs, weights, intermediates) in
    float16 and runs each kernel on float32 copies, rounding its float outputs back to float16:
    the numerics of a matrix unit that reads and writes fp16 and accumulates in fp32 (AI Core).
    Outputs are returned in their declared dtypes.
    """

    def __init__(self, subgraph: "Subgraph", device: str, kernels: str = "numpy",
                 storage_dtype: np.dtype | None = None, fp16_ops: frozenset[str] = frozenset(),
                 fuse: bool = False) -> None:
        self.subgraph = subgraph
        self.device = device
        self.where = f"subgraph {subgraph.name!r} on {device}"
        self.inputs: list[Tensor] = subgraph.get_input_tensors()
        self.outputs: list[Tensor] = subgraph.get_output_tensors()
        self.storage_dtype = None if storage_dtype is None else np.dtype(storage_dtype)
        self.fp16_ops = frozenset(fp16_ops)  # ops computed in float16 (allow_fp32_to_fp16), the rest as declared
        # run-mode fusion of Conv chains (see xgraph.runners.fusion); never with float16 numerics
        self.fuse = fuse and self.storage_dtype is None and not self.fp16_ops
        #: op name -> name of the op whose fused step computes it (ops not fused are absent)
        self.fused_into: dict[str, str] = {}
        self.backend = "numpy"
        self.backend_reason = ""
        self.kernel_sources: dict[str, str] = {}
        self._session = None
        self.steps: list[Step] = []
        self._buffers = BufferPool()
        if kernels in ("onnxruntime", "auto") and self.storage_dtype is None and not self.fp16_ops:
            self._try_onnxruntime(kernels == "onnxruntime")
        if self._session is None:
            self._plan()

    # -- planning --------------------------------------------------------------------------------
    def _try_onnxruntime(self, required: bool) -> None:
        reason = "" if onnxruntime_available() else "onnxruntime is not installed (pip install 'xgraph[onnxruntime]')"
        if required and reason:
            raise RunnerError(f"{self.where}: kernels='onnxruntime' but {reason}")
        reason = reason or is_standard_onnx(self.subgraph) or ort_unexchangeable(self.inputs + self.outputs)
        if not reason:
            try:
                self._session = ort_session(self.subgraph)
            except Exception as e:  # onnxruntime raises its own exception types for unsupported models
                if required:
                    raise RunnerError(f"{self.where}: onnxruntime cannot load this subgraph: {e}") from e
                reason = f"onnxruntime cannot load it: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        if self._session is not None:
            self.backend = "onnxruntime"
            self._ort_inputs = [t.name for t in self.inputs]
            self._ort_outputs = [t.name for t in self.outputs]
            self.kernel_sources = {op.name: "onnxruntime" for op in self.subgraph.toposort()}
        else:
            self.backend_reason = reason

    def _plan(self) -> None:
        configure_blas_once()
        intra_op_threads()  # a bad XGRAPH_INTRA_OP_THREADS fails here, when the runner is made
        registry = kernel_registry()
        ops = self.subgraph.toposort()
        slot_of: dict[Tensor, int] = {}
        template: list[Any] = [None]
        for t in self.inputs:
            slot_of[t] = len(template)
            template.append(None)
        for t in self.subgraph.get_const_tensors():
            slot_of[t] = len(template)
            template.append(self._to_storage(t.data))
        for op in ops:
            for t in op.get_output_tensors():
                slot_of[t] = len(template)
                template.append(None)
        by_name = {t.name: t for t in slot_of}
        steps = [self._plan_step(op, registry, slot_of, by_name) for op in ops]
        self._template = template
        self._input_slots = tuple(slot_of[t] for t in self.inputs)
        self._output_slots = tuple(slot_of[t] for t in self.outputs)
        if self.fuse:
            steps = fuse_steps(steps, template, {s: t for t, s in slot_of.items()}, set(self._output_slots))
            self.fused_into = {op.name: step.op.name for step in steps for op in step.fused}
        # values that are not known to be tensors may be sequences (lists) and stay as the kernel made them
        self._untyped_slots = frozenset(s for t, s in slot_of.items() if t.dtype is None)
        self._output_casts = tuple(self._output_cast(t) for t in self.outputs)
        keep = set(self._output_slots) | {slot_of[t] for t in self.subgraph.get_const_tensors()} | {0}
        last_reader: dict[int, int] = {}
        for i, step in enumerate(steps):
            for s in step.inputs:
                last_reader[s] = i
            for s in step.outputs:
                last_reader.setdefault(s, i)  # written and never read: dead right away
        dying: dict[int, list[int]] = {}
        for s, i in last_reader.items():
            if s not in keep:
                dying.setdefault(i, []).append(s)
        for i, step in enumerate(steps):
            step.release = tuple(dying.get(i, ()))
        self.steps = steps

    def _plan_step(self, op: "Op", registry: "KernelRegistry", slot_of: dict, by_name: dict) -> Step:
        device = op_device(op, self.device)
        inputs = list(op.get_input_tensors())
        while inputs and inputs[-1] is None:
            inputs.pop()
        in_slots = [0 if t is None else slot_of[t] for t in inputs]
        out_slots = tuple(slot_of[t] for t in op.get_output_tensors())
        used = {t for t in op.get_output_tensors() if t.consumers or t in self.outputs}
        needed = max((i + 1 for i, t in enumerate(op.get_output_tensors()) if t in used), default=0)
        dtype = next((t.dtype for t in inputs if t is not None and t.dtype is not None), None)
        if self.storage_dtype is not None and dtype == self.storage_dtype:
            dtype = np.dtype(np.float32)  # kernels run on float32 copies of float16 storage
        fn, attrs, source = self._choose_kernel(op, device, registry, dtype)
        outer = getattr(fn, "outer_names", ())
        if outer:
            missing = [n for n in outer if n not in by_name]
            if missing:
                raise KernelError(f"{self.where}: op {op.name!r} ({op.type}) reads outer-scope tensor "
                                  f"{missing[0]!r}, which this subgraph neither receives nor produces; "
                                  f"place its producer in the same subgraph")
            fn = _with_outer_scope(fn, len(in_slots), outer)
            in_slots += [slot_of[by_name[n]] for n in outer]
        if self.storage_dtype is not None:
            fn = _fp16_storage(fn, self.storage_dtype)
        elif op.name in self.fp16_ops:
            fn = _fp16_rounding(fn)
        self.kernel_sources[op.name] = source
        return Step(op, fn, tuple(in_slots), out_slots, attrs, needed, source=source)

    def _choose_kernel(self, op: "Op", device: str, registry: "KernelRegistry", dtype) -> tuple[Callable, dict, str]:
        opset = op.opset()
        for candidate in dict.fromkeys((device, "CPU")):
            k = registry.find(op.type, op.domain, opset, candidate, dtype)
            if k is not None:
                attrs = op.get_onnx_attrs()
                if k.wants_num_outputs and "num_outputs" not in attrs:  # e.g. Split < 18 without 'split'
                    attrs = dict(attrs, num_outputs=len(op.get_output_tensors()))
                return k.fn, attrs, f"numpy:{candidate}"
        from xgraph.kernels.reference import make_reference_kernel
        graph = self.subgraph.graph
        inputs = op.get_input_tensors()
        try:
            fn = make_reference_kernel(op.type, op.domain, op.attribute_protos(), graph.opset_imports,
                                       len(inputs), len(op.get_output_tensors()), graph.functions,
                                       omitted_inputs=[i for i, t in enumerate(inputs) if t is None])
        except XGraphError as e:
            raise KernelError(f"{self.where}: op {op.name!r} ({op.type}) has no numpy kernel on {device} "
                              f"and the reference fallback cannot run it: {e}") from e
        return fn, {}, "reference"

    def _to_storage(self, array: np.ndarray) -> np.ndarray:
        if self.storage_dtype is not None and array.dtype == np.float32:
            return array.astype(self.storage_dtype)
        return array

    def _output_cast(self, t: "Tensor") -> np.dtype | None:
        if self.storage_dtype is not None and t.dtype == np.float32:
            return t.dtype
        return None

    # -- running ---------------------------------------------------------------------------------
    def run(self, inputs: Sequence[np.ndarray], on_step: Callable | None = None) -> list[np.ndarray]:
        """Run once; `on_step(step, args, results)` is called after each op when given."""
        if self._session is not None:
            return self._run_onnxruntime(inputs)
        values = self._template.copy()
        for slot, x in zip(self._input_slots, inputs):
            values[slot] = self._to_storage(x) if self.storage_dtype is not None else x
        step = None
        try:
            for step in self.steps:
                args = [values[s] for s in step.inputs]
                if step.output_buffer is None:
                    result = step.fn(*args, **step.attrs)
                else:
                    result = step.fn(*args, into=self._buffers.take(*step.output_buffer), **step.attrs)
                outs = step.outputs
                if type(result) is np.ndarray:
                    values[outs[0]] = result
                else:
                    if not isinstance(result, (tuple, list)):
                        result = (result,)
                    if len(result) < step.needed:
                        raise KernelError(f"the kernel returned {len(result)} outputs, {step.needed} are used")
                    for s, r in zip(outs, result):
                        if isinstance(r, np.ndarray) or r is None or (type(r) is list and s in self._untyped_slots):
                            values[s] = r
                        else:
                            values[s] = np.asarray(r)
                if on_step is not None:
                    on_step(step, args, [values[s] for s in outs])
                for s in step.release:
                    values[s] = None
        except Exception as e:
            if step is None:
                raise
            detail = str(e) if isinstance(e, XGraphError) else f"{type(e).__name__}: {e}"
            raise KernelError(f"{self.where}: {step.describe()} failed: {detail}") from e
        results = [values[s] for s in self._output_slots]
        if self.storage_dtype is not None:
            results = [r if c is None else r.astype(c) for r, c in zip(results, self._output_casts)]
        return results

    def _run_onnxruntime(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        try:
            return self._session.run(self._ort_outputs, dict(zip(self._ort_inputs, inputs)))
        except Exception as e:  # onnxruntime's own error types
            raise KernelError(f"{self.where}: onnxruntime failed: {e}") from e

    def release(self) -> None:
        """Drop the onnxruntime session, the planned steps and the reused buffers."""
        self._session = None
        self.steps = []
        self._buffers.clear()


def _with_outer_scope(fn: Callable, num_inputs: int, names: Sequence[str]) -> Callable:
    """A reference kernel that takes its outer-scope values as extra trailing positional inputs."""
    def call(*args):
        return fn(*args[:num_inputs], outer_scope=dict(zip(names, args[num_inputs:])))
    return call


def _fp16_storage(fn: Callable, storage: np.dtype) -> Callable:
    """`fn` run on float32 copies of float16 inputs, its float32 results rounded to float16."""
    def call(*args, **attrs):
        wide = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == storage else a for a in args]
        result = fn(*wide, **attrs)
        if isinstance(result, np.ndarray):
            return result.astype(storage) if result.dtype == np.float32 else result
        if isinstance(result, (tuple, list)):
            return [r.astype(storage) if isinstance(r, np.ndarray) and r.dtype == np.float32 else r for r in result]
        return result
    return call


def _to_fp16_grid(a: Any) -> Any:
    """A float32 array's values rounded to the nearest float16, kept as float32."""
    if isinstance(a, np.ndarray) and a.dtype == np.float32:
        return a.astype(np.float16).astype(np.float32)
    return a


def _fp16_rounding(fn: Callable) -> Callable:
    """`fn` as a float16 unit computes it: float32 inputs and results rounded to float16 values."""
    def call(*args, **attrs):
        result = fn(*[_to_fp16_grid(a) for a in args], **attrs)
        if isinstance(result, (tuple, list)):
            return [_to_fp16_grid(r) for r in result]
        return _to_fp16_grid(result)
    return call


class ReferenceExecutor:
    """The golden path: the ONNX ReferenceEvaluator on the whole subgraph model.

    Ops of custom domains the evaluator does not know (xgraph.dvpp, plugin domains) run
    through xgraph's registered kernels inside the evaluator.
    """

    def __init__(self, subgraph: "Subgraph", device: str) -> None:
        from onnx.reference import ReferenceEvaluator

        from xgraph.kernels.reference import evaluator_fixes, registry_ops
        self.where = f"subgraph {subgraph.name!r} on {device}"
        self.backend = "reference"
        self._inputs = [t.name for t in subgraph.get_input_tensors()]
        self._outputs = [t.name for t in subgraph.get_output_tensors()]
        try:
            custom = registry_ops((op.domain, op.type) for op in subgraph.get_ops())
            self._evaluator = ReferenceEvaluator(subgraph.to_onnx(), new_ops=evaluator_fixes() + custom)
        except Exception as e:  # the evaluator raises many types; all mean "cannot run this model"
            raise RunnerError(f"{self.where}: the ONNX reference evaluator cannot load it: {e}") from e
        self._lock = threading.Lock()

    def run(self, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Run the whole subgraph through the reference evaluator."""
        with self._lock:
            try:
                results = self._evaluator.run(self._outputs, dict(zip(self._inputs, inputs)))
            except Exception as e:  # numpy and evaluator errors alike
                raise KernelError(f"{self.where}: reference evaluator failed: {type(e).__name__}: {e}") from e
        from xgraph.kernels.reference import plain_value
        return [plain_value(r if isinstance(r, list) or r is None else np.asarray(r)) for r in results]

    def release(self) -> None:
        """Nothing to free beyond the evaluator itself."""
        self._evaluator = None
