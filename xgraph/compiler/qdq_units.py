"""QDQ units: a DequantizeLinear -> op -> QuantizeLinear pattern placed as one op.

A QDQ model (onnxruntime's quantize_static, Vitis AI's vai_q_onnx, Ascend AMCT) wraps each
float op in DequantizeLinear (DQ) on its inputs and QuantizeLinear (Q) on its outputs; an int8
device runs the whole pattern as one integer op (QLinearConv and kin). Placement must therefore
never split it: a DQ on AICPU feeding a Conv on AI Core moves a float tensor between devices and
loses what the device was given the quantization for.

`qdq_units` finds the units (pure): every op that is not a Q or DQ (the unit's *op*) takes

- the DQ ops producing its inputs: constant weights (int8) and biases (int32), and activation
  DQs (a DQ read by several ops joins them all into one unit, so it stays with each reader);
- the Q ops reading its outputs.

A Q whose input no unit op produces (the model's input quantizer) joins the unit of its first DQ
reader (other readers' units read its int8 tensor, as they read any unit's; joining them all
would make one unit of a Conv and the residual Add beside it); a DQ no unit op reads (the
model's dequantized output) joins the unit of its Q. So the
tensors between units are the quantized (int8) ones, and no Q or DQ is ever alone.
`bind_qdq_units` merges each unit's unassigned one-op children into one unassigned child
before placement (as `bind_nested_graph_inputs` does), so first fit sees the unit: a device
takes all of it or none. A unit a merge would make cyclic is left as it was.

`unit_label` names a unit's op for the report: "Conv (int8, per-channel)".
"""
from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING

import numpy as np

from xgraph.errors import GraphError

if TYPE_CHECKING:
    from xgraph.ir import Graph, Op, Subgraph

QDQ_TYPES = frozenset({"QuantizeLinear", "DequantizeLinear"})
_TYPE = attrgetter("type")
#: bits of each quantized element type (labels name both types when weights and activations differ)
_WIDTH = {"int4": 4, "uint4": 4, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16}


class _Sets:
    """Union-find over ops."""

    def __init__(self) -> None:
        self.parent: dict["Op", "Op"] = {}

    def find(self, op: "Op") -> "Op":
        self.parent.setdefault(op, op)
        while self.parent[op] is not op:
            self.parent[op] = self.parent[self.parent[op]]
            op = self.parent[op]
        return op

    def union(self, a: "Op", b: "Op") -> None:
        ra, rb = self.find(a), self.find(b)
        if ra is not rb:
            self.parent[rb] = ra


def _is_qdq(op: "Op") -> bool:
    return op.type in QDQ_TYPES and op.domain in ("", "ai.onnx")


def qdq_units(graph: "Graph") -> list[list["Op"]]:
    """The QDQ units of `graph` with more than one op, each in topological order; pure."""
    if QDQ_TYPES.isdisjoint(map(_TYPE, graph.get_ops())):
        return []  # asked of the op types in C: most graphs have no Q/DQ at all
    ops = graph.toposort()
    if not any(_is_qdq(op) for op in ops):
        return []
    sets = _Sets()
    for op in ops:
        if _is_qdq(op):
            continue
        for t in op.get_input_tensors():
            if t is not None and t.producer is not None and t.producer.type == "DequantizeLinear" and _is_qdq(t.producer):
                sets.union(op, t.producer)
        for reader in op.get_fanout_ops():
            if reader.type == "QuantizeLinear" and _is_qdq(reader):
                sets.union(op, reader)
    in_unit = {sets.find(op) for op in ops if not _is_qdq(op)}

    def anchored(op: "Op") -> bool:
        return sets.find(op) in in_unit

    for op in ops:  # model-input quantizers (Q -> DQ with no op before): join their first DQ reader
        if op.type == "QuantizeLinear" and _is_qdq(op) and not anchored(op):
            reader = next((r for r in op.get_fanout_ops() if r.type == "DequantizeLinear"), None)
            if reader is not None:
                sets.union(reader, op)
    for op in reversed(ops):  # dequantized model outputs (Q -> DQ with no op after): join their Q
        if op.type == "DequantizeLinear" and _is_qdq(op) and not anchored(op):
            for t in op.get_input_tensors()[:1]:
                if t is not None and t.producer is not None and t.producer.type == "QuantizeLinear":
                    sets.union(t.producer, op)
    groups: dict["Op", list["Op"]] = {}
    for op in ops:
        groups.setdefault(sets.find(op), []).append(op)
    return [g for g in groups.values() if len(g) > 1]


