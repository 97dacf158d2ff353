"""The run mode's requantization is onnxruntime's: float32 multiplier, float32 product, round half to even.

Oracles: onnxruntime's QLinearConv (MLAS's requantization) on the same integers, and a numpy
oracle written element by element from the float32 formula in xgraph/kernels/requantization.py.
The cases are built on near-ties, where the float64 reading of ONNX's formula rounds to the
other integer: each test also checks that float64 gives a different answer there, so it would
fail if the run mode went back to it.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ort = pytest.importorskip("onnxruntime")

import xgraph  # noqa: E402
from xgraph.kernels.requantization import float32_multiplier, requantize_float32  # noqa: E402

M, SIDE = 64, 16  # output channels; SIDE x SIDE pixels hold every uint8 value once
Y_ZP = 128


def oracle(acc: int, x_scale: float, w_scale: float, y_scale: float, zero_point: int = Y_ZP) -> int:
    """One output by the float32 formula, scalar by scalar (numpy float32 scalars round every operation)."""
    multiplier = np.float32(np.float32(x_scale) * np.float32(w_scale)) / np.float32(y_scale)
    value = np.float32(acc) * multiplier
    value = min(max(value, np.float32(0 - zero_point)), np.float32(255 - zero_point))
    return int(np.rint(value)) + zero_point


def float64_reading(acc: int, x_scale: float, w_scale: float, y_scale: float, zero_point: int = Y_ZP) -> int:
    value = acc * (float(x_scale) * float(w_scale) / float(y_scale))
    return min(255, max(0, int(np.rint(value)) + zero_point))


def unit_scale_ties(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(accumulator per channel, w_scale, x_scale, y_scale) putting that accumulator on a near-tie.

    x_scale = y_scale = 1, so the multiplier is w_scale itself, chosen as float32((k + 0.5) / A)
    for an odd A: A * multiplier is k + 0.5 within float32 rounding, so the float32 product lands
    on the half exactly (then to even) and the float64 one just beside it."""
    acc = (rng.integers(20_000, 400_000, M) | 1).astype(np.int64)
    k = rng.integers(-100, 100, M)
    return acc, ((k + 0.5) / acc).astype(np.float32), 1.0, 1.0


def scaled_ties(rng: np.random.Generator, x_scale: np.float32,
                y_scale: np.float32) -> tuple[np.ndarray, np.ndarray, float, float]:
    """The same with random w_scales whose float32 multiplier (float32(x_scale * w_scale) / y_scale) differs
    from the float64 one, and an accumulator that the two multipliers round to different integers."""
    acc, w_scale = [], []
    while len(w_scale) < M:
        ws = np.float32(rng.uniform(1e-4, 1e-3))
        m32 = float(float32_multiplier(x_scale, ws, y_scale)[0])
        m64 = float(x_scale) * float(ws) / float(y_scale)
        candidates = rng.integers(20_000, 2_000_000, 4000)
        hits = candidates[(np.abs(candidates * m32) < 120) & (np.rint(candidates * m32) != np.rint(candidates * m64))]
        if m32 != m64 and hits.size:
            acc.append(int(hits[0]))
            w_scale.append(ws)
    return np.array(acc, np.int64), np.array(w_scale, np.float32), float(x_scale), float(y_scale)


def _models(bias, w_scale, x_scale, y_scale):
    """(QLinearConv model, its QDQ form): xq (1, 1, SIDE, SIDE) uint8, weights all 1, one bias per channel."""
    inits = [numpy_helper.from_array(np.float32(x_scale), "x_scale"), numpy_helper.from_array(np.uint8(0), "x_zp"),
             numpy_helper.from_array(np.ones((M, 1, 1, 1), np.int8), "w"),
             numpy_helper.from_array(w_scale, "w_scale"), numpy_helper.from_array(np.zeros(M, np.int8), "w_zp"),
             numpy_helper.from_array(bias.astype(np.int32), "b"),
             numpy_helper.from_array((np.float32(x_scale) * w_scale).astype(np.float32), "b_scale"),
             numpy_helper.from_array(np.zeros(M, np.int32), "b_zp"),
             numpy_helper.from_array(np.float32(y_scale), "y_scale"), numpy_helper.from_array(np.uint8(Y_ZP), "y_zp")]
    x = [helper.make_tensor_value_info("xq", TensorProto.UINT8, [1, 1, SIDE, SIDE])]
    y = [helper.make_tensor_value_info("yq", TensorProto.UINT8, [1, M, SIDE, SIDE])]
    qlinear = helper.make_node("QLinearConv", ["xq", "x_scale", "x_zp", "w", "w_scale", "w_zp", "y_scale", "y_zp", "b"],
                               ["yq"], kernel_shape=[1, 1])
    qdq = [helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["x"]),
           helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["wf"], axis=0),
           helper.make_node("DequantizeLinear", ["b", "b_scale", "b_zp"], ["bf"], axis=0),
           helper.make_node("Conv", ["x", "wf", "bf"], ["yf"], name="conv", kernel_shape=[1, 1]),
           helper.make_node("QuantizeLinear", ["yf", "y_scale", "y_zp"], ["yq"])]
    opsets = [helper.make_opsetid("", 13)]
    return (helper.make_model(helper.make_graph([qlinear], "qlinearconv", x, y, inits), opset_imports=opsets),
            helper.make_model(helper.make_graph(qdq, "qdq_conv", x, y, inits), opset_imports=opsets))


