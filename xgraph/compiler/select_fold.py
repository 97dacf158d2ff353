"""Selections decided at compile time: a `Where` whose condition is a weight that is all true
(or all false) is the branch it selects.

Once input shapes are fixed, a decoder's causal mask folds to a weight: for one new token at
past length P it is `tril[P:P+1, :P+1]`, a row of ones, so `Where(mask, scores, -inf)` passes
`scores` through unchanged. Left in, that weight differs per past length, and two past-length
gears of one decoder are two different graphs; removed, they are one graph but for shapes
(their onnxruntime sessions can be one, `xgraph.runners.ort_session`), and AI Core runs one
op fewer per layer. The op is dropped only when the selected input already has the result's
static shape and dtype (no broadcast left for `Where` to do) and the result is not a graph
output or read by a nested graph, so nothing a reader sees changes.
"""
from __future__ import annotations

import numpy as np

from xgraph.ir import Graph, Op, Tensor

_WHERE = frozenset({"Where"})


def _static(t: Tensor | None) -> bool:
    return t is not None and t.shape is not None and all(isinstance(d, int) and d >= 0 for d in t.shape)


def selected_input(op: Op) -> Tensor | None:
    """The input a `Where` always selects (its condition a constant all-true or all-false weight
    and that input already the result's shape and dtype); None when it has to run."""
    if op.type != "Where" or op.domain not in ("", "ai.onnx"):
        return None
    inputs, outputs = op.get_input_tensors(), op.get_output_tensors()
    if len(inputs) != 3 or len(outputs) != 1 or any(t is None for t in inputs):
        return None
    cond, out = inputs[0], outputs[0]
    if not cond.is_const or cond.data is None or cond.data.dtype != np.bool_ or cond.data.size == 0:
        return None
    if cond.data.all():
        chosen = inputs[1]
    elif not cond.data.any():
        chosen = inputs[2]
    else:
        return None
    if not (_static(chosen) and _static(out)) or tuple(chosen.shape) != tuple(out.shape):
        return None  # the condition or the other branch broadcasts the result: Where still has work
    if chosen.dtype is None or chosen.dtype != out.dtype:
        return None
    return chosen


def fold_constant_selects(graph: Graph, keep: "set[Tensor]") -> int:
    """Replace every `Where` that `selected_input` decides by its selected input; returns ops removed.

    `keep`: tensors that must stay as they are (graph outputs, tensors nested graphs read)."""
    if not any(selected_input(op) is not None for op in [op for op in graph.get_ops() if op.type in _WHERE]):
        return 0  # nothing to drop (a Where's verdict cannot change as others go): no need to order the graph
    removed = 0
    for op in graph.toposort():
        chosen = selected_input(op)
        if chosen is None or op.get_output_tensors()[0] in keep:
            continue
        graph.replace_uses(op.get_output_tensors()[0], chosen)
        graph.remove_op(op)
        removed += 1
    return removed


__all__ = ["fold_constant_selects", "selected_input"]
