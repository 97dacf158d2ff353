"""What one constant fold is: whether an op may fold, and the arrays it folds to.

An op folds when its inputs are all weights (or values folded earlier in the same pass), it is
deterministic, has no nested graphs, is not a `DequantizeLinear` (an int8 weight keeps its scale)
and none of its outputs must stay an op output (graph outputs, tensors nested graphs read). Its
arrays come from the ONNX reference evaluator, one node at a time (shape arithmetic from the same
numpy calls without it: `fold_fast`), when the size estimate (`fold_sizes`) and the result stay
within the byte limit.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import onnx

from xgraph.errors import XGraphError
from xgraph.ir import Op, Tensor
from xgraph.compiler.fold_fast import fast_fold
from xgraph.compiler.fold_memo import values_key
from xgraph.compiler.fold_sizes import estimated_output_bytes

NONDETERMINISTIC = frozenset({"Bernoulli", "Multinomial"})
#: Ops never folded: DequantizeLinear of a constant stays an int8 (int32 bias) weight with its scale.
KEEP_QUANTIZED = frozenset({"DequantizeLinear"})

_NO_VALUES: Mapping = {}


def nested_graphs(op: Op) -> list[tuple[str, Any]]:
    """(name, value) of `op`'s attributes that are graphs or lists of graphs."""
    return [(k, v) for k, v in op.get_onnx_attrs().items()
            if isinstance(v, onnx.GraphProto) or (isinstance(v, list) and v and isinstance(v[0], onnx.GraphProto))]


def refused_type(op_type: str) -> bool:
    """True for op types never folded: random, nondeterministic, or `KEEP_QUANTIZED` (an int8 weight keeps
    its scale and zero point: the device decides what it needs)."""
    return op_type.startswith("Random") or op_type in NONDETERMINISTIC or op_type in KEEP_QUANTIZED


def foldable_reading_values(op: Op, keep: "set[Tensor]") -> bool:
    """`foldable` for an op already known to read only weights and `pending` values."""
    if refused_type(op.type) or (op.graph.index().has_nested_graphs(op) and nested_graphs(op)):
        return False
    return keep.isdisjoint(op.get_output_tensors())


def foldable(op: Op, keep: "set[Tensor]", pending: "Mapping[Tensor, np.ndarray]" = _NO_VALUES) -> bool:
    """True when `op` may fold: every input a weight or in `pending`, and nothing else forbids it."""
    if not op.graph.index().reads_only_values(op, pending):
        return False  # the common case, and the cheapest test: asked first
    return foldable_reading_values(op, keep)


def evaluate(op: Op, values: "list[np.ndarray | None]", kernels: dict | None = None) -> list[np.ndarray] | None:
    """`op`'s outputs on its input `values` (None for omitted inputs) by the ONNX reference evaluator;
    None when it cannot run the op.

    `kernels` (one dict per fold) keeps the evaluator of each kind of node: building one costs
    about four times running it, and a transformer's blocks repeat the same Shape/Gather/Concat
    nodes thousands of times."""
    fast = fast_fold(op, values)  # shape arithmetic: the evaluator's own numpy call, without the evaluator
    if fast is not None:
        return fast
    from xgraph.kernels.reference import make_reference_kernel
    inputs = op.get_input_tensors()
    graph = op.graph
    try:
        attributes = op.attribute_protos()
        omitted = [i for i, t in enumerate(inputs) if t is None]
        key = (op.type, op.domain, tuple(a.SerializeToString(deterministic=True) for a in attributes),
               tuple(sorted(graph.opset_imports.items())), len(inputs), len(op.get_output_tensors()),
               tuple(omitted), id(graph.functions), len(graph.functions))
        seen = ("outputs", key, values_key(values)) if kernels is not None else None
        if seen is not None and seen[2] is not None and seen in kernels:
            return kernels[seen]  # the same node on the same small values: the same results
        kernel = kernels.get(key) if kernels is not None else None
        if kernel is None:
            kernel = make_reference_kernel(op.type, op.domain, attributes, graph.opset_imports, len(inputs),
                                           len(op.get_output_tensors()), graph.functions, omitted_inputs=omitted)
            if kernels is not None:
                kernels[key] = kernel
        with np.errstate(all="ignore"):  # the model's own arithmetic (T5's log(0) in a branch Where drops)
            results = kernel(*values)
    except XGraphError:
        return None  # the evaluator cannot run it (custom op, bad data): it stays an op
    if len(results) != len(op.get_output_tensors()) or not all(isinstance(r, np.ndarray) for r in results):
        return None
    arrays = [np.asarray(r) for r in results]
    if seen is not None and seen[2] is not None:
        kernels[seen] = arrays  # weights hold read-only views: sharing the arrays is safe
    return arrays


def fold_values(op: Op, values: "list[np.ndarray | None]", kernels: dict, max_bytes: int) -> list[np.ndarray] | None:
    """The arrays `op` folds to on `values`, or None when it does not fold (size unknown or too large,
    or the evaluator cannot run it)."""
    estimate = estimated_output_bytes(op, values)  # from the input values, before anything is allocated
    if estimate is None or estimate > max_bytes:
        return None
    arrays = evaluate(op, values, kernels)
    if arrays is None or sum(a.nbytes for a in arrays) > max_bytes:
        return None
    return arrays


__all__ = ["KEEP_QUANTIZED", "NONDETERMINISTIC", "evaluate", "fold_values", "foldable", "foldable_reading_values",
           "nested_graphs", "refused_type"]
