"""act_npu: a KernelRunner plugin; the activation unit runs Relu/Clip, xgraph's kernels the rest."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import PluginError

PLUGINS = str(Path(__file__).resolve().parents[1])


def conv_net() -> onnx.ModelProto:
    """x -> Conv -> Relu -> MaxPool -> Conv -> Add(shortcut) -> Clip -> Softmax."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((4, 4, 3, 3)).astype(np.float32), "w2")
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p1"], ["a1"], name="add1"),
        helper.make_node("Clip", ["a1", "lo", "hi"], ["k1"], name="clip1"),
        helper.make_node("Softmax", ["k1"], ["y"], name="softmax1", axis=1),
    ]
    graph = helper.make_graph(nodes, "conv_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])],
                              [w1, w2, numpy_helper.from_array(np.array(0, np.float32), "lo"),
                               numpy_helper.from_array(np.array(2, np.float32), "hi")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def compiled():
    model = conv_net()
    return model, xgraph.compile(model, {"plugins": "act_npu",
                                         "plugin_options": {"act_npu": {"types": "Conv,Relu,MaxPool,Add,Clip"}}},
                                 [PLUGINS])


@pytest.mark.parametrize("mode, tolerance", [("run", 1e-5), ("ref", 1e-5), ("sim", 2e-3)])
def test_matches_onnxruntime_with_the_unit_running_the_activations(compiled, mode, tolerance):
    model, graph = compiled
    [sg] = [c for c in graph.get_root_subgraph().get_children() if c.get_attr("device") == "ACTNPU"]
    assert sorted(op.name for op in sg.get_ops()) == ["add1", "clip1", "conv1", "conv2", "pool1", "relu1"]
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})[0]
    runner = xgraph.Runner.create_runner(sg, mode)
    [inner] = runner.run([x])
    with xgraph.create_graph_runner(graph, mode) as whole:
        [y] = whole.run({"x": x})
    np.testing.assert_allclose(y, expected, rtol=tolerance, atol=tolerance)
    assert runner.unit_calls == 2  # relu1 and clip1 on the unit ...
    sources = runner.kernel_sources
    assert sources["relu1"] == sources["clip1"] == "accelerated"
    other = {sources[n] for n in ("conv1", "conv2", "pool1", "add1")}  # ... the rest on xgraph's kernels
    assert other == ({"reference"} if mode == "ref" else {"numpy:CPU"})
    assert sg.get_attr("act_npu_accelerated_ops") == 2
    assert inner.shape == (1, 4, 4, 4)


def test_types_option_is_checked():
    with pytest.raises(PluginError, match='unknown plugin option'):
        xgraph.compile(conv_net(), {"plugins": "act_npu", "plugin_options": {"act_npu": {"type": "Conv"}}}, [PLUGINS])
