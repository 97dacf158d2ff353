"""Placement by cost: device capacity and instances, the "placement" option, the estimate the report shows."""
from __future__ import annotations

import json
import textwrap

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.devices.settings import apply_device_settings
from xgraph.compiler.options import parse_options
from xgraph.devices import DeviceSpec, LinkProfile, device_from_dict, get_devices, parse_bytes
from xgraph.errors import OptionError, PluginError


def _model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _host_plugin(directory, ops: list[str]) -> str:
    """A plugin pinning each named op to the host (CPU, host memory) in its own subgraph."""
    (directory / "pin_host.py").write_text(textwrap.dedent(f'''
        from xgraph.partition import filter_by_name
        from xgraph.plugins import Plugin

        class Pin(Plugin):
            def get_plugin_name(self):
                return "pin_host"

            def get_device(self):
                return "CPU"

            def partition(self, graph):
                return {{filter_by_name(graph, n) for n in {ops!r}}}

        def get_plugin():
            return Pin()
    '''))
    return "pin_host"


def _sandwich() -> onnx.ModelProto:
    """x -> pinned0 (host) -> middle (Relu, 4 MiB) -> pinned1 (host) -> y: first fit sends `middle` to AI Core."""
    shape = [1, 16, 256, 256]
    nodes = [helper.make_node("Neg", ["x"], ["a"], name="pinned0"),
             helper.make_node("Relu", ["a"], ["b"], name="middle"),
             helper.make_node("Neg", ["b"], ["y"], name="pinned1")]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])


def _device_of(compiled, op: str) -> str:
    return str(compiled.get_root_subgraph().find_child_subgraph_by_op(op).get_attr("device"))


# -- device capacity, instances and links -----------------------------------------------------------
def test_builtin_card_has_capacity_instances_and_a_link():
    devices = get_devices()
    for name in ("AICORE", "AICPU", "DVPP"):
        spec = devices[name]
        assert (spec.instances, spec.memory_capacity, spec.max_concurrency) == (1, 8 << 30, 1)
        assert spec.link == LinkProfile(3.0, 10.0)
    assert devices["CPU"].memory_capacity is None
    assert LinkProfile(2.0, 10.0).seconds(2_000_000) == pytest.approx(10e-6 + 1e-3)


@pytest.mark.parametrize("key, value", [("instances", 0), ("instances", True), ("max_concurrency", "2"),
                                        ("memory_capacity", "8 apples"), ("memory_capacity", 0)])
def test_device_tables_refuse_bad_capacity_naming_the_key(key, value):
    with pytest.raises(PluginError, match=key):
        device_from_dict({"device": {"name": "NPU", key: value}})


def test_device_tables_read_capacity_and_link():
    spec = device_from_dict({"device": {"name": "NPU", "instances": 4, "memory_capacity": "512MiB",
                                        "max_concurrency": 2}, "link": {"bandwidth_gbps": 12.5, "latency_us": 3}})
    assert (spec.instances, spec.memory_capacity, spec.max_concurrency) == (4, 512 << 20, 2)
    assert spec.link == LinkProfile(12.5, 3.0)
    assert [parse_bytes(v) for v in ("8GiB", "8 GB", "512M", "1024", 7, "1.5G", -1)] == \
        [8 << 30, 8 << 30, 512 << 20, 1024, 7, None, None]


# -- options -------------------------------------------------------------------------------------------
def test_devices_object_overrides_the_card_and_round_trips():
    options = parse_options({"devices": {"aicore": {"instances": 2, "memory": "1GiB", "max_concurrency": 3}},
                             "placement": "throughput"})
    assert options.devices is None and options.placement == "throughput"
    assert parse_options(options.to_json()) == options
    table = apply_device_settings(get_devices(), options.device_settings)
    assert [(table[n].instances, table[n].memory_capacity) for n in ("AICORE", "AICPU", "DVPP")] == [(2, 1 << 30)] * 3
    assert (table["AICORE"].max_concurrency, table["AICPU"].max_concurrency) == (3, 1)
    assert table["CPU"] is get_devices()["CPU"]


