"""`xgraph profile-costs`: a measured cost table over every op on every accepting device, read back by a compile."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.cli.main import main
from xgraph.cli.xcompile import main as xcompile

OPENVINO_PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
#: The devices whose op-info libraries take each op of `_small` (docs/devices.md's tables), checked independently.
ACCEPTING = {"mm0": {"AICORE", "AICPU", "CPU"}, "relu0": {"AICORE", "AICPU", "CPU"},
             "mm1": {"AICORE", "AICPU", "CPU"}, "relu1": {"AICORE", "AICPU", "CPU"}, "topk": {"AICPU", "CPU"}}


def _small(path: Path) -> str:
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [numpy_helper.from_array(np.array([3], np.int64), "k")], "x"
    for i in range(2):
        inits.append(numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), f"w{i}"))
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"], name=f"relu{i}")]
        prev = f"r{i}"
    nodes.append(helper.make_node("TopK", [prev, "k"], ["v", "idx"], name="topk", axis=-1))
    graph = helper.make_graph(nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 32])],
                              [helper.make_tensor_value_info("v", TensorProto.FLOAT, [4, 3]),
                               helper.make_tensor_value_info("idx", TensorProto.INT64, [4, 3])], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return str(path)


def test_the_table_covers_every_op_on_every_accepting_device_and_a_compile_reads_it(tmp_path, capsys):
    model, table = _small(tmp_path / "small.onnx"), tmp_path / "costs.json"
    assert main(["profile-costs", model, "-o", str(table), "--repeat", "2", "--kernels", "numpy"]) == 0
    assert str(table) in capsys.readouterr().out
    doc = json.loads(table.read_text())
    assert (doc["version"], doc["model"], doc["repeat"], doc["candidates"]) == (1, "small", 2, [])
    assert {name: set(entry["seconds"]) for name, entry in doc["ops"].items()} == ACCEPTING
    assert all(s > 0 for entry in doc["ops"].values() for s in entry["seconds"].values())
    assert doc["signatures"]["TopK||float32[4,32];int64[1]"].keys() == {"AICPU", "CPU"}
    compiled = xgraph.compile(model, {"placement": "latency", "costs": str(table)})
    assert xgraph.report(compiled)["cost"]["sources"] == {"measured": 5}
    options = json.dumps({"placement": "latency", "costs": str(table)})
    assert xcompile(["--options", options, "-o", str(tmp_path / "small.xmodel"), model]) == 0
    assert f"unit costs: measured 5 (table {table})" in capsys.readouterr().out


def test_plugin_subgraphs_are_timed_on_their_runner(tmp_path):
    pytest.importorskip("openvino", reason="the openvino plugin needs the openvino package")
    model, table = _small(tmp_path / "small.onnx"), tmp_path / "costs.json"
    options = {"plugins": "openvino", "plugin_options": {"openvino": {"claims": "prefer"}}}
    assert main(["profile-costs", model, "-o", str(table), "--repeat", "2", "--plugin-path", str(OPENVINO_PLUGINS),
                 "--options", json.dumps(options)]) == 0
    [candidate] = json.loads(table.read_text())["candidates"]
    assert candidate["plugin"] == "openvino" and candidate["device"] == "OPENVINO" and candidate["seconds"] > 0
    assert candidate["ops"] == sorted(ACCEPTING)
    compiled = xgraph.compile(model, {**options, "placement": "latency", "costs": str(table)},
                              plugin_path=[str(OPENVINO_PLUGINS)])
    units = xgraph.report(compiled)["cost"]["unit_sources"]
    offered = next(u for u in units if u["ops"] == len(ACCEPTING))  # the offer as one unit, measured either way
    assert offered["source"] == "measured"


def test_bad_arguments_fail_before_any_work_and_write_nothing(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = _small(tmp_path / "small.onnx")
    with pytest.raises(SystemExit) as info:
        main(["profile-costs", model, "--repeat", "0"])
    assert info.value.code == 2 and "--repeat" in capsys.readouterr().err.strip().splitlines()[-1]
    assert main(["profile-costs", model, "-o", "no/such/dir/t.json"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "no/such/dir/t.json" in line and "does not exist" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.onnx"]


def test_reference_values_fall_back_to_the_inputs_when_onnxruntime_cannot_run_the_graph():
    from onnx import TensorProto, helper

    from xgraph.profiling import reference_values
    node = helper.make_node("Mystery", ["x"], ["y"], name="m", domain="com.example")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    values = reference_values(xgraph.Graph.from_onnx(model))
    assert list(values) == ["x"] and values["x"].shape == (2, 3)
