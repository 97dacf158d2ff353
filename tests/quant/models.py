"""Small float models built with onnx.helper (seeded random weights) and their QDQ / QOperator versions."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _init(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(arr.astype(np.float32), name)


def small_cnn(seed: int = 0, opset: int = 13, classes: int = 10) -> onnx.ModelProto:
    """Conv-Relu-MaxPool-Conv(residual Add)-Relu-GlobalAveragePool-Flatten-Gemm-Softmax on 1x3x16x16."""
    rng = np.random.default_rng(seed)
    inits = [
        _init("w1", rng.normal(0, 0.3, (8, 3, 3, 3))), _init("b1", rng.normal(0, 0.1, (8,))),
        _init("w2", rng.normal(0, 0.2, (8, 8, 3, 3))), _init("b2", rng.normal(0, 0.1, (8,))),
        _init("wf", rng.normal(0, 0.3, (classes, 8))), _init("bf", rng.normal(0, 0.1, (classes,))),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "p1"], ["a2"], name="add2"),
        helper.make_node("Relu", ["a2"], ["r2"], name="relu2"),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], name="fc", transB=1),
    ]
    graph = helper.make_graph(nodes, "small_cnn",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8
    onnx.checker.check_model(model)
    return model


def single_conv(seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """x (1x4x8x8) -> Conv 3x3 (6 channels, bias) -> y: one QDQ unit once quantized."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv", pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "single_conv",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])],
                              [_init("w", rng.normal(0, 0.3, (6, 4, 3, 3))), _init("b", rng.normal(0, 0.2, (6,)))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8
    return model


def single_gemm(seed: int = 0, opset: int = 13) -> onnx.ModelProto:
    """x (2x16) -> Gemm (transB, 10 outputs, bias) -> y."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)]
    graph = helper.make_graph(nodes, "single_gemm",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])],
                              [_init("w", rng.normal(0, 0.3, (10, 16))), _init("b", rng.normal(0, 0.2, (10,)))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8
    return model


class _Reader:
    def __init__(self, name: str, arrays):
        self._it = iter([{name: a} for a in arrays])

    def get_next(self):
        return next(self._it, None)


def calibration_inputs(shape=(1, 3, 16, 16), n: int = 8, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(0, 1, shape).astype(np.float32) for _ in range(n)]


def quantize(model: onnx.ModelProto, *, per_channel: bool = True, fmt: str = "qdq", activation: str = "int8",
             calib=None, input_name: str = "x", reduce_range: bool = True) -> onnx.ModelProto:
    """The model quantized by onnxruntime.quantization.quantize_static (QDQ or QOperator).

    `reduce_range` (7-bit weights) keeps onnxruntime's x86 u8s8 integer kernels from saturating
    their 16-bit pair sums, so its fused integer results are exact and usable as an oracle."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    calib = calib if calib is not None else calibration_inputs()
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "f.onnx"), os.path.join(tmp, "q.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, _Reader(input_name, calib),
                        quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                        per_channel=per_channel,
                        activation_type=QuantType.QInt8 if activation == "int8" else QuantType.QUInt8,
                        weight_type=QuantType.QInt8, reduce_range=reduce_range)
        return onnx.load(dst)
