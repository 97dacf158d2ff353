"""What many ops and tensors are, read as columns in one pass: for stages that key every op of a graph.

Placement and kernel annotation give each op a signature (`xgraph.compiler.verdicts`) built
from its type, domain, ONNX attributes and, per input and output tensor, dtype, shape,
weight-ness and use. Read through the public `Op`/`Tensor` accessors that is several
method calls and a copied list or dict per op and per tensor; a 100,000-op graph pays for
it in every stage that signs ops. These functions read the same facts straight from the
IR's tables in one comprehension (a column per tensor fact, a row per op, its tensors
already numbered by the caller's table) and hand back new lists and tuples, so the caller
can keep them without being able to change the graph.

Both are pure and O(number of ops or tensors asked about, plus their attributes and links).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Hashable, Iterable, Mapping, NamedTuple

from xgraph.ir.op import ANNOTATION

if TYPE_CHECKING:
    import numpy as np

    from xgraph.ir.graph_core import GraphCore as Graph
    from xgraph.ir.op import Op
    from xgraph.ir.tensor import Tensor


#: (type, domain, key of the ONNX attribute pairs, input numbers, output numbers): see `op_rows`.
OpRow = tuple[str, str, Hashable, tuple[Hashable, ...], tuple[Hashable, ...]]


class TensorFacts(NamedTuple):
    """Per tensor of the graph (in creation order, as `Graph.get_tensors`): dtype, shape, whether it is
    a weight, and whether it is used (read by an op, or a graph output)."""

    tensors: list["Tensor"]
    dtypes: list["np.dtype | None"]
    shapes: list["tuple | None"]
    is_const: list[bool]
    used: list[bool]


def _onnx_items(op: "Op") -> tuple[tuple[str, Any], ...]:
    attrs, kinds = op._attrs, op._attr_types
    if ANNOTATION not in kinds.values() and kinds.keys() == attrs.keys():  # the usual op: no annotation
        return tuple(attrs.items())
    return tuple((k, v) for k, v in attrs.items() if kinds.get(k) is not ANNOTATION)


def op_rows(ops: Iterable["Op"], tensor_number: "Mapping[Tensor | None, Hashable]",
            attr_key: "Callable[[tuple[tuple[str, Any], ...]], Hashable]" = tuple) -> list[OpRow]:
    """Per op of `ops`, in order: (type, domain, `attr_key` of its ONNX attributes as (name, value) pairs in
    the op's own order, annotations left out (what `Op.get_onnx_attrs` holds; () for an op without any
    attribute, without calling `attr_key`), the numbers of its inputs, the numbers of its outputs), each
    tensor numbered by `tensor_number[t]` (an omitted optional input is looked up as None)."""
    number = tensor_number.__getitem__
    empty = ()
    return [(op.type, op.domain, attr_key(_onnx_items(op)) if op._attrs else empty, tuple(map(number, op._inputs)),
             tuple(map(number, op._outputs))) for op in ops]


def tensor_facts(graph: "Graph") -> TensorFacts:
    """The facts of every tensor of `graph`, one list per field."""
    tensors = list(graph._tensors.values())
    outputs = set(graph._outputs)
    return TensorFacts(tensors, [t._dtype for t in tensors], [t._shape for t in tensors],
                       [t._data is not None for t in tensors],
                       [bool(t._consumers) or t in outputs for t in tensors])


__all__ = ["OpRow", "TensorFacts", "op_rows", "tensor_facts"]
