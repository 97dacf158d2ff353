"""Copies between cards are exactly what the report says: on random graphs whose device subgraphs sit on
random instances of a two-card compile, the graph runner performs, per run, exactly the copies of
`copies_per_run` (host to card, card to host, card to card), and the results equal the one-card run."""
from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import xgraph


@st.composite
def models(draw):
    """A random DAG of Relu/Neg/Add and int64 Neg (AI CPU takes it, AI Core refuses it) with 1-2 outputs."""
    n = draw(st.integers(3, 12))
    nodes, tensors = [], ["x"]
    for i in range(n):
        kind = draw(st.sampled_from(["relu", "neg", "add", "int_neg"]))
        a = draw(st.sampled_from(tensors))
        if kind == "add":
            nodes.append(helper.make_node("Add", [a, draw(st.sampled_from(tensors))], [f"t{i}"], name=f"op{i}"))
        elif kind == "int_neg":
            nodes += [helper.make_node("Cast", [a], [f"c{i}"], name=f"op{i}_to_int", to=TensorProto.INT64),
                      helper.make_node("Neg", [f"c{i}"], [f"n{i}"], name=f"op{i}_int_neg"),
                      helper.make_node("Cast", [f"n{i}"], [f"t{i}"], name=f"op{i}", to=TensorProto.FLOAT)]
        else:
            nodes.append(helper.make_node(kind.capitalize(), [a], [f"t{i}"], name=f"op{i}"))
        tensors.append(f"t{i}")
    outputs = sorted({tensors[-1], draw(st.sampled_from(tensors[1:]))})
    graph = helper.make_graph(nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 3]) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@settings(max_examples=30, deadline=None)
@given(model=models(), cards=st.lists(st.integers(0, 1), min_size=12, max_size=12))
def test_runtime_copies_between_cards_equal_the_report(model, cards):
    one_card = xgraph.compile(model, {})
    graph = xgraph.compile(model, {"devices": {"AICORE": {"instances": 2}}})
    device_side = [c for c in graph.get_root_subgraph().toposort_child_subgraph()
                   if c.get_attr("device") in ("AICORE", "AICPU")]
    for child, card in zip(device_side, cards):
        child.set_attr("instance", card)
    copies = xgraph.report(graph)["copies_per_run"]
    assert copies["total"] == copies["crossings"] + copies["graph_inputs"] + copies["graph_outputs"]
    options = json.loads(graph.get_attr("compile_options"))
    assert options["devices"] == {"AICORE": {"instances": 2}}
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    with xgraph.create_graph_runner(one_card, kernels="numpy") as runner:
        want = runner.run({"x": x})
    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        got = runner.run({"x": x})
        assert runner.get_stats()["copies"]["count"] == copies["total"]
        job = runner.execute_async({"x": x})  # the streams count what the inline run counted
        assert runner.wait(job, timeout=30) == 0
        assert runner.get_stats()["copies"]["count"] == 2 * copies["total"]
        streams = set(runner.plan.streams())
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    used = {f"{c.get_attr('device')}:{c.get_attr('instance')}" for c in device_side}
    assert used <= streams
