"""Read-only facts about one op that whole-graph passes ask of thousands of ops, each in one step.

Constant folding asks, for every op it looks at, whether its inputs are all weights (or values
folded earlier in the same pass), what those values are, and what its attributes and output types
are, as a key for reusing an earlier result. Spelled with the general accessors (`get_input_tensors`,
`get_onnx_attrs`, `get_attr_kind`) each question copies lists and dicts; these read the op once.
Nothing here changes the graph.
"""
from __future__ import annotations

from itertools import chain
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Container, Iterable, Mapping, Sequence

from xgraph.ir.op_order import TABLE_ORDER
from xgraph.ir.weight_edits import fed_positions

if TYPE_CHECKING:
    import numpy as np

    from xgraph.ir.graph_core import GraphCore
    from xgraph.ir.op import Op
    from xgraph.ir.tensor import Tensor

_NONE: "Mapping" = {}


def reads_only_values(op: "Op", pending: "Mapping[Tensor, Any]" = _NONE) -> bool:
    """True when every input of `op` (omitted optionals aside) is a weight or a key of `pending`
    (values a pass computed for tensors it has not turned into weights yet)."""
    for t in op._inputs:
        if t is not None and t._data is None and t not in pending:
            return False
    return True


def known_values(op: "Op", pending: "Mapping[Tensor, np.ndarray]") -> "list[np.ndarray | None] | None":
    """The arrays `op` reads, in input order (a weight's data, else `pending[t]`; None for an omitted
    input), or None when some input is neither a weight nor in `pending`: one look at the inputs."""
    values = []
    for t in op._inputs:
        if t is None:
            values.append(None)
        elif t._data is not None:
            values.append(t._data)
        else:
            value = pending.get(t)
            if value is None:
                return None
            values.append(value)
    return values


def any_nested_graphs(graph: "GraphCore") -> bool:
    """True when some op of `graph` has a graph attribute (an If/Loop/Scan body)."""
    return bool(graph._nested_ops)


def has_nested_graphs(op: "Op") -> bool:
    """True when some attribute of `op` is a graph (an If/Loop/Scan body): the graph's own index, no attribute walk."""
    return op in op._graph._nested_ops


def fold_identity(op: "Op") -> "tuple[tuple, tuple, tuple]":
    """(key, values, output types) of `op`, in one call. The key is (type, domain, attribute names, their
    kinds, the ids of their values), a hashable tuple: two ops with equal keys have equal attributes as
    long as `values` (the attribute values, which the caller holds on to with the key) stays alive, so
    no id is reused; ops with equal attributes may still have different keys. The output types are
    ((shape, dtype) per output), as inferred."""
    attrs = op._attrs
    values = tuple(attrs.values())
    return ((op.type, op.domain, tuple(attrs), tuple(op._attr_types.values()), tuple(map(id, values))), values,
            tuple([(t._shape, t._dtype) for t in op._outputs]))


def order_survives_removals(graph: "GraphCore") -> bool:
    """True when `graph.toposort()` is the table order and stays so, less the removed ops, after edits that
    remove ops or add weights (no op has nested graphs, and the table order is known topological): an
    order taken before such edits is then the order after them, restricted to what is left."""
    graph.toposort()  # finds (and caches) whether the table order is topological
    return not graph._nested_ops and bool(graph._cache.get(TABLE_ORDER))


def creation_number(op: "Op") -> int:
    """The op's creation number: along a table order `order_survives_removals` vouches for, it rises with
    the topological position (so it can stand for the position without a map of every op)."""
    return op._seq


def value_fed_positions(ops: "Sequence[Op]", pending: "Mapping[Tensor, Any]", skip: "Container[Op]") -> "list[int]":
    """Positions in `ops` of the ops not in `skip` whose inputs (omitted optionals aside) are all weights or
    keys of `pending`, in order (`weight_edits.weight_fed_positions` with pending values)."""
    return [i for i in fed_positions(ops, pending) if ops[i] not in skip]


_OUTPUTS = attrgetter("_outputs")
_SHAPE = attrgetter("_shape")


def ops_of_types(ops: "Sequence[Op]", types: "Container[str]") -> "list[Op]":
    """The ops of `ops` whose type is in `types`, in order."""
    return [op for op in ops if op.type in types]


def distinct_output_shapes(ops: "Iterable[Op]") -> set:
    """The distinct shapes (tuples, or None when unknown) of the outputs of `ops`, read in C."""
    return set(map(_SHAPE, chain.from_iterable(map(_OUTPUTS, ops))))


__all__ = ["any_nested_graphs", "creation_number", "distinct_output_shapes", "fold_identity", "has_nested_graphs",
           "known_values", "ops_of_types", "order_survives_removals", "reads_only_values", "value_fed_positions"]
