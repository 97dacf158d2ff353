"""The execution plan of one subgraph: made once by a pure function, run many times by a backend.

    plan = plan_subgraph(subgraph, "AICORE", registries.kernels, PlanOptions(kernels="numpy", fuse=True))
    plan.backend                # "numpy" | "onnxruntime" | "reference"
    plan.kernels["conv"]        # KernelChoice: source, device, kernel, reason
    plan.steps                  # frozen Steps over a value table (numpy backend)

`plan_subgraph` reads the subgraph, the device and the registries' kernel table and returns a
frozen `ExecutionPlan`; it changes nothing and starts nothing (no session, no thread). The
numpy plan is a flat list of steps ``(kernel, input slots, output slots, attributes)`` over a
value table: slot 0 is always None (an omitted optional input), then the subgraph inputs, the
weights (their values are the plan's `template`) and every op output. Then passes rewrite it,
each `ExecutionPlan -> ExecutionPlan`: float16 numerics (`xgraph.runners.precision`), run-mode
fusion (`xgraph.runners.fusion`) and liveness (`xgraph.runners.liveness`: which slots die after
each step, which steps write into reused buffers). `xgraph.runners.backends` runs a plan.

Kernel choice per op is `xgraph.kernels.resolution.resolve_kernel`, the function compile's
`kernel` annotation uses too; a whole standard-ONNX subgraph may instead go to onnxruntime
(``kernels="onnxruntime"`` or ``"auto"``), which the plan records for each of its ops. Under
``"auto"`` a subgraph holding an op onnxruntime is known to get wrong (`xgraph.runners.ort_deviations`)
stays with xgraph's kernels, the reason kept in `backend_reason`.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from xgraph.errors import KernelError, RunnerError, XGraphError
from xgraph.kernels.resolution import NONE, ONNXRUNTIME, REFERENCE, KernelChoice, compute_dtype, op_device, resolve_kernel
from xgraph.modes import AUTO, NUMPY
from xgraph.modes import ONNXRUNTIME as ORT_KERNELS
from xgraph.runners.ort_deviations import subgraph_deviation
from xgraph.runners.ort_session import is_standard_onnx, onnxruntime_available, ort_unexchangeable

if TYPE_CHECKING:
    from xgraph.ir import Op, Subgraph, Tensor
    from xgraph.kernels import KernelRegistry

#: The backends a plan may name.
BACKENDS = ("numpy", "onnxruntime", "reference")


@dataclass(frozen=True, slots=True)
class Step:
    """One planned call: what to call, which slots it reads and writes, which slots die after it."""

    op: "Op"
    fn: Callable
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    attrs: Mapping[str, Any]
    needed: int  # how many of the kernel's results something reads
    choice: KernelChoice
    release: tuple[int, ...] = ()
    fused: tuple["Op", ...] = ()  # the ops this one call computes, when the run-mode fusion made it
    layout: tuple | None = None  # (shape, dtype) of a static output `fn` can write `into=` (fusion sets it)
    buffer: int | None = None  # index into ExecutionPlan.buffers: the reused array `fn` writes into

    @property
    def source(self) -> str:
        """Where the kernel came from, as runners report it ("numpy:AICORE", "reference", ...)."""
        return self.choice.label

    def describe(self) -> str:
        """How error messages name the step: its op, or the chain of ops fused into it."""
        if self.fused:
            return (f"ops {', '.join(repr(op.name) for op in self.fused)} "
                    f"({'+'.join(op.type for op in self.fused)} fused, {self.source} kernel)")
        return f"op {self.op.name!r} ({self.op.type}, {self.source} kernel)"


@dataclass(frozen=True)
class PlanOptions:
    """What shapes a plan besides the subgraph: kernels, float16 numerics, fusion."""

    kernels: str = NUMPY
    storage_dtype: np.dtype | None = None  # force_fp16: float32 values kept in float16
    fp16_ops: frozenset[str] = frozenset()  # allow_fp32_to_fp16: ops rounded to float16
    fuse: bool = False  # run-mode fusion (never together with float16 numerics)
    reference: bool = False  # the golden path: the whole subgraph in the ONNX reference evaluator
    qdq_units: str = ""  # integer QDQ units (xgraph.runners.int8_fusion): "" off, "exact" (run), "device" (sim)


@dataclass(frozen=True)
class ExecutionPlan:
    """Everything a backend needs to run one subgraph, fixed at runner creation."""

    subgraph: "Subgraph"
    device: str
    backend: str
    kernels: Mapping[str, KernelChoice]  # op name -> what runs it
    backend_reason: str = ""  # why not onnxruntime, when it was asked for and is not used
    steps: tuple[Step, ...] = ()
    template: tuple[Any, ...] = ()  # the value table before a run: None, the weights' values
    slot_tensors: tuple["Tensor | None", ...] = ()
    input_slots: tuple[int, ...] = ()
    output_slots: tuple[int, ...] = ()
    keep: frozenset[int] = frozenset()  # slots never released: slot 0, the weights, the outputs
    untyped_slots: frozenset[int] = frozenset()  # values that may be sequences (lists)
    storage_dtype: np.dtype | None = None
    output_casts: tuple[np.dtype | None, ...] = ()
    buffers: tuple[tuple, ...] = ()  # (shape, dtype) of each reused buffer
    escaping_buffers: frozenset[int] = frozenset()  # buffers an output may be a view of (copied out)
    fused_into: Mapping[str, str] = field(default_factory=dict)  # op name -> op whose fused step computes it

    @property
    def where(self) -> str:
        """How messages name the subgraph."""
        return f"subgraph {self.subgraph.name!r} on {self.device}"

    @property
    def kernel_sources(self) -> dict[str, str]:
        """op name -> the kernel's source label ("numpy:AICORE", "reference", "onnxruntime", ...)."""
        return {name: choice.label for name, choice in self.kernels.items()}

    def with_steps(self, steps: Sequence[Step], **changes: Any) -> "ExecutionPlan":
        """This plan with other steps (and other fields): how passes return their result."""
        return replace(self, steps=tuple(steps), **changes)


