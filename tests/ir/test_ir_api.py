"""The IR operations other stages use: copy, grouped merges, snapshot/restore, attribute kinds,
export that never mutates, and read-only weights. check_links after every mutation."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from xgraph import Graph, XGraphError
from xgraph.ir.links import check_links
from xgraph.ir.onnx.xmodel import to_model_proto


def small_graph() -> Graph:
    """x -> conv(w) -> relu -> add(relu, conv); a Constant; annotations and attrs everywhere."""
    g = Graph("net")
    g.create_input("x", (1, 3, 8, 8), np.float32)
    g.create_const("w", np.ones((4, 3, 3, 3), np.float32))
    for name, op_type, attrs, inputs in [("conv", "Conv", {"pads": [1, 1, 1, 1]}, ["x", "w"]),
                                         ("relu", "Relu", {}, ["conv"]), ("add", "Add", {}, ["relu", "conv"]),
                                         ("k", "Constant", {"value": np.arange(3, dtype=np.float32)}, [])]:
        g.create_op(name, op_type, attrs, inputs)
    g.set_outputs(["add"])
    g.get_op("conv").set_attr("device", "AICORE", onnx_type=None)
    g.get_op("conv").set_attr("note", {"why": [1, 2]}, onnx_type=None)
    g.get_tensor("relu").set_attr("layout", "NCHW")
    g.set_attr("origin", {"tool": "test"})
    return g


def saved(g: Graph) -> bytes:
    """Everything the graph holds (tree, attrs, opsets, model info, functions) as .xmodel bytes."""
    return to_model_proto(g).SerializeToString(deterministic=True)


# -- copy -------------------------------------------------------------------------------------------
def test_copy_is_deep_and_independent():
    g = small_graph()
    c = g.copy()
    check_links(c)
    assert type(c) is Graph and c is not g
    assert saved(c) == saved(g)
    assert all(a is not b for a, b in zip(c.get_ops(), g.get_ops()))
    c.get_op("conv").get_attr("pads").append(9)
    c.get_op("conv").get_attr("note")["why"].append(3)
    c.get_tensor("relu").set_attr("layout", "NHWC")
    c.create_op("extra", "Relu", inputs=["add"])
    check_links(c)
    assert g.get_op("conv").get_attr("pads") == [1, 1, 1, 1]
    assert g.get_op("conv").get_attr("note") == {"why": [1, 2]}
    assert g.get_tensor("relu").get_attr("layout") == "NCHW" and not g.has_op("extra")
    assert np.shares_memory(c.get_tensor("w").data, g.get_tensor("w").data)  # weights shared, never copied


def test_copy_drops_named_annotations_only_and_not_the_tree():
    g = small_graph()
    g.get_root_subgraph().create_child_subgraph()
    c = g.copy(drop_annotations=["device", "pads"])  # "pads" is an ONNX attribute: kept
    check_links(c)
    conv = c.get_op("conv")
    assert not conv.has_attr("device") and conv.get_attr("pads") == [1, 1, 1, 1] and conv.has_attr("note")
    assert c.get_root_subgraph().is_leaf
    assert conv.get_attr_kind("pads") == onnx.AttributeProto.INTS and conv.get_attr_kind("note") is None


def test_carries_annotations_sees_annotations_not_onnx_attributes():
    g = small_graph()
    assert g.index().carries_annotations(["device"]) and not g.index().carries_annotations(["pads", "kernel"])
    c = g.copy(drop_annotations=["device"])
    assert not c.index().carries_annotations(["device"])
    c.get_op("conv").set_attr("kernel", "numpy", onnx_type=None)
    assert c.index().carries_annotations(["device", "kernel"])


def test_attr_kind():
    g = small_graph()
    conv, k = g.get_op("conv"), g.get_op("k")
    assert conv.get_attr_kind("pads") == onnx.AttributeProto.INTS
    assert k.get_attr_kind("value") == onnx.AttributeProto.TENSOR
    assert conv.get_attr_kind("device") is None and conv.is_annotation("device")
    with pytest.raises(XGraphError, match="has no attribute 'nope'.*pads"):
        conv.get_attr_kind("nope")


# -- grouped merges -----------------------------------------------------------------------------------
def chain(n: int) -> Graph:
    g = Graph("chain")
    prev = g.create_input("x", (2,))
    for i in range(n):
        prev = g.create_op(f"n{i}", "Relu", inputs=[prev]).get_output_tensor()
    g.set_outputs([prev])
    g.get_root_subgraph().create_child_subgraph()
    return g


def test_merge_child_groups_applies_every_group_at_once():
    g = chain(6)
    root = g.get_root_subgraph()
    leaf = g.get_leaf_subgraph
    merged = root.merge_child_groups([[leaf("n0"), leaf("n1")], [leaf("n2")], [leaf("n3"), leaf("n4"), leaf("n5")]])
    check_links(g)
    assert [sorted(op.name for op in sg.get_ops()) for sg in merged] == [["n0", "n1"], ["n2"], ["n3", "n4", "n5"]]
    assert [sg.name for sg in merged] == ["subgraph_n0", "subgraph_n2", "subgraph_n3"]
    assert root.get_children() == set(merged)


@pytest.mark.parametrize("groups, message", [
    (lambda leaf: [[leaf("n0"), leaf("n2")]], "cycle"),                     # n1 sits between them
    (lambda leaf: [[leaf("n0"), leaf("n1")], [leaf("n1"), leaf("n2")]], "two merge groups"),
    (lambda leaf: [[leaf("n0"), leaf("n1")], []], "nothing to merge"),
    (lambda leaf: [[leaf("n3"), leaf("n4")], [leaf("n0"), "n1"]], "not a child"),
])
def test_merge_child_groups_all_or_nothing(groups, message):
    g = chain(5)
    before = saved(g)
    children = g.get_root_subgraph().get_children()
    with pytest.raises(XGraphError, match=message):
        g.get_root_subgraph().merge_child_groups(groups(g.get_leaf_subgraph))
    assert saved(g) == before and g.get_root_subgraph().get_children() == children
    check_links(g)


# -- snapshot / restore -------------------------------------------------------------------------------
def test_snapshot_restore_undoes_every_kind_of_change():
    g = small_graph()
    g.get_root_subgraph().create_child_subgraph()
    children = g.get_root_subgraph().get_children()
    before, ops, tensors = saved(g), g.get_ops(), g.get_tensors()
    state = g.snapshot()
    assert state.graph is g and state.name == "net" and set(state.ops) == {op.name for op in ops}
    columns = state.op_columns
    assert columns.attrs[columns.ops.index(g.get_op("conv"))]["pads"] == [1, 1, 1, 1]
    g.get_root_subgraph().merge_children({g.get_leaf_subgraph("relu"), g.get_leaf_subgraph("add")})
    g.create_op("extra", "Relu", inputs=["add"])
    g.get_op("relu").set_input(0, g.get_tensor("x"))
    g.get_op("conv").get_attr("pads")[0] = 7  # in place
    g.get_op("conv").set_attr("note", "changed")
    g.get_tensor("relu").set_attr("layout", "NHWC")
    g.get_tensor("relu").shape = (9,)
    g.set_attr("origin", "elsewhere")
    g.name = "renamed"
    g.opset_imports[""] = 11
    g.ir_version = 3
    g.model_info["producer_name"] = "someone"
    g.functions.append(onnx.FunctionProto(name="f", domain="custom"))
    g.restore(state)
    check_links(g)
    assert saved(g) == before
    assert g.get_ops() == ops and g.get_tensors() == tensors  # the same objects
    assert g.get_root_subgraph().get_children() == children
    assert g.snapshot().version == state.version


def test_restore_refuses_a_state_of_another_graph():
    g, h = small_graph(), small_graph()
    with pytest.raises(XGraphError, match="another graph|captured from"):
        g.restore(h.snapshot())


# -- export never mutates -----------------------------------------------------------------------------
def untyped_graph() -> Graph:
    """Op outputs without dtype or shape: export has to infer the graph output's type."""
    g = Graph("untyped")
    x = g.create_input("x", (2, 3), np.float32)
    a = g.create_op("a", "Relu", inputs=[x])
    b = g.create_op("b", "Transpose", {"perm": [1, 0]}, inputs=[a.get_output_tensor()])
    g.set_outputs([b.get_output_tensor()])
    return g