XQ = np.arange(SIDE * SIDE, dtype=np.uint8).reshape(1, 1, SIDE, SIDE)  # pixel p holds the value p


@pytest.fixture(scope="module")
def tie_cases():
    """(accumulator, w_scale, x_scale, y_scale) cases; channel c meets its accumulator at pixel c (bias = acc - c)."""
    rng = np.random.default_rng(23)
    return [unit_scale_ties(rng), scaled_ties(rng, np.float32(0.0173), np.float32(0.0391))]


def _accumulators(target: np.ndarray) -> np.ndarray:
    """(M, SIDE * SIDE) accumulators of the 1x1 conv with weight 1 and bias target - channel index."""
    return XQ.reshape(1, -1).astype(np.int64) + (target - np.arange(M)).reshape(-1, 1)


def test_the_numpy_oracle_is_what_requantize_float32_computes_and_float64_differs_on_near_ties(tie_cases):
    differ = 0
    for target, w_scale, xs, ys in tie_cases:
        acc = _accumulators(target)
        got = requantize_float32(acc, float32_multiplier(xs, w_scale, ys).reshape(-1, 1), Y_ZP, np.dtype(np.uint8))
        for c in range(M):
            for p in (c, 7, 200):
                a = int(acc[c, p])
                want = oracle(a, xs, float(w_scale[c]), ys)
                assert int(got[c, p]) == want, (c, p, a)
                differ += p == c and float64_reading(a, xs, float(w_scale[c]), ys) != want
    assert differ >= 40, differ  # the cases do sit on near-ties


def test_run_gives_onnxruntimes_qlinearconv_integers_on_near_ties(tie_cases):
    float64_differs = 0
    for target, w_scale, xs, ys in tie_cases:
        qlinear, qdq = _models(target - np.arange(M), w_scale, xs, ys)
        (theirs,) = ort.InferenceSession(qlinear.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"xq": XQ})
        for model in (qdq, qlinear):
            with xgraph.create_graph_runner(xgraph.compile(model), mode="run", kernels="numpy") as runner:
                if model is qdq:
                    (sub,) = runner.runners.values()
                    assert sub.fused_into.get("conv") == "conv"  # one integer step, not float simulation
                (ours,) = runner.run({"xq": XQ})
            np.testing.assert_array_equal(ours, theirs, err_msg=model.graph.name)
        theirs = theirs.reshape(M, -1)
        float64_differs += sum(float64_reading(int(target[c]), xs, float(w_scale[c]), ys) != int(theirs[c, c])
                               for c in range(M))
    assert float64_differs >= 40, float64_differs


def test_run_equals_onnxruntime_on_a_full_range_3x3_conv():
    """Random full-range uint8 activations with a zero point, 7-bit per-channel weights (exact in onnxruntime's
    u8s8 kernels), random scales: every output the same integer."""
    rng = np.random.default_rng(29)
    c_in, m = 16, 24
    xs, ys = np.float32(0.0217), np.float32(0.0733)
    w = rng.integers(-63, 64, (m, c_in, 3, 3)).astype(np.int8)
    w_scale = rng.uniform(2e-3, 9e-3, m).astype(np.float32)
    bias = rng.integers(-20_000, 20_000, m).astype(np.int32)
    inits = [numpy_helper.from_array(xs, "x_scale"), numpy_helper.from_array(np.uint8(119), "x_zp"),
             numpy_helper.from_array(w, "w"), numpy_helper.from_array(w_scale, "w_scale"),
             numpy_helper.from_array(np.zeros(m, np.int8), "w_zp"), numpy_helper.from_array(bias, "b"),
             numpy_helper.from_array((xs * w_scale).astype(np.float32), "b_scale"),
             numpy_helper.from_array(np.zeros(m, np.int32), "b_zp"),
             numpy_helper.from_array(ys, "y_scale"), numpy_helper.from_array(np.uint8(101), "y_zp")]
    nodes = [helper.make_node("DequantizeLinear", ["xq", "x_scale", "x_zp"], ["x"]),
             helper.make_node("DequantizeLinear", ["w", "w_scale", "w_zp"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["b", "b_scale", "b_zp"], ["bf"], axis=0),
             helper.make_node("Conv", ["x", "wf", "bf"], ["yf"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["yf", "y_scale", "y_zp"], ["yq"])]
    graph = helper.make_graph(nodes, "qdq_conv3", [helper.make_tensor_value_info("xq", TensorProto.UINT8,
                                                                                 [1, c_in, 28, 28])],
                              [helper.make_tensor_value_info("yq", TensorProto.UINT8, [1, m, 28, 28])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])  # fuses to QLinearConv
    with xgraph.create_graph_runner(xgraph.compile(model), mode="run", kernels="numpy") as runner:
        for _ in range(3):
            xq = rng.integers(0, 256, (1, c_in, 28, 28)).astype(np.uint8)
            (ours,) = runner.run({"xq": xq})
            (theirs,) = session.run(None, {"xq": xq})
            assert len(np.unique(theirs)) > 100  # a spread of outputs, saturating at both ends too
            np.testing.assert_array_equal(ours, theirs)
