"""Bulk reads of children for placement and kernel annotation, against the public accessors."""
from __future__ import annotations

from xgraph import Graph
from xgraph.ir.child_ops import attr_column, ops_of, unlabelled_children


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
    kept, op_lists = unlabelled_children(children, "device")
    assert kept == [c for c in children if not c.has_attr("device")]
    assert op_lists == [c.toposort() for c in kept]
    assert [[op.name for op in ops] for ops in op_lists] == [["o0"], ["o1", "o2", "o3"], ["o5"]]
    assert attr_column(children, "device", "-") == [c.get_attrs().get("device", "-") for c in children]
    assert attr_column(children, "runner") == [c.get_attrs().get("runner") for c in children]
    assert ops_of(children) == [op for c in children for op in c.get_ops()]
    op_lists[0].append("x")  # new lists: the graph is not changed through them
    assert len(kept[0].get_ops()) == 1
