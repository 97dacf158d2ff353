"""Annotations written to many ops at once, as columns: the compile stages' bulk op writes.

Placement and kernel annotation end by giving every op of a 100,000-op graph one value per
annotation key ("device", "placement_reason", "kernel"). Written op by op (`op.set_attr(key,
v, onnx_type=None)`, or through a dict per key) that is several Python calls and a dict
entry per op and key; here the values come as one list per key, lined up with one list of
ops, the checks run as C passes over the columns and the writes as one plain loop per key
(an op carrying an ONNX attribute of that name keeps it).

`write_columns` is what `GraphCore.set_op_annotations` and `set_op_annotation_columns` run;
it checks everything first and then writes, so an invalid op or value changes nothing.
O(number of ops x number of keys).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

from xgraph.errors import GraphError
from xgraph.ir.attr_store import check_attr_value
from xgraph.ir.op import ANNOTATION

if TYPE_CHECKING:
    from xgraph.ir.op import Op

def write_columns(graph: Any, ops: "Sequence[Op]", columns: "Mapping[str, Sequence[Any]]") -> None:
    """Set annotation `key` to `values[i]` on `ops[i]`, for each (key, values) of `columns`, keys in order; all or nothing.

    `graph` is the GraphCore the ops must belong to (its `_leaf_of` lists them). An op that
    carries an ONNX attribute named `key` keeps it. A later occurrence of an op in `ops` wins.
    """
    leaf_of = graph._leaf_of
    if not all(map(leaf_of.__contains__, ops)):  # every op of the graph has a leaf; checked in C
        op = next(op for op in ops if op not in leaf_of)
        raise GraphError(f"graph {graph.name!r}: set_op_annotations got {op!r}, which is not an op of it")
    for key, values in columns.items():
        if len(values) != len(ops):
            raise GraphError(f"graph {graph.name!r}: annotation {key!r} has {len(values)} values for {len(ops)} ops; "
                             "give one value per op")
        if not set(map(type, values)) <= {str}:  # the usual values (devices, reasons, kernels) are all str
            for op, value in zip(ops, values):
                check_attr_value(f"op {op.name!r}", key, value)
    for key, values in columns.items():  # one plain loop per key: no per-op dict or call to build
        for op, value in zip(ops, values):
            kinds = op._attr_types
            if key not in kinds or kinds[key] is ANNOTATION:  # absent, or an annotation already
                op._attrs[key] = value
                kinds[key] = ANNOTATION


__all__ = ["write_columns"]
