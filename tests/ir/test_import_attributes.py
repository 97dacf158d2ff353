"""Attributes repeated across nodes (decoded once per distinct attribute on import) stay each op's own."""
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph.errors import ModelFileError


def _model(nodes):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_ops_sharing_an_attribute_each_get_their_own_value():
    nodes = [helper.make_node("Transpose", ["x"], ["a"], name="t1", perm=[2, 0, 1]),
             helper.make_node("Transpose", ["a"], ["b"], name="t2", perm=[2, 0, 1]),
             helper.make_node("Softmax", ["b"], ["c"], name="s1", axis=1),
             helper.make_node("Softmax", ["c"], ["d"], name="s2", axis=1)]
    graph = xgraph.Graph.from_onnx(_model(nodes))
    t1, t2 = graph.get_op("t1"), graph.get_op("t2")
    assert t1.get_attr("perm") == t2.get_attr("perm") == [2, 0, 1]
    assert graph.get_op("s2").get_attr("axis") == 1
    t1.set_attr("perm", [1, 2, 0])
    assert t2.get_attr("perm") == [2, 0, 1]
    assert graph.get_tensor("d").shape == (3, 4, 2)  # (2, 3, 4) transposed by [2, 0, 1] twice
    exported = {n.name: [a for a in n.attribute] for n in graph.to_onnx().graph.node}
    assert exported["t2"][0].ints == [2, 0, 1] and exported["t2"][0].type == helper.AttributeProto.INTS


def test_a_repeated_attribute_on_a_later_node_is_still_refused():
    second = helper.make_node("Softmax", ["a"], ["b"], name="s2", axis=1)
    second.attribute.append(helper.make_attribute("axis", 1))
    nodes = [helper.make_node("Softmax", ["x"], ["a"], name="s1", axis=1), second]
    with pytest.raises(ModelFileError, match="node 's2' has attribute 'axis' twice"):
        xgraph.Graph.from_onnx(_model(nodes))
