"""Quantized models the int8 tests and benchmarks share: QDQ ResNet50, a QDQ MobileNet-style net, a QOperator net.

They are built, not downloaded: ResNet50 is the zoo architecture of onnx's test data with seeded
random weights (`testing.runtime.zoo_model`) upgraded to opset 13; the MobileNet-style
float model (depthwise + pointwise convs, Relu6 as Clip, an Add residual, GlobalAveragePool,
Gemm) is written with onnx.helper; both are quantized by onnxruntime's `quantize_static` (QDQ,
int8 activations and weights, per-channel weights). The QOperator model is written by hand
(QLinearConv, QLinearAdd, ConvInteger, MatMulInteger, DynamicQuantizeLinear, QLinearMatMul), so
every integer op has a hand-picked scale and zero point.

`reduce_range=True` (7-bit weights) is the default for quantize_static: onnxruntime's x86 u8s8
kernels add pairs of products in 16 bits with saturation (VPMADDUBSW), so with full 8-bit weights
its "integer" results are not exact and would be a wrong oracle.

Needs onnxruntime (``xgraph[quantize]``) for the QDQ models; imported on first use.
"""
from __future__ import annotations

import os
import tempfile
from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from testing.runtime import zoo_model


def _f32(name: str, arr: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr, np.float32), name)


def _model(nodes, name, inputs, outputs, inits, opset: int, extra_opsets=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 7 if opset < 15 else (8 if opset < 19 else 9)
    return model


class _Calibration:
    """The CalibrationDataReader protocol of onnxruntime.quantization over a list of arrays."""

    def __init__(self, name: str, arrays: Sequence[np.ndarray]) -> None:
        self._it = iter([{name: a} for a in arrays])

    def get_next(self):
        return next(self._it, None)


def quantize_qdq(model: onnx.ModelProto, calibration: Sequence[np.ndarray], *, per_channel: bool = True,
                 activation: str = "int8", reduce_range: bool = True) -> onnx.ModelProto:
    """`model` quantized by onnxruntime's quantize_static in QDQ format (int8 weights, MinMax calibration)."""
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    name = model.graph.input[0].name
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "int8.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, _Calibration(name, calibration), quant_format=QuantFormat.QDQ,
                        per_channel=per_channel, reduce_range=reduce_range, weight_type=QuantType.QInt8,
                        activation_type=QuantType.QInt8 if activation == "int8" else QuantType.QUInt8)
        return onnx.load(dst)


def random_inputs(shape: Sequence[int], n: int, seed: int) -> list[np.ndarray]:
    """`n` seeded inputs, uniform in [0, 1) (images after scaling)."""
    rng = np.random.default_rng(seed)
    return [rng.uniform(0, 1, tuple(shape)).astype(np.float32) for _ in range(n)]


def resnet50_float(seed: int = 0) -> onnx.ModelProto:
    """The zoo's ResNet50 with seeded random weights at opset 13 (IR 7); ends in Softmax."""
    from onnx import version_converter
    model = version_converter.convert_version(zoo_model("resnet50", seed=seed), 13)
    model.ir_version = 7
    # IR 3 listed every initializer as a graph input too; onnxruntime treats such initializers as
    # overridable inputs and then does not fold or fuse them (no integer QLinearConv in the QDQ model).
    weights = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in weights]
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    return model


def pre_processed(model: onnx.ModelProto) -> onnx.ModelProto:
    """onnxruntime's `quant_pre_process` (what its quantizer asks for): BatchNormalization folded into
    the Conv before it, shapes inferred, so each Conv becomes one DQ -> Conv -> Q unit."""
    from onnxruntime.quantization.shape_inference import quant_pre_process
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "float.onnx"), os.path.join(tmp, "pre.onnx")
        onnx.save(model, src)
        quant_pre_process(src, dst, skip_symbolic_shape=True)
        return onnx.load(dst)


def qdq_resnet50(seed: int = 0, calibration: int = 4, pre_process: bool = False) -> onnx.ModelProto:
    """QDQ ResNet50 (opset 13), calibrated on `calibration` random inputs (1x3x224x224).

    Without `pre_process` the zoo's 53 BatchNormalizations stay float ops between quantizers
    (DQ -> BatchNormalization -> Q units), as quantize_static leaves them."""
    model = resnet50_float(seed)
    if pre_process:
        model = pre_processed(model)
    return quantize_qdq(model, random_inputs((1, 3, 224, 224), calibration, seed + 100))


