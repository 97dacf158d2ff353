"""The README's plugin example works as written: compiled in, and equal to onnxruntime."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import xgraph

README = Path(__file__).resolve().parents[1] / "README.md"


@pytest.fixture(scope="module")
def plugin_dir(doc_plugin) -> Path:
    return doc_plugin(README, "# my_plugins/smfc.py", "readme_smfc")


def _model(opset: int) -> onnx.ModelProto:
    nodes = [helper.make_node("Softmax", ["x"], ["a"], axis=1, name="s1"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["y"], name="s2")]
    return helper.make_model(helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])]), opset_imports=[helper.make_opsetid("", opset)])


@pytest.mark.parametrize("opset", [11, 17])
def test_readme_plugin_matches_onnxruntime(plugin_dir, opset):
    ort = pytest.importorskip("onnxruntime")
    model = _model(opset)
    compiled = xgraph.compile(model, {"plugins": "readme_smfc"}, [str(plugin_dir)])
    assert {sg.get_attr("device") for sg in compiled.get_root_subgraph().get_children()} == {"SMFC", "AICORE"}
    x = np.random.default_rng(opset).standard_normal((2, 3, 4)).astype(np.float32)
    with xgraph.create_graph_runner(compiled) as runner:
        (y,) = runner.run({"x": x})
    (expected,) = ort.InferenceSession(model.SerializeToString()).run(None, {"x": x})
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-6)
