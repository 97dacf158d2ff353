"""Plan-time fusion for the `run` mode: a convolution and the ops that only post-process it become one call.

    Conv [-> per-channel affine ops] [-> Add/Sum with a residual] [-> Relu/LeakyRelu/Sigmoid/Tanh/Clip/HardSigmoid]
    per-channel affine ops (at least two, or one and an activation) [-> activation]

Per-channel affine ops are BatchNormalization (inference, constant statistics) and Mul or Add
by a constant with one value per channel (or one value): after a convolution they are folded
into its weights and bias once, when the plan is made; the residual and the activation are
applied to each output block in place, right after its matrix product, while it is still in
cache. Elsewhere a run of them becomes one multiply-add. The graph is not changed: fusion is a
pass over the execution plan (`xgraph.runners.plan`), `fuse(plan) -> plan`, so a subgraph keeps
every op for partitioning, reports and the `sim`/`ref` modes (which run op by op). A fused
step of static output shape gets a `layout`: the liveness pass then gives it a reused buffer.

A chain is only fused when nothing else can tell the difference: every intermediate value has
exactly one reader and is not a subgraph output, all values are float32, and the weights and
normalization statistics are constants. A residual that broadcasts is applied with Add's own
broadcasting rules.
`XGRAPH_FUSION=0` turns it off (every op then runs as its own kernel call, as in `sim`).
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.conv_lowering import ResidualNotInPlace, activation_in_place, conv_core
from xgraph.kernels.op_nn_norm import batch_norm_scale_shift, channel_affine

from xgraph.kernels.resolution import NUMPY
from xgraph.runners.plan import ExecutionPlan, Step

if TYPE_CHECKING:
    from xgraph.ir import Op, Tensor

#: Activations the convolution epilogue applies in place: op type -> (FusedConv name, its parameters).
ACTIVATIONS: dict[str, Callable[["Op"], tuple[str, list[float]] | None]] = {
    "Relu": lambda op: ("Relu", []),
    "LeakyRelu": lambda op: ("LeakyRelu", [float(op.get_attr("alpha")) if op.has_attr("alpha") else 0.01]),
    "Sigmoid": lambda op: ("Sigmoid", []),
    "Tanh": lambda op: ("Tanh", []),
    "HardSigmoid": lambda op: ("HardSigmoid", [float(op.get_attr("alpha")) if op.has_attr("alpha") else 0.2,
                                               float(op.get_attr("beta")) if op.has_attr("beta") else 0.5]),
    # Clip with attributes (opset < 11); with min/max inputs they must be constants, handled below
    "Clip": lambda op: ("Clip", [float(op.get_attr("min")) if op.has_attr("min") else -np.inf,
                                 float(op.get_attr("max")) if op.has_attr("max") else np.inf]),
}
_FLOAT32 = np.dtype(np.float32)
ENV = "XGRAPH_FUSION"


def fusion_enabled() -> bool:
    """False when XGRAPH_FUSION=0 asks the run mode to execute every op on its own."""
    return os.environ.get(ENV, "1").strip() != "0"


def builtin_kernel(step: "Step") -> bool:
    """True when the step runs one of xgraph's own numpy kernels (its kernel choice says so).

    Fusion computes the absorbed ops itself, so an op whose kernel was replaced (a plugin's,
    a package's, a test's) is never fused: its own kernel must run.
    """
    return step.choice.source == NUMPY


class _Readers:
    """The execution plan as the fusion pass reads it: who reads each slot, constants, dtypes."""

    def __init__(self, plan: ExecutionPlan) -> None:
        self.steps = plan.steps
        self.template = plan.template
        self.keep = frozenset(plan.output_slots)
        self.slot_tensors = plan.slot_tensors
        self.readers: dict[int, list[int]] = {}
        for i, step in enumerate(plan.steps):
            for s in step.inputs:
                self.readers.setdefault(s, []).append(i)

    def tensor(self, slot: int) -> "Tensor | None":
        return self.slot_tensors[slot] if 0 < slot < len(self.slot_tensors) else None

    def constant(self, slot: int) -> np.ndarray | None:
        value = self.template[slot] if slot else None
        return value if isinstance(value, np.ndarray) else None

    def sole_reader(self, slot: int) -> int | None:
        """The index of the one step reading `slot` (once), if it is an intermediate nothing else sees."""
        readers = self.readers.get(slot, [])
        if slot in self.keep or len(readers) != 1 or self.steps[readers[0]].inputs.count(slot) != 1:
            return None
        return readers[0]

    def is_float32(self, slot: int) -> bool:
        t = self.tensor(slot)
        return t is not None and t.dtype == _FLOAT32


def fuse(plan: ExecutionPlan) -> ExecutionPlan:
    """`plan` with every fusable chain replaced by one step (the others unchanged, in order)."""
    view = _Readers(plan)
    steps = plan.steps
    absorbed: set[int] = set()
    replacement: dict[int, "Step"] = {}
    for head in (_conv_chain, _affine_chain):
        for i, step in enumerate(steps):
            if i in absorbed or not builtin_kernel(step):
                continue
            fused = head(view, i, absorbed)
            if fused is not None:
                new_step, members = fused
                # the fused call takes the place of the chain's last op: by then its residual exists
                replacement[members[-1]] = new_step
                absorbed.update(members)
    new_steps = [replacement.get(i, step) for i, step in enumerate(steps) if i not in absorbed or i in replacement]
    fused_into = {op.name: step.op.name for step in new_steps for op in step.fused}
    return plan.with_steps(new_steps, fused_into=fused_into)


class _Chain:
    """A chain being grown from its head step along sole readers, with the ops it absorbed."""

    def __init__(self, plan: _Readers, head: int, absorbed: set[int]) -> None:
        self.plan, self.absorbed = plan, absorbed
        self.members = [head]
        self.ops = [plan.steps[head].op]
        self.out = plan.steps[head].outputs[0]
        self.affine = 0  # per-channel affine ops absorbed

    def next(self) -> int | None:
        """The index of the one step reading the chain's current output, if it may join."""
        plan = self.plan
        reader = plan.sole_reader(self.out) if plan.is_float32(self.out) else None
        if reader is None or reader in self.absorbed:
            return None
        step = plan.steps[reader]
        if not builtin_kernel(step) or step.op.domain != "" or not step.outputs \
                or not plan.is_float32(step.outputs[0]):
            return None
        return reader

    def take(self, index: int) -> None:
        self.members.append(index)
        self.ops.append(self.plan.steps[index].op)
        self.out = self.plan.steps[index].outputs[0]

    def grow_affine(self, scale: np.ndarray, shift: np.ndarray, rank: int | None) -> tuple[np.ndarray, np.ndarray]:
        """Absorb the per-channel affine ops that follow into (scale, shift), float64 vectors."""
        while True:
            index = self.next()
            found = None if index is None else \
                _channel_affine(self.plan, self.plan.steps[index], self.out, scale.size, rank)
            if found is None:
                return scale, shift
            a, b = found
            if scale.size == 1 and a.size > 1:  # scalars so far meet per-channel values
                scale, shift = np.broadcast_to(scale, a.shape), np.broadcast_to(shift, a.shape)
            scale, shift = scale * a, shift * a + b
            self.take(index)
            self.affine += 1

    def grow_activation(self) -> tuple[str, list[float]] | None:
        index = self.next()
        if index is None or self.plan.steps[index].op.type not in ACTIVATIONS:
            return None
        activation = _activation(self.plan, self.plan.steps[index])
        if activation is not None:
            self.take(index)
        return activation


