"""Exact integer products on float32 BLAS (xgraph/kernels/integer_products.py) against int64 oracles.

The oracles compute in int64 with numpy's plain integer loops (no BLAS, no rounding); cases
cover seeded random integers over the whole int8/uint8 range and the worst cases, where every
product is the largest odd one (127 * 127) or the largest one (-128 * -128, 255 * 127), so the
sums pass 2**24 and an unsplit float32 product would round.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from xgraph.kernels.integer_products import (FLOAT32_EXACT, exact_chunks, input_bound, integer_conv,
                                             integer_matmul)


def _conv_oracle(a: np.ndarray, w: np.ndarray, pad: int, stride: int = 1, group: int = 1) -> np.ndarray:
    """Conv by its definition in int64: per output, the sum over its window and its group's channels."""
    a, w = a.astype(np.int64), w.astype(np.int64)
    n, c, h, wd = a.shape
    m, cg, kh, kw = w.shape
    ap = np.pad(a, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, m, oh, ow), np.int64)
    per_group = m // group
    for o in range(m):
        g = o // per_group
        for i in range(oh):
            for j in range(ow):
                window = ap[:, g * cg:(g + 1) * cg, i * stride:i * stride + kh, j * stride:j * stride + kw]
                out[:, o, i, j] = (window * w[o]).sum(axis=(1, 2, 3))
    return out


def _exact(got: np.ndarray, want: np.ndarray) -> None:
    assert np.all(np.rint(got) == got), "the accumulation must be integer-valued"
    np.testing.assert_array_equal(got.astype(np.int64), want)


@pytest.mark.parametrize("a_value, w_value", [(127, 127), (-128, -128), (-128, 127), (255, 127)])
def test_worst_case_matmul_is_exact(a_value, w_value):
    k = 4608  # ResNet50's widest reduction (3 x 3 x 512): 4608 * 127 * 127 = 74e6 > 2**24
    a_max = 255 if a_value == 255 else 128
    a = np.full((3, k), a_value, np.int64)
    a[1, ::3] = -a_value if a_value != 255 else 0
    w = np.full((k, 5), w_value, np.int64)
    w[::7, 1] = 1
    fn = integer_matmul(w, a_max)
    _exact(fn(a.astype(np.float32)), a @ w)


def test_worst_case_needs_and_gets_several_chunks():
    w = np.full((4608, 2), 127)
    chunks = exact_chunks(np.abs(w), 128)
    assert len(chunks) == 5 and chunks[0] == (0, 1032) and chunks[-1][1] == 4608
    assert all(b == c for (_, b), (c, _) in zip(chunks, chunks[1:]))
    assert exact_chunks(np.abs(w[:1000]), 128) == [(0, 1000)]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000), st.integers(1, 8), st.integers(0, 2**31 - 1), st.sampled_from(["int8", "uint8"]))
def test_random_full_range_matmul_is_exact(k, n, seed, dtype):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    zp = int(rng.integers(info.min, info.max + 1))
    a = rng.integers(info.min, info.max + 1, (2, k)) - zp
    w = rng.integers(-128, 128, (k, n))
    fn = integer_matmul(w, input_bound(np.dtype(dtype), zp))
    _exact(fn(a.astype(np.float32)), a @ w)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 400), st.integers(1, 200000), st.integers(0, 2**31 - 1))
