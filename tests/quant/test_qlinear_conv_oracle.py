"""One QLinearConv against a numpy oracle written from the ONNX definition: per-channel int8 weights,
asymmetric uint8 activations, groups, strides and uneven pads; as a QOperator node and as its QDQ form."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

import xgraph  # noqa: E402

RNG = np.random.default_rng(5)
N, C, H, W, M, GROUP, K = 1, 4, 9, 8, 6, 2, 3
STRIDES, PADS = (2, 1), (1, 0, 2, 1)  # pads: top, left, bottom, right
X_SCALE, X_ZP = np.float32(0.031), np.uint8(131)  # asymmetric activations
W_Q = RNG.integers(-63, 64, (M, C // GROUP, K, K)).astype(np.int8)  # 7 bits: onnxruntime's u8s8 kernels stay exact
W_SCALE = RNG.uniform(0.004, 0.02, M).astype(np.float32)  # one scale per output channel
BIAS = RNG.integers(-3000, 3000, M).astype(np.int32)
Y_SCALE, Y_ZP = np.float32(0.045), np.uint8(97)


def oracle(xq: np.ndarray) -> np.ndarray:
    """y[o, i, j] = saturate(round_half_even(M_o * (b_o + sum (x - x_zp) * w)) + y_zp), padding with x_zp."""
    top, left, bottom, right = PADS
    centred = np.zeros((C, H + top + bottom, W + left + right), np.int64)  # pads hold x_zp: 0 once centred
    centred[:, top:top + H, left:left + W] = xq[0].astype(np.int64) - int(X_ZP)
    oh = (H + top + bottom - K) // STRIDES[0] + 1
    ow = (W + left + right - K) // STRIDES[1] + 1
    per_group = M // GROUP
    y = np.zeros((1, M, oh, ow), np.uint8)
    for o in range(M):
        g = o // per_group
        channels = centred[g * (C // GROUP):(g + 1) * (C // GROUP)]
        multiplier = float(X_SCALE) * float(W_SCALE[o]) / float(Y_SCALE)
        for i in range(oh):
            for j in range(ow):
                patch = channels[:, i * STRIDES[0]:i * STRIDES[0] + K, j * STRIDES[1]:j * STRIDES[1] + K]
                acc = int((patch * W_Q[o].astype(np.int64)).sum()) + int(BIAS[o])
                y[0, o, i, j] = min(255, max(0, int(np.rint(acc * multiplier)) + int(Y_ZP)))
    return y


def _inits():
    return [numpy_helper.from_array(X_SCALE, "x_scale"), numpy_helper.from_array(X_ZP, "x_zp"),
            numpy_helper.from_array(W_Q, "w"), numpy_helper.from_array(W_SCALE, "w_scale"),
            numpy_helper.from_array(np.zeros(M, np.int8), "w_zp"), numpy_helper.from_array(BIAS, "b"),
            numpy_helper.from_array(Y_SCALE, "y_scale"), numpy_helper.from_array(Y_ZP, "y_zp"),
            numpy_helper.from_array((X_SCALE * W_SCALE).astype(np.float32), "b_scale"),
            numpy_helper.from_array(np.zeros(M, np.int32), "b_zp")]


CONV_ATTRS = dict(group=GROUP, strides=list(STRIDES), pads=[PADS[0], PADS[1], PADS[2], PADS[3]], kernel_shape=[K, K])


def qoperator_model() -> onnx.ModelProto:
    node = helper.make_node("QLinearConv", ["xq", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "b"],
                            ["yq"], **CONV_ATTRS)
    graph = helper.make_graph([node], "qlinearconv", [helper.make_tensor_value_info("xq", TensorProto.UINT8,
                                                                                    [N, C, H, W])],
                              [helper.make_tensor_value_info("yq", TensorProto.UINT8, None)], _inits())
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def qdq_model() -> onnx.ModelProto:
    """The same computation as DQ(x), DQ(w, axis 0), DQ(b) -> Conv -> Q: xgraph's integer unit."""
    nodes = [helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["x"]),
             helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "b_scale", "b_zp"], ["bf"], axis=0),
             helper.make_node("Conv", ["x", "wf", "bf"], ["y"], name="conv", **CONV_ATTRS),
             helper.make_node("QuantizeLinear", ["y", "y_scale", "y_zp"], ["yq"])]
    graph = helper.make_graph(nodes, "qdq_conv", [helper.make_tensor_value_info("xq", TensorProto.UINT8,
                                                                                [N, C, H, W])],
                              [helper.make_tensor_value_info("yq", TensorProto.UINT8, None)], _inits())
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def inputs():
    return [RNG.integers(0, 256, (N, C, H, W)).astype(np.uint8) for _ in range(4)]


@pytest.mark.parametrize("build", [qoperator_model, qdq_model], ids=["QLinearConv", "QDQ unit"])
def test_run_equals_the_oracle_and_onnxruntime_is_within_one_step(build, inputs):
    model = build()
    compiled = xgraph.compile(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    with xgraph.create_graph_runner(compiled, mode="run", kernels="numpy") as runner:
        if build is qdq_model:  # the whole pattern is one integer step
            (sub,) = runner.runners.values()
            assert sub.fused_into.get("conv") == "conv"
        for xq in inputs:
            want = oracle(xq)
            (got,) = runner.run({"xq": xq})
            assert got.shape == want.shape == (1, M, 5, 7)
            np.testing.assert_array_equal(got, want)
            assert 0 in want and 255 in want or len(np.unique(want)) > 50  # a spread of values, not a constant
            (theirs,) = session.run(None, {"xq": xq})
            assert np.abs(theirs.astype(int) - want.astype(int)).max() <= 1
