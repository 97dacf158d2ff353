"""Quantizing a model with its own preprocessing front (xgraph/compiler/quantize_front.py), and the
`exclude` / `compare` options of `xgraph quantize`."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytest.importorskip("onnxruntime.quantization")

import xgraph  # noqa: E402
from xgraph.compiler.quantize import quantize_model  # noqa: E402
from xgraph.compiler.quantize_front import split_front  # noqa: E402
from xgraph.errors import OptionError, XGraphError  # noqa: E402
from tests.quant.models import small_cnn  # noqa: E402

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "classify"
JPEG = SAMPLE / "images" / "sample1.jpg"


def test_split_cuts_after_the_dvpp_ops():
    split = split_front(onnx.load(str(SAMPLE / "classifier.onnx")))
    assert [n.op_type for n in split.front.graph.node] == ["JpegDecode", "VpcResize"]
    assert split.cut == ["pixels"]
    assert split.body_nodes[0].op_type == "Cast"


def test_front_gives_the_picture_dvpp_gives_and_join_restores_the_model():
    model = onnx.load(str(SAMPLE / "classifier.onnx"))
    split = split_front(model)
    feed = {"jpeg": np.frombuffer(JPEG.read_bytes(), np.uint8)}
    pictures = split.run(feed)
    assert pictures["pixels"].shape == (64, 64, 3) and pictures["pixels"].dtype == np.uint8
    # the oracle: the compiled float model's own DVPP subgraph on the same bytes
    compiled = xgraph.compile(model, {"output_ops": "resize"})
    with xgraph.create_graph_runner(compiled) as runner:
        np.testing.assert_array_equal(runner.run(feed)[0], pictures["pixels"])
    joined = split.join(split.body(pictures))
    onnx.checker.check_model(split.body(pictures))
    with xgraph.create_graph_runner(xgraph.compile(model)) as a, xgraph.create_graph_runner(xgraph.compile(joined)) as b:
        (sa, la), (sb, lb) = a.run(feed), b.run(feed)
    np.testing.assert_array_equal(sa, sb)
    assert list(la[0]) == list(lb[0])


def test_a_standard_model_has_no_front():
    assert split_front(small_cnn()) is None


def _custom_after_standard() -> onnx.ModelProto:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("VpcResize", ["r"], ["y"], domain="xgraph.dvpp", height=4, width=4, name="resize")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, [8, 8, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [4, 4, 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("xgraph.dvpp", 1)])


def test_a_custom_op_after_standard_ones_is_named():
    with pytest.raises(XGraphError, match=r"'resize' \(xgraph.dvpp:VpcResize\) comes after standard ONNX ops"):
        split_front(_custom_after_standard())


@pytest.fixture()
def cnn(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), str(path))
    calib = tmp_path / "calib"
    calib.mkdir()
    rng = np.random.default_rng(5)
    for i in range(4):
        np.save(calib / f"{i}.npy", rng.uniform(0, 1, (1, 3, 16, 16)).astype(np.float32))
    return path, calib


def test_excluded_ops_stay_float(cnn, tmp_path):
    path, calib = cnn
    out = tmp_path / "q.onnx"
    result = quantize_model(path, calib, out, exclude=["fc"])
    model = onnx.load(str(out))
    fc = next(n for n in model.graph.node if n.name == "fc")
    producers = {o: n.op_type for n in model.graph.node for o in n.output}
    assert producers.get(fc.input[1]) != "DequantizeLinear"  # the Gemm's weight stays a float initializer
    assert any(n.op_type == "QuantizeLinear" for n in model.graph.node)
    assert result.summary["excluded"] == ["fc"]


def test_unknown_exclude_and_compare_names_fail_and_write_nothing(cnn, tmp_path):
    path, calib = cnn
    out = tmp_path / "q.onnx"
    with pytest.raises(OptionError, match=r"exclude names op\(s\) \['nope'\]"):
        quantize_model(path, calib, out, exclude=["nope"])
    with pytest.raises(OptionError, match="compare tensor 'nope'"):
        quantize_model(path, calib, out, compare="nope")
    assert not out.exists()


def test_compare_names_the_tensor_the_summary_uses(cnn, tmp_path):
    path, calib = cnn
    result = quantize_model(path, calib, tmp_path / "q.onnx", compare="g")
    assert result.summary["compared"] == "g"
    assert result.summary["output_range"] > 0
