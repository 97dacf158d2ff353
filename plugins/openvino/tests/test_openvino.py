"""The openvino plugin: OpenVINO's own claim, its compiled blob stored once, checked at load."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ov = pytest.importorskip("openvino", reason="the openvino plugin needs pip install 'xgraph[openvino]'")

import xgraph  # noqa: E402
from xgraph.plugins import load_plugin  # noqa: E402
from xgraph.plugins.blobs import BlobError  # noqa: E402

PLUGINS = str(Path(__file__).resolve().parents[2])


def small_cnn() -> onnx.ModelProto:
    """Conv -> Relu -> Flatten -> Gemm -> Softmax, random weights (about 1 MB of them)."""
    rng = np.random.default_rng(0)
    w = lambda name, *shape: numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32) * 0.1, name)
    nodes = [helper.make_node("Conv", ["x", "cw", "cb"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flat"),
             helper.make_node("Gemm", ["f", "gw", "gb"], ["g"], name="fc", transB=1),
             helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=1)]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [w("cw", 16, 3, 3, 3), w("cb", 16), w("gw", 10, 16 * 16 * 16), w("gb", 10)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def cnn(tmp_path):
    path = tmp_path / "cnn.onnx"
    onnx.save(small_cnn(), path)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    import onnxruntime as ort
    expected = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    return path, x, expected


def compile_with(path, **options):
    return xgraph.compile(path, {"plugins": "openvino", "plugin_options": {"openvino": options}}, plugin_path=[PLUGINS])


def openvino_subgraphs(graph):
    return [sg for sg in graph.get_root_subgraph().get_children() if sg.get_attr("device") == "OPENVINO"]


def test_it_claims_what_query_model_supports_and_matches_onnxruntime(cnn):
    path, x, expected = cnn
    compiled = compile_with(path)
    [sg] = openvino_subgraphs(compiled)
    assert {op.name for op in sg.get_ops()} == {"conv", "relu", "flat", "fc", "softmax"}
    with xgraph.create_graph_runner(compiled, plugin_path=[PLUGINS]) as runner:
        [y] = runner.run({"x": x})
        assert {type(r).__name__ for r in runner.runners.values()} == {"OpenVinoRunner"}
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


class _Refusing:
    """An OpenVINO Core whose device supports every op but the one producing `refused`."""

    def __init__(self, refused):
        self.core, self.refused = ov.Core(), refused

    def read_model(self, *args):
        return self.core.read_model(*args)

    def query_model(self, model, device, config):
        supported = self.core.query_model(model, device, config)
        self.asked = (device, dict(config))
        return {k: v for k, v in supported.items() if k != self.refused}


def test_an_op_query_model_does_not_place_on_the_device_is_left_to_placement(cnn):
    path, _, _ = cnn
    graph = xgraph.load(path)
    graph.get_root_subgraph().create_child_subgraph()
    plugin = load_plugin("openvino", [PLUGINS]).get_plugin({"device": "CPU"})
    plugin._core = _Refusing("y")  # OpenVINO names the op that writes an ONNX output after that output
    [sg] = plugin.partition(graph)
    assert {op.name for op in sg.get_ops()} == {"conv", "relu", "flat", "fc"}
    assert plugin._core.asked == ("CPU", {"INFERENCE_PRECISION_HINT": "f32"})


@pytest.mark.parametrize("weights", ["shared", "embedded"])
def test_the_blob_round_trips_through_the_xmodel(cnn, tmp_path, weights):
    path, x, expected = cnn
    out = tmp_path / f"{weights}.xmodel"
    compile_with(path, weights=weights).serialize(out)
    loaded = xgraph.load(out)
    [sg] = openvino_subgraphs(loaded)
    blob = sg.get_blob()
    assert blob.weights == weights and blob.compat.startswith(f"openvino-{ov.__version__.split('-')[0]};device=CPU")
    with xgraph.create_graph_runner(loaded, plugin_path=[PLUGINS]) as runner:
        [y] = runner.run({"x": x})
        assert [c.verdict for c in runner.blob_checks] == ["ok"]
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)


def test_shared_weights_keep_the_xmodel_the_size_of_the_onnx(cnn, tmp_path):
    path, _, _ = cnn
    sizes = {}
    for weights in ("shared", "embedded"):
        compile_with(path, weights=weights).serialize(tmp_path / f"{weights}.xmodel")
        sizes[weights] = os.path.getsize(tmp_path / f"{weights}.xmodel") / os.path.getsize(path)
    assert sizes["shared"] <= 1.1 and sizes["embedded"] >= 1.8


def test_a_blob_of_another_openvino_is_recompiled_and_of_an_absent_device_refused(cnn, tmp_path):
    path, x, expected = cnn
    compiled = compile_with(path)
    [sg] = openvino_subgraphs(compiled)
    blob = sg.get_blob()
    sg.set_blob(blob.data, weights="shared", compat="openvino-2024.0.0;device=CPU;precision=f32")
    with xgraph.create_graph_runner(compiled, plugin_path=[PLUGINS]) as runner:
        [check] = runner.blob_checks
        [y] = runner.run({"x": x})
    assert (check.verdict, check.compat) == ("recompile", "openvino-2024.0.0;device=CPU;precision=f32")
    assert sg.get_blob().compat == load_plugin("openvino", [PLUGINS]).get_plugin().blob_compat()
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
    sg.set_blob(blob.data, weights="shared", compat="openvino-2024.0.0;device=NPU;precision=f32")
    with pytest.raises(BlobError, match=r"plugin 'openvino'.*subgraph_conv.*openvino-2024\.0\.0;device=NPU"):
        xgraph.create_graph_runner(compiled, plugin_path=[PLUGINS])


def test_precision_is_pinned_to_f32_and_a_lower_one_is_recorded(cnn):
    path, _, _ = cnn
    assert openvino_subgraphs(compile_with(path))[0].get_attr("inference_precision") == "f32"
    assert openvino_subgraphs(compile_with(path, precision="bf16"))[0].get_attr("inference_precision") == "bf16"
    with pytest.raises(xgraph.XGraphError, match="precision 'fp8'"):
        compile_with(path, precision="fp8")
