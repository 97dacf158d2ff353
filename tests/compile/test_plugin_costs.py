"""Plugins in the cost model: estimates, device specs and preferences the solver may decline."""
from __future__ import annotations

import textwrap

import numpy as np
import onnx
import pytest

import xgraph
from xgraph.errors import PluginError


def _plugin(directory, name: str = "pref", claims: str = "prefer", estimate: str = "None", spec: str = "None",
            ops: tuple[str, ...] = ("mm1", "mm2"), merge: bool = True) -> str:
    """A plugin offering (or claiming) ops `ops` (merged when `merge`), on device NAME in host memory."""
    (directory / f"{name}.py").write_text(textwrap.dedent(f'''
        from xgraph.partition import filter_by_name, merge_subgraph
        from xgraph.plugins import Plugin

        class P(Plugin):
            claims = {claims!r}

            def get_plugin_name(self):
                return {name!r}

            def get_memory(self):
                return "host"

            def partition(self, graph):
                taken = {{filter_by_name(graph, n) for n in {list(ops)!r}}}
                return merge_subgraph(taken) if {merge!r} else taken

            def compile(self, subgraph):
                subgraph.set_attr("vendor_blob", "compiled")

            def estimate(self, subgraph):
                return {estimate}

            def get_device_spec(self):
                return {spec}

        def get_plugin():
            return P()
    '''))
    return name


@pytest.fixture
def compile_with(tmp_path, models):
    """compile_with(options, **plugin): four MatMuls mm0..mm3 (128 x 128) compiled with `_plugin(**plugin)`."""
    path = tmp_path / "m.onnx"
    onnx.save(models.matmul_chain(4, 128), path)

    def run(options, **plugin):
        name = _plugin(tmp_path, **plugin)
        return xgraph.compile(str(path), {"plugins": name, **options}, plugin_path=[str(tmp_path)])
    return run


def _device(compiled, op):
    return str(compiled.get_root_subgraph().find_child_subgraph_by_op(op).get_attr("device"))


def test_the_chain_stores_the_estimate_and_records_the_claim_mode(compile_with):
    compiled = compile_with({}, estimate="0.25")
    sg = compiled.get_root_subgraph().find_child_subgraph_by_op("mm1")
    assert sg.get_attr("estimated_seconds") == 0.25 and sg.get_attr("plugin_preference") is True
    run = compiled.get_attr("plugin_runs")[0]
    assert run["claims"] == "prefer" and run["device_spec"] is None


@pytest.mark.parametrize("seconds, device", [("1e-9", "PREF"), ("10.0", "AICORE")])
def test_a_plugin_estimate_decides_a_preference_under_latency(compile_with, seconds, device):
    compiled = compile_with({"placement": "latency"}, estimate=seconds)
    assert _device(compiled, "mm1") == _device(compiled, "mm2") == device
    report = xgraph.report(compiled)
    reason = next(op["reason"] for op in report["ops"] if op["name"] == "mm1")
    if device == "PREF":
        assert compiled.get_root_subgraph().find_child_subgraph_by_op("mm1").get_attr("vendor_blob") == "compiled"
    else:  # declined: the reason names the plugin, and the plugin's attrs are gone with it
        assert reason.startswith("by latency: AICORE, not plugin 'pref': AICORE is"), reason
        sg = compiled.get_root_subgraph().find_child_subgraph_by_op("mm1")
        assert not sg.has_attr("vendor_blob") and not sg.has_attr("plugin")
        outputs = xgraph.create_graph_runner(compiled, "run").run({"x": np.ones((64, 128), np.float32)})
        assert outputs[0].shape == (64, 128)


def test_first_fit_takes_a_preference_as_a_claim(compile_with):
    compiled = compile_with({}, estimate="10.0")
    assert _device(compiled, "mm1") == "PREF"


def test_a_claim_stays_whatever_its_estimate(compile_with):
    compiled = compile_with({"placement": "latency"}, claims="claim", estimate="10.0")
    assert _device(compiled, "mm1") == "PREF"
    assert xgraph.report(compiled)["cost"]["chosen"]["latency_seconds"] >= 10.0


def test_the_device_spec_costs_a_preference_without_an_estimate(compile_with):
    slow = '{"cost": {"peak_gflops": {"float32": 0.001}, "bandwidth_gbps": 0.001}}'
    compiled = compile_with({"placement": "latency"}, spec=slow)
    assert _device(compiled, "mm1") == "AICORE"  # its roofline on a 1 MFLOP/s device loses
    run = compiled.get_attr("plugin_runs")[0]
    assert run["device_spec"]["cost"]["peak_gflops"] == {"float32": 0.001}
    from xgraph.devices import get_devices
    from xgraph.devices.settings import compiled_devices
    assert compiled_devices(compiled, get_devices())["PREF"].cost.bandwidth_gbps == 0.001


@pytest.mark.parametrize("plugin, message", [
    ({"estimate": "1 / 0"}, "estimate('subgraph_mm1') raised ZeroDivisionError"),
    ({"estimate": "'fast'"}, "estimate('subgraph_mm1') returned 'fast'"),
    ({"estimate": "-1.0"}, "returned -1.0"),
    ({"spec": "{'device': {'name': 'OTHER'}}"}, "describes device 'OTHER' but get_device() is 'PREF'"),
    ({"spec": "{'cost': {'peak_gflops': 3}}"}, "get_device_spec() returned a bad spec"),
    ({"spec": "42"}, "get_device_spec()"),
    ({"claims": "maybe"}, "claims = 'maybe'"),
])
def test_bad_hooks_are_plugin_errors_naming_plugin_and_method(compile_with, plugin, message):
    with pytest.raises(PluginError, match="plugin 'pref'") as info:
        compile_with({"placement": "latency"}, **plugin)
    assert message in str(info.value)


def test_a_plugin_device_with_two_instances_shares_the_load_under_throughput(compile_with):
    compiled = compile_with({"placement": "throughput"}, claims="claim", estimate="1.0",
                            spec='{"device": {"instances": 2, "max_concurrency": 2}}', ops=("mm0", "mm2"), merge=False)
    root = compiled.get_root_subgraph()
    assert {root.find_child_subgraph_by_op(op).get_attr("instance") for op in ("mm0", "mm2")} == {0, 1}
    cost = xgraph.report(compiled)["cost"]
    assert {"PREF:0", "PREF:1"} <= set(cost["chosen"]["instances"])
    assert cost["sources"]["estimate"] == 2
    from xgraph.devices import get_devices
    from xgraph.devices.settings import compiled_devices
    assert compiled_devices(compiled, get_devices())["PREF"].max_concurrency == 2  # what the runtime's queues read
    outputs = xgraph.create_graph_runner(compiled, "run").run({"x": np.ones((64, 128), np.float32)})
    assert outputs[0].shape == (64, 128)