def test_export_infers_missing_types_without_changing_the_graph():
    g = untyped_graph()
    g.get_root_subgraph().create_child_subgraph()
    sg = g.get_leaf_subgraph("b")
    state = g.snapshot()
    before = [(t.name, t.shape, t.dtype) for t in g.get_tensors()]
    model = g.to_onnx()
    sub = sg.to_onnx()
    assert [(t.name, t.shape, t.dtype) for t in g.get_tensors()] == before
    assert g.get_tensor("b").dtype is None and g.get_tensor("b").shape is None
    assert g.snapshot().version == state.version
    onnx.checker.check_model(model, full_check=True)
    out = model.graph.output[0].type.tensor_type
    assert out.elem_type == TensorProto.FLOAT and [d.dim_value for d in out.shape.dim] == [3, 2]
    assert sub.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    g.infer_shapes()  # the one way to store inferred types
    assert g.get_tensor("b").shape == (3, 2) and g.get_tensor("b").dtype == np.float32
    assert g.to_onnx().SerializeToString() == model.SerializeToString()


def test_export_that_cannot_type_a_boundary_raises_and_changes_nothing():
    g = Graph("custom")
    x = g.create_input("x", (2,), np.float32)
    y = g.create_op("y", "Mystery", inputs=[x], domain="acme")
    g.set_outputs([y.get_output_tensor()])
    before = [(t.name, t.shape, t.dtype) for t in g.get_tensors()]
    with pytest.raises(XGraphError, match="element type of tensor.*'y'"):
        g.to_onnx()
    assert [(t.name, t.shape, t.dtype) for t in g.get_tensors()] == before