def bind_qdq_units(graph: "Graph") -> list["Subgraph"]:
    """Merge each QDQ unit's unassigned children into one unassigned child; returns the merged children.

    A unit part of which a plugin already took is left alone (the plugin's subgraph owns what it
    took); a unit whose merge would make the children graph cyclic is merged per op instead."""
    root = graph.get_root_subgraph()
    merged: list["Subgraph"] = []
    for unit in qdq_units(graph):
        children = {root.find_child_subgraph_by_op(op) for op in unit}
        if None in children or any(c.has_attr("device") for c in children) or len(children) == 1:
            continue
        try:
            merged.append(root.merge_children(children))
        except GraphError:
            merged += _merge_per_op(root, unit)
    return merged


def _merge_per_op(root: "Subgraph", unit: list["Op"]) -> list["Subgraph"]:
    """Fallback for a unit that is not convex: each op with its own constant DQs and output Qs."""
    out = []
    for op in unit:
        if _is_qdq(op):
            continue
        part = {op} | {t.producer for t in op.get_input_tensors()
                       if t is not None and t.producer in unit and t.producer.type == "DequantizeLinear"
                       and all(i is None or i.is_const for i in t.producer.get_input_tensors())}
        part |= {r for r in op.get_fanout_ops() if r in unit and r.type == "QuantizeLinear"}
        children = {root.find_child_subgraph_by_op(o) for o in part}
        if len(children) > 1 and None not in children:
            try:
                out.append(root.merge_children(children))
            except GraphError:
                continue  # left as single ops: placement still decides each on its own
    return out


def unit_label(op: "Op") -> str:
    """"Conv (int8, per-channel)" for a unit's op with a quantized weight, "Add (int8)" for one reading
    quantized activations only, "Conv (int8 weights, int16 activations, per-tensor)" where the two
    widths differ, "Relu (int8 output)" for one reading a float tensor and quantizing its result;
    "" for a Q/DQ or an op outside any unit."""
    if _is_qdq(op):
        return ""
    dqs = [t.producer for t in op.get_input_tensors()
           if t is not None and t.producer is not None and t.producer.type == "DequantizeLinear"]
    if not dqs:  # a float input (Sum -> Relu -> Q): named by what it quantizes to
        quantized = [out.dtype for reader in op.get_fanout_ops() if reader.type == "QuantizeLinear" and _is_qdq(reader)
                     for out in reader.get_output_tensors()[:1] if out is not None and out.dtype is not None]
        return f"{op.type} ({np.dtype(quantized[0]).name} output)" if quantized else ""

    def data(dq: "Op"):
        return dq.get_input_tensors()[0]

    weights = [dq for dq in dqs if data(dq) is not None and data(dq).is_const and data(dq).dtype != np.int32]
    activations = [dq for dq in dqs if dq not in weights and data(dq) is not None and not data(dq).is_const]

    def type_of(group) -> str | None:
        dtype = next((data(dq).dtype for dq in group if data(dq) is not None and data(dq).dtype is not None), None)
        return np.dtype(dtype).name if dtype is not None else None

    weight_type, activation_type = type_of(weights), type_of(activations)
    bits = weight_type or activation_type or "int8"
    if not weights:
        return f"{op.type} ({bits})"
    if activation_type and _WIDTH.get(activation_type) != _WIDTH.get(weight_type):  # W8A16, W4A8, ...
        bits = f"{weight_type} weights, {activation_type} activations"
    per_channel = any(len(dq.get_input_tensors()) > 1 and dq.get_input_tensors()[1] is not None and
                      dq.get_input_tensors()[1].shape not in (None, (), (1,)) for dq in weights)
    return f"{op.type} ({bits}, {'per-channel' if per_channel else 'per-tensor'})"


__all__ = ["QDQ_TYPES", "bind_qdq_units", "qdq_units", "unit_label"]
