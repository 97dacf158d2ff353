"""Placement: first fit with reasons, device restrictions, strict mode, small islands, no ping-pong."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import xgraph
from xgraph.errors import PartitionError
from xgraph.compiler.options import parse_options
from xgraph.compiler.placement import apply_placement, count_crossings, join_refusals, place, propose_placement
from xgraph.compiler.support import op_info
from xgraph.devices import get_devices


def placed(graph: xgraph.Graph) -> dict[str, tuple[str, str]]:
    """op name -> (device, reason) from a compiled graph's annotations."""
    return {op.name: (op.get_attr("device"), op.get_attr("placement_reason")) for op in graph.get_ops()}


def fresh(model) -> xgraph.Graph:
    g = xgraph.Graph.from_onnx(model)
    g.get_root_subgraph().create_child_subgraph()
    return g


def test_first_fit_with_reasons(models):
    g = xgraph.compile(models.cnn_with_lstm())
    models.check_compiled(g)
    p = placed(g)
    assert p["lstm"] == ("CPU", "AICORE, AICPU, DVPP: LSTM is not in its op-info library")
    assert {n: d for n, (d, r) in p.items() if n != "lstm"} == dict.fromkeys(
        ["conv", "relu", "to_seq", "squeeze", "fc", "softmax"], "AICORE")
    assert all(r == "" for n, (d, r) in p.items() if n != "lstm")
    assert [(c.get_attr("device"), c.get_op_num()) for c in g.get_root_subgraph().toposort_child_subgraph()] == \
        [("AICORE", 3), ("CPU", 1), ("AICORE", 3)]
    sg = g.get_root_subgraph().find_child_subgraph_by_op("lstm")
    assert sg.get_attr("runner") == {"run": "cpu", "sim": "cpu", "ref": "cpu"}
    edges = count_crossings(g, get_devices())
    assert [(e["tensor"], e["direction"]) for e in edges] == [("seq", "D2H"), ("h", "H2D")]


def test_devices_option_restricts_and_moves_the_first_choice(models):
    p = placed(xgraph.compile(models.cnn_with_lstm(), {"devices": "aicpu,cpu"}))
    assert p["conv"] == ("AICPU", "")  # the cheapest allowed device took it
    assert p["lstm"] == ("CPU", "AICPU: LSTM is not in its op-info library")
    p = placed(xgraph.compile(models.cnn_with_lstm(), {"devices": "aicore"}))  # the host stays the fallback
    assert p["conv"] == ("AICORE", "") and p["lstm"] == ("CPU", "AICORE: LSTM is not in its op-info library")


def test_strict_mode_lists_every_unplaceable_op_and_every_refusal(models):
    with pytest.raises(PartitionError) as e:
        xgraph.compile(models.cnn_with_lstm(), {"fallback": "error"})
    msg = str(e.value)
    assert "\n" not in msg
    assert "no allowed device accepts 1 op(s): 'lstm' (LSTM): AICORE, AICPU, DVPP: LSTM is not in its op-info " \
           "library" in msg
    with pytest.raises(PartitionError) as e:
        xgraph.compile(models.cnn_with_lstm(), {"fallback": "error", "devices": "aicore"})
    assert "2 op(s)" not in str(e.value) and "'lstm' (LSTM): AICORE: LSTM" in str(e.value)
    # naming the host explicitly allows it even in strict mode
    p = placed(xgraph.compile(models.cnn_with_lstm(), {"fallback": "error", "devices": "aicore,cpu"}))
    assert p["lstm"][0] == "CPU"


def test_strict_mode_fails_before_changing_anything(models):
    g = fresh(models.cnn_with_lstm())
    with pytest.raises(PartitionError):
        propose_placement(g, get_devices(), parse_options({"fallback": "error"}))
    assert g.get_root_subgraph().get_children_num() == 7
    assert not any(c.has_attr("device") for c in g.get_root_subgraph().get_children())


def test_unrunnable_op_still_falls_back_but_says_so(models):
    g = xgraph.compile(models.one_op("Frobnicate", [(np.float32, [3])], domain="my.ops"))
    device, reason = placed(g)["op"]
    assert device == "CPU"
    assert reason.startswith("AICORE, AICPU, DVPP: Frobnicate (domain 'my.ops') is not in its op-info library; CPU: ")
    assert reason.endswith("(placed there anyway: fallback is cpu)")
    assert g.get_op("op").get_attr("kernel") == "none"
    assert xgraph.report(g)["unrunnable_ops"] == [{"name": "op", "type": "Frobnicate", "device": "CPU"}]


def test_small_island_between_device_ops_stays_on_the_device(models):
    model = models.sandwich(["Neg", "Abs"], outer=6)  # AICORE x7 | AICPU x2 (int64 Neg, Abs) | AICORE x7
    for min_ops in (1, 5):
        g = xgraph.compile(model, {"min_subgraph_ops": min_ops})
        r = xgraph.report(g)
        assert r["devices"] == {"AICORE": {"subgraphs": 2, "ops": 14}, "AICPU": {"subgraphs": 1, "ops": 2}}
        assert r["crossings"] == 0
        kept = ("; kept on AICPU: sending this 2-op island to the host (min_subgraph_ops=5) would add 2 "
                "host/device copies") if min_ops == 5 else ""
        assert placed(g)["neg7"] == ("AICPU", "AICORE: Neg with dtype int64 unsupported: takes float16, float32, "
                                              "int8, int32" + kept)


