"""Integer QDQ units in the run mode: exact integer arithmetic, checked against a loop oracle and onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")

import xgraph  # noqa: E402
from xgraph.runners.int8_fusion import fixed_point_multiplier, requantize, requantize_fixed_point  # noqa: E402
from tests.quant.models import calibration_inputs, quantize, single_conv, single_gemm  # noqa: E402


def _inits(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    return {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}


def _loop_qlinear_conv(xq, xs, xzp, wq, ws, bq, ys, yzp):
    """QLinearConv by its definition: integer sums per output element (3x3, pad 1, stride 1), then requantize."""
    n, c, h, w = xq.shape
    m = wq.shape[0]
    xp = np.zeros((n, c, h + 2, w + 2), np.int64)
    xp[:, :, 1:-1, 1:-1] = xq.astype(np.int64) - int(xzp)
    out = np.zeros((n, m, h, w), np.int64)
    for o in range(m):
        for i in range(h):
            for j in range(w):
                out[0, o, i, j] = int((xp[0, :, i:i + 3, j:j + 3] * wq[o].astype(np.int64)).sum()) + int(bq[o])
    y = np.rint(out * (float(xs) * ws.astype(np.float64).reshape(1, -1, 1, 1) / float(ys))) + int(yzp)
    return np.clip(y, -128, 127).astype(np.int8)


@pytest.fixture(scope="module")
def conv_case():
    q = quantize(single_conv(), calib=calibration_inputs((1, 4, 8, 8)))
    return q, xgraph.compile(q)


def test_run_mode_fuses_the_conv_unit_into_one_integer_step(conv_case):
    _, compiled = conv_case
    with xgraph.create_graph_runner(compiled, mode="run", kernels="numpy") as runner:
        (sub,) = runner.runners.values()
        assert sub.fused_into.get("conv") == "conv"
        assert sub.fused_into.get("w_DequantizeLinear") == "conv"
        assert sub.fused_into.get("y_QuantizeLinear") == "conv"


def test_integer_conv_equals_a_loop_oracle_and_onnxruntime(conv_case):
    q, compiled = conv_case
    p = _inits(q)
    sess = ort.InferenceSession(q.SerializeToString())
    rng = np.random.default_rng(11)
    with xgraph.create_graph_runner(compiled, mode="run", kernels="numpy") as runner:
        for _ in range(5):
            x = rng.uniform(0, 1, (1, 4, 8, 8)).astype(np.float32)
            y = runner.run({"x": x})[0]
            xq = np.clip(np.rint(x / p["x_scale"]) + p["x_zero_point"], -128, 127).astype(np.int8)
            want_q = _loop_qlinear_conv(xq, p["x_scale"], p["x_zero_point"], p["w_quantized"], p["w_scale"],
                                        p["b_quantized"], p["y_scale"], p["y_zero_point"])
            want = (want_q.astype(np.float32) - p["y_zero_point"]) * p["y_scale"]
            np.testing.assert_allclose(y, want, atol=1e-6)
            assert np.abs(y - sess.run(None, {"x": x})[0]).max() <= p["y_scale"] + 1e-6


def test_integer_gemm_matches_onnxruntime_within_one_step():
    q = quantize(single_gemm(), calib=calibration_inputs((2, 16)))
    p = _inits(q)
    sess = ort.InferenceSession(q.SerializeToString())
    compiled = xgraph.compile(q)
    rng = np.random.default_rng(12)
    with xgraph.create_graph_runner(compiled, mode="run", kernels="numpy") as runner:
        (sub,) = runner.runners.values()
        assert sub.fused_into.get("fc") == "fc"
        for _ in range(20):
            x = rng.uniform(0, 1, (2, 16)).astype(np.float32)
            assert np.abs(runner.run({"x": x})[0] - sess.run(None, {"x": x})[0]).max() <= p["y_scale"] + 1e-6


@settings(max_examples=200, deadline=None)
@given(st.floats(1e-6, 0.99), st.integers(-(2 ** 24), 2 ** 24))
def test_fixed_point_requantization_is_within_one_step_of_the_float_one(multiplier, acc):
    mantissa, shift = fixed_point_multiplier(np.array([multiplier]))
    assert 2 ** 30 <= int(mantissa[0]) <= 2 ** 31
    assert abs(int(mantissa[0]) * 2.0 ** -int(shift[0]) - multiplier) <= multiplier * 2 ** -30
    a = np.array([acc], np.int64)
    exact = requantize(a, np.array([multiplier]), 3, np.dtype(np.int8))
    device = requantize_fixed_point(a, np.array([multiplier]), 3, np.dtype(np.int8))
    assert abs(int(exact[0]) - int(device[0])) <= 1


def test_fixed_point_rounds_half_away_from_zero():
    m = np.array([0.5])
    acc = np.array([1, 3, -1, -3, 5], np.int64)
    assert requantize(acc, m, 0, np.dtype(np.int8)).tolist() == [0, 2, 0, -2, 2]  # half to even
    assert requantize_fixed_point(acc, m, 0, np.dtype(np.int8)).tolist() == [1, 2, -1, -2, 3]  # half away


def test_sim_runs_units_in_fixed_point_and_costs_them_at_the_int8_peak(conv_case):
    q, compiled = conv_case
    p = _inits(q)
    sess = ort.InferenceSession(q.SerializeToString())
    rng = np.random.default_rng(13)
    with xgraph.create_graph_runner(compiled, mode="sim") as runner:
        (sub,) = runner.runners.values()
        assert sub.fused_into.get("conv") == "conv"
        x = rng.uniform(0, 1, (1, 4, 8, 8)).astype(np.float32)
        y = runner.run({"x": x})[0]
        assert np.abs(y - sess.run(None, {"x": x})[0]).max() <= p["y_scale"] + 1e-6
        estimate = sub.last_estimate
    conv = next(c for c in estimate.ops if c.op == "conv")
    assert conv.flops == 2 * 6 * 8 * 8 * 4 * 3 * 3
    from xgraph.devices import get_devices
    peak = get_devices()["AICORE"].cost.peak_gflops["int8"] * 1e9
    assert conv.seconds >= conv.flops / peak
    assert estimate.dtype in ("float32", "int8")
