"""Cutting the graph runner's plan into per-actor stages (pure: no Ray needed).

The invariants, checked on random DAGs: every task runs in exactly one stage, on its actor;
a stage reads only feeds and what earlier stages made; what a later stage or the caller reads
leaves its stage; copies run on the device side of their crossing.
"""
from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import xgraph
from xgraph.ray.graph_runner import RemoteRunner
from xgraph.ray.stages import cut_stages
from xgraph.runners.graph_runner import build_plan, device_subgraphs
from testing.runtime import place

DEVICES = ("AICORE", "AICPU", "CPU", "DVPP")


def plan_of(graph: xgraph.Graph):
    proxies = {sg: RemoteRunner(sg) for sg in device_subgraphs(graph)}
    return build_plan(graph, proxies), {sg.name: str(sg.get_attr("device")) for sg in proxies}


def random_dag(parents: list[list[int]]) -> xgraph.Graph:
    """Op i adds (or, with one parent, negates) the outputs of ops `parents[i]` (-1: the input x)."""
    nodes = []
    for i, ps in enumerate(parents):
        names = ["x" if p < 0 else f"t{p}" for p in ps]
        nodes.append(helper.make_node("Add" if len(names) == 2 else "Neg", names, [f"t{i}"], name=f"op{i:02d}"))
    consumed = {p for ps in parents for p in ps}
    outs = [f"t{i}" for i in range(len(parents)) if i not in consumed]
    g = helper.make_graph(nodes, "dag", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, [1, 4]) for o in outs])
    return xgraph.Graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))


@st.composite
def placed_dags(draw):
    n = draw(st.integers(1, 12))
    parents = []
    for i in range(n):
        k = draw(st.integers(1, 2))
        parents.append(sorted(set(draw(st.lists(st.integers(-1, i - 1), min_size=k, max_size=k)))))
    devices = draw(st.lists(st.sampled_from(DEVICES), min_size=n, max_size=n))
    group_by_device = draw(st.booleans())
    return random_dag(parents), {f"op{i:02d}": d for i, d in enumerate(devices)}, group_by_device


@settings(max_examples=60, deadline=None)
@given(placed_dags())
def test_stages_are_in_dependency_order_and_cover_every_task_once(case):
    graph, device_of, group_by_device = case
    place(graph, device_of)
    plan, devices = plan_of(graph)
    actor_of = {name: (device if group_by_device else name) for name, device in devices.items()}
    stages = cut_stages(plan, actor_of)
    seen = [t.index for s in stages for t in s.tasks]
    assert sorted(seen) == list(range(len(plan.tasks)))
    made: set = set(plan.feeds) | set(plan.constants)
    readers_elsewhere = {k for s in stages for k in s.inputs} | set(plan.results)
    for stage in stages:
        assert set(stage.inputs) <= made, f"stage {stage.index} reads what no earlier stage made"
        inside = set()
        for task in stage.tasks:
            assert set(task.inputs) <= made | inside
            inside |= set(task.outputs)
            plan_task = plan.tasks[task.index]
            if task.kind == "subgraph":
                assert actor_of[task.name] == stage.actor
            else:  # a copy runs on the device side: H2D with its reader, D2H with its producer
                assert plan_task.stream in ("H2D", "D2H")
        assert set(stage.outputs) == inside & readers_elsewhere
        made |= set(stage.outputs)
    assert set(plan.results) <= made


def test_the_classifier_is_four_stages_with_its_copies_on_the_device_side():
    graph = xgraph.compile(Path(__file__).resolve().parents[2] / "samples" / "classify" / "classifier.onnx")
    plan, devices = plan_of(graph)
    stages = cut_stages(plan, devices)
    assert [(s.actor, [t.name for t in s.tasks]) for s in stages] == [
        ("DVPP", ["copy jpeg H2D", "subgraph_decode"]),
        ("AICORE", ["subgraph_add_batch"]),
        ("AICPU", ["subgraph_top5", "copy top_index D2H", "copy scores D2H"]),
        ("CPU", ["subgraph_class_names"])]
    assert stages[0].inputs == (("jpeg", "host"),) and stages[2].outputs == (("top_index", "host"), ("scores", "host"))


def test_a_device_visited_twice_gets_two_stages_on_one_actor():
    graph = random_dag([[-1], [0], [1]])
    place(graph, {"op00": "AICORE", "op01": "CPU", "op02": "AICORE"})
    plan, devices = plan_of(graph)
    stages = cut_stages(plan, devices)
    assert [(s.actor, [t.name for t in s.tasks]) for s in stages] == [
        ("AICORE", ["copy x H2D", "subgraph_op00", "copy t0 D2H"]), ("CPU", ["subgraph_op01"]),
        ("AICORE", ["copy t1 H2D", "subgraph_op02", "copy t2 D2H"])]