def _conv_chain(plan: _Readers, head: int, absorbed: set[int]) -> tuple["Step", list[int]] | None:
    """The fused step for a chain starting at Conv step `head`, and the indices of the steps it replaces."""
    conv = plan.steps[head]
    if conv.op.type != "Conv" or conv.op.domain != "":
        return None
    if len(conv.inputs) < 2 or len(conv.outputs) != 1 or not plan.is_float32(conv.inputs[0]) \
            or not plan.is_float32(conv.outputs[0]):
        return None
    w = plan.constant(conv.inputs[1])
    has_bias = len(conv.inputs) > 2 and bool(conv.inputs[2])
    b = plan.constant(conv.inputs[2]) if has_bias else None
    if w is None or w.dtype != _FLOAT32 or w.ndim < 3 or (has_bias and (b is None or b.size != w.shape[0])):
        return None
    m = w.shape[0]
    chain = _Chain(plan, head, absorbed)
    scale, shift = chain.grow_affine(np.ones(m), np.zeros(m) if b is None else b.astype(np.float64).reshape(m),
                                     w.ndim)
    residual = 0
    index = chain.next()
    if index is not None and plan.steps[index].op.type in ("Add", "Sum") and len(plan.steps[index].inputs) == 2:
        others = [s for s in plan.steps[index].inputs if s != chain.out]
        if len(others) == 1 and others[0] and plan.is_float32(others[0]):
            residual = others[0]
            chain.take(index)
    activation = chain.grow_activation()
    if len(chain.members) == 1:
        return None  # nothing to fuse
    if chain.affine:
        scale = np.broadcast_to(scale, (m,)).reshape((m,) + (1,) * (w.ndim - 1))
        w, b = (w.astype(np.float64) * scale).astype(np.float32), np.broadcast_to(shift, (m,)).astype(np.float32)
    fn = _fused_conv(w, b, conv.attrs, activation)
    inputs = (conv.inputs[0], residual) if residual else (conv.inputs[0],)
    return replace(conv, fn=fn, inputs=inputs, outputs=(chain.out,), attrs={}, needed=1,
                   fused=tuple(chain.ops), layout=_static_layout(plan, chain.out)), chain.members


