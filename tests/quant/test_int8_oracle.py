"""unsigned_activations: int8 activations moved to uint8 (zero point + 128) change no value, only the type.

Oracle: onnxruntime with its optimizations off runs the model before and after; the floats the
DQs give back are the same and the moved integers are the old ones plus 128.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

from xgraph.runners.int8_numerics import unsigned_activations  # noqa: E402


def _model() -> onnx.ModelProto:
    """x -> Q (int8, z=-7) -> DQ -> Relu -> Q (int8, z=3, also a graph output) ; Q (per-axis) -> DQ -> Add."""
    inits = [numpy_helper.from_array(np.float32(0.02), "s1"), numpy_helper.from_array(np.int8(-7), "z1"),
             numpy_helper.from_array(np.float32(0.015), "s2"), numpy_helper.from_array(np.int8(3), "z2"),
             numpy_helper.from_array(np.array([0.01, 0.03, 0.02], np.float32), "s3"),
             numpy_helper.from_array(np.array([1, -2, 0], np.int8), "z3")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s1", "z1"], ["q1"], name="q1"),
             helper.make_node("DequantizeLinear", ["q1", "s1", "z1"], ["d1"], name="d1"),
             helper.make_node("Relu", ["d1"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "s2", "z2"], ["q2"], name="q2"),
             helper.make_node("QuantizeLinear", ["x", "s3", "z3"], ["q3"], name="q3", axis=1),
             helper.make_node("DequantizeLinear", ["q3", "s3", "z3"], ["d3"], name="d3", axis=1),
             helper.make_node("Add", ["d1", "d3"], ["y"], name="add")]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])
    outs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8]),
            helper.make_tensor_value_info("q2", TensorProto.INT8, [1, 3, 8, 8])]
    graph = helper.make_graph(nodes, "acts", [x], outs, inits,
                              value_info=[helper.make_tensor_value_info("q1", TensorProto.INT8, [1, 3, 8, 8])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _run(model: onnx.ModelProto, names, x):
    model = onnx.ModelProto.FromString(model.SerializeToString())
    known = {o.name for o in model.graph.output}
    model.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in known)
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return dict(zip(names, session.run(names, {"x": x})))


def test_only_per_tensor_int8_activations_read_by_their_own_dqs_move():
    model = _model()
    moved = unsigned_activations(model)
    zero_points = {t.name: numpy_helper.to_array(t) for t in moved.graph.initializer}
    by_name = {n.name: n for n in moved.graph.node}
    assert zero_points[by_name["q1"].input[2]].dtype == np.uint8 == zero_points[by_name["d1"].input[2]].dtype
    assert int(zero_points[by_name["q1"].input[2]]) == -7 + 128
    assert by_name["q2"].input[2] == "z2"  # a graph output keeps its type
    assert by_name["q3"].input[2] == by_name["d3"].input[2] == "z3"  # per-axis: left alone
    assert [v.type.tensor_type.elem_type for v in moved.graph.value_info if v.name == "q1"] == [TensorProto.UINT8]
    assert model.graph.node[0].input[2] == "z1"  # the model itself is not changed
    onnx.checker.check_model(moved)


def test_the_moved_model_computes_the_same_values():
    model, moved = _model(), unsigned_activations(_model())
    x = np.random.default_rng(0).uniform(-3, 3, (1, 3, 8, 8)).astype(np.float32)
    before, after = _run(model, ["y", "q2", "q1", "d1"], x), _run(moved, ["y", "q2", "q1", "d1"], x)
    assert after["q1"].dtype == np.uint8 and before["q1"].dtype == np.int8
    assert {0, 255} <= set(np.unique(after["q1"]).tolist())  # saturates at both ends, shifted with the values
    np.testing.assert_array_equal(after["q1"].astype(np.int16) - 128, before["q1"])
    for name in ("y", "q2", "d1"):
        np.testing.assert_array_equal(after[name], before[name])
