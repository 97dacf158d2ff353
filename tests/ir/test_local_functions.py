"""Model-local functions are expanded at import, each op named by its call chain, and run like onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph import Graph
from xgraph.ir.links import check_links
from xgraph.partition import filter as filter_subgraphs
from xgraph.partition import merge_subgraph

OPSET = [helper.make_opsetid("", 18), helper.make_opsetid("blocks", 1)]
HIDDEN = 8


def _function(name, inputs, outputs, nodes, attributes=()):
    return helper.make_function("blocks", name, inputs, outputs, nodes, OPSET, attributes=list(attributes))


def decoder_with_functions() -> onnx.ModelProto:
    """Two decoder blocks, each a call of `Block`, which calls `Norm` (attribute `eps`, referenced
    inside) and `Mlp`, which calls `Act` (3 levels of nesting, 4 functions, 6 calls per block)."""
    eps_const = helper.make_node("Constant", [], ["eps"], name="eps_const")
    eps_const.attribute.append(helper.make_attribute_ref("value_float", onnx.AttributeProto.FLOAT))
    eps_const.attribute[0].ref_attr_name = "eps"
    norm = _function("Norm", ["x"], ["y"], [
        helper.make_node("Mul", ["x", "x"], ["sq"], name="square"),
        helper.make_node("ReduceMean", ["sq", "axes"], ["ms"], name="mean"),
        eps_const,
        helper.make_node("CastLike", ["eps", "ms"], ["eps_t"], name="cast_eps"),
        helper.make_node("Add", ["ms", "eps_t"], ["var"], name="add_eps"),
        helper.make_node("Sqrt", ["var"], ["rms"], name="sqrt"),
        helper.make_node("Div", ["x", "rms"], ["y"], name="scale")], attributes=["eps"])
    norm.node.insert(1, helper.make_node("Constant", [], ["axes"], name="axes",
                                         value=numpy_helper.from_array(np.array([-1], np.int64))))
    act = _function("Act", ["x"], ["y"], [helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
                                          helper.make_node("Mul", ["x", "s"], ["y"], name="gate")])
    mlp = _function("Mlp", ["x", "w_up", "w_down"], ["y"], [
        helper.make_node("MatMul", ["x", "w_up"], ["h"], name="up"),
        helper.make_node("Act", ["h"], ["a"], domain="blocks", name="act"),
        helper.make_node("MatMul", ["a", "w_down"], ["y"], name="down")])
    block = _function("Block", ["x", "w_up", "w_down"], ["y"], [
        helper.make_node("Norm", ["x"], ["n"], domain="blocks", name="norm", eps=1e-3),
        helper.make_node("Mlp", ["n", "w_up", "w_down"], ["m"], domain="blocks", name="mlp"),
        helper.make_node("Add", ["x", "m"], ["y"], name="residual")])
    rng = np.random.default_rng(0)
    weights = []
    nodes = []
    x = "x"
    for i in range(2):
        up = numpy_helper.from_array(rng.standard_normal((HIDDEN, 2 * HIDDEN)).astype(np.float32), f"up{i}")
        down = numpy_helper.from_array(rng.standard_normal((2 * HIDDEN, HIDDEN)).astype(np.float32), f"down{i}")
        weights += [up, down]
        nodes.append(helper.make_node("Block", [x, f"up{i}", f"down{i}"], [f"h{i}"], domain="blocks",
                                      name=f"block{i}"))
        x = f"h{i}"
    nodes.append(helper.make_node("Relu", [x], ["y"], name="head"))
    graph = helper.make_graph(nodes, "fn_decoder", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, HIDDEN])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, HIDDEN])], weights)
    model = helper.make_model(graph, opset_imports=OPSET, functions=[norm, act, mlp, block])
    onnx.checker.check_model(model, full_check=True)
    return model


def test_calls_are_expanded_and_named_by_their_call_chain():
    model = decoder_with_functions()
    before = model.SerializeToString()
    graph = Graph.from_onnx(model)
    check_links(graph)
    assert model.SerializeToString() == before  # the caller's proto is not changed
    names = {op.name for op in graph.get_ops()}
    assert {"block0/norm/eps_const", "block0/mlp/act/gate", "block1/mlp/up", "block1/residual", "head"} <= names
    assert not {op.domain for op in graph.get_ops()} - {""}  # no call is left
    assert graph.functions == []  # every function was called, so none is kept
    eps = graph.get_op("block1/norm/eps_const").get_attr("value_float")
    assert eps == pytest.approx(1e-3)  # the attribute reference took the call's value
    assert graph.get_tensor("y").shape == (2, HIDDEN)


def test_a_block_is_selected_by_its_scope():
    graph = xgraph.load(decoder_with_functions().SerializeToString())
    graph.get_root_subgraph().create_child_subgraph()
    block1 = filter_subgraphs(graph, lambda sgs: {sg for sg in sgs
                                                 if all(op.name.startswith("block1/") for op in sg.get_ops())})
    (merged,) = merge_subgraph(block1)
    assert {op.name.split("/")[0] for op in merged.get_ops()} == {"block1"}
    assert merged.get_op_num() == 13  # Norm 8, Mlp 4 (Act 2), the residual Add


@pytest.mark.parametrize("mode", ["run", "sim", "ref"])
def test_a_function_model_runs_equal_to_onnxruntime(mode):
    ort = pytest.importorskip("onnxruntime")
    model = decoder_with_functions()
    x = np.random.default_rng(1).standard_normal((2, HIDDEN)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    compiled = xgraph.compile(model)
    with xgraph.create_graph_runner(compiled, mode=mode) as runner:
        np.testing.assert_allclose(runner.run({"x": x})[0], expected, rtol=1e-4, atol=1e-4)


def test_functions_nobody_calls_are_kept():
    model = decoder_with_functions()
    model.graph.node[0].op_type = "Relu"  # block0 no longer calls Block
    del model.graph.node[0].input[1:]
    model.graph.node[0].ClearField("domain")
    graph = Graph.from_onnx(model)
    assert [f.name for f in graph.functions] == []  # block1 calls Block, which calls the rest
    model.graph.node[1].op_type = "Relu"
    model.graph.node[1].ClearField("domain")
    del model.graph.node[1].input[1:]
    graph = Graph.from_onnx(model)
    assert sorted(f.name for f in graph.functions) == ["Act", "Block", "Mlp", "Norm"]


def test_a_call_with_more_inputs_than_its_function_is_refused_naming_it():
    from xgraph.errors import ModelFileError
    model = decoder_with_functions()
    model.graph.node[0].input.append("x")  # Block declares three inputs; block0 now passes four
    with pytest.raises(ModelFileError, match="node 'block0' in the main graph calls function 'Block' with 4 input"):
        Graph.from_onnx(model.SerializeToString())