def _static_layout(plan: _Readers, slot: int) -> tuple[tuple[int, ...], np.dtype] | None:
    """(shape, dtype) of an intermediate whose shape is fully known: its buffer can be reused across runs."""
    t = plan.tensor(slot)
    if slot in plan.keep or t is None or t.shape is None or not all(isinstance(d, int) for d in t.shape):
        return None
    return tuple(t.shape), t.dtype


def _affine_chain(plan: _Readers, head: int, absorbed: set[int]) -> tuple["Step", list[int]] | None:
    """One multiply-add (and activation) for a run of per-channel affine ops starting at step `head`."""
    step = plan.steps[head]
    if not step.inputs or not plan.is_float32(step.inputs[0]) or not step.outputs \
            or not plan.is_float32(step.outputs[0]):
        return None
    x = step.inputs[0]
    t = plan.tensor(x)
    rank = len(t.shape) if t is not None and t.shape is not None else None
    first = _channel_affine(plan, step, x, 1, rank)
    if first is None:
        return None
    chain = _Chain(plan, head, absorbed)
    scale, shift = chain.grow_affine(*first, rank)
    activation = chain.grow_activation()
    if len(chain.members) < 2:
        return None
    fn = _fused_affine(scale.astype(np.float32), shift.astype(np.float32), rank, activation)
    return replace(step, fn=fn, inputs=(x,), outputs=(chain.out,), attrs={}, needed=1,
                   fused=tuple(chain.ops), layout=_static_layout(plan, chain.out)), chain.members


def _channel_affine(plan: _Readers, step: "Step", x: int, m: int,
                    rank: int | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(scale, shift) float64 vectors (length m, or 1) when `step` computes scale * x + shift per channel of x."""
    op = step.op
    if op.domain != "" or step.needed != 1 or len(step.outputs) < 1:
        return None
    if op.type == "BatchNormalization":
        if len(step.inputs) != 5 or step.inputs[0] != x:
            return None
        attrs = step.attrs
        if attrs.get("training_mode", 0) or not attrs.get("spatial", 1):
            return None
        params = [plan.constant(s) for s in step.inputs[1:]]
        size = params[0].size if params[0] is not None else 0
        if any(p is None or p.dtype != _FLOAT32 or p.size != size for p in params) or (m > 1 and size != m):
            return None
        return batch_norm_scale_shift(*(p.reshape(size) for p in params), attrs.get("epsilon", 1e-5))
    if op.type not in ("Mul", "Add") or len(step.inputs) != 2 or step.inputs.count(x) != 1 or rank is None:
        return None
    c = plan.constant(step.inputs[1] if step.inputs[0] == x else step.inputs[0])
    if c is None or c.dtype != _FLOAT32 or c.ndim > rank:
        return None
    shape = (1,) * (rank - c.ndim) + c.shape
    if rank < 2:
        if c.size != 1:
            return None
    elif any(d != 1 for i, d in enumerate(shape) if i != 1) or (shape[1] != 1 and m > 1 and shape[1] != m):
        return None
    values = c.astype(np.float64).reshape(-1)
    if op.type == "Mul":
        return values, np.zeros_like(values)
    return np.ones_like(values), values


def _activation(plan: _Readers, act: "Step") -> tuple[str, list[float]] | None:
    name, params = ACTIVATIONS[act.op.type](act.op)
    if act.op.type == "Clip" and len(act.inputs) > 1:  # opset >= 11: min and max are inputs
        bounds = [params[0], params[1]]
        for k, slot in enumerate(act.inputs[1:3]):
            if not slot:
                continue
            value = plan.constant(slot)
            if value is None or value.size != 1:
                return None
            bounds[k] = float(value.reshape(()))
        params = bounds
    elif len(act.inputs) != 1:
        return None
    return name, params


def _fused_conv(w: np.ndarray, b: np.ndarray | None, attrs: dict[str, Any],
                activation: tuple[str, list[float]] | None) -> Callable:
    act = activation_in_place(*activation) if activation else None
    geometry = {k: attrs[k] for k in ("auto_pad", "dilations", "group", "kernel_shape", "pads", "strides")
                if k in attrs}

    def fused(x, z=None, into=None):
        try:
            return conv_core("Conv", x, w, bias=b, residual=z, activation=act, into=into, **geometry)
        except ResidualNotInPlace:  # the Add broadcasts the output to a larger shape: plain Add semantics
            y = conv_core("Conv", x, w, bias=b, **geometry) + z
            if act is not None:
                act(y)
            return y
    return fused


def _fused_affine(scale: np.ndarray, shift: np.ndarray, rank: int | None,
                  activation: tuple[str, list[float]] | None) -> Callable:
    act = activation_in_place(*activation) if activation else None
    channels = scale.size

    def fused(x, into=None):
        if rank is not None and x.ndim != rank:
            raise KernelError(f"the input has rank {x.ndim}, but its declared shape has rank {rank}")
        if channels > 1 and (x.ndim < 2 or x.shape[1] != channels):
            raise KernelError(f"the input has shape {x.shape}, but the per-channel values are for "
                              f"{channels} channels")
        return channel_affine(x, scale, shift, act, into=into)
    return fused