def mobilenet_float(seed: int = 0, size: int = 32, classes: int = 10, opset: int = 13) -> onnx.ModelProto:
    """A MobileNet-v2-style net on 1x3xSxS: stem Conv s2 + Relu6, a depthwise-separable block, an inverted
    residual block (expand 1x1 + Relu6, depthwise 3x3 + Relu6, project 1x1, Add), GlobalAveragePool, Gemm.

    Relu6 is Clip(0, 6) (min/max as inputs from opset 11, attributes before)."""
    rng = np.random.default_rng(seed)

    def weight(shape):
        fan_in = int(np.prod(shape[1:]))
        return rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)

    c0, c1, e = 8, 16, 48
    inits = [
        _f32("stem_w", weight((c0, 3, 3, 3))), _f32("stem_b", rng.normal(0, 0.1, c0)),
        _f32("dw1_w", weight((c0, 1, 3, 3))), _f32("dw1_b", rng.normal(0, 0.1, c0)),
        _f32("pw1_w", weight((c1, c0, 1, 1))), _f32("pw1_b", rng.normal(0, 0.1, c1)),
        _f32("ex_w", weight((e, c1, 1, 1))), _f32("ex_b", rng.normal(0, 0.1, e)),
        _f32("dw2_w", weight((e, 1, 3, 3))), _f32("dw2_b", rng.normal(0, 0.1, e)),
        _f32("pr_w", weight((c1, e, 1, 1)) * 0.5), _f32("pr_b", rng.normal(0, 0.1, c1)),
        _f32("fc_w", rng.standard_normal((classes, c1)) * np.sqrt(1.0 / c1)), _f32("fc_b", rng.normal(0, 0.1, classes)),
    ]
    if opset >= 11:
        inits += [_f32("zero", np.array(0.0)), _f32("six", np.array(6.0))]

    def relu6(x, y):
        if opset >= 11:
            return helper.make_node("Clip", [x, "zero", "six"], [y], name=f"{y}_clip")
        return helper.make_node("Clip", [x], [y], name=f"{y}_clip", min=0.0, max=6.0)

    conv = helper.make_node
    nodes = [
        conv("Conv", ["x", "stem_w", "stem_b"], ["s"], name="stem", pads=[1, 1, 1, 1], strides=[2, 2]),
        relu6("s", "s6"),
        conv("Conv", ["s6", "dw1_w", "dw1_b"], ["d1"], name="dw1", pads=[1, 1, 1, 1], group=c0),
        relu6("d1", "d16"),
        conv("Conv", ["d16", "pw1_w", "pw1_b"], ["p1"], name="pw1"),
        conv("Conv", ["p1", "ex_w", "ex_b"], ["ex"], name="expand"),
        relu6("ex", "ex6"),
        conv("Conv", ["ex6", "dw2_w", "dw2_b"], ["d2"], name="dw2", pads=[1, 1, 1, 1], group=e),
        relu6("d2", "d26"),
        conv("Conv", ["d26", "pr_w", "pr_b"], ["pr"], name="project"),
        conv("Add", ["pr", "p1"], ["res"], name="residual"),
        conv("GlobalAveragePool", ["res"], ["g"], name="gap"),
        conv("Flatten", ["g"], ["f"], name="flatten"),
        conv("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    ]
    model = _model(nodes, "mobilenet_style",
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, classes])], inits, opset)
    onnx.checker.check_model(model)
    return model


def qdq_mobilenet(seed: int = 0, size: int = 32, calibration: int = 8, opset: int = 13) -> onnx.ModelProto:
    """The MobileNet-style net quantized to QDQ (Relu6 folded into the Conv output ranges by quantize_static)."""
    return quantize_qdq(mobilenet_float(seed, size, opset=opset), random_inputs((1, 3, size, size), calibration, seed + 1))


def _q(name: str, arr, dtype) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(arr, dtype), name)


