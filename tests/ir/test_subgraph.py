"""The subgraph tree: XIR semantics, merge_children refusing cycles, boundary tensors."""
from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xgraph import Graph, Subgraph, XGraphError
from xgraph.ir.links import check_links, check_tree


def random_dag(seed: int, n: int, p: float) -> Graph:
    """A graph of n ops; op i reads each earlier op with probability p (or the input)."""
    rng = np.random.default_rng(seed)
    g = Graph(f"dag{seed}")
    x = g.create_input("x", (1,))
    outs = []
    for i in range(n):
        preds = [outs[j] for j in range(i) if rng.random() < p] or [x]
        op = g.create_op(f"op{i:03d}", "Sum", inputs=preds[:4])
        outs.append(op.get_output_tensor())
    g.set_outputs([t for t in outs if not t.consumers])
    return g


def quotient(parent, groups) -> nx.DiGraph:
    """The children graph of `parent` with each group contracted, built independently with networkx."""
    label = {}
    for c in parent.get_children():
        for op in c.get_ops():
            label[op] = id(c)
    for i, grp in enumerate(groups):
        for c in grp:
            for op in c.get_ops():
                label[op] = ("g", i)
    q = nx.DiGraph()
    q.add_nodes_from(set(label.values()))
    for op in label:
        for c in op.get_fanout_ops():
            if c in label and label[c] != label[op]:
                q.add_edge(label[op], label[c])
    return q


def tree_snapshot(g: Graph):
    return sorted((s.name, s.depth, tuple(sorted(op.name for op in s.get_ops())), repr(s.get_attrs()))
                  for s in g.iter_subgraphs())


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 25), p=st.floats(0.05, 0.5), picks=st.lists(st.integers(0, 24), min_size=2, max_size=6))
def test_merge_children_raises_exactly_on_cycles(seed, n, p, picks):
    g = random_dag(seed, n, p)
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    children = root.toposort_child_subgraph()
    group = {children[i % len(children)] for i in picks}
    cyclic = not nx.is_directed_acyclic_graph(quotient(root, [group]))
    before = tree_snapshot(g)
    if cyclic:
        with pytest.raises(XGraphError, match="cycle"):
            root.merge_children(group)
        assert tree_snapshot(g) == before
    else:
        merged = root.merge_children(group)
        assert merged.get_ops() == set().union(*(c.get_ops() for c in group))
        assert merged.name == "subgraph_" + min(op.name for op in merged.get_ops())
        assert nx.is_directed_acyclic_graph(quotient(root, []))
        root.toposort_child_subgraph()
    check_tree(g)
    check_links(g)


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(4, 25), p=st.floats(0.05, 0.5),
       merges=st.lists(st.lists(st.integers(0, 24), min_size=2, max_size=5), min_size=2, max_size=4))
def test_successive_merges_raise_exactly_on_cycles(seed, n, p, merges):
    # after a first merge, a child spans other ops in topological order: a later merge must see
    # a path that leaves the new group late, enters that child late and leaves it early
    g = random_dag(seed, n, p)
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    for picks in merges:
        children = root.toposort_child_subgraph()
        group = {children[i % len(children)] for i in picks}
        if len(group) < 2:
            continue
        if not nx.is_directed_acyclic_graph(quotient(root, [group])):
            with pytest.raises(XGraphError, match="cycle"):
                root.merge_children(group)
        else:
            root.merge_children(group)
        assert nx.is_directed_acyclic_graph(quotient(root, []))
    check_tree(g)


