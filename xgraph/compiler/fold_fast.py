"""Folds of shape arithmetic answered without the ONNX reference evaluator.

A transformer's Reshape targets are computed by `Shape -> Gather -> Unsqueeze -> Concat` on
small int64 vectors; the shape queries fold the Shapes, and the rest are the only folds such a
model has. Each is one numpy call in the reference evaluator (`np.take`, `np.expand_dims`,
`np.concatenate`), but asking the evaluator means importing it and building one evaluator per
kind of node, which costs more than every fold of a 100,000-op model together.

`fast_fold(op, values)` makes the same numpy call the evaluator's implementation makes, on
the same arrays, for the cases where that implementation does nothing else: integer arrays,
the default ONNX domain, no attribute but the op's own, at an opset whose semantics is the
one below. Everything else, and any case numpy refuses, returns None: the caller then asks
the evaluator, so what does not fold here folds (or not) exactly as before. The results are
fresh arrays (the evaluator turns a numpy scalar into a 0-d array; so does this).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from xgraph.ir import Op


def _integers(values: list, count: int | None = None) -> bool:
    """True when `values` are `count` (any number when None) integer numpy arrays."""
    return (count is None or len(values) == count) and all(
        isinstance(v, np.ndarray) and v.dtype.kind in "iu" for v in values)


def _gather(attrs: dict[str, Any], values: list) -> "np.ndarray | None":
    axis = attrs.get("axis", 0)
    if not _integers(values, 2) or type(axis) is not int or not -values[0].ndim <= axis < values[0].ndim:
        return None
    x, indices = (v if v.flags["C_CONTIGUOUS"] else np.ascontiguousarray(v) for v in values)  # as the evaluator
    return np.take(x, indices, axis=axis)  # (ascontiguousarray of a 0-d array would make it 1-d)


def _unsqueeze(attrs: dict[str, Any], values: list) -> "np.ndarray | None":
    if attrs or not _integers(values, 2) or values[1].ndim != 1:
        return None
    return np.expand_dims(values[0], axis=tuple(values[1]))


def _concat(attrs: dict[str, Any], values: list) -> "np.ndarray | None":
    axis = attrs.get("axis")
    if not values or not _integers(values) or type(axis) is not int or len({v.dtype for v in values}) != 1:
        return None
    if any(not -v.ndim <= axis < v.ndim for v in values):  # a rank-0 input included: the evaluator raises
        return None
    return np.concatenate(values, axis)


#: op type -> (the lowest opset with that semantics, the attributes it may have, the numpy call)
_FOLDS: dict[str, tuple[int, frozenset[str], Callable[[dict, list], "np.ndarray | None"]]] = {
    "Gather": (1, frozenset({"axis"}), _gather),
    "Unsqueeze": (13, frozenset(), _unsqueeze),
    "Concat": (4, frozenset({"axis"}), _concat),
}


def fast_fold(op: Op, values: "list[np.ndarray | None]") -> "list[np.ndarray] | None":
    """`op`'s outputs on `values` as the reference evaluator computes them, for the shape arithmetic above;
    None when this module does not answer (ask the evaluator)."""
    entry = _FOLDS.get(op.type)
    if entry is None or op.domain != "" or len(op.get_output_tensors()) != 1 or any(v is None for v in values):
        return None
    lowest, allowed, call = entry
    opset = op.graph.opset_imports.get("", op.graph.opset_imports.get("ai.onnx"))
    attrs = op.get_onnx_attrs()
    if opset is None or opset < lowest or not attrs.keys() <= allowed:
        return None
    try:
        result = call(attrs, values)
    except (ValueError, IndexError, TypeError):  # what the evaluator reports as a failure (AxisError is both)
        return None
    return None if result is None else [np.array(result)]


__all__ = ["fast_fold"]