def test_every_chunk_keeps_its_bound(groups, scale, seed):
    rng = np.random.default_rng(seed)
    weight_abs = rng.integers(0, 129, (groups, 3)) * (scale // 1000 + 1)
    a_max = int(rng.integers(1, 256))
    chunks = exact_chunks(weight_abs, a_max)
    assert chunks[0][0] == 0 and chunks[-1][1] == groups
    for start, end in chunks:
        assert end > start
        assert end - start == 1 or a_max * weight_abs[start:end].sum(axis=0).max() <= FLOAT32_EXACT


@pytest.mark.parametrize("a_value, w_value", [(127, 127), (-128, -128), (255, 127)])
def test_worst_case_conv_is_exact(a_value, w_value):
    c = 600  # 600 * 3 * 3 * 127 * 127 = 87e6 > 2**24: split by input channels
    a = np.full((1, c, 5, 5), a_value, np.int64)
    a[0, ::5, 1, :] = 0
    w = np.full((4, c, 3, 3), w_value, np.int64)
    w[1, :, 1, 1] = -w_value
    a_max = 255 if a_value == 255 else 128
    fn = integer_conv(w, a_max, {"pads": [1, 1, 1, 1]})
    _exact(fn(a.astype(np.float32)), _conv_oracle(a, w, 1))


@pytest.mark.parametrize("seed", range(3))
def test_random_conv_with_stride_and_groups_is_exact(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-128, 128, (1, 8, 9, 9))
    for group, cg in ((1, 8), (2, 4), (8, 1)):
        w = rng.integers(-128, 128, (8, cg, 3, 3))
        fn = integer_conv(w, 128, {"pads": [1, 1, 1, 1], "strides": [2, 2], "group": group})
        _exact(fn(a.astype(np.float32)), _conv_oracle(a, w, 1, stride=2, group=group))


def test_input_bound_follows_the_zero_point():
    assert input_bound(np.dtype(np.int8), 0) == 128
    assert input_bound(np.dtype(np.uint8), 0) == 255
    assert input_bound(np.dtype(np.uint8), 128) == 128
    assert input_bound(np.dtype(np.int8), -100) == 227


def _qdq_conv_model(w_q: np.ndarray, b_q: np.ndarray, xs: float, ws: np.ndarray, ys: float):
    """x -> Q -> DQ -> Conv(DQ(w_q), DQ(b_q)) 3x3 pad 1 -> Q -> DQ -> y: one int8 unit, weights as given."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    m, c = w_q.shape[:2]
    inits = [numpy_helper.from_array(np.array(xs, np.float32), "xs"), numpy_helper.from_array(np.int8(0), "zp"),
             numpy_helper.from_array(w_q.astype(np.int8), "wq"), numpy_helper.from_array(ws.astype(np.float32), "ws"),
             numpy_helper.from_array(np.zeros(m, np.int8), "wzp"), numpy_helper.from_array(b_q.astype(np.int32), "bq"),
             numpy_helper.from_array((xs * ws).astype(np.float32), "bs"),
             numpy_helper.from_array(np.zeros(m, np.int32), "bzp"),
             numpy_helper.from_array(np.array(ys, np.float32), "ys")]
    mk = helper.make_node
    nodes = [mk("QuantizeLinear", ["x", "xs", "zp"], ["xq"], name="xq"),
             mk("DequantizeLinear", ["xq", "xs", "zp"], ["xd"], name="xd"),
             mk("DequantizeLinear", ["wq", "ws", "wzp"], ["wd"], axis=0, name="wd"),
             mk("DequantizeLinear", ["bq", "bs", "bzp"], ["bd"], axis=0, name="bd"),
             mk("Conv", ["xd", "wd", "bd"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             mk("QuantizeLinear", ["c", "ys", "zp"], ["yq"], name="yq"),
             mk("DequantizeLinear", ["yq", "ys", "zp"], ["y"], name="yd")]
    graph = helper.make_graph(nodes, "wide_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 5, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, m, 5, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 7
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("case", ["extremes", "random"])
def test_fused_wide_unit_with_full_range_weights_is_exact(case):
    """Through compile and the run mode's fused unit (numpy kernels): K = 600 * 9, full-range int8 weights.

    This checks the wiring (chunks, bias, per-channel multipliers, saturation); the output's
    requantization would hide an accumulator off by a few, which the kernel tests above catch."""
    import xgraph
    rng = np.random.default_rng(7)
    m, c = 4, 600
    if case == "extremes":
        w_q = np.where(rng.random((m, c, 3, 3)) < 0.9, 127, -128)
        x = np.where(rng.random((1, c, 5, 5)) < 0.9, 1e3, -1e3).astype(np.float32)  # saturates to 127 / -128
    else:
        w_q = rng.integers(-128, 128, (m, c, 3, 3))
        x = rng.uniform(-1, 1, (1, c, 5, 5)).astype(np.float32)
    xs, ys = 1 / 127, 40.0
    ws = rng.uniform(0.5, 1.5, m) / 127
    b_q = rng.integers(-2**20, 2**20, m)
    compiled = xgraph.compile(_qdq_conv_model(w_q, b_q, xs, ws, ys))
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        (sub,) = runner.runners.values()
        assert sub.fused_into.get("conv") == "conv"
        y = runner.run({"x": x})[0]
    xq = np.clip(np.rint(x.astype(np.float64) / np.float32(xs)), -128, 127).astype(np.int64)
    acc = _conv_oracle(xq, w_q, 1) + b_q.reshape(1, -1, 1, 1)
    # beyond what one float32 product is guaranteed to keep exact (the extremes' sums themselves pass 2**24)
    assert 128 * np.abs(w_q).reshape(m, -1).sum(axis=1).max() > FLOAT32_EXACT
    assert case != "extremes" or np.abs(acc).max() > FLOAT32_EXACT
    multiplier = float(np.float32(xs)) * ws.astype(np.float32).astype(np.float64).reshape(1, -1, 1, 1) / float(np.float32(ys))
    yq = np.clip(np.rint(acc * multiplier), -128, 127)
    np.testing.assert_array_equal(y, (yq * np.float32(ys)).astype(np.float32))