def test_a_merge_through_a_merged_child_that_spans_it_is_refused():
    g = Graph("spans")
    x = g.create_input("x", (1,))
    a = g.create_op("a", "Sum", inputs=[x])
    g1 = g.create_op("g1", "Sum", inputs=[a.get_output_tensor()])
    g2 = g.create_op("g2", "Sum", inputs=[x])
    p = g.create_op("p", "Sum", inputs=[g2.get_output_tensor()])
    d = g.create_op("d", "Sum", inputs=[p.get_output_tensor()])
    out = g.create_op("out", "Sum", inputs=[g1.get_output_tensor(), d.get_output_tensor()])
    g.set_outputs([out.get_output_tensor()])
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    child = {op.name: root.find_child_subgraph_by_op(op) for op in g.get_ops()}
    root.merge_children({child["a"], child["d"]})  # a before g1, d after p: it spans the next group
    before = tree_snapshot(g)
    with pytest.raises(XGraphError, match="cycle"):  # {g1, g2} -> p -> {a, d} -> {g1, g2}
        root.merge_children({child["g1"], child["g2"]})
    assert tree_snapshot(g) == before


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(4, 20))
def test_deeper_levels_partition_their_parent(seed, n):
    g = random_dag(seed, n, 0.3)
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    order = root.toposort_child_subgraph()
    first = root.merge_children(set(order[: n // 2]))  # a prefix in topo order never cycles
    first.create_child_subgraph()
    assert first.get_children_num() == first.get_op_num() and first.depth == 1
    kids = first.toposort_child_subgraph()
    inner = first.merge_children(set(kids[:2]))
    assert inner.depth == 2 and inner.get_parent() is first
    assert root.find_child_subgraph_by_op(next(iter(inner.get_ops()))) is first
    assert first.find_child_subgraph_by_op(next(iter(inner.get_ops()))) is inner
    check_links(g)


def test_merge_refuses_bad_requests_without_change():
    g = random_dag(1, 6, 0.4)
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    kids = root.toposort_child_subgraph()
    before = tree_snapshot(g)
    with pytest.raises(XGraphError, match="empty"):
        root.merge_children(set())
    with pytest.raises(XGraphError, match="not a child"):
        kids[0].merge_children({kids[1]})
    with pytest.raises(XGraphError, match="already has children"):
        root.create_child_subgraph()
    assert tree_snapshot(g) == before
    check_links(g)


def test_boundary_tensors_xir_semantics():
    g = Graph()
    x = g.create_input("x", (2, 2))
    w = g.create_const("w", np.eye(2, dtype=np.float32))
    a = g.create_op("a", "MatMul", inputs=[x, w])
    b = g.create_op("b", "Relu", inputs=[a.get_output_tensor()])
    c = g.create_op("c", "Add", inputs=[b.get_output_tensor(), a.get_output_tensor()])
    g.set_outputs([c.get_output_tensor(), b.get_output_tensor()])
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    ab = root.merge_children({root.find_child_subgraph_by_op("a"), root.find_child_subgraph_by_op("b")})
    assert [t.name for t in ab.get_input_tensors()] == ["x"]          # weights travel with it
    assert [t.name for t in ab.get_output_tensors()] == ["a", "b"]    # a read by c; b a graph output
    assert [t.name for t in ab.get_const_tensors()] == ["w"]
    cs = root.find_child_subgraph_by_op("c")
    assert [t.name for t in cs.get_input_tensors()] == ["b", "a"]
    assert [t.name for t in root.get_input_tensors()] == ["x"]
    assert [s.name for s in root.toposort_child_subgraph()] == ["subgraph_a", "subgraph_c"]
    assert ab.has_op("b") and not ab.has_op("c") and g.get_subgraph("subgraph_c") is cs
    assert ab.is_leaf and not root.is_leaf and root.is_root and ab.depth == 1 and root.is_child(ab)
    check_links(g)


def test_subgraph_to_onnx_runs_alone():
    import onnxruntime as ort
    g = random_dag(7, 12, 0.3)
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    kids = root.toposort_child_subgraph()
    sg = root.merge_children(set(kids[3:8]))
    check_links(g)
    m = sg.to_onnx()
    import onnx
    onnx.checker.check_model(m, full_check=True)
    sess = ort.InferenceSession(m.SerializeToString())
    feeds = {t.name: np.ones((1,), np.float32) for t in sg.get_input_tensors()}
    outs = sess.run(None, feeds)
    assert len(outs) == len(sg.get_output_tensors())


def test_nested_graph_reads_are_implicit_inputs():
    import onnx
    from onnx import helper
    vi = helper.make_tensor_value_info
    then = helper.make_graph([helper.make_node("Add", ["h", "w"], ["t"])], "then", [], [vi("t", 1, [2])])
    other = helper.make_graph([helper.make_node("Neg", ["h"], ["e"])], "else", [], [vi("e", 1, [2])])
    m = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"], name="relu"),
         helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other, name="if")],
        "g", [vi("c", onnx.TensorProto.BOOL, []), vi("x", 1, [2])], [vi("y", 1, [2])],
        [onnx.numpy_helper.from_array(np.ones(2, np.float32), "w")]), opset_imports=[helper.make_opsetid("", 18)])
    g = Graph.from_onnx(m)
    relu, cond = g.get_op("relu"), g.get_op("if")
    assert [t.name for t in cond.get_implicit_input_tensors()] == ["h", "w"]
    assert cond.get_input_ops() == [relu] and relu.get_fanout_ops() == [cond]
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    children, preds = root.child_dependencies()  # the nested read is an edge between the children
    names = [c.name for c in children]
    assert names == ["subgraph_relu", "subgraph_if"] and preds == [[], [0]]
    assert [c.name for c in root.toposort_child_subgraph()] == names
    s_if = root.find_child_subgraph_by_op("if")
    assert [t.name for t in s_if.get_input_tensors()] == ["c", "h"]
    assert [t.name for t in s_if.get_const_tensors()] == ["w"]
    assert [t.name for t in root.find_child_subgraph_by_op("relu").get_output_tensors()] == ["h"]
    with pytest.raises(XGraphError, match="consumers"):
        g.remove_op("relu")
    check_links(g)
    sub = s_if.to_onnx()
    onnx.checker.check_model(sub, full_check=True)
    import onnxruntime as ort
    out = ort.InferenceSession(sub.SerializeToString()).run(
        None, {"c": np.array(True), "h": np.array([1, 2], np.float32)})
    np.testing.assert_array_equal(out[0], [2, 3])


