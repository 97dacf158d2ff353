"""Folding edits made in bulk leave the graph the one-op-at-a-time edits leave.

`replace_ops_by_weights` against `replace_op_by_weights` called per op in the same order (any
order, readers before producers included); the stage's fold (`keep_unread=False`) against the full
fold, both followed by dead-op removal; shape queries replaced in one edit against one call per op.
The oracle compares the tensor table (order included), every tensor's readers (order included),
every op's inputs and every weight's values.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import GraphError
from xgraph.compiler import prepare as prep
from xgraph.compiler.shape_fixpoint import fold_shape_queries
from xgraph.ir.links import check_links
from xgraph.ir.builder import remove_unused_weights, replace_op_by_weights, replace_ops_by_weights


@st.composite
def models(draw):
    """Random graphs of weights, one input, foldable ops and Shape (as `test_fold_worklist` draws them)."""
    n_weights = draw(st.integers(1, 4))
    names = [f"w{i}" for i in range(n_weights)] + ["x"]
    init = [numpy_helper.from_array(np.full((2,), i + 1, np.float32), f"w{i}") for i in range(n_weights)]
    nodes = []
    for i in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(("Neg", "Relu", "Identity", "Add", "Mul", "Shape")))
        args = [draw(st.sampled_from(names)) for _ in range(2 if kind in ("Add", "Mul") else 1)]
        nodes.append(helper.make_node(kind, args, [f"t{i}"], name=f"n{i}"))
        if kind != "Shape":
            names.append(f"t{i}")
    outputs = draw(st.lists(st.sampled_from([n.output[0] for n in nodes]), min_size=1, max_size=3, unique=True))
    g = helper.make_graph(nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
                          initializer=init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def state(graph) -> list:
    tensors = [(t.name, [c.name for c in t.consumers], None if t.data is None else t.data.tolist(),
                t.producer.name if t.producer is not None else None) for t in graph.get_tensors()]
    ops = [(op.name, [None if t is None else t.name for t in op.get_input_tensors()]) for op in graph.get_ops()]
    return [tensors, ops, [t.name for t in graph.get_output_tensors()]]


def _chain_model(n: int = 6) -> "xgraph.Graph":
    """x -> Shape -> Gather -> Unsqueeze -> Concat -> Reshape(x), plus a second reader of the Gather."""
    init = [numpy_helper.from_array(np.array(0, np.int64), "i0"), numpy_helper.from_array(np.array([0], np.int64), "ax"),
            numpy_helper.from_array(np.array([-1], np.int64), "rest")]
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node("Shape", ["s"], ["ss"], name="shape_of_shape"),
             helper.make_node("Gather", ["s", "i0"], ["g"], name="gather", axis=0),
             helper.make_node("Unsqueeze", ["g", "ax"], ["u"], name="unsq"),
             helper.make_node("Concat", ["u", "rest"], ["c"], name="concat", axis=0),
             helper.make_node("Reshape", ["x", "c"], ["y"], name="reshape"),
             helper.make_node("Cast", ["g"], ["gf"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Add", ["gf", "z"], ["y2"], name="add"),
             helper.make_node("Cast", ["ss"], ["ssf"], name="cast2", to=TensorProto.FLOAT),
             helper.make_node("Add", ["ssf", "z"], ["y3"], name="add2")]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                                           helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in ("y", "y2", "y3")],
                          initializer=init)
    return xgraph.Graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def _arrays(op):
    return [np.full((1,), i + 1, np.int64) for i, _ in enumerate(op.get_output_tensors())]


@pytest.mark.parametrize("keep_unread", [True, False])
@pytest.mark.parametrize("order", ["topological", "reversed", "shuffled"])
def test_bulk_replace_equals_replace_per_op_in_any_order(order, keep_unread):
    bulk, one = _chain_model(), _chain_model()
    names = ["shape", "gather", "unsq", "concat", "shape_of_shape", "cast"]
    if order == "reversed":
        names.reverse()
    elif order == "shuffled":
        names = [names[i] for i in (3, 0, 5, 1, 4, 2)]
    made = replace_ops_by_weights(bulk, [(bulk.get_op(n), _arrays(bulk.get_op(n))) for n in names], keep_unread)
    expected = [replace_op_by_weights(one, one.get_op(n), _arrays(one.get_op(n))) for n in names]
    expected = [t.name for ts in expected for t in ts]
    if keep_unread:
        assert state(bulk) == state(one) and [t.name for t in made] == expected
    else:
        remove_unused_weights(bulk), remove_unused_weights(one)
        assert state(bulk) == state(one)
        assert [t.name for t in made] == [n for n in expected if bulk.has_tensor(n)]
    check_links(bulk)


def test_bulk_replace_checks_everything_first_and_changes_nothing_on_refusal():
    g = _chain_model()
    before = state(g)
    with pytest.raises(GraphError, match="graph outputs"):
        replace_ops_by_weights(g, [(g.get_op("shape"), _arrays(g.get_op("shape"))),
                                   (g.get_op("reshape"), _arrays(g.get_op("reshape")))])
    with pytest.raises(GraphError, match="one array per output"):
        replace_ops_by_weights(g, [(g.get_op("gather"), [])])
    with pytest.raises(GraphError, match="given twice"):
        replace_ops_by_weights(g, [(g.get_op("gather"), _arrays(g.get_op("gather")))] * 2)
    other = _chain_model()
    with pytest.raises(GraphError, match="does not belong"):
        replace_ops_by_weights(g, [(other.get_op("gather"), _arrays(other.get_op("gather")))])
    assert state(g) == before


@settings(max_examples=80, deadline=None)
@given(models())
def test_stage_fold_without_unread_weights_equals_fold_then_dead_removal(model):
    ours, oracle = xgraph.Graph.from_onnx(model), xgraph.Graph.from_onnx(model)
    assert prep.fold_constants(ours, keep_unread=False) == prep.fold_constants(oracle)
    assert prep.remove_dead_ops(ours) == prep.remove_dead_ops(oracle)
    assert state(ours) == state(oracle)
    check_links(ours)


def test_shape_queries_in_one_edit_equal_one_call_per_op():
    bulk, one = _chain_model(), _chain_model()
    assert fold_shape_queries(bulk) == fold_shape_queries(one, prep.replace_by_weights) == 2
    assert state(bulk) == state(one)
    assert bulk.get_tensor("ss").data.tolist() == [3]  # Shape of a folded Shape: from its value
    check_links(bulk)


def test_the_chain_folds_to_the_weights_its_unfolded_readers_read():
    g = _chain_model()
    fold_shape_queries(g)
    assert prep.fold_constants(g, keep_unread=False) == 5  # gather, unsq, concat, both casts
    prep.remove_dead_ops(g)
    assert g.get_tensor("c").data.tolist() == [2, -1]
    assert g.get_tensor("gf").data.tolist() == 2.0 and g.get_tensor("ssf").data.tolist() == [3.0]
    assert sorted(t.name for t in g.get_const_tensors()) == ["c", "gf", "ssf"]
    assert [op.name for op in g.get_ops()] == ["reshape", "add", "add2"]


def _queries_model() -> "xgraph.Graph":
    """Shape of a folded sum, Shape of a Shape, and a Shape of the input whose Gather folds."""
    init = [numpy_helper.from_array(np.ones((2, 5), np.float32), "w"), numpy_helper.from_array(np.array(1, np.int64), "i1")]
    nodes = [helper.make_node("Add", ["w", "w"], ["sum"], name="sum"),
             helper.make_node("Shape", ["sum"], ["sum_shape"], name="shape_of_sum"),
             helper.make_node("Shape", ["x"], ["xs"], name="shape_x"),
             helper.make_node("Shape", ["xs"], ["xss"], name="shape_of_shape"),
             helper.make_node("Gather", ["xs", "i1"], ["g"], name="gather", axis=0),
             helper.make_node("Concat", ["sum_shape", "xss"], ["cat"], name="concat", axis=0),
             helper.make_node("Cast", ["cat"], ["catf"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("Cast", ["g"], ["gf"], name="cast_g", to=TensorProto.FLOAT),
             helper.make_node("Add", ["catf", "gf"], ["y"], name="out"),
             helper.make_node("Mul", ["y", "z"], ["y2"], name="out2")]
    g = helper.make_graph(nodes, "queries", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                                             helper.make_tensor_value_info("z", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y2", TensorProto.FLOAT, None)], initializer=init)
    return xgraph.Graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


def test_queries_replaced_in_the_fold_edit_equal_queries_replaced_first():
    from xgraph.compiler.shape_fixpoint import foldable_shape_queries, resolve_shapes
    merged, first = _queries_model(), _queries_model()
    queries = foldable_shape_queries(merged)
    assert [op.name for op, _ in queries] == ["shape_of_sum", "shape_x", "shape_of_shape"]
    assert prep.fold_constants(merged, keep_unread=False, queries=queries) == 6
    assert fold_shape_queries(first, prep.replace_by_weights) == 3 and prep.fold_constants(first) == 6
    assert prep.remove_dead_ops(merged) == prep.remove_dead_ops(first)
    assert state(merged) == state(first)
    assert [op.name for op in merged.get_ops()] == ["out2"]
    assert merged.get_tensor("y").data.tolist() == [5.0, 8.0, 6.0]  # [2, 5] + [3], plus dim 1 of x
    check_links(merged)
    again = [_queries_model(), _queries_model()]
    one = resolve_shapes(again[0], lambda g: prep.fold_constants(g, keep_unread=False), prep.remove_dead_ops,
                         fold_with_queries=lambda g, q: prep.fold_constants(g, keep_unread=False, queries=q))
    two = resolve_shapes(again[1], prep.fold_constants, prep.remove_dead_ops, prep.replace_by_weights)
    assert one == two and state(again[0]) == state(again[1])


def _fed_by_definition(ops, pending=()):
    return [i for i, op in enumerate(ops)
            if all(t is None or t.is_const or t in pending for t in op.get_input_tensors())]


def _unread_by_definition(ops, used):
    return [i for i, op in enumerate(ops) if not any(t.consumers or t in used for t in op.get_output_tensors())]


@settings(max_examples=60, deadline=None)
@given(models(), st.data())
def test_position_scans_equal_their_definitions(model, data):
    g = xgraph.Graph.from_onnx(model)
    index = g.index()
    ops = g.get_ops()
    tensors = [t for t in g.get_tensors() if not t.is_const]
    pending = set(data.draw(st.lists(st.sampled_from(tensors), max_size=3))) if tensors else set()
    used = set(data.draw(st.lists(st.sampled_from(g.get_tensors()), max_size=3)))
    assert index.fed_positions(ops) == _fed_by_definition(ops)
    assert index.fed_positions(ops, pending) == _fed_by_definition(ops, pending)
    assert index.unread_positions(ops, used) == _unread_by_definition(ops, used)


def test_position_scans_with_omitted_inputs():
    g = xgraph.Graph("g")
    x = g.create_input("x", (2,))
    lo = g.create_const("lo", np.zeros(1, np.float32))
    a = g.create_op("a", "Clip", inputs=[lo, None, lo])
    g.create_op("b", "Clip", inputs=[x, None, lo])
    g.create_op("c", "Relu", inputs=[a.get_output_tensor()])
    ops = g.get_ops()
    assert g.index().fed_positions(ops) == [0] == _fed_by_definition(ops)
    assert g.index().fed_positions(ops, {x}) == [0, 1] == _fed_by_definition(ops, {x})


def test_queries_of_a_graph_whose_table_order_is_not_topological_are_replaced_first():
    from xgraph.compiler.shape_fixpoint import resolve_shapes

    def build():
        g = xgraph.Graph("g")
        x = g.create_input("x", (2, 3))
        z = g.create_input("z", (1,))
        late = g.create_op("late_cast", "Cast", {"to": TensorProto.FLOAT}, [x])  # rewired below to a later tensor
        shape = g.create_op("shape", "Shape", inputs=[x])
        relu = g.create_op("relu", "Relu", inputs=[z])
        late.set_input(0, shape.get_output_tensor())
        g.create_op("out", "Add", inputs=[late.get_output_tensor(), relu.get_output_tensor()])
        g.set_outputs([g.get_op("out").get_output_tensor()])
        return g

    stage, oracle = build(), build()
    assert stage.toposort() != stage.get_ops()
    one = resolve_shapes(stage, lambda g: prep.fold_constants(g, keep_unread=False), prep.remove_dead_ops,
                         fold_with_queries=lambda g, q: prep.fold_constants(g, keep_unread=False, queries=q))
    two = resolve_shapes(oracle, prep.fold_constants, prep.remove_dead_ops, prep.replace_by_weights)
    assert one == two and one["shape_ops"] == 1 and one["folded_ops"] == 1
    assert state(stage) == state(oracle)
    assert stage.get_tensor("late_cast").data.tolist() == [2.0, 3.0]
