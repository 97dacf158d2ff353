"""Copies are exactly what placement says: on random graphs with random plugin claims (in host
or device memory) and random min_subgraph_ops, the graph runner performs, per run, exactly the
copies the report predicts, and min_subgraph_ops never raises that count. The same holds with
the device subgraphs on random instances of a two-card compile (copies between cards too)."""
from __future__ import annotations

import itertools
import json
import textwrap

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import xgraph

_names = itertools.count()


@st.composite
def graphs_and_claims(draw):
    """(model, ops claimed by a host-memory plugin on CPU, ops claimed by a device-memory plugin)."""
    n = draw(st.integers(4, 14))
    nodes, tensors = [], ["x"]
    for i in range(n):
        kind = draw(st.sampled_from(["relu", "neg", "add", "int_neg", "int_neg"]))
        a = draw(st.sampled_from(tensors))
        if kind == "add":
            b = draw(st.sampled_from(tensors))
            nodes.append(helper.make_node("Add", [a, b], [f"t{i}"], name=f"op{i}"))
        elif kind == "int_neg":  # int64 Neg: AI Core refuses it, AI CPU takes it
            nodes += [helper.make_node("Cast", [a], [f"c{i}"], name=f"op{i}_to_int", to=TensorProto.INT64),
                      helper.make_node("Neg", [f"c{i}"], [f"n{i}"], name=f"op{i}_int_neg"),
                      helper.make_node("Cast", [f"n{i}"], [f"t{i}"], name=f"op{i}", to=TensorProto.FLOAT)]
        else:
            nodes.append(helper.make_node(kind.capitalize(), [a], [f"t{i}"], name=f"op{i}"))
        tensors.append(f"t{i}")
    outputs = sorted({tensors[-1], draw(st.sampled_from(tensors[1:]))})
    graph = helper.make_graph(nodes, "random", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, [2, 3]) for o in outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    names = [node.name for node in nodes]
    host = draw(st.lists(st.sampled_from(names), unique=True, max_size=3))
    device = draw(st.lists(st.sampled_from([x for x in names if x not in host] or names), unique=True, max_size=3))
    return model, host, [x for x in device if x not in host]


def _plugin(directory, device: str, ops: list[str], memory: str | None) -> str:
    """A plugin file taking each named op as its own subgraph; returns its (unique) name."""
    name = f"claim{next(_names)}"
    get_memory = f"\n    def get_memory(self):\n        return {memory!r}\n" if memory else ""
    (directory / f"{name}.py").write_text(textwrap.dedent(f'''
        from xgraph.partition import filter_by_name
        from xgraph.plugins import Plugin

        class Claim(Plugin):
            def get_plugin_name(self):
                return {name!r}

            def get_device(self):
                return {device!r}
    ''') + get_memory + textwrap.dedent(f'''
            def partition(self, graph):
                found = (filter_by_name(graph, n) for n in {ops!r})
                return {{sg for sg in found if sg is not None}}

        def get_plugin():
            return Claim()
    '''))
    return name


@pytest.mark.parametrize("seed", [0])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=graphs_and_claims(), min_ops=st.integers(1, 6), npu_memory=st.sampled_from(["device", "host"]))
def test_runtime_copies_equal_the_report_and_min_subgraph_ops_never_adds_copies(tmp_path, seed, case, min_ops,
                                                                                npu_memory):
    model, host_ops, device_ops = case
    plugins = [_plugin(tmp_path, "CPU", host_ops, None), _plugin(tmp_path, "NPU", device_ops, npu_memory)]
    options = {"plugins": ",".join(plugins), "min_subgraph_ops": min_ops}
    compiled = xgraph.compile(model, options, plugin_path=[str(tmp_path)])
    copies = xgraph.report(compiled)["copies_per_run"]
    assert copies["total"] == copies["crossings"] + copies["graph_inputs"] + copies["graph_outputs"]
    x = np.random.default_rng(seed).standard_normal((2, 3)).astype(np.float32)
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        runner.run({"x": x})
        assert runner.get_stats()["copies"]["count"] == copies["total"]
    baseline = xgraph.compile(model, {**options, "min_subgraph_ops": 1}, plugin_path=[str(tmp_path)])
    assert copies["total"] <= xgraph.report(baseline)["copies_per_run"]["total"]


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=graphs_and_claims(), cards=st.lists(st.integers(0, 1), min_size=12, max_size=12),
       npu_memory=st.sampled_from(["device", "host"]))
def test_copies_between_cards_equal_the_report_and_results_equal_one_card(tmp_path, case, cards, npu_memory):
    model, host_ops, device_ops = case
    plugins = [_plugin(tmp_path, "CPU", host_ops, None), _plugin(tmp_path, "NPU", device_ops, npu_memory)]
    options = {"plugins": ",".join(plugins)}
    one_card = xgraph.compile(model, options, plugin_path=[str(tmp_path)])
    graph = xgraph.compile(model, {**options, "devices": {"AICORE": {"instances": 2}}}, plugin_path=[str(tmp_path)])
    assert json.loads(graph.get_attr("compile_options"))["devices"] == {"AICORE": {"instances": 2}}
    device_side = [c for c in graph.get_root_subgraph().toposort_child_subgraph()
                   if c.get_attr("device") in ("AICORE", "AICPU")]  # the card's devices (NPU stays on card 0)
    for child, card in zip(device_side, cards):
        child.set_attr("instance", card)
    copies = xgraph.report(graph)["copies_per_run"]
    assert copies["total"] == copies["crossings"] + copies["graph_inputs"] + copies["graph_outputs"]
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    with xgraph.create_graph_runner(one_card, kernels="numpy") as runner:
        want = runner.run({"x": x})
    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        got = runner.run({"x": x})  # on the caller's thread
        assert runner.get_stats()["copies"]["count"] == copies["total"]
        job = runner.execute_async({"x": x})  # on the streams
        assert runner.wait(job, timeout=30) == 0
        assert runner.get_stats()["copies"]["count"] == 2 * copies["total"]
        streams = set(runner.plan.streams())
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    assert {f"{c.get_attr('device')}:{c.get_attr('instance')}" for c in device_side} <= streams


def test_plugin_on_cpu_is_host_memory_and_its_copies_are_performed(tmp_path):
    """A plugin pinning an op to CPU (default get_memory) makes the runtime copy around it."""
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="r0"), helper.make_node("Neg", ["a"], ["b"], name="pinned"),
             helper.make_node("Relu", ["b"], ["y"], name="r1")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    name = _plugin(tmp_path, "CPU", ["pinned"], None)
    compiled = xgraph.compile(model, {"plugins": name}, plugin_path=[str(tmp_path)])
    pinned = compiled.get_root_subgraph().find_child_subgraph_by_op("pinned")
    assert pinned.get_attr("memory") == "host"
    copies = xgraph.report(compiled)["copies_per_run"]
    assert copies == {"total": 4, "crossings": 2, "graph_inputs": 1, "graph_outputs": 1}
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        (y,) = runner.run({"x": np.ones((2, 3), np.float32)})
        assert runner.get_stats()["copies"]["count"] == 4
    np.testing.assert_array_equal(y, np.zeros((2, 3), np.float32))
