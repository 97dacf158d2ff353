"""Hand-written quantized models for the opset matrix: one QDQ Conv + Add net, any opset >= 10, any
quantized element type ONNX allows there, per-tensor or per-channel, symmetric or asymmetric."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: element type -> (numpy dtype, first opset whose QuantizeLinear/DequantizeLinear take it)
QTYPES = {
    "int8": (np.dtype(np.int8), 10), "uint8": (np.dtype(np.uint8), 10),
    "int16": (np.dtype(np.int16), 21), "uint16": (np.dtype(np.uint16), 21),
    "int4": (np.dtype(ml_dtypes.int4), 21), "uint4": (np.dtype(ml_dtypes.uint4), 21),
}
ONNX_TYPE = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int16": TensorProto.INT16,
             "uint16": TensorProto.UINT16, "int4": TensorProto.INT4, "uint4": TensorProto.UINT4}


def _range(kind: str) -> tuple[int, int]:
    dtype = QTYPES[kind][0]
    info = ml_dtypes.iinfo(dtype)
    return int(info.min), int(info.max)


def _zero_point(kind: str, symmetric: bool) -> int:
    lo, hi = _range(kind)
    if symmetric:
        return 0 if lo < 0 else (hi + 1) // 2
    return (lo + hi) // 2 + max(1, (hi - lo) // 16)  # off-centre


def _tensor(name: str, values, kind: str) -> onnx.TensorProto:
    arr = np.asarray(values)
    if kind in ("int4", "uint4"):
        return helper.make_tensor(name, ONNX_TYPE[kind], list(arr.shape), arr.astype(np.int64).reshape(-1).tolist())
    return numpy_helper.from_array(arr.astype(QTYPES[kind][0]), name)


def qdq_conv_add(opset: int, activation: str = "int8", weight: str = "int8", *, symmetric: bool = True,
                 per_channel: bool = False, seed: int = 0) -> onnx.ModelProto:
    """x (1x4x6x6 float) -> Q -> DQ -> Conv 3x3 (quantized weights, int32 bias) -> Q -> DQ, + DQ(x) -> Q -> DQ -> y.

    `symmetric` gives the weights zero point 0 (signed types) or the mid value (unsigned) and the
    activations the same; asymmetric puts both off-centre. Per-channel weights (DequantizeLinear
    axis 0) need opset 13."""
    if per_channel and opset < 13:
        raise ValueError("per-axis DequantizeLinear needs opset 13")
    for kind in (activation, weight):
        if QTYPES[kind][1] > opset:
            raise ValueError(f"{kind} QuantizeLinear/DequantizeLinear need opset {QTYPES[kind][1]}")
    rng = np.random.default_rng(seed)
    c = 4
    lo, hi = _range(activation)
    x_scale = np.float32(2.0 / (hi - lo))  # x in [-1, 1) or so
    y_scale = np.float32(4.0 / (hi - lo))
    wlo, whi = _range(weight)
    w_zp = _zero_point(weight, symmetric)
    span = min(whi - w_zp, w_zp - wlo, 63)  # 7 bits: onnxruntime's x86 u8s8 kernels saturate 16-bit pair sums
    w_q = rng.integers(w_zp - span, w_zp + span + 1, (c, c, 3, 3))
    w_scale = (rng.uniform(0.5, 1.5, c) / (span * 9 * c) * 4).astype(np.float32)
    if not per_channel:
        w_scale = np.float32(w_scale.mean())
    b_scale = (x_scale * w_scale).astype(np.float32)
    bias = rng.integers(-(span * 4), span * 4 + 1, c).astype(np.int32)
    x_zp, y_zp = _zero_point(activation, symmetric), _zero_point(activation, symmetric)
    inits = [
        numpy_helper.from_array(x_scale, "x_scale"), _tensor("x_zp", x_zp, activation),
        numpy_helper.from_array(y_scale, "y_scale"), _tensor("y_zp", y_zp, activation),
        _tensor("w_q", w_q, weight), numpy_helper.from_array(np.asarray(w_scale, np.float32), "w_scale"),
        _tensor("w_zp", np.full(c, w_zp) if per_channel else w_zp, weight),
        numpy_helper.from_array(bias, "b_q"), numpy_helper.from_array(np.asarray(b_scale, np.float32), "b_scale"),
    ]
    axis = {"axis": 0} if per_channel else {}
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="quant_x"),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd"], name="dq_x"),
        helper.make_node("DequantizeLinear", ["w_q", "w_scale", "w_zp"], ["w"], name="dq_w", **axis),
        helper.make_node("DequantizeLinear", ["b_q", "b_scale"], ["b"], name="dq_b", **axis),
        helper.make_node("Conv", ["xd", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("QuantizeLinear", ["c", "y_scale", "y_zp"], ["cq"], name="quant_c"),
        helper.make_node("DequantizeLinear", ["cq", "y_scale", "y_zp"], ["cd"], name="dq_c"),
        helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["xd2"], name="dq_x2"),
        helper.make_node("Add", ["cd", "xd2"], ["a"], name="add"),
        helper.make_node("QuantizeLinear", ["a", "y_scale", "y_zp"], ["aq"], name="quant_a"),
        helper.make_node("DequantizeLinear", ["aq", "y_scale", "y_zp"], ["y"], name="dq_y"),
    ]
    graph = helper.make_graph(nodes, f"qdq_conv_add_{opset}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 6, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 5 if opset < 13 else (7 if opset < 15 else (8 if opset < 19 else (9 if opset < 21 else 10)))
    onnx.checker.check_model(model)
    return model