def qoperator_net(seed: int = 0, opset: int = 13, qlinear_add: bool = True) -> onnx.ModelProto:
    """A hand-built QOperator CNN on 1x3x12x12 float input, 10 float logits out.

    QuantizeLinear (uint8) -> QLinearConv (per-channel int8 weights, int32 bias) [-> QLinearAdd
    (com.microsoft) with a second QLinearConv branch] -> DequantizeLinear -> DynamicQuantizeLinear
    -> ConvInteger (uint8 weights with a zero point) -> Cast, Mul by the two scales -> Relu ->
    Flatten -> DynamicQuantizeLinear -> MatMulInteger -> Cast, Mul -> QuantizeLinear (int8) ->
    QLinearMatMul -> DequantizeLinear -> logits. At opset 10 (before DynamicQuantizeLinear) the two
    dynamic quantizers are QuantizeLinear with fixed scales.
    """
    rng = np.random.default_rng(seed)
    c, m, k = 3, 8, 6
    h = 12
    u8, i8, i32 = np.uint8, np.int8, np.int32
    xs, xzp = 1.0 / 255, 0
    w1 = rng.integers(-63, 64, (m, c, 3, 3))  # 7 bits: see the module docstring
    w1s = rng.uniform(0.002, 0.006, m)
    y1s, y1zp = 0.02, 128
    w2 = rng.integers(-63, 64, (m, c, 3, 3))
    w2s = rng.uniform(0.002, 0.006, m)
    y2s, y2zp = 0.02, 120
    ads, adzp = 0.03, 100
    w3 = rng.integers(0, 256, (k, m, 3, 3))
    w3zp = 128
    w3s = 0.004
    flat = k * (h - 2) * (h - 2)
    w4 = rng.integers(0, 256, (flat, 32))
    w4zp = 127
    w4s = 0.002
    q5s, q5zp = 0.05, 0
    w5 = rng.integers(-127, 128, (32, 10))
    w5s, w5zp = 0.01, 0
    outs, outzp = 0.1, 0
    inits = [
        _f32("x_scale", xs), _q("x_zp", xzp, u8),
        _q("w1", w1, i8), _f32("w1_scale", w1s), _q("w1_zp", np.zeros(m), i8),
        _q("b1", rng.integers(-2000, 2000, m), i32), _f32("y1_scale", y1s), _q("y1_zp", y1zp, u8),
        _q("w2", w2, i8), _f32("w2_scale", w2s), _q("w2_zp", np.zeros(m), i8),
        _q("b2", rng.integers(-2000, 2000, m), i32), _f32("y2_scale", y2s), _q("y2_zp", y2zp, u8),
        _f32("add_scale", ads), _q("add_zp", adzp, u8),
        _q("w3", w3, u8), _q("w3_zp", w3zp, u8), _f32("w3_scale", w3s),
        _q("w4", w4, u8), _q("w4_zp", w4zp, u8), _f32("w4_scale", w4s),
        _f32("q5_scale", q5s), _q("q5_zp", q5zp, i8),
        _q("w5", w5, i8), _f32("w5_scale", w5s), _q("w5_zp", w5zp, i8),
        _f32("out_scale", outs), _q("out_zp", outzp, i8),
        numpy_helper.from_array(np.array([1, -1], np.int64), "flat_shape"),
    ]
    node = helper.make_node
    nodes = [
        node("QuantizeLinear", ["x", "x_scale", "x_zp"], ["xq"], name="quant_x"),
        node("QLinearConv", ["xq", "x_scale", "x_zp", "w1", "w1_scale", "w1_zp", "y1_scale", "y1_zp", "b1"], ["c1"],
             name="qconv1", pads=[1, 1, 1, 1]),
    ]
    if qlinear_add:
        nodes += [
            node("QLinearConv", ["xq", "x_scale", "x_zp", "w2", "w2_scale", "w2_zp", "y2_scale", "y2_zp", "b2"],
                 ["c2"], name="qconv2", pads=[1, 1, 1, 1]),
            node("QLinearAdd", ["c1", "y1_scale", "y1_zp", "c2", "y2_scale", "y2_zp", "add_scale", "add_zp"], ["a"],
                 name="qadd", domain="com.microsoft"),
            node("DequantizeLinear", ["a", "add_scale", "add_zp"], ["af"], name="dq_add"),
        ]
    else:
        nodes.append(node("DequantizeLinear", ["c1", "y1_scale", "y1_zp"], ["af"], name="dq_add"))
    if opset < 11:  # DynamicQuantizeLinear is opset 11: fixed quantizers instead
        inits += [_f32("aq_scale", 0.02), _q("aq_zp", 0, u8), _f32("fq_scale", 0.05), _q("fq_zp", 0, u8)]

    def quantize(x, y, name):
        if opset < 11:
            return node("QuantizeLinear", [x, f"{y}_scale", f"{y}_zp"], [y], name=name)
        return node("DynamicQuantizeLinear", [x], [y, f"{y}_scale", f"{y}_zp"], name=name)

    nodes += [
        quantize("af", "aq", "dynq1"),
        node("ConvInteger", ["aq", "w3", "aq_zp", "w3_zp"], ["c3"], name="convint"),
        node("Cast", ["c3"], ["c3f"], name="cast3", to=TensorProto.FLOAT),
        node("Mul", ["aq_scale", "w3_scale"], ["s3"], name="scale3"),
        node("Mul", ["c3f", "s3"], ["c3s"], name="rescale3"),
        node("Relu", ["c3s"], ["r3"], name="relu3"),
        node("Reshape", ["r3", "flat_shape"], ["f"], name="flatten"),
        quantize("f", "fq", "dynq2"),
        node("MatMulInteger", ["fq", "w4", "fq_zp", "w4_zp"], ["m4"], name="matmulint"),
        node("Cast", ["m4"], ["m4f"], name="cast4", to=TensorProto.FLOAT),
        node("Mul", ["fq_scale", "w4_scale"], ["s4"], name="scale4"),
        node("Mul", ["m4f", "s4"], ["m4s"], name="rescale4"),
        node("QuantizeLinear", ["m4s", "q5_scale", "q5_zp"], ["m4q"], name="quant4"),
        node("QLinearMatMul", ["m4q", "q5_scale", "q5_zp", "w5", "w5_scale", "w5_zp", "out_scale", "out_zp"], ["lq"],
             name="qmatmul"),
        node("DequantizeLinear", ["lq", "out_scale", "out_zp"], ["logits"], name="dq_out"),
    ]
    extra = [("com.microsoft", 1)] if qlinear_add else []
    return _model(nodes, "qoperator_net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, h, h])],
                  [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits, opset, extra)


__all__ = ["mobilenet_float", "pre_processed", "qdq_mobilenet", "qdq_resnet50", "qoperator_net", "quantize_qdq", "random_inputs",
           "resnet50_float"]
