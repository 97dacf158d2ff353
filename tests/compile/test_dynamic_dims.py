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


# -- ranges in the cost model ----------------------------------------------------------------------------------------

def _past_matmul() -> onnx.ModelProto:
    """x (past, 64) -> MatMul by a 64 x 256 weight -> y (past, 256): one op whose work grows with `past`."""
    weight = onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal((64, 256)).astype(np.float32), "w")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], "past_mm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["past", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["past", 256])], [weight])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _cost(model: onnx.ModelProto, input_shape: str | None) -> dict:
    compiled = xgraph.compile(model, {"input_shape": input_shape} if input_shape else None)
    return xgraph.report(compiled)["cost"]


def test_a_wider_range_makes_a_larger_estimate():
    small, large = _cost(_past_matmul(), "past:0..64"), _cost(_past_matmul(), "past:0..4096")
    # 64x the rows; the fixed launch and copy latencies keep the ratio below 64
    assert large["chosen"]["latency_seconds"] > 10 * small["chosen"]["latency_seconds"]
    assert small["assumed_dims"] == {"past": {"size": 64, "range": [0, 64]}}
    assert large["assumed_dims"] == {"past": {"size": 4096, "range": [0, 4096]}}


@pytest.mark.parametrize("dynamic, static", [
    ("past:0..4096", "past:4096"),  # a range: estimated at its top
    ("x:0..512,64", "x:512,64"),  # the same, given by input and dim index
    (None, "past:1"),  # no range: at 1 (dim_ranges.DEFAULT_SIZE), documented in docs/devices.md
    ("past:8..-1", "past:8"),  # no top: at its low end
])
def test_a_dynamic_dim_is_estimated_as_the_static_model_at_the_assumed_size(dynamic, static):
    estimated, oracle = _cost(_past_matmul(), dynamic), _cost(_past_matmul(), static)
    assert estimated["chosen"] == oracle["chosen"]
    assert "assumed_dims" in estimated and "assumed_dims" not in oracle  # a static model assumes nothing


def test_ranges_reach_the_dims_the_symbolic_shapes_compute():
    """A decoder step's attention runs over `past + 1` keys: with past in 0..2048 it is estimated at 2049."""
    model = _models.llama_past()
    compiled = xgraph.compile(model, {"input_shape": "input_ids:1,1;past:0..2048"})
    scores = compiled.get_op("l0_scores")
    assert scores.get_output_tensors()[0].shape == (1, 4, 1, "past + 1")
    (entry,) = xgraph.explain(compiled, ["l0_scores"])
    assert entry["assumed_dims"] == {"past": {"size": 2048, "range": [0, 2048]}}
    (oracle,) = xgraph.explain(model, ["l0_scores"], {"input_shape": "input_ids:1,1;past:2048"})
    assert oracle["assumed_dims"] == {}  # all static: past + 1 is 2049
    assert [v["seconds"] for v in entry["devices"]] == [v["seconds"] for v in oracle["devices"]]


# -- an op-info rule's dynamic range ---------------------------------------------------------------------------------

NPU = """
[device]
name = "NPU"
cost_rank = 0
memory = "device"
runner = { run = "aicore", sim = "aicore", ref = "aicore" }

[cost]
peak_gflops = { float32 = 2000.0 }
bandwidth_gbps = 50.0
launch_overhead_us = 5.0

[ops.MatMul]
static_shapes = true
dynamic_dims = true
"""


@pytest.fixture
def npu(tmp_path):
    """A device cheaper than AI Core whose MatMul is a dynamic-shape operator for dims in 1..2048."""
    from xgraph.devices import load_device_file, register_device, unregister_device
    path = tmp_path / "npu.toml"
    path.write_text(NPU + "dynamic_range = [1, 2048]\n")
    register_device(load_device_file(path))
    try:
        yield
    finally:
        unregister_device("NPU")


def test_a_dim_whose_range_leaves_the_rules_range_is_refused_with_its_reason(npu):
    compiled = xgraph.compile(_past_matmul(), {"input_shape": "past:1..8192"})
    assert _devices(compiled)["mm"] == ("MatMul", "AICORE", "NPU: MatMul dim past up to 8192 exceeds its dynamic "
                                                            "range 1..2048")
    assert _devices(xgraph.compile(_past_matmul(), {"input_shape": "past:1..2048"}))["mm"] == ("MatMul", "NPU", "")
    _, device, reason = _devices(xgraph.compile(_past_matmul(), {"input_shape": "past:0..2048"}))["mm"]
    assert device == "AICORE" and reason == "NPU: MatMul dim past down to 0 is below its dynamic range 1..2048"
    _, device, reason = _devices(xgraph.compile(_past_matmul()))["mm"]  # no range given: unbounded
    assert device == "AICORE" and reason.startswith("NPU: MatMul dim past has no upper bound, beyond its dynamic "
                                                    'range 1..2048; bound it with input_shape ("past:1..2048")')


def test_the_rules_range_checks_dims_the_symbolic_shapes_compute(npu):
    """The scores and context MatMuls take `past + 1` keys: past up to 2048 makes 2049, outside 1..2048; the
    projections (static dims) stay on the ranged device."""
    model = _models.llama_past()
    compiled = xgraph.compile(model, {"input_shape": "input_ids:1,1;past:0..2048"})
    ops = _devices(compiled)
    assert ops["l0_scores"] == ("MatMul", "AICORE", "NPU: MatMul dim past + 1 up to 2049 exceeds its dynamic range "
                                                    "1..2048")
    assert ops["l0_q_proj"][1] == "NPU"
    (entry,) = xgraph.explain(compiled, ["l0_scores"])
    npu_verdict = next(v for v in entry["devices"] if v["device"] == "NPU")
    assert not npu_verdict["accepts"] and npu_verdict["reason"] == ops["l0_scores"][2].removeprefix("NPU: ")
    fits = _devices(xgraph.compile(model, {"input_shape": "input_ids:1,1;past:0..2047"}))
    assert fits["l0_scores"][1] == fits["l0_ctx"][1] == "NPU"


def test_a_rule_without_a_range_takes_any_dynamic_dim_as_before(tmp_path):
    from xgraph.devices import load_device_file, register_device, unregister_device
    path = tmp_path / "npu.toml"
    path.write_text(NPU)
    register_device(load_device_file(path))
    try:
        for options in (None, {"input_shape": "past:0..100000"}):
            assert _devices(xgraph.compile(_past_matmul(), options))["mm"] == ("MatMul", "NPU", "")
    finally:
        unregister_device("NPU")


def test_xcompile_and_explain_say_which_size_they_assumed(tmp_path, capsys):
    path = tmp_path / "mm.onnx"
    onnx.save(_past_matmul(), path)
    assert xcompile.main([str(path), "-o", str(tmp_path / "mm.xmodel"), "--options",
                          '{"input_shape": "past:0..4096"}']) == 0
    out = capsys.readouterr().out
    assert "dynamic dims estimated at: past = 4096 (top of 0..4096)" in out
    from xgraph.compiler.explain import explain_text
    text = explain_text(xgraph.explain(str(tmp_path / "mm.xmodel"), ["mm"]))
    assert "  estimated at: past = 4096 (top of 0..4096)" in text
    assert xcompile.main([str(path), "-o", str(tmp_path / "mm1.xmodel")]) == 0
    assert "dynamic dims estimated at: past = 1 (no range given)" in capsys.readouterr().out