def _frozen(mapping: Mapping) -> Mapping:
    return MappingProxyType(dict(mapping))


def onnxruntime_reason(subgraph: "Subgraph") -> str:
    """'' when onnxruntime may run the whole subgraph, else why not (missing package, custom ops, dtypes)."""
    if not onnxruntime_available():
        return "onnxruntime is not installed (pip install 'xgraph[onnxruntime]')"
    return is_standard_onnx(subgraph) or ort_unexchangeable(subgraph.get_input_tensors() + subgraph.get_output_tensors())


def plan_subgraph(subgraph: "Subgraph", device: str, kernels: "KernelRegistry", options: PlanOptions = PlanOptions(),
               *, not_onnxruntime: str = "") -> ExecutionPlan:
    """The plan for `subgraph` on `device` (pure: reads the graph and the kernel table, changes nothing).

    `not_onnxruntime` forces a numpy plan and records why (onnxruntime could not load the
    subgraph). Raises KernelError naming the op when an op has nothing to run it.
    """
    ops = subgraph.toposort()
    if options.reference:
        choice = KernelChoice(REFERENCE, "", None, "ref mode: the ONNX reference evaluator runs the whole subgraph")
        return ExecutionPlan(subgraph, device, "reference", _frozen({op.name: choice for op in ops}))
    wants_ort = options.kernels in (AUTO, ORT_KERNELS) and options.storage_dtype is None and not options.fp16_ops
    reason = not_onnxruntime
    if wants_ort and not reason:
        reason = onnxruntime_reason(subgraph)
        if reason and options.kernels == ORT_KERNELS:
            raise RunnerError(f"subgraph {subgraph.name!r} on {device}: kernels='onnxruntime' but {reason}")
        if not reason and options.kernels == AUTO:  # "auto" never loses a case xgraph's kernels pass
            reason = subgraph_deviation(ops)
        if not reason:
            choice = KernelChoice(ONNXRUNTIME, device, None, "a standard-ONNX subgraph: one onnxruntime session")
            return ExecutionPlan(subgraph, device, "onnxruntime", _frozen({op.name: choice for op in ops}))
    return _numpy_plan(subgraph, device, kernels, ops, reason if wants_ort else "", options.storage_dtype)


