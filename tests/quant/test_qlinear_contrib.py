"""com.microsoft quantized contrib ops (QLinearAdd, QLinearMul, QLinearGlobalAveragePool, QGemm): schemas, kernels vs oracles and onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

import xgraph  # noqa: E402
from xgraph.kernels.op_qlinear_contrib import qlinear_add, qlinear_mul  # noqa: E402
from xgraph.ops.ms_quantized import broadcast_dims  # noqa: E402


def _model(op: str, dtype: int, a_shape, b_shape) -> onnx.ModelProto:
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    zp = {"a": 3, "b": 250 if np_type == np.uint8 else -7, "c": 128 if np_type == np.uint8 else 5}
    inits = [numpy_helper.from_array(np.array(s, np.float32), f"{k}_scale") for k, s in
             (("a", 0.05), ("b", 0.02), ("c", 0.04 if op == "QLinearAdd" else 0.01))]
    inits += [numpy_helper.from_array(np.array(v, np_type), f"{k}_zp") for k, v in zp.items()]
    node = helper.make_node(op, ["a", "a_scale", "a_zp", "b", "b_scale", "b_zp", "c_scale", "c_zp"], ["c"],
                            domain="com.microsoft")
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("a", dtype, a_shape),
                                            helper.make_tensor_value_info("b", dtype, b_shape)],
                              [helper.make_tensor_value_info("c", dtype, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])


def _oracle(op, a, b, np_type):
    """C = round_half_even(f(A_s (A - A_zp), B_s (B - B_zp)) / C_s) + C_zp, saturated: the schema's formula."""
    zp = {"a": 3, "b": 250 if np_type == np.uint8 else -7, "c": 128 if np_type == np.uint8 else 5}
    ra = 0.05 * (a.astype(np.float64) - zp["a"])
    rb = 0.02 * (b.astype(np.float64) - zp["b"])
    value = ra + rb if op == "QLinearAdd" else ra * rb
    c_scale = np.float64(np.float32(0.04 if op == "QLinearAdd" else 0.01))
    info = np.iinfo(np_type)
    return np.clip(np.rint(value / c_scale) + zp["c"], info.min, info.max).astype(np_type)


def test_schema_types_and_broadcasts_the_output():
    assert broadcast_dims([1, 8, 4, 4], [8, 1, 1]) == [1, 8, 4, 4]
    assert broadcast_dims(["N", 3], [1, 3]) == ["N", 3]
    inferred = onnx.shape_inference.infer_shapes(_model("QLinearAdd", TensorProto.INT8, [2, 3, 4], [3, 1]),
                                                 strict_mode=True)
    (out,) = inferred.graph.output
    assert out.type.tensor_type.elem_type == TensorProto.INT8
    assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [2, 3, 4]


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
@pytest.mark.parametrize("dtype", [TensorProto.INT8, TensorProto.UINT8])
def test_kernel_equals_the_formula_and_onnxruntime_within_one_step(op, dtype):
    np_type = helper.tensor_dtype_to_np_dtype(dtype)
    info = np.iinfo(np_type)
    rng = np.random.default_rng(0)
    a = rng.integers(info.min, info.max + 1, (2, 3, 4)).astype(np_type)
    b = rng.integers(info.min, info.max + 1, (3, 1)).astype(np_type)
    model = _model(op, dtype, [2, 3, 4], [3, 1])
    compiled = xgraph.compile(model)
    with xgraph.create_graph_runner(compiled, mode="run", kernels="numpy") as runner:
        (got,) = runner.run({"a": a, "b": b})
    want = _oracle(op, a, b, np_type)
    np.testing.assert_array_equal(got, want)
    assert np.iinfo(np_type).min in want or np.iinfo(np_type).max in want  # saturation was exercised
    (theirs,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"a": a, "b": b})
    assert np.abs(theirs.astype(int) - got.astype(int)).max() <= 1


def test_kernel_refuses_per_channel_scales_by_name():
    from xgraph.errors import KernelError
    with pytest.raises(KernelError, match="A_scale must be a scalar"):
        qlinear_add(np.zeros(3, np.int8), np.ones(3, np.float32), np.int8(0), np.zeros(3, np.int8),
                    np.float32(1), np.int8(0), np.float32(1), np.int8(0))
    assert qlinear_mul(np.array([10], np.int8), np.float32(0.5), np.int8(0), np.array([4], np.int8),
                       np.float32(0.5), np.int8(0), np.float32(1.0), np.int8(0)).tolist() == [10]