@pytest.mark.parametrize("options, message", [
    ({"placement": "latncy"}, "did you mean 'latency'"),
    ({"devices": {"aicor": {"instances": 2}}}, "did you mean 'AICORE'"),
    ({"devices": {"AICORE": {"instance": 2}}}, "did you mean 'instances'"),
    ({"devices": {"AICORE": {"memory": "8 apples"}}}, "memory"),
    ({"devices": {"AICORE": {"instances": 0}}}, "instances"),
    ({"devices": {"AICORE": 2}}, "must be an object"),
])
def test_bad_device_settings_and_placements_are_refused(options, message):
    with pytest.raises(OptionError, match=message):
        parse_options(options)


# -- compile ---------------------------------------------------------------------------------------------
def test_first_fit_stays_the_default_and_only_reports_its_estimate(tmp_path, models):
    compiled = xgraph.compile(_sandwich(), {"plugins": _host_plugin(tmp_path, ["pinned0", "pinned1"])},
                              plugin_path=[str(tmp_path)])
    assert _device_of(compiled, "middle") == "AICORE"
    assert not compiled.has_attr("placement_estimate")
    assert not any(c.has_attr("instance") for c in compiled.get_root_subgraph().get_children())
    cost = xgraph.report(compiled)["cost"]
    assert cost["placement"] == "first_fit" and "first_fit" not in cost
    # 4 MiB each way over a 3 GB/s link against a Relu on either side: most of the time is copies
    assert cost["chosen"]["crossing_share"] > 0.2 and '"placement": "latency"' in cost["note"]
    alone = xgraph.report(xgraph.compile(models.matmul_chain()))["cost"]  # one subgraph: only its input and output cross
    assert alone["chosen"]["crossing_share"] == 0 < alone["chosen"]["copy_share"] and "note" not in alone


def test_latency_keeps_an_island_between_host_ops_on_the_host(tmp_path):
    plugin = _host_plugin(tmp_path, ["pinned0", "pinned1"])
    first = xgraph.compile(_sandwich(), {"plugins": plugin}, plugin_path=[str(tmp_path)])
    compiled = xgraph.compile(_sandwich(), {"plugins": plugin, "placement": "latency"}, plugin_path=[str(tmp_path)])
    assert _device_of(compiled, "middle") == "CPU"
    report = xgraph.report(compiled)
    assert report["copies_per_run"]["total"] < xgraph.report(first)["copies_per_run"]["total"]
    cost = report["cost"]
    assert cost["objective"] == "latency" and cost["solver"]["optimal"]
    assert cost["chosen"]["latency_seconds"] < cost["first_fit"]["latency_seconds"]
    reason = compiled.get_op("middle").get_attr("placement_reason")
    assert reason.startswith("by latency: CPU, not AICORE: AICORE would save") and "copies cost" in reason
    x = np.random.default_rng(0).standard_normal((1, 16, 256, 256)).astype(np.float32)
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        (y,) = runner.run({"x": x})
    np.testing.assert_array_equal(y, np.maximum(-x, 0) * -1)


def test_throughput_uses_both_cards_and_balances_them(models):
    options = {"devices": {"AICORE": {"instances": 2}}, "placement": "throughput"}
    compiled = xgraph.compile(models.matmul_chain(), options)
    children = compiled.get_root_subgraph().get_children()
    instances = {c.get_attr("instance") for c in children if c.get_attr("device") == "AICORE"}
    assert instances == {0, 1}
    cost = xgraph.report(compiled)["cost"]
    busy = [cost["chosen"]["instances"][f"AICORE:{i}"]["busy_seconds"] for i in (0, 1)]
    assert min(busy) >= 0.3 * max(busy)
    assert cost["chosen"]["throughput_seconds"] < 0.75 * cost["first_fit"]["throughput_seconds"]
    x = np.random.default_rng(1).standard_normal((64, 256)).astype(np.float32)
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner, \
            xgraph.create_graph_runner(xgraph.compile(models.matmul_chain()), kernels="numpy") as plain:
        np.testing.assert_allclose(runner.run({"x": x})[0], plain.run({"x": x})[0], rtol=1e-6)


