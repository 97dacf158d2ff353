"""The SMFC sample plugin: Softmax selection and merging, its program, its runner's numerics."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest

import xgraph
from xgraph import Graph
from xgraph.errors import RunnerError
from xgraph.plugins import load_plugin, run_plugin_chain

PLUGINS = str(Path(__file__).resolve().parents[1])
RESNET50 = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / "light_resnet50.onnx"


def oracle(x: np.ndarray, axis: int) -> np.ndarray:
    """Softmax the textbook way, in float64 (inputs here are small, so no max shift is needed)."""
    e = np.exp(x.astype(np.float64))
    return e / e.sum(axis=axis, keepdims=True)


def heads_graph() -> Graph:
    """x -> sm1(axis 1) -> relu -> sm2(default axis); x -> sm3(axis 0); and a float64 softmax."""
    g = Graph("heads")
    x = g.create_input("x", (2, 5))
    sm1 = g.create_op("sm1", "Softmax", {"axis": 1}, [x])
    relu = g.create_op("relu", "Relu", inputs=[sm1.get_output_tensor()])
    sm2 = g.create_op("sm2", "Softmax", inputs=[relu.get_output_tensor()])
    sm3 = g.create_op("sm3", "Softmax", {"axis": 0}, [x])
    d = g.create_input("d", (2, 5), dtype=np.float64)
    sm64 = g.create_op("sm64", "Softmax", inputs=[d])
    g.set_outputs([sm2.get_output_tensor(), sm3.get_output_tensor(), sm64.get_output_tensor()])
    g.get_root_subgraph().create_child_subgraph()
    return g


def test_softmaxes_merge_as_far_as_dependencies_allow():
    g = heads_graph()
    [record] = run_plugin_chain(g, ["smfc"], [PLUGINS])
    assert record["device"] == "SMFC" and record["runner"] == {"run": "smfc", "sim": "smfc", "ref": "smfc"}
    assert record["subgraphs"] == ["subgraph_sm1", "subgraph_sm2"]
    first = g.get_subgraph("subgraph_sm1")
    assert {op.name for op in first.get_ops()} == {"sm1", "sm3"}
    assert first.get_attr("smfc_program") == [
        {"op": "sm1", "input": "x", "output": "sm1", "axis": 1, "coerce_2d": False},
        {"op": "sm3", "input": "x", "output": "sm3", "axis": 0, "coerce_2d": False}]
    assert g.get_subgraph("subgraph_sm2").get_attr("smfc_program")[0]["axis"] == -1
    assert not g.get_subgraph("subgraph_sm64").has_attr("device")  # float64: not an IP dtype


@pytest.mark.parametrize("mode, tolerance", [("run", 1e-6), ("sim", 2e-3), ("ref", 1e-7)])
def test_runner_matches_the_oracle_in_every_mode(mode, tolerance):
    g = heads_graph()
    run_plugin_chain(g, ["smfc"], [PLUGINS])
    x = np.random.default_rng(0).standard_normal((2, 5)).astype(np.float32)
    first = xgraph.Runner.create_runner(g.get_subgraph("subgraph_sm1"), mode)
    assert [t.name for t in first.get_output_tensors()] == ["sm1", "sm3"]
    sm1, sm3 = first.run([x])
    assert sm1.dtype == np.float32
    np.testing.assert_allclose(sm1, oracle(x, 1), atol=tolerance)
    np.testing.assert_allclose(sm3, oracle(x, 0), atol=tolerance)
    [sm2] = xgraph.Runner.create_runner(g.get_subgraph("subgraph_sm2"), mode).run([np.maximum(sm1, 0)])
    np.testing.assert_allclose(sm2, oracle(np.maximum(oracle(x, 1), 0), -1), atol=tolerance)


def test_opset_11_softmax_flattens_from_the_axis():
    g = Graph("old")
    g.opset_imports[""] = 11
    x = g.create_input("x", (2, 3, 4))
    sm = g.create_op("sm", "Softmax", {"axis": 1}, [x])
    g.set_outputs([sm.get_output_tensor()])
    g.get_root_subgraph().create_child_subgraph()
    run_plugin_chain(g, ["smfc"], [PLUGINS])
    sg = g.get_subgraph("subgraph_sm")
    assert sg.get_attr("smfc_program")[0]["coerce_2d"] is True
    x = np.random.default_rng(1).standard_normal((2, 3, 4)).astype(np.float32)
    [y] = xgraph.Runner.create_runner(sg, "ref").run([x])
    np.testing.assert_allclose(y, oracle(x.reshape(2, 12), 1).reshape(2, 3, 4), atol=1e-6)


def test_whole_graph_compiles_and_runs_with_the_plugin():
    source = Graph("heads2")  # uncompiled: xgraph.compile splits the root itself
    x = source.create_input("x", (2, 5))
    sm1 = source.create_op("sm1", "Softmax", {"axis": 1}, [x])
    relu = source.create_op("relu", "Relu", inputs=[sm1.get_output_tensor()])
    sm2 = source.create_op("sm2", "Softmax", inputs=[relu.get_output_tensor()])
    source.set_outputs([sm2.get_output_tensor()])
    compiled = xgraph.compile(source, {"plugins": "smfc"}, plugin_path=[PLUGINS])
    devices = {c.get_attr("device") for c in compiled.get_root_subgraph().get_children()}
    assert "SMFC" in devices and len(devices) == 2
    xv = np.random.default_rng(2).standard_normal((2, 5)).astype(np.float32)
    [y] = xgraph.create_graph_runner(compiled).run({"x": xv})
    np.testing.assert_allclose(y, oracle(np.maximum(oracle(xv, 1), 0), -1), atol=1e-6)


def test_runner_refuses_a_subgraph_the_plugin_did_not_compile():
    g = heads_graph()
    sg = g.get_subgraph("subgraph_sm1")
    sg.set_attr("runner", {"run": "smfc"})
    load_plugin("smfc", [PLUGINS])  # registers the runner
    with pytest.raises(RunnerError, match="no 'smfc_program' attr"):
        xgraph.Runner.create_runner(sg, "run")


@pytest.mark.zoo
def test_resnet50_softmax_goes_to_smfc():
    g = Graph.from_onnx(RESNET50)
    g.get_root_subgraph().create_child_subgraph()
    [record] = run_plugin_chain(g, ["smfc"], [PLUGINS])
    [name] = record["subgraphs"]
    sg = g.get_subgraph(name)
    assert [op.type for op in sg.get_ops()] == ["Softmax"]
    [step] = sg.get_attr("smfc_program")
    assert (step["axis"], step["coerce_2d"]) == (1, True)  # the zoo model is opset 9
    assigned = [c for c in g.get_root_subgraph().get_children() if c.has_attr("device")]
    assert assigned == [sg]
