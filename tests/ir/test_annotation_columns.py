"""Annotation columns: the bulk writes placement and kernel annotation end with."""
from __future__ import annotations

import onnx
import pytest

from xgraph import Graph, XGraphError


def _graph() -> Graph:
    g = Graph("g")
    x = g.create_input("x", [2, 3])
    g.create_op("a", "Relu", inputs=[x])
    g.create_op("b", "Softmax", inputs=["a"], attrs={"axis": 1})
    g.create_op("c", "Neg", inputs=["b"])
    g.create_op("d", "Abs", inputs=["c"])
    g.set_outputs(["d"])
    return g


def _state(g: Graph) -> list:
    return [(op.name, dict(op.get_attrs()), [k for k in op.get_attrs() if op.is_annotation(k)]) for op in g.get_ops()]


def test_columns_equal_one_set_attr_per_op_and_key_in_key_order():
    g, oracle = _graph(), _graph()
    g.get_op("a").set_attr("device", "old", onnx_type=None)  # an annotation already there is overwritten
    oracle.get_op("a").set_attr("device", "old", onnx_type=None)
    g.get_op("b").set_attr("device", 3, onnx_type=onnx.AttributeProto.INT)  # an ONNX attribute of that name stays
    oracle.get_op("b").set_attr("device", 3, onnx_type=onnx.AttributeProto.INT)
    names = ["d", "b", "a"]
    devices, reasons = ["AICORE", "CPU", "AICPU"], ["", "why b", "why a"]
    g.set_op_annotation_columns([g.get_op(n) for n in names], {"device": devices, "placement_reason": reasons})
    for name, device, reason in zip(names, devices, reasons):
        op = oracle.get_op(name)
        if not op.has_attr("device") or op.is_annotation("device"):
            op.set_attr("device", device, onnx_type=None)
    for name, reason in zip(names, reasons):
        oracle.get_op(name).set_attr("placement_reason", reason, onnx_type=None)
    assert _state(g) == _state(oracle)
    assert g.get_op("b").get_attr("device") == 3 and not g.get_op("b").is_annotation("device")
    assert g.get_op("a").get_attr("device") == "AICPU" and list(g.get_op("a").get_attrs()) == ["device", "placement_reason"]
    assert not g.get_op("c").has_attr("device")


def test_columns_refuse_foreign_ops_bad_values_and_ragged_columns_changing_nothing():
    g, other = _graph(), _graph()
    ops = g.get_ops()
    before = _state(g)
    with pytest.raises(XGraphError, match="not an op of it"):
        g.set_op_annotation_columns([ops[0], other.get_ops()[0]], {"device": ["CPU", "CPU"]})
    with pytest.raises(XGraphError, match="unsupported type object"):
        g.set_op_annotation_columns(ops[:2], {"device": ["CPU", "CPU"], "kernel": ["numpy", object()]})
    with pytest.raises(XGraphError, match="one value per op"):
        g.set_op_annotation_columns(ops[:2], {"device": ["CPU", "CPU"], "kernel": ["numpy"]})
    assert _state(g) == before
    g.set_op_annotation_columns(ops[:2], {"kernel": [["a", 1], {"k": 2.0}]})
    assert ops[0].get_attr("kernel") == ["a", 1] and ops[1].get_attr("kernel") == {"k": 2.0}