def test_device_memory_capacity_sends_what_does_not_fit_elsewhere(models):
    weights = 6 * 256 * 256 * 4  # 1.5 MiB
    compiled = xgraph.compile(models.matmul_chain(), {"devices": {"AICORE": {"memory": weights // 2}},
                                                "placement": "latency"})
    cost = xgraph.report(compiled)["cost"]
    card = cost["chosen"]["instances"]["AICORE:0"]
    assert 0 < card["memory"] <= weights // 2 == card["capacity"]
    assert any(_device_of(compiled, f"mm{i}") == "CPU" for i in range(6))


def test_xcompile_prints_the_estimate_beside_first_fit(tmp_path, capsys, models):
    from xgraph.cli.xcompile import main
    path = tmp_path / "chain.onnx"
    onnx.save(models.matmul_chain(), path)
    options = json.dumps({"devices": {"AICORE": {"instances": 2}}, "placement": "throughput"})
    assert main([str(path), "--options", options, "-o", str(tmp_path / "chain.xmodel")]) == 0
    out = capsys.readouterr().out
    assert "estimated (throughput): latency" in out and "first fit would take" in out
    assert "AICORE:0: busy" in out and "AICORE:1: busy" in out


def test_explain_answers_in_costs(tmp_path):
    options = {"plugins": _host_plugin(tmp_path, ["pinned0", "pinned1"]), "placement": "latency"}
    compiled = xgraph.compile(_sandwich(), options, plugin_path=[str(tmp_path)])
    (entry,) = xgraph.explain(compiled, ["middle"], plugin_path=[str(tmp_path)])
    assert entry["device"] == "CPU" and entry["reason"].startswith("by latency: CPU, not AICORE")
    seconds = {v["device"]: v["seconds"] for v in entry["devices"] if v["accepts"]}
    assert 0 < seconds["AICORE"] < seconds["CPU"]  # AI Core computes faster; the copies made the difference
    from xgraph.compiler.explain import explain_text
    assert "AICORE: accepts, " in explain_text([entry]) and " ms" in explain_text([entry])


def test_a_cost_placement_is_never_estimated_worse_than_first_fit(tmp_path):
    """Host ops scattered through a chain (pinned by a plugin) make first fit's split many short calls; whatever
    the solver's search covers, the split used is never estimated worse than first fit's."""
    nodes, prev, pinned = [], "x", []
    for i in range(40):
        op = "Neg" if i % 4 == 3 else "Relu"
        nodes.append(helper.make_node(op, [prev], [f"t{i}"], name=f"op{i}"))
        pinned += [f"op{i}"] if op == "Neg" else []
        prev = f"t{i}"
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 32, 32])],
                   [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 64, 32, 32])])
    plugin = _host_plugin(tmp_path, pinned)
    for objective in ("latency", "throughput"):
        compiled = xgraph.compile(model, {"plugins": plugin, "placement": objective}, plugin_path=[str(tmp_path)])
        cost = xgraph.report(compiled)["cost"]
        key = f"{objective}_seconds"
        assert cost["chosen"][key] <= cost["first_fit"][key] * (1 + 1e-9)


def test_the_report_estimates_a_graph_whose_instances_its_options_do_not_record(models):
    """A subgraph put on instance 1 by hand (no recorded device settings) is estimated on that instance."""
    compiled = xgraph.compile(models.matmul_chain(2))
    (child,) = [c for c in compiled.get_root_subgraph().get_children() if c.get_attr("device") == "AICORE"]
    child.set_attr("instance", 1)
    instances = xgraph.report(compiled)["cost"]["chosen"]["instances"]
    assert list(instances) == ["AICORE:1"] and instances["AICORE:1"]["busy_seconds"] > 0


def test_two_values_of_one_card_setting_are_refused(models):
    with pytest.raises(OptionError, match="two values of 'instances': 2 for AICORE and 3 for AICPU"):
        xgraph.compile(models.matmul_chain(2), {"devices": {"AICORE": {"instances": 2}, "AICPU": {"instances": 3}}})
    same = xgraph.compile(models.matmul_chain(2), {"devices": {"AICORE": {"instances": 2}, "AICPU": {"instances": 2}}})
    assert same.get_op_num() == 2