def test_set_children_attrs_writes_each_child_its_own_copy():
    g = random_dag(3, 6, 0.4)
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    children = root.toposort_child_subgraph()
    root.set_children_attrs(children[:4], {"device": "CPU", "runner": {"run": "cpu"}, "tags": [1, {"a": 2}]})
    for c in children[:4]:
        assert c.get_attrs() == {"device": "CPU", "runner": {"run": "cpu"}, "tags": [1, {"a": 2}]}
    assert all(not c.get_attrs() for c in children[4:])
    children[0].get_attr("runner")["run"] = "changed"
    children[0].get_attr("tags")[1]["a"] = 3
    assert children[1].get_attr("runner") == {"run": "cpu"} and children[1].get_attr("tags") == [1, {"a": 2}]
    check_tree(g)


def test_set_children_attrs_changes_nothing_on_bad_input():
    g = random_dag(4, 5, 0.4)
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    children = root.toposort_child_subgraph()
    with pytest.raises(XGraphError, match="not a child of it"):
        root.set_children_attrs([children[0], root], {"device": "CPU"})
    with pytest.raises(XGraphError, match="unsupported type object"):
        root.set_children_attrs(children, {"device": "CPU", "bad": object()})
    assert all(not c.get_attrs() for c in children)


def test_set_op_annotations_refuses_foreign_ops_and_bad_values_changing_nothing():
    g, other = random_dag(5, 4, 0.5), random_dag(6, 2, 0.5)
    ops = g.get_ops()
    with pytest.raises(XGraphError, match="not an op of it"):
        g.set_op_annotations("device", {ops[0]: "CPU", other.get_ops()[0]: "CPU"})
    with pytest.raises(XGraphError, match="not an op of it"):
        g.set_op_annotations("device", {ops[0]: "CPU", "op001": "CPU"})
    with pytest.raises(XGraphError, match="unsupported type object"):
        g.set_op_annotations("device", {ops[0]: "CPU", ops[1]: object()})
    assert not any(op.has_attr("device") for op in ops)
    g.set_op_annotations("device", {ops[0]: "CPU", ops[1]: ["a", 1]})
    assert ops[0].get_attr("device") == "CPU" and ops[1].get_attr("device") == ["a", 1]
    assert ops[1].is_annotation("device")