# -- read-only weights -----------------------------------------------------------------------------------
def test_weights_and_tensor_attributes_are_read_only_everywhere(tmp_path):
    g = small_graph()
    own = np.zeros(3, np.float32)
    g.create_const("mine", own)
    own[0] = 1  # the caller's array stays the caller's (shared, as documented)
    assert g.get_tensor("mine").data[0] == 1 and own.flags.writeable
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Add", ["x", "w"], ["y"], name="add")], "m",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
        [helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])]), opset_imports=[helper.make_opsetid("", 17)])
    g.serialize(tmp_path / "m.xmodel")
    graphs = {"create_const": g, "from_onnx": Graph.from_onnx(model), "copy": g.copy(),
              "deserialize": Graph.deserialize(tmp_path / "m.xmodel")}
    for how, graph in graphs.items():
        for t in graph.get_const_tensors():
            with pytest.raises(ValueError, match="read-only"):
                t.data[...] = 42
        for op in graph.get_ops():
            for key in op.get_onnx_attrs():
                value = op.get_attr(key)
                if isinstance(value, np.ndarray):
                    with pytest.raises(ValueError, match="read-only"):
                        value[...] = 42
    assert np.array_equal(Graph.from_onnx(model).get_tensor("w").data, [1.0, 2.0])
    assert np.array_equal(g.get_op("k").get_attr("value"), [0, 1, 2])


def test_changes_since_names_each_kind_of_change_and_nothing_else():
    g = small_graph()
    g.get_root_subgraph().create_child_subgraph()
    state = g.snapshot()
    empty = g.changes_since(state)
    assert (empty.structure, empty.name, empty.graph_attrs, empty.model, empty.ops, empty.tensors,
            empty.subgraph_attrs, empty.subgraph_children, empty.new_subgraphs) == \
        (False, False, [], [], {}, {}, {}, set(), {})
    leaf = g.get_leaf_subgraph("relu")
    g.get_tensor("relu").name = "sneaky"
    g.get_op("conv").get_attr("note")["why"].append(3)
    leaf.set_attr("device", "X")
    g.ir_version = 3
    diff = g.changes_since(state)
    assert not diff.structure and diff.model == [f"the model's IR version ({state.model.ir_version} -> 3)"]
    assert diff.tensors == {g.get_tensor("relu"): "the name of tensor 'relu' (now 'sneaky')"}
    assert diff.ops == {g.get_op("conv"): ["attrs ['note'] of op 'conv'"]}
    assert diff.subgraph_attrs == {leaf: ["device"]}
    g.restore(state)
    check_links(g)
    assert g.get_tensor("relu").name == "relu" and g.changes_since(state).tensors == {}
    g.create_op("late", "Relu", inputs=["add"])
    assert g.changes_since(state).structure
