"""The data-propagation budget decided from the importer's columns (one pass computing only the bounds the
length cone wants) equals the budget decided from the protos (every bound of every cone op, iterated),
on random graphs of shape arithmetic."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from xgraph.ir.onnx.inference_budget import data_propagation_is_bounded
from xgraph.ir.onnx.nodes import Nodes

#: op type -> number of inputs it reads (from tensors made before it)
ARITY = {"Shape": 1, "Size": 1, "Add": 2, "Sub": 2, "Mul": 2, "Div": 2, "Concat": 3, "Max": 2, "Gather": 2,
         "Unsqueeze": 2, "Reshape": 2, "ConstantOfShape": 1, "Expand": 2, "Range": 3, "Tile": 2, "Pad": 2,
         "Cast": 1, "TopK": 2, "Relu": 1, "Identity": 1}


@st.composite
def shape_graphs(draw):
    import numpy as np
    names = ["x", "k2", "k5", "half"]
    inits = [numpy_helper.from_array(np.array([2], np.int64), "k2"),
             numpy_helper.from_array(np.array([5, 7], np.int64), "k5"),
             numpy_helper.from_array(np.array(0.5, np.float32), "half")]
    nodes = []
    for i in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["Constant", *ARITY]))
        out = f"t{i}"
        if kind == "Constant":
            nodes.append(helper.make_node("Constant", [], [out], value_ints=draw(st.lists(st.integers(0, 40),
                                                                                        min_size=1, max_size=3))))
        else:
            ins = [draw(st.sampled_from(names)) for _ in range(ARITY[kind])]
            outs = [out, f"{out}_i"] if kind == "TopK" else [out]
            nodes.append(helper.make_node(kind, ins, outs))
            names += outs[1:]
        names.append(out)
    if draw(st.booleans()):
        nodes = draw(st.permutations(nodes))  # file order not topological: the iterated fixpoint decides
    graph = helper.make_graph(nodes, "shapes", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                              [helper.make_tensor_value_info(names[-1], TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape_graphs(), st.sampled_from([2, 8, 64, 1 << 10, 1 << 20]))
def test_the_columns_decide_what_the_protos_decide_on_random_shape_arithmetic(model, limit):
    columns = Nodes(model.graph.node, "m")
    assert data_propagation_is_bounded(model, 4, limit, top=columns) == data_propagation_is_bounded(model, 4, limit)


@pytest.mark.parametrize("order", ["producers first", "readers first"])
def test_a_length_from_doubled_shape_values_is_caught_either_way(order):
    """Shape(x) doubled six times reaches 4 * 64 = 256: over a limit of 100, under one of 1000."""
    nodes = [helper.make_node("Shape", ["x"], ["v0"])]
    nodes += [helper.make_node("Add", [f"v{i}", f"v{i}"], [f"v{i + 1}"]) for i in range(6)]
    nodes += [helper.make_node("ConstantOfShape", ["v6"], ["y"])]
    graph = helper.make_graph(nodes if order == "producers first" else nodes[::-1], "doubled",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    columns = Nodes(model.graph.node, "m")
    assert not data_propagation_is_bounded(model, 4, 100, top=columns)
    # in file order one pass settles it; readers first, 8 ops need more passes than the fixpoint takes: refused
    assert data_propagation_is_bounded(model, 4, 1000, top=columns) == (order == "producers first")
    assert data_propagation_is_bounded(model, 4, 1000) == (order == "producers first")
