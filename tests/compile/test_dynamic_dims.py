"""Dynamic dims on AI Core: its dynamic-shape ops take symbolic dims, input_shape ranges, the summary line."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph.cli import xcompile
from xgraph.compiler.options import parse_input_shape, parse_input_shape_ranges, parse_options
from xgraph.errors import OptionError
from testing.runtime import load_script

_models = load_script(Path(__file__).with_name("dynamic_models.py"), "compile_dynamic_models_dims")
HEAVY = {"Conv", "Gemm", "MatMul", "LayerNormalization", "Softmax", "ReduceMean"}


def _devices(compiled) -> dict[str, tuple[str, str, str]]:
    return {o["name"]: (o["type"], o["device"], o["reason"]) for o in xgraph.report(compiled)["ops"]}


def _ort(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def test_cnn_with_a_dynamic_batch_runs_on_ai_core_for_every_batch():
    model = _models.mobilenet_like()
    compiled = xgraph.compile(model)
    heavy = [(name, device) for name, (t, device, _) in _devices(compiled).items() if t in HEAVY]
    assert len(heavy) == 10 and all(device == "AICORE" for _, device in heavy), heavy
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        for batch in (1, 3):
            image = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
            np.testing.assert_allclose(runner.run({"image": image})[0], _ort(model, {"image": image})[0],
                                       rtol=1e-4, atol=1e-5)


def test_decoder_with_every_dim_dynamic_keeps_its_heavy_ops_on_ai_core():
    model = _models.llama_past()
    compiled = xgraph.compile(model)
    for name, (t, device, reason) in _devices(compiled).items():
        if t in HEAVY:
            assert device == "AICORE", (name, reason)
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        for past, seq in ((0, 3), (5, 1)):
            feeds = _models.llama_feeds(past, seq=seq)
            for got, expected in zip(runner.run(feeds), _ort(model, feeds)):
                np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_ops_that_need_static_shapes_still_refuse_dynamic_dims():
    nodes = [helper.make_node("Resize", ["x", "", "scales"], ["y"], name="resize", mode="nearest")]
    graph = helper.make_graph(nodes, "r", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 4, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [onnx.numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")])
    compiled = xgraph.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    _, device, reason = _devices(compiled)["resize"]
    assert device != "AICORE" and "needs static shapes" in reason
    dynamic = xgraph.report(compiled)["dynamic"]
    assert dynamic["static_fallbacks"] == 1 and dynamic["aicore_ops"] == 0


@pytest.mark.parametrize("text, shapes, ranges", [
    ("past_k:1,2,0..2048,8", {"past_k": (1, 2, -1, 8)}, {"past_k": {2: (0, 2048)}}),
    ("x:1~-1,3", {"x": (-1, 3)}, {"x": {0: (1, -1)}}),  # ATC's ~, unbounded high end
    ("past:0..64;ids:1,1", {"past": (-1,), "ids": (1, 1)}, {"past": {0: (0, 64)}}),
])
def test_input_shape_takes_ranges(text, shapes, ranges):
    assert parse_input_shape(text) == shapes
    assert parse_input_shape_ranges(text) == ranges
    options = parse_options({"input_shape": text})
    assert parse_options(options.to_dict()).input_shape_ranges == ranges  # the record reads back the same


@pytest.mark.parametrize("options, message", [
    ({"input_shape": "x:1,5..2"}, "needs 0 <= low <= high"),
    ({"input_shape": "x:1,1..8", "dynamic_dims": "2;4"}, "exclude option 'dynamic_dims'"),
])
def test_bad_ranges_are_refused_naming_the_option(options, message):
    with pytest.raises(OptionError, match=message):
        parse_options(options)


def test_ranges_are_checked_against_the_model_and_reported():
    model = _models.llama_past()
    with pytest.raises(OptionError, match="model fixes it at 2"):
        xgraph.compile(model, {"input_shape": "past_l0_k:1,0..4,-1,8"})
    compiled = xgraph.compile(model, {"input_shape": "input_ids:1,1;past:0..2048"})
    dynamic = xgraph.report(compiled)["dynamic"]
    assert dynamic["ranges"] == {"past": [0, 2048]}
    assert [i["name"] for i in dynamic["inputs"]] == [f"past_l{i}_{kv}" for i in range(2) for kv in "kv"]
    assert dynamic["inputs"][0]["shape"] == [1, 2, "past", 8]
    assert "(past in 0..2048)" in dynamic["line"] and "dynamic_dims" in dynamic["line"]


def test_xcompile_prints_one_line_about_dynamic_inputs(tmp_path, capsys):
    path = tmp_path / "cnn.onnx"
    onnx.save(_models.mobilenet_like(), path)
    assert xcompile.main([str(path), "-o", str(tmp_path / "cnn.xmodel")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("dynamic inputs:")]
    assert len(lines) == 1
    assert "image (N, 3, 32, 32)" in lines[0] and "30/30 ops (100%) on AI Core" in lines[0]
    assert all(word in lines[0] for word in ("input_shape", "N:1..2048", "dynamic_dims"))
    assert xcompile.main([str(path), "-o", str(tmp_path / "cnn1.xmodel"), "--options", '{"input_shape": "N:1"}']) == 0
    assert "dynamic inputs:" not in capsys.readouterr().out  # a static model has no such line
