"""Shared fixtures for runtime tests: small models and hand-placed device subgraphs."""
from __future__ import annotations

import types

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from testing.runtime import place


def chain_model(k: int, shape=(1, 4)) -> onnx.ModelProto:
    """x -> Relu -> Relu -> ... (k ops) -> y."""
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}" if i < k - 1 else "y"],
                              name=f"op{i:03d}") for i in range(k)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def small_cnn(seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax, with random weights; input 'x' (1,3,8,8)."""
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((4, 3, 3, 3)) / np.sqrt(27)).astype(np.float32)
    b = rng.standard_normal(4).astype(np.float32) * 0.1
    fc = (rng.standard_normal((10, 16)) / 4).astype(np.float32)
    fcb = rng.standard_normal(10).astype(np.float32) * 0.1
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[3, 3], strides=[3, 3]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fc", "fcb"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=-1),
    ]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (fc, "fc"), (fcb, "fcb"))]
    g = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10]),
                           helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def make():
    """Model builders and placement for tests in other files (import mode "importlib" has no sibling imports)."""
    return types.SimpleNamespace(place=place, chain_model=chain_model, small_cnn=small_cnn)
