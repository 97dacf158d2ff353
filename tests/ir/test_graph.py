"""Graph, Op and Tensor: construction, links, attributes, mutation that refuses and changes nothing."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

from xgraph import Graph, XGraphError
from xgraph.ir.links import check_links


def small_graph() -> Graph:
    g = Graph("net")
    x = g.create_input("x", (1, 3, 8, 8), np.float32)
    w = g.create_const("w", np.ones((4, 3, 3, 3), np.float32))
    conv = g.create_op("conv", "Conv", {"pads": [1, 1, 1, 1]}, [x, w])
    relu = g.create_op("relu", "Relu", inputs=[conv.get_output_tensor()])
    add = g.create_op("add", "Add", inputs=[relu.get_output_tensor(), conv.get_output_tensor()])
    g.set_outputs([add.get_output_tensor()])
    return g


def test_links_both_ways():
    g = small_graph()
    check_links(g)
    conv, relu, add = (g.get_op(n) for n in ("conv", "relu", "add"))
    assert [t.name for t in conv.get_input_tensors()] == ["x", "w"]
    assert conv.get_fanout_ops() == [relu, add]
    assert add.get_input_ops() == [relu, conv]
    assert g.get_tensor("conv").consumers == [relu, add]
    assert g.get_tensor("w").is_const and g.get_tensor("w").producer is None
    assert [t.name for t in g.get_input_tensors()] == ["x"]  # weights are not inputs
    assert [op.name for op in g.toposort()] == ["conv", "relu", "add"]


def test_same_tensor_twice_counts_both_uses():
    g = Graph()
    x = g.create_input("x", (2,))
    sq = g.create_op("sq", "Mul", inputs=[x, x])
    assert x.consumers == [sq]
    sq.set_input(1, None)
    assert x.consumers == [sq]  # still used by slot 0
    sq.set_input(0, None)
    assert x.consumers == []
    check_links(g)


def test_multi_output_and_omitted_inputs():
    g = Graph()
    x = g.create_input("x", (4, 6))
    split = g.create_op("split", "Split", {"axis": 1}, [x], num_outputs=3)
    assert [t.name for t in split.get_output_tensors()] == ["split:0", "split:1", "split:2"]
    clip = g.create_op("clip", "Clip", inputs=[split.get_output_tensors()[1], None, g.create_const("hi", np.float32(1))])
    assert clip.get_input_tensors()[1] is None
    assert clip.get_input_ops() == [split]
    check_links(g)


@pytest.mark.parametrize("bad", [
    lambda g: g.create_op("conv", "Relu", inputs=["x"]),            # duplicate op name
    lambda g: g.create_op("r2", "Relu", inputs=["nope"]),           # unknown input
    lambda g: g.create_op("r3", "Relu", inputs=["x"], outputs=["relu"]),  # output name taken
    lambda g: g.create_op("", "Relu"),                              # empty name
    lambda g: g.remove_op("conv"),                                  # outputs still consumed
    lambda g: g.remove_op("add"),                                   # a graph output
    lambda g: g.get_op("relu").set_input(0, g.get_tensor("add")),   # would make a cycle
    lambda g: g.create_input("x", (1,)),                            # duplicate tensor name
    lambda g: g.get_op("missing"),
])
def test_refused_mutations_change_nothing(bad):
    g = small_graph()
    before = g.to_onnx().SerializeToString()
    with pytest.raises(XGraphError):
        bad(g)
    assert g.to_onnx().SerializeToString() == before
    check_links(g)


def test_foreign_tensor_refused():
    g, h = small_graph(), small_graph()
    with pytest.raises(XGraphError, match="not a tensor of this graph"):
        g.create_op("r", "Relu", inputs=[h.get_tensor("x")])


def test_remove_op_and_tree_stays_a_partition():
    g = small_graph()
    extra = g.create_op("neg", "Neg", inputs=["x"])
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    g.remove_op(extra)
    assert not g.has_op("neg") and not g.has_tensor("neg")
    assert root.get_children_num() == 3
    check_links(g)


def test_op_created_after_partition_gets_its_own_child():
    g = small_graph()
    g.get_root_subgraph().create_child_subgraph()
    op = g.create_op("late", "Neg", inputs=["x"])
    assert g.get_leaf_subgraph(op).get_parent() is g.get_root_subgraph()
    check_links(g)


def test_attributes_onnx_vs_annotation():
    g = small_graph()
    conv = g.get_op("conv")
    conv.set_attr("strides", [1, 1])       # declared by Conv's schema: an ONNX attribute
    conv.set_attr("device", "AICORE")      # not in the schema: an annotation
    assert conv.get_attr("strides") == [1, 1] and not conv.is_annotation("strides")
    assert conv.is_annotation("device")
    names = {a.name for a in g.to_onnx().graph.node[0].attribute}
    assert names == {"pads", "strides"}
    with pytest.raises(XGraphError, match="no attribute 'group'"):
        conv.get_attr("group")


def test_graph_and_tensor_attrs_reject_objects():
    g = small_graph()
    g.set_attr("k", {"a": "b"})
    assert g.get_attr("k") == {"a": "b"}
    with pytest.raises(XGraphError, match="unsupported type"):
        g.set_attr("bad", object())
    with pytest.raises(XGraphError):
        g.get_tensor("x").set_attr("bad", {1: 2})


def test_replace_uses_and_outputs():
    g = small_graph()
    neg = g.create_op("neg", "Neg", inputs=["relu"])
    g.replace_uses("relu", neg.get_output_tensor())
    assert g.get_op("add").get_input_tensors()[0] is neg.get_output_tensor()
    assert g.get_tensor("relu").consumers == [neg]
    check_links(g)


def test_toposort_deterministic_and_independent_of_rewiring():
    g = Graph()
    x = g.create_input("x", (1,))
    a = g.create_op("a", "Neg", inputs=[x])
    b = g.create_op("b", "Neg", inputs=[x])
    g.create_op("c", "Add", inputs=[a.get_output_tensor(), b.get_output_tensor()])
    a.set_input(0, b.get_output_tensor())  # a now comes after b
    check_links(g)
    order = [op.name for op in g.toposort()]
    assert order == ["b", "a", "c"] and order == [op.name for op in g.toposort()]
    onnx.checker.check_model(g.to_onnx())  # exported in a valid order


def test_isomorphism_finds_every_residual_match():
    g = Graph()
    x = g.create_input("x", (1, 4, 8, 8))
    w = g.create_const("w", np.ones((4, 4, 1, 1), np.float32))
    prev = x
    for i in range(3):
        c = g.create_op(f"c{i}", "Conv", inputs=[prev, w])
        r = g.create_op(f"r{i}", "Relu", inputs=[c.get_output_tensor()])
        a = g.create_op(f"a{i}", "Add", inputs=[prev, r.get_output_tensor()])
        prev = a.get_output_tensor()
    from xgraph import GraphTemplate
    t = GraphTemplate("res")
    conv = t.add_op("conv", {"Conv"})
    act = t.add_op("act", {"Relu", "Clip"}, inputs=[conv])
    t.add_op("add", {"Add"}, inputs=[act])
    matches = g.isomorphism(t)
    assert [(m["conv"].name, m["act"].name, m["add"].name) for m in matches] == \
        [("c0", "r0", "a0"), ("c1", "r1", "a1"), ("c2", "r2", "a2")]
    act.set_filter(lambda op: op.name != "r1")
    assert len(g.isomorphism(t)) == 2
    t.set_filter(lambda m: m["add"].name == "a2")
    assert [m["add"].name for m in g.isomorphism(t)] == ["a2"]


def test_template_two_branch_add():
    g = Graph()
    x = g.create_input("x", (4,))
    a = g.create_op("a", "Relu", inputs=[x])
    b = g.create_op("b", "Sigmoid", inputs=[x])
    g.create_op("s", "Add", inputs=[b.get_output_tensor(), a.get_output_tensor()])
    from xgraph import GraphTemplate
    t = GraphTemplate("two")
    l = t.add_op("l", {"Relu"})
    r = t.add_op("r", {"Sigmoid"})
    t.add_op("add", {"Add"}, inputs=[l, r])
    assert [(m["l"].name, m["r"].name, m["add"].name) for m in g.isomorphism(t)] == [("a", "b", "s")]
