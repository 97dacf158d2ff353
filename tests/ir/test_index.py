"""The graph index (`graph.index()`): its op rows, tensor facts and children reads agree with the public accessors,
and it hands out copies."""
from __future__ import annotations

import numpy as np

import xgraph
from xgraph import Graph


def small_graph() -> xgraph.Graph:
    g = xgraph.Graph("g")
    x = g.create_input("x", [2, 3], np.float32)
    w = g.create_const("w", np.ones((3,), np.float32))
    a = g.create_op("a", "Add", inputs=[x, w])
    b = g.create_op("b", "Transpose", inputs=[a.get_output_tensor()], attrs={"perm": [1, 0]})
    g.create_op("c", "Relu", inputs=[x])  # its output is read by nothing
    b.set_attr("note", "an annotation", onnx_type=None)
    g.set_outputs([b.get_output_tensor()])
    return g


def test_op_rows_are_what_the_accessors_say():
    g = small_graph()
    numbers = {t: i for i, t in enumerate(g.get_tensors())}
    numbers[None] = -1
    rows = g.index().op_rows(g.get_ops(), numbers)
    assert rows == [(op.type, op.domain, tuple(op.get_onnx_attrs().items()),
                     tuple(numbers[t] for t in op.get_input_tensors()),
                     tuple(numbers[t] for t in op.get_output_tensors())) for op in g.get_ops()]
    assert rows[1][2] == (("perm", [1, 0]),)  # the annotation is left out


def test_tensor_facts_are_what_the_accessors_say():
    g = small_graph()
    facts = g.index().tensor_facts()
    tensors = g.get_tensors()
    outputs = set(g.get_output_tensors())
    assert facts.tensors == tensors
    assert facts.dtypes == [t.dtype for t in tensors] and facts.shapes == [t.shape for t in tensors]
    assert facts.is_const == [t.is_const for t in tensors]
    assert facts.used == [bool(t.consumers) or t in outputs for t in tensors]
    assert facts.used[tensors.index(g.get_op("c").get_output_tensor())] is False
    facts.tensors.clear()  # the caller's own list
    assert g.get_tensors() == tensors


def _graph() -> Graph:
    g = Graph("g")
    x = g.create_input("x", [4])
    for i, kind in enumerate(["Relu", "Neg", "Abs", "Sigmoid", "Tanh", "Exp"]):
        g.create_op(f"o{i}", kind, inputs=[x if i == 0 else f"o{i - 1}"])
    g.set_outputs(["o5"])
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    by = {c.name: c for c in root.get_children()}
    root.merge_children({by["subgraph_o1"], by["subgraph_o2"], by["subgraph_o3"]})
    by = {c.name: c for c in root.get_children()}
    by["subgraph_o4"].set_attr("device", "CPU")
    by["subgraph_o4"].set_attr("runner", {"name": "cpu"})
    return g


def test_unlabelled_children_and_columns_match_the_accessors():
    g = _graph()
    children = g.get_root_subgraph().toposort_child_subgraph()
    index = g.index()
    kept, op_lists = index.unlabelled_children(children, "device")
    assert kept == [c for c in children if not c.has_attr("device")]
    assert op_lists == [c.toposort() for c in kept]
    assert [[op.name for op in ops] for ops in op_lists] == [["o0"], ["o1", "o2", "o3"], ["o5"]]
    assert index.attr_column(children, "device", "-") == [c.get_attrs().get("device", "-") for c in children]
    assert index.attr_column(children, "runner") == [c.get_attrs().get("runner") for c in children]
    assert index.ops_of(children) == [op for c in children for op in c.get_ops()]
    op_lists[0].append("x")  # new lists: the graph is not changed through them
    assert len(kept[0].get_ops()) == 1
