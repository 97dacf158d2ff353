"""Plan-time fusion for the `run` mode: a convolution and the ops that only post-process it become one call.

    Conv [-> BatchNormalization] [-> Add/Sum with a residual] [-> Relu/LeakyRelu/Sigmoid/Tanh/Clip/HardSigmoid]

BatchNormalization (inference, constant statistics) is folded into the convolution's weights
and bias once, when the plan is made; the residual and the activation are applied to each
output block in place, right after its matrix product, while it is still in cache. The graph
is not changed: fusion only rewrites the executor's list of steps, so a subgraph keeps every
op for partitioning, reports and the `sim`/`ref` modes (which run op by op).

A chain is only fused when nothing else can tell the difference: every intermediate value has
exactly one reader and is not a subgraph output, all values are float32, and the weights and
normalization statistics are constants. A residual that broadcasts is applied with Add's own
broadcasting rules.
`XGRAPH_FUSION=0` turns it off (every op then runs as its own kernel call, as in `sim`).
"""
from __future__ import annotations

import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from xgraph.runners.kernels.op_nn_conv import ResidualNotInPlace, activation_in_place, conv_core
from xgraph.runners.kernels.op_nn_norm import batch_norm_scale_shift

if TYPE_CHECKING:
    from xgraph.ir import Op, Tensor
    from xgraph.runners.executor import Step

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


class _Plan:
    """What the fusion pass needs to know about the planned steps and their value slots."""

    def __init__(self, steps: Sequence["Step"], template: Sequence[Any], tensor_of: dict[int, "Tensor"],
                 keep: set[int]) -> None:
        self.steps = steps
        self.template = template
        self.tensor_of = tensor_of
        self.keep = keep
        self.readers: dict[int, list[int]] = {}
        for i, step in enumerate(steps):
            for s in step.inputs:
                self.readers.setdefault(s, []).append(i)

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
        t = self.tensor_of.get(slot)
        return t is not None and t.dtype == _FLOAT32


def fuse_convolutions(steps: list["Step"], template: list[Any], tensor_of: dict[int, "Tensor"],
                      keep: set[int]) -> list["Step"]:
    """`steps` with every fusable Conv chain replaced by one step (the others unchanged, in order)."""
    plan = _Plan(steps, template, tensor_of, keep)
    absorbed: set[int] = set()
    replacement: dict[int, "Step"] = {}
    for i, step in enumerate(steps):
        if step.op.type == "Conv" and step.op.domain == "" and step.source.startswith("numpy") and i not in absorbed:
            fused = _fuse_chain(plan, i, absorbed)
            if fused is not None:
                new_step, members = fused
                # the fused call takes the place of the chain's last op: by then its residual exists
                replacement[members[-1]] = new_step
                absorbed.update(members)
    return [replacement.get(i, step) for i, step in enumerate(steps) if i not in absorbed or i in replacement]


def _fuse_chain(plan: _Plan, head: int, absorbed: set[int]) -> tuple["Step", list[int]] | None:
    """The fused step for the chain starting at Conv step `head` and the indices of the steps it replaces."""
    conv = plan.steps[head]
    if len(conv.inputs) < 2 or len(conv.outputs) != 1 or not plan.is_float32(conv.inputs[0]):
        return None
    w = plan.constant(conv.inputs[1])
    b = plan.constant(conv.inputs[2]) if len(conv.inputs) > 2 and conv.inputs[2] else None
    if w is None or w.dtype != _FLOAT32 or (len(conv.inputs) > 2 and conv.inputs[2] and b is None):
        return None
    members = [head]
    ops = [conv.op]
    out = conv.outputs[0]
    if not plan.is_float32(out):
        return None
    residual = 0
    activation: tuple[str, list[float]] | None = None

    def follower(slot: int) -> int | None:
        reader = plan.sole_reader(slot) if plan.is_float32(slot) else None
        return None if reader is None or reader in absorbed else reader

    nxt = follower(out)
    if nxt is not None and plan.steps[nxt].op.type == "BatchNormalization":
        folded = _fold_batch_norm(plan, plan.steps[nxt], out, w, b)
        if folded is not None:
            w, b = folded
            members.append(nxt)
            ops.append(plan.steps[nxt].op)
            out = plan.steps[nxt].outputs[0]
            nxt = follower(out)
    if nxt is not None and plan.steps[nxt].op.type in ("Add", "Sum") and plan.steps[nxt].op.domain == "":
        add = plan.steps[nxt]
        others = [s for s in add.inputs if s != out]
        if len(add.inputs) == 2 and len(others) == 1 and others[0] and plan.is_float32(others[0]) \
                and plan.is_float32(add.outputs[0]):
            residual = others[0]
            members.append(nxt)
            ops.append(add.op)
            out = add.outputs[0]
            nxt = follower(out)
    if nxt is not None and plan.steps[nxt].op.domain == "" and plan.steps[nxt].op.type in ACTIVATIONS:
        act = plan.steps[nxt]
        activation = _activation(plan, act)
        if activation is not None and plan.is_float32(act.outputs[0]):
            members.append(nxt)
            ops.append(act.op)
            out = act.outputs[0]
    if len(members) == 1:
        return None  # nothing to fuse
    fn = _fused_conv(w, b, conv.attrs, activation)
    inputs = (conv.inputs[0], residual) if residual else (conv.inputs[0],)
    return replace(conv, fn=fn, inputs=inputs, outputs=(out,), attrs={}, needed=1, fused=tuple(ops)), members


def _fold_batch_norm(plan: _Plan, bn: "Step", conv_out: int, w: np.ndarray,
                     b: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
    """(W', B') with BatchNormalization(Conv(x, W, B)) == Conv(x, W', B'), or None when it cannot fold."""
    if len(bn.inputs) != 5 or bn.inputs[0] != conv_out or bn.needed != 1:
        return None
    attrs = bn.attrs
    if attrs.get("training_mode", 0) or not attrs.get("spatial", 1):
        return None
    params = [plan.constant(s) for s in bn.inputs[1:]]
    m = w.shape[0]
    if any(p is None or p.size != m or p.dtype != _FLOAT32 for p in params):
        return None
    a, shift = batch_norm_scale_shift(*(p.reshape(m) for p in params), attrs.get("epsilon", 1e-5))
    w2 = (w.astype(np.float64) * a.reshape((m,) + (1,) * (w.ndim - 1))).astype(np.float32)
    b2 = ((b.astype(np.float64).reshape(m) if b is not None else 0.0) * a + shift).astype(np.float32)
    return w2, b2


def _activation(plan: _Plan, act: "Step") -> tuple[str, list[float]] | None:
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

    def fused(x, z=None):
        try:
            return conv_core("Conv", x, w, bias=b, residual=z, activation=act, **geometry)
        except ResidualNotInPlace:  # the Add broadcasts the output to a larger shape: plain Add semantics
            y = conv_core("Conv", x, w, bias=b, **geometry) + z
            if act is not None:
                act(y)
            return y
    return fused
