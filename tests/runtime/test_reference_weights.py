"""The "ref" runner feeds the graph's large weights to the reference evaluator on every run
instead of letting it copy them when it is built (a 2.4 GB model ran in 7.0 GB, now 2.4 GB)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

import xgraph


def _model():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((64, 64)).astype(np.float32)  # 16 KiB: left out of the exported proto
    b = rng.standard_normal(64).astype(np.float32)  # 256 bytes: stays inside it
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 64])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w, b


def test_large_weights_are_fed_as_the_graphs_own_arrays():
    model, w, b = _model()
    graph = xgraph.compile(model)
    x = np.random.default_rng(6).standard_normal((3, 64)).astype(np.float32)
    with xgraph.create_graph_runner(graph, mode="ref") as runner:
        (device_runner,) = runner.runners.values()
        backend = device_runner._executor._backend
        assert set(backend._weights) == {"w"}
        assert backend._weights["w"] is graph.get_tensor("w").data  # the same array, not a copy
        evaluated = backend._evaluator.proto_.graph
        assert [t.name for t in evaluated.initializer] == ["b"] and "w" in [i.name for i in evaluated.input]
        (y,) = runner.run({"x": x})
    np.testing.assert_allclose(y, x.astype(np.float64) @ w + b, rtol=1e-5, atol=1e-5)


def test_weights_as_inputs_keeps_a_weight_already_listed_as_an_input_once():
    from xgraph.kernels.reference import weights_as_inputs
    model, w, _ = _model()
    model.graph.input.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [64, 64]))  # IR < 4 style
    out = weights_as_inputs(model, {"w": w})
    assert [i.name for i in out.graph.input] == ["x", "w"] and [t.name for t in out.graph.initializer] == ["b"]
    assert [t.name for t in model.graph.initializer] == ["w", "b"]  # the given model is not changed