def test_child_dependencies_count_each_producer_once_per_op():
    g = Graph("g")
    x = g.create_input("x", [1])
    g.create_op("a", "Relu", inputs=[x])
    g.create_op("b", "Relu", inputs=[x])
    g.create_op("c", "Add", inputs=["a", "a"])  # one producer read twice
    g.create_op("d", "Sum", inputs=["a", "b", "c"])  # three producers
    g.create_op("e", "Sum", inputs=["x", "b", "b"])  # a graph input and one producer twice
    g.create_op("f", "Clip", inputs=["d", None, None])  # omitted optional inputs
    g.create_op("h", "Add", inputs=[None, "e"])
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    children, preds = root.child_dependencies()
    assert [c.name for c in children] == [f"subgraph_{n}" for n in "abcdefh"]
    assert preds == [[], [], [0], [0, 1, 2], [1], [3], [4]]
    root.merge_children({g.get_leaf_subgraph("a"), g.get_leaf_subgraph("b")})
    children, preds = root.child_dependencies()  # the links are cached; the numbering follows the new tree
    assert [c.name for c in children] == [f"subgraph_{n}" for n in "acdefh"]
    assert preds == [[], [0], [0, 0, 1], [0], [2], [3]]


def _abc_split() -> "tuple[Graph, Subgraph, tuple[Subgraph, ...]]":
    """a -> b -> c, the root split into one leaf per op: (graph, root, the three leaves)."""
    g = Graph("g")
    g.create_input("x", [1])
    for n, src in [("a", "x"), ("b", "a"), ("c", "b")]:
        g.create_op(n, "Relu", inputs=[src])
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    return g, root, tuple(g.get_leaf_subgraph(n) for n in "abc")


def test_get_leaf_subgraphs_is_get_leaf_subgraph_per_op():
    from xgraph.errors import GraphError
    g, root, (a, b, _) = _abc_split()
    root.merge_children({a, b})
    ops = g.get_ops()
    assert g.get_leaf_subgraphs(ops) == [g.get_leaf_subgraph(op) for op in ops]
    assert g.get_leaf_subgraphs(["c", ops[0]]) == [g.get_leaf_subgraph("c"), g.get_leaf_subgraph("a")]
    assert g.get_leaf_subgraphs(iter(ops[:1])) == [g.get_leaf_subgraph("a")]
    other = Graph("other")
    stranger = other.create_op("a", "Relu", inputs=[other.create_input("x", [1])])
    with pytest.raises(GraphError, match="does not belong to graph 'g'"):
        g.get_leaf_subgraphs([ops[0], stranger])
    with pytest.raises(GraphError, match="no op named 'zz'"):
        g.get_leaf_subgraphs(["zz"])


def test_are_children_is_is_child_for_each():
    g, root, (a, b, c) = _abc_split()
    merged = root.merge_children({a, b})
    kids = root.get_children()
    for these in ([merged, c], {merged}, frozenset(), iter([c]), {merged: 1}.keys(), [merged, merged]):
        assert root.are_children(these)
    for these in ([a], [merged, a], {root}, [c, b]):
        assert not root.are_children(these) and not all(map(root.is_child, these))
    assert root.get_children() == kids  # nothing changed
