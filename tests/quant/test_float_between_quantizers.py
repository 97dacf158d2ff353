"""Float ops between two quantizers round as onnxruntime's: its integers downstream depend on it.

BatchNormalization (QDQ ResNet50 without pre-processing has 53 DQ -> BatchNormalization -> Q
units) is folded in float32 as onnxruntime's kernel does; oracles: onnxruntime's
BatchNormalization on the same float32 values, and a numpy oracle of that fold.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

import xgraph  # noqa: E402
from xgraph.kernels.op_nn_norm import batch_norm_scale_shift  # noqa: E402

RNG = np.random.default_rng(31)
C = 64


def _params():
    return (RNG.uniform(0.2, 3.0, C).astype(np.float32), RNG.normal(0, 1, C).astype(np.float32),
            RNG.normal(0, 2, C).astype(np.float32), RNG.uniform(1e-3, 5.0, C).astype(np.float32))


def test_the_fold_of_float32_parameters_is_onnxruntimes_float32_fold():
    scale, bias, mean, var = _params()
    a, b = batch_norm_scale_shift(scale, bias, mean, var, 1e-5)
    inv_std = np.float32(1) / np.sqrt(var + np.float32(1e-5))  # float32 throughout, one rounding per operation
    np.testing.assert_array_equal(a, (inv_std * scale).astype(np.float64))
    np.testing.assert_array_equal(b, (bias - mean * (inv_std * scale)).astype(np.float64))
    a64, _ = batch_norm_scale_shift(*(v.astype(np.float64) for v in (scale, bias, mean, var)), 1e-5)
    assert np.any(a64.astype(np.float32) != a.astype(np.float32))  # the float64 fold rounds differently


def _quantize(y: np.ndarray, y_scale: np.float32, y_zp: int) -> np.ndarray:
    return np.clip(np.rint(y / y_scale) + y_zp, -128, 127).astype(np.int8)


def test_dq_batchnorm_q_gives_onnxruntimes_integers_where_the_float64_fold_does_not():
    """Every int8 value in each of 1024 channels, 10 parameter sets: xgraph's integers are onnxruntime's, and
    somewhere the float64 fold (the previous kernel) lands one step away."""
    rng = np.random.default_rng(37)  # its own generator: the same cases whatever ran before
    channels, x_scale, y_scale = 1024, np.float32(0.05), np.float32(0.0371)
    xq = np.broadcast_to(np.arange(-128, 128, dtype=np.int8).reshape(1, 1, 16, 16), (1, channels, 16, 16)).copy()
    float64_differs = 0
    for _ in range(10):
        scale, bias, mean, var = (rng.uniform(0.2, 3.0, channels).astype(np.float32),
                                  rng.normal(0, 1, channels).astype(np.float32),
                                  rng.normal(0, 2, channels).astype(np.float32),
                                  rng.uniform(1e-3, 5.0, channels).astype(np.float32))
        inits = [numpy_helper.from_array(x_scale, "x_scale"), numpy_helper.from_array(np.int8(-3), "x_zp"),
                 numpy_helper.from_array(scale, "scale"), numpy_helper.from_array(bias, "bias"),
                 numpy_helper.from_array(mean, "mean"), numpy_helper.from_array(var, "var"),
                 numpy_helper.from_array(y_scale, "y_scale"), numpy_helper.from_array(np.int8(5), "y_zp")]
        nodes = [helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["x"]),
                 helper.make_node("BatchNormalization", ["x", "scale", "bias", "mean", "var"], ["y"], name="bn"),
                 helper.make_node("QuantizeLinear", ["y", "y_scale", "y_zp"], ["yq"])]
        shape = [1, channels, 16, 16]
        graph = helper.make_graph(nodes, "dq_bn_q", [helper.make_tensor_value_info("xq", TensorProto.INT8, shape)],
                                  [helper.make_tensor_value_info("yq", TensorProto.INT8, shape)], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        (theirs,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"xq": xq})
        with xgraph.create_graph_runner(xgraph.compile(model), mode="run", kernels="numpy") as runner:
            (ours,) = runner.run({"xq": xq})
        np.testing.assert_array_equal(ours, theirs)
        x = (xq.astype(np.float32) - np.float32(-3)) * x_scale
        a64 = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
        b64 = bias.astype(np.float64) - mean.astype(np.float64) * a64
        y64 = x * a64.astype(np.float32).reshape(1, -1, 1, 1) + b64.astype(np.float32).reshape(1, -1, 1, 1)
        float64_differs += int((_quantize(y64, y_scale, 5) != theirs).sum())
    assert float64_differs >= 1, float64_differs
