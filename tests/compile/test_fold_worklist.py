"""Constant folding and dead-op removal by worklist give the graph a whole-graph sweep gives.

The oracle is the sweep spelled with the general IR methods only (`create_const` + `replace_uses`
per output, `remove_op`, `remove_tensor`; every op in topological order, dead ops in reverse
topological order): on random graphs of weights, inputs, foldable and unfoldable ops, the
tensor table (order included), every tensor's readers (order included), every op's inputs and
every weight's values must come out the same.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import GraphError
from xgraph.compiler import prepare as prep
from xgraph.compiler.fold_eval import evaluate, foldable
from xgraph.compiler.fold_sizes import estimated_output_bytes
from xgraph.ir.builder import remove_unused_weights, replace_op_by_weights

_UNARY = ("Neg", "Relu", "Abs", "Shape", "Identity")
_BINARY = ("Add", "Mul", "Sub")


@st.composite
def models(draw) -> onnx.ModelProto:
    n_weights = draw(st.integers(1, 4))
    names = [f"w{i}" for i in range(n_weights)] + ["x"]
    init = [numpy_helper.from_array(np.full((2,), i + 1, np.float32), f"w{i}") for i in range(n_weights)]
    nodes = []
    for i in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(_UNARY + _BINARY))
        args = [draw(st.sampled_from(names)) for _ in range(2 if kind in _BINARY else 1)]
        if kind == "Shape":
            nodes.append(helper.make_node("Shape", args, [f"t{i}"], name=f"n{i}"))
            continue  # an int64 result: nothing float reads it, so it is only ever dead or an output
        nodes.append(helper.make_node(kind, args, [f"t{i}"], name=f"n{i}"))
        names.append(f"t{i}")
    produced = [n.output[0] for n in nodes]
    outputs = draw(st.lists(st.sampled_from(produced), min_size=1, max_size=3, unique=True))
    g = helper.make_graph(nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outputs],
                          initializer=init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def sweep_fold(graph, max_bytes=prep.MAX_FOLD_BYTES) -> int:
    """The oracle: every op in topological order, each fold spelled with the general methods."""
    keep = set(graph.get_output_tensors())
    folded = 0
    for op in graph.toposort():
        if not foldable(op, keep):
            continue
        estimate = estimated_output_bytes(op)
        if estimate is None or estimate > max_bytes:
            continue
        arrays = evaluate(op, [None if t is None else t.data for t in op.get_input_tensors()])
        if arrays is None or sum(a.nbytes for a in arrays) > max_bytes:
            continue
        staged = []
        for t, a in zip(op.get_output_tensors(), arrays):
            if not t.consumers:
                continue
            temp = graph.create_const(f"{t.name}__folded", a)
            graph.replace_uses(t, temp)
            staged.append((t.name, temp, a))
        graph.remove_op(op)
        for name, temp, a in staged:
            graph.replace_uses(temp, graph.create_const(name, a))
            graph.remove_tensor(temp)
        folded += 1
    return folded


def sweep_dead(graph) -> int:
    used = set(graph.get_output_tensors())
    removed = 0
    for op in reversed(graph.toposort()):
        if not any(t.consumers or t in used for t in op.get_output_tensors()):
            graph.remove_op(op)
            removed += 1
    for t in graph.get_const_tensors():
        if not t.consumers and t not in used:
            graph.remove_tensor(t)
    return removed


def state(graph) -> list:
    tensors = [(t.name, [c.name for c in t.consumers], None if t.data is None else t.data.tolist(),
                t.producer.name if t.producer is not None else None) for t in graph.get_tensors()]
    ops = [(op.name, [None if t is None else t.name for t in op.get_input_tensors()]) for op in graph.get_ops()]
    return [tensors, ops, [t.name for t in graph.get_output_tensors()]]


@settings(max_examples=120, deadline=None)
@given(models())
def test_worklist_fold_and_dead_removal_equal_the_sweep(model):
    ours, oracle = xgraph.Graph.from_onnx(model), xgraph.Graph.from_onnx(model)
    assert prep.fold_constants(ours) == sweep_fold(oracle)
    assert state(ours) == state(oracle)
    assert prep.remove_dead_ops(ours) == sweep_dead(oracle)
    assert state(ours) == state(oracle)
    from xgraph.ir.links import check_links
    check_links(ours)


def _two_outputs_graph():
    g = xgraph.Graph("g")
    x = g.create_input("x", (4,))
    w = g.create_const("w", np.arange(4, dtype=np.float32))
    split = g.create_op("split", "Split", {"num_outputs": 2}, [w], num_outputs=2)
    a, b = split.get_output_tensors()
    g.create_op("add", "Add", inputs=[a, a])
    g.create_op("mul", "Mul", inputs=[x, b])
    return g, split


def test_replace_op_by_weights_rewires_every_slot_and_keeps_the_arrays_read_only():
    g, split = _two_outputs_graph()
    halves = [np.array([0, 1], np.float32), np.array([2, 3], np.float32)]
    made = replace_op_by_weights(g, split, halves)
    assert [t.name for t in made] == ["split:0", "split:1"] and not g.has_op("split")
    assert g.get_op("add").get_input_tensors() == [made[0], made[0]]
    assert g.get_op("mul").get_input_tensors()[1] is made[1]
    assert made[0].consumers == [g.get_op("add")] and made[1].producer is None
    assert made[0].data.tolist() == [0, 1] and not made[0].data.flags.writeable
    assert halves[0].flags.writeable  # the caller's array stays the caller's
    assert remove_unused_weights(g) == 1 and not g.has_tensor("w")


def test_replace_op_by_weights_refuses_graph_outputs_and_wrong_counts_changing_nothing():
    g, split = _two_outputs_graph()
    g.set_outputs([split.get_output_tensors()[1]])
    before = state(g)
    with pytest.raises(GraphError, match="graph outputs"):
        replace_op_by_weights(g, split, [np.zeros(2, np.float32)] * 2)
    with pytest.raises(GraphError, match="one array per output"):
        replace_op_by_weights(g, split, [np.zeros(2, np.float32)])
    assert state(g) == before
