"""The device table: built-in op-info TOML files, their validation, and registering devices."""
from __future__ import annotations

import importlib
import textwrap

import onnx
import pytest

from xgraph.errors import PluginError
from xgraph.devices import (
    CostProfile, DeviceSpec, builtin_device_files, device_from_dict, get_devices, load_device_file, register_device,
    unregister_device)

MINIMAL = """
[device]
name = "NPU"
cost_rank = 2
runner = { run = "cpu" }
"""


def write(tmp_path, text: str):
    path = tmp_path / "npu.toml"
    path.write_text(textwrap.dedent(text))
    return path


def test_builtin_devices_in_cost_order_with_memory_runner_and_cost():
    devices = get_devices()
    assert list(devices)[:4] == ["AICORE", "AICPU", "DVPP", "CPU"]
    assert [devices[n].cost_rank for n in ("AICORE", "AICPU", "DVPP", "CPU")] == [1, 3, 5, 10]
    assert {n: devices[n].memory for n in devices} == {"AICORE": "device", "AICPU": "device", "DVPP": "device",
                                                        "CPU": "host"}
    for name, spec in devices.items():
        assert dict(spec.runner) == {m: name.lower() for m in ("run", "sim", "ref")}
        assert spec.cost.bandwidth_gbps > 0 and spec.cost.peak_gflops and spec.cost.launch_overhead_us >= 0
    assert devices["AICORE"].cost.peak_gflops["float16"] > devices["AICORE"].cost.peak_gflops["float32"]
    assert [p.name for p in builtin_device_files()] == ["aicore.toml", "aicpu.toml", "dvpp.toml", "cpu.toml"]


def test_every_listed_op_is_a_real_op_of_its_domain():
    importlib.import_module("xgraph.ops")  # registers the xgraph.dvpp schemas
    for spec in get_devices().values():
        for (domain, op_type) in spec.ops.rules:
            assert onnx.defs.has(op_type, domain), f"{spec.name} lists unknown op {domain}.{op_type}"


def test_every_runner_a_table_names_is_registered():
    from xgraph.runners.runner import registered_runners
    runners = registered_runners()
    for spec in get_devices().values():
        assert set(spec.runner.values()) <= set(runners), spec.name


def test_ai_cpu_covers_the_dense_ai_core_ops_for_dynamic_shapes():
    devices = get_devices()
    aicore, aicpu = devices["AICORE"].ops, devices["AICPU"].ops
    missing = sorted(t for (d, t) in aicore.rules if (d, t) not in aicpu.rules)
    assert missing == []
    assert all(not r.static_shapes for r in aicpu.rules.values())
    assert all(r.static_shapes for r in aicore.rules.values())


def test_cpu_is_a_catch_all_with_exclusions():
    cpu = get_devices()["CPU"].ops
    assert cpu.any_op is not None and cpu.any_op.checks == ("host_runnable",)
    assert cpu.rule_for("AnythingAtAll", "") is cpu.any_op
    assert cpu.rule_for("Gradient", "") is None and "training-only" in cpu.exclude["Gradient"]


def test_minimal_file_gets_defaults(tmp_path):
    spec = load_device_file(write(tmp_path, MINIMAL))
    assert (spec.name, spec.cost_rank, spec.memory, dict(spec.runner)) == ("NPU", 2, "device", {"run": "cpu"})
    assert spec.cost == CostProfile() and not spec.ops.rules and spec.ops.any_op is None


