"""QuantizeLinear / DequantizeLinear kernels: the float32 in-place paths give the float64 definition's results."""
from __future__ import annotations

import ml_dtypes
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from xgraph.kernels.op_math import dequantize_linear, quantize_linear

_TYPES = [np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.uint16, ml_dtypes.int4)]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(_TYPES), st.integers(0, 2**31 - 1), st.floats(1e-3, 50), st.booleans())
def test_quantize_equals_the_float64_rounding(dtype, seed, scale, per_axis):
    rng = np.random.default_rng(seed)
    info = ml_dtypes.iinfo(dtype)
    x = (rng.standard_normal((2, 3, 4)) * scale * rng.choice([1, 100, 1e6])).astype(np.float32)
    x.flat[:3] = [np.inf, -np.inf, (info.max + 0.5) * np.float32(scale)]  # saturation and a tie at the top
    shape = (3,) if per_axis else ()
    s = np.full(shape, scale, np.float32)
    zp = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    got = quantize_linear(x, s, zp, axis=1)
    b = (1, 3, 1) if per_axis else ()
    ratio = (x / s.reshape(b)).astype(np.float64)  # the division in float32, as ONNX's reference does
    want = np.clip(np.rint(ratio) + zp.astype(np.float64).reshape(b), info.min, info.max).astype(dtype)
    assert got.dtype == dtype and np.array_equal(got.astype(np.int64), want.astype(np.int64))


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int32)]), st.integers(0, 2**31 - 1),
       st.booleans())
def test_dequantize_equals_the_definition(dtype, seed, per_axis):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    x = rng.integers(max(info.min, -2**30), min(info.max, 2**30), (2, 3, 4)).astype(dtype)
    shape = (3,) if per_axis else ()
    s = rng.uniform(1e-4, 2, shape).astype(np.float32)
    zp = rng.integers(max(info.min, -100), min(info.max, 100), shape).astype(dtype)
    compute = np.float64 if dtype == np.int32 else np.float32
    b = (1, 3, 1) if per_axis else ()
    want = ((x.astype(compute) - zp.astype(compute).reshape(b)) * s.astype(compute).reshape(b)).astype(np.float32)
    np.testing.assert_array_equal(dequantize_linear(x, s, zp, axis=1), want)