def test_small_islands_without_device_neighbours_go_to_the_host(models):
    g = xgraph.compile(models.sandwich(["Neg", "Abs"], outer=3), {"min_subgraph_ops": 5})
    r = xgraph.report(g)
    assert r["devices"] == {"CPU": {"subgraphs": 1, "ops": 10}} and r["crossings"] == 0
    assert placed(g)["relu0"] == ("CPU", "AICORE island of 4 op(s) is smaller than min_subgraph_ops=5")
    assert placed(g)["neg4"] == ("CPU", "AICPU island of 2 op(s) is smaller than min_subgraph_ops=5")
    # next to a host-only op: both 3-op AI Core islands go to the host, leaving no copies at all
    g = xgraph.compile(models.cnn_with_lstm(), {"min_subgraph_ops": 4})
    assert xgraph.report(g)["devices"] == {"CPU": {"subgraphs": 1, "ops": 7}}
    g = xgraph.compile(models.cnn_with_lstm(), {"min_subgraph_ops": 3})
    assert xgraph.report(g)["devices"]["AICORE"] == {"subgraphs": 2, "ops": 6}


def test_propose_is_pure_and_deterministic(models):
    g = fresh(models.bert_like_encoder())
    opts = parse_options({})
    first = propose_placement(g, get_devices(), opts)
    assert propose_placement(g, get_devices(), opts) == first
    assert g.get_root_subgraph().get_children_num() == g.get_op_num()
    assert not any(op.has_attr("device") for op in g.get_ops())


def test_apply_refuses_bad_proposals_without_changing_anything(models):
    g = fresh(models.cnn_with_lstm())
    proposal = propose_placement(g, get_devices(), parse_options({}))
    missing = {op: v for op, v in proposal.items() if op.name != "fc"}
    with pytest.raises(PartitionError, match=r"no device for op\(s\) \['fc'\]"):
        apply_placement(g, missing, get_devices())
    bogus = {op: ("NPU", "") for op in proposal}
    with pytest.raises(PartitionError, match="unknown device 'NPU'"):
        apply_placement(g, bogus, get_devices())
    assert g.get_root_subgraph().get_children_num() == 7
    merged = apply_placement(g, proposal, get_devices())
    assert sorted(s.get_attr("device") for s in merged) == ["AICORE", "AICORE", "CPU"]


def test_join_refusals_merges_equal_reasons_in_order():
    assert join_refusals([("A", "A: x"), ("B", "B: x"), ("C", "C: y"), ("D", "D: x")]) == "A, B: x; C: y; D: x"


# --------------------------------------------------------------------------------- properties

KINDS = ("Relu", "Add", "Hardmax", "Einsum")  # AICORE, AICORE, AICPU only, host only


@st.composite
def random_models(draw):
    n = draw(st.integers(2, 14))
    nodes, produced = [], ["x"]
    for i in range(n):
        kind = draw(st.sampled_from(KINDS))
        a = draw(st.sampled_from(produced))
        inputs = [a, draw(st.sampled_from(produced))] if kind == "Add" else [a]
        attrs = {"equation": "ij->ij"} if kind == "Einsum" else {}
        nodes.append(helper.make_node(kind, inputs, [f"t{i}"], name=f"n{i}", **attrs))
        produced.append(f"t{i}")
    used = {x for node in nodes for x in node.input}
    outputs = [helper.make_tensor_value_info(t, TensorProto.FLOAT, [4, 4]) for t in produced[1:] if t not in used]
    g = helper.make_graph(nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])], outputs)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    return model, draw(st.integers(1, 4))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(random_models())
def test_random_dags_compile_to_a_consistent_acyclic_partition(models, case):
    model, min_ops = case
    g = xgraph.compile(model, {"min_subgraph_ops": min_ops})
    models.check_compiled(g)
    devices = get_devices()
    for child in g.get_root_subgraph().get_children():
        assert {op.get_attr("device") for op in child.get_ops()} == {child.get_attr("device")}
    if min_ops == 1:  # plain first fit: the cheapest device that accepts the op, and "" only for AICORE
        order = list(devices.values())
        for op in g.get_ops():
            first = next(s.name for s in order if op_info(s)(op).ok)
            assert op.get_attr("device") == first
            assert (op.get_attr("placement_reason") == "") == (first == "AICORE")
    r = xgraph.report(g)
    assert sum(d["ops"] for d in r["devices"].values()) == g.get_op_num()


def tree_and_annotations(g: xgraph.Graph) -> tuple:
    children = sorted((sorted(op.name for op in c.get_ops()), c.get_attrs()) for c in g.get_root_subgraph().get_children())
    return children, {op.name: op.get_attrs() for op in g.get_ops()}


@settings(max_examples=40, deadline=None)
@given(random_models(), st.booleans())
def test_place_is_propose_then_apply(case, strict):
    model, min_ops = case
    devices = get_devices()
    opts = parse_options({"fallback": "error", "devices": "aicore,aicpu"} if strict else {"min_subgraph_ops": min_ops})
    one, two = fresh(model), fresh(model)
    try:
        merged = place(one, devices, opts)
    except PartitionError as e:
        with pytest.raises(PartitionError) as expected_error:
            propose_placement(two, devices, opts)
        assert str(e) == str(expected_error.value)  # the same ops listed, in the same order
        assert tree_and_annotations(one) == tree_and_annotations(two)  # nothing changed
        return
    expected = apply_placement(two, propose_placement(two, devices, opts), devices)
    assert [sorted(op.name for op in sg.get_ops()) for sg in merged] == \
        [sorted(op.name for op in sg.get_ops()) for sg in expected]
    assert tree_and_annotations(one) == tree_and_annotations(two)
