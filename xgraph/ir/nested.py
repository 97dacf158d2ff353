"""Nested graphs (If/Loop/Scan bodies): which outer tensors they read by name.

ONNX lets a body read any tensor of an enclosing graph by name without listing it as an
input of the op. Those reads are real dependencies: the op must run after their producers,
a subgraph holding the op needs them as inputs, and a runner must feed them. xgraph calls
them the op's implicit inputs.
"""
from __future__ import annotations

from typing import Iterable

import onnx


GRAPH_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


def graphs_of(values: Iterable) -> list[onnx.GraphProto]:
    """The GraphProtos among attribute values (single graphs and lists of graphs)."""
    out: list[onnx.GraphProto] = []
    for v in values:
        if isinstance(v, onnx.GraphProto):
            out.append(v)
        elif isinstance(v, list):
            out.extend(g for g in v if isinstance(g, onnx.GraphProto))
    return out


def free_names(graph: onnx.GraphProto) -> set[str]:
    """Names `graph` (or any graph nested in it) reads without defining them. O(size of the body)."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {s.values.name for s in graph.sparse_initializer}
    used = {v.name for v in graph.output}
    for node in graph.node:
        defined.update(node.output)
        used.update(node.input)
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                used |= free_names(a.g)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    used |= free_names(g)
    return (used - defined) - {""}


def outer_names(values: Iterable) -> list[str]:
    """Sorted outer-scope names read by the graphs among `values`."""
    names: set[str] = set()
    for g in graphs_of(values):
        names |= free_names(g)
    return sorted(names)
