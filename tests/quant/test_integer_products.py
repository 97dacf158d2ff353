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