def _numpy_plan(subgraph: "Subgraph", device: str, kernels: "KernelRegistry", ops: "list[Op]",
                reason: str, storage: np.dtype | None) -> ExecutionPlan:
    inputs, outputs = subgraph.get_input_tensors(), subgraph.get_output_tensors()
    consts = subgraph.get_const_tensors()
    slot_of: dict[Tensor, int] = {}
    template: list[Any] = [None]
    tensors: list[Tensor | None] = [None]
    for t in inputs:
        slot_of[t] = len(template)
        template.append(None)
        tensors.append(t)
    for t in consts:
        slot_of[t] = len(template)
        template.append(t.data)
        tensors.append(t)
    for op in ops:
        for t in op.get_output_tensors():
            slot_of[t] = len(template)
            template.append(None)
            tensors.append(t)
    where = f"subgraph {subgraph.name!r} on {device}"
    by_name = {t.name: t for t in slot_of}
    output_set = set(outputs)
    steps = tuple(_plan_step(op, op_device(op, device), kernels, slot_of, by_name, output_set, where, storage)
                  for op in ops)
    output_slots = tuple(slot_of[t] for t in outputs)
    return ExecutionPlan(
        subgraph, device, "numpy", _frozen({s.op.name: s.choice for s in steps}), reason, steps, tuple(template),
        tuple(tensors), tuple(slot_of[t] for t in inputs), output_slots,
        frozenset(output_slots) | {slot_of[t] for t in consts} | {0},
        frozenset(s for t, s in slot_of.items() if t.dtype is None), None, (None,) * len(outputs))


def _plan_step(op: "Op", device: str, kernels: "KernelRegistry", slot_of: dict, by_name: dict,
               outputs: set, where: str, storage: np.dtype | None) -> Step:
    inputs = list(op.get_input_tensors())
    while inputs and inputs[-1] is None:
        inputs.pop()
    in_slots = [0 if t is None else slot_of[t] for t in inputs]
    out_slots = tuple(slot_of[t] for t in op.get_output_tensors())
    needed = max((i + 1 for i, t in enumerate(op.get_output_tensors()) if t.consumers or t in outputs), default=0)
    dtype = compute_dtype(op)
    if storage is not None and dtype == storage:
        dtype = np.dtype(np.float32)  # kernels run on float32 copies of float16 storage
    choice = resolve_kernel(op, device, kernels, dtype=dtype)
    if choice.source == NONE:
        raise KernelError(f"{where}: op {op.name!r} ({op.type}): {choice.reason}")
    if choice.kernel is not None:
        attrs = op.get_onnx_attrs()
        if choice.kernel.wants_num_outputs and "num_outputs" not in attrs:  # e.g. Split < 18 without 'split'
            attrs = dict(attrs, num_outputs=len(op.get_output_tensors()))
        fn: Callable = choice.kernel.fn
    else:
        fn, attrs = _reference_kernel(op, device, where), {}
    outer = getattr(fn, "outer_names", ())
    if outer:
        missing = [n for n in outer if n not in by_name]
        if missing:
            raise KernelError(f"{where}: op {op.name!r} ({op.type}) reads outer-scope tensor "
                              f"{missing[0]!r}, which this subgraph neither receives nor produces; "
                              f"place its producer in the same subgraph")
        fn = _with_outer_scope(fn, len(in_slots), outer)
        in_slots += [slot_of[by_name[n]] for n in outer]
    return Step(op, fn, tuple(in_slots), out_slots, attrs, needed, choice)


def _reference_kernel(op: "Op", device: str, where: str) -> Callable:
    from xgraph.kernels.reference import make_reference_kernel
    graph = op.graph
    inputs = op.get_input_tensors()
    try:
        return make_reference_kernel(op.type, op.domain, op.attribute_protos(), graph.opset_imports,
                                     len(inputs), len(op.get_output_tensors()), graph.functions,
                                     omitted_inputs=[i for i, t in enumerate(inputs) if t is None])
    except XGraphError as e:
        raise KernelError(f"{where}: op {op.name!r} ({op.type}) has no numpy kernel on {device} "
                          f"and the reference fallback cannot run it: {e}") from e


def _with_outer_scope(fn: Callable, num_inputs: int, names: Sequence[str]) -> Callable:
    """A reference kernel that takes its outer-scope values as extra trailing positional inputs."""
    def call(*args):
        return fn(*args[:num_inputs], outer_scope=dict(zip(names, args[num_inputs:])))
    return call


__all__ = ["BACKENDS", "ExecutionPlan", "PlanOptions", "Step", "plan_subgraph", "onnxruntime_reason"]