@pytest.mark.parametrize("extra, key, problem", [
    ('[ops.Conv]\ndtype = ["float32"]\n', "ops.Conv", "unknown key(s) ['dtype']"),
    ('[ops.Conv]\ndtypes = ["float33"]\n', "ops.Conv.dtypes", "unknown dtype(s) ['float33']"),
    ('[ops.Conv]\nchecks = ["magic"]\n', "ops.Conv.checks", "unknown check(s) ['magic']"),
    ('[ops.Conv]\nattrs.group = { in = [1], maximum = 3 }\n', "ops.Conv.attrs.group", "unknown key(s) ['maximum']"),
    ('[ops.Conv]\ninputs.x = { rank = [4] }\n', "ops.Conv.inputs.x", "must be an integer index"),
    ('[ops.Conv]\nmax_rank = "four"\n', "ops.Conv.max_rank", "must be an integer"),
    ('[ops.Conv]\n[[group]]\nops = ["Conv"]\n', "group[0].Conv", "already defined at"),
    ('[cost]\npeak_gflops = { float32 = -1 }\n', "cost.peak_gflops", "positive number"),
    ('[ops.MatMul]\ndynamic_dims = true\ndynamic_range = [4096]\n', "ops.MatMul.dynamic_range",
     "must be [low, high], got [4096]"),
    ('[ops.MatMul]\ndynamic_dims = true\ndynamic_range = [8, 2]\n', "ops.MatMul.dynamic_range", "low <= high"),
    ('[ops.MatMul]\ndynamic_dims = true\ndynamic_range = [-1, 8]\n', "ops.MatMul.dynamic_range", "must be >= 0"),
    ('[ops.MatMul]\ndynamic_dims = true\ndynamic_range = "1..8"\n', "ops.MatMul.dynamic_range", "must be a list"),
    ('[ops.MatMul]\ndynamic_range = [1, 4096]\n', "ops.MatMul.dynamic_range", "set dynamic_dims = true beside it"),
    ('[weird]\n', "", "unknown key(s) ['weird']"),
])
def test_validation_names_file_and_key(tmp_path, extra, key, problem):
    path = write(tmp_path, MINIMAL + extra)
    with pytest.raises(PluginError) as e:
        load_device_file(path)
    msg = str(e.value)
    assert str(path) in msg and problem in msg
    if key:
        assert f"key {key!r}" in msg


def test_a_rule_declares_the_range_of_its_dynamic_dims(tmp_path):
    spec = load_device_file(write(tmp_path, MINIMAL + '[ops.MatMul]\nstatic_shapes = true\ndynamic_dims = true\n'
                                  'dynamic_range = [1, 4096]\n[ops.Relu]\ndynamic_dims = true\n'))
    assert spec.ops.rule_for("MatMul", "").dynamic_range == (1, 4096)
    assert spec.ops.rule_for("Relu", "").dynamic_range is None  # none declared: any dynamic dim, as before


def test_bad_device_fields_and_files(tmp_path):
    with pytest.raises(PluginError, match="memory must be one of"):
        device_from_dict({"device": {"name": "X", "memory": "shared"}}, "x.toml")
    with pytest.raises(PluginError, match="needs a \\[device\\] table"):
        device_from_dict({}, "x.toml")
    with pytest.raises(PluginError, match="runner entries"):
        DeviceSpec("X", runner={"fast": "cpu"})
    with pytest.raises(PluginError, match="not valid TOML"):
        load_device_file(write(tmp_path, "[device\n"))
    with pytest.raises(PluginError, match="file not found"):
        load_device_file(tmp_path / "none.toml")


def test_register_free_text_device_and_name_clash():
    spec = register_device(DeviceSpec("SMFC", cost_rank=20, memory="device", runner={"run": "cpu"}))
    try:
        assert get_devices()["SMFC"] is spec
        assert list(get_devices())[-1] == "SMFC"  # ordered by cost rank
        with pytest.raises(PluginError, match="registered twice"):
            register_device(DeviceSpec("SMFC"))
        with pytest.raises(PluginError, match="registered twice"):
            register_device(DeviceSpec("AICORE"))
    finally:
        unregister_device("SMFC")
    assert "SMFC" not in get_devices()


def test_shape_values_section_is_parsed_and_checked():
    aicore = get_devices()["AICORE"].ops.shape_values
    assert aicore is not None and "Shape" in aicore.ops and aicore.max_elements == 8
    assert {str(d) for d in aicore.dtypes} == {"int32", "int64"}
    assert get_devices()["CPU"].ops.shape_values is None  # the host runs any op anyway
    base = {"device": {"name": "X"}}
    spec = device_from_dict({**base, "shape_values": {"ops": ["Shape"], "dtypes": ["int64"], "max_elements": 4}})
    assert spec.ops.shape_values.max_elements == 4 and spec.ops.shape_values.ops == frozenset({"Shape"})
    with pytest.raises(PluginError, match="shape_values.*needs ops"):
        device_from_dict({**base, "shape_values": {"dtypes": ["int64"]}}, "x.toml")
    with pytest.raises(PluginError, match="shape_values.*unknown key|shape_values.*maxelements"):
        device_from_dict({**base, "shape_values": {"ops": ["Shape"], "dtypes": ["int64"], "maxelements": 4}}, "x.toml")
    with pytest.raises(PluginError, match="max_elements"):
        device_from_dict({**base, "shape_values": {"ops": ["Shape"], "dtypes": ["int64"], "max_elements": 0}}, "x.toml")