def _single(node: onnx.NodeProto, inputs, inits, out_type=None) -> onnx.ModelProto:
    graph = helper.make_graph([node], "one", inputs, [helper.make_tensor_value_info(node.output[0], 0, None)], inits)
    graph.output[0].ClearField("type")
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])


def _run_both(model, feeds):
    with xgraph.create_graph_runner(xgraph.compile(model), mode="run", kernels="numpy") as runner:
        (got,) = runner.run(feeds)
    (theirs,) = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    return got, theirs


@pytest.mark.parametrize("channels_last", [0, 1])
def test_qlinear_global_average_pool_equals_the_mean_of_the_dequantized_input(channels_last):
    rng = np.random.default_rng(1)
    shape = (2, 5, 4, 3) if not channels_last else (2, 4, 3, 5)
    x = rng.integers(0, 256, shape).astype(np.uint8)
    inits = [numpy_helper.from_array(np.array(0.05, np.float32), "xs"), numpy_helper.from_array(np.uint8(100), "xz"),
             numpy_helper.from_array(np.array(0.02, np.float32), "ys"), numpy_helper.from_array(np.uint8(7), "yz")]
    node = helper.make_node("QLinearGlobalAveragePool", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            channels_last=channels_last)
    got, theirs = _run_both(_single(node, [helper.make_tensor_value_info("x", TensorProto.UINT8, shape)], inits),
                            {"x": x})
    axes = (1, 2) if channels_last else (2, 3)
    mean = (0.05 * (x.astype(np.float64) - 100)).mean(axis=axes, keepdims=True)
    want = np.clip(np.rint(mean / np.float64(np.float32(0.02))) + 7, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(got, want)
    assert got.shape == ((2, 5, 1, 1) if not channels_last else (2, 1, 1, 5))
    assert np.abs(theirs.astype(int) - got.astype(int)).max() <= 1


@pytest.mark.parametrize("quantized_output", [True, False])
def test_qgemm_is_the_exact_product_plus_bias_per_column_scaled(quantized_output):
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (3, 16)).astype(np.uint8)
    b = rng.integers(-63, 64, (10, 16)).astype(np.int8)  # transB; 7 bits keep onnxruntime's u8s8 kernel exact
    b_scale = rng.uniform(0.001, 0.01, 10).astype(np.float32)
    bias = rng.integers(-500, 500, 10).astype(np.int32)
    inits = [numpy_helper.from_array(np.array(0.02, np.float32), "as"), numpy_helper.from_array(np.uint8(120), "az"),
             numpy_helper.from_array(b, "b"), numpy_helper.from_array(b_scale, "bs"),
             numpy_helper.from_array(np.zeros(10, np.int8), "bz"), numpy_helper.from_array(bias, "c")]
    names = ["a", "as", "az", "b", "bs", "bz", "c"]
    if quantized_output:
        inits += [numpy_helper.from_array(np.array(0.05, np.float32), "ys"), numpy_helper.from_array(np.uint8(125), "yz")]
        names += ["ys", "yz"]
    node = helper.make_node("QGemm", names, ["y"], domain="com.microsoft", transB=1, alpha=1.0)
    model = _single(node, [helper.make_tensor_value_info("a", TensorProto.UINT8, [3, 16])], inits)
    if quantized_output:
        got, theirs = _run_both(model, {"a": a})
    else:  # onnxruntime has no CPU kernel for QGemm's float output
        with xgraph.create_graph_runner(xgraph.compile(model), mode="run", kernels="numpy") as runner:
            (got,) = runner.run({"a": a})
    acc = (a.astype(np.int64) - 120) @ b.astype(np.int64).T + bias
    real = acc * (np.float64(np.float32(0.02)) * b_scale.astype(np.float64))
    if quantized_output:
        want = np.clip(np.rint(real / np.float64(np.float32(0.05))) + 125, 0, 255).astype(np.uint8)
        np.testing.assert_array_equal(got, want)
        assert np.abs(theirs.astype(int) - got.astype(int)).max() <= 1
    else:
        assert got.dtype == np.float32
        np.testing.assert_allclose(got, real, rtol=1e-6)
