"""Requantization of an exact int32 accumulator in float32, as onnxruntime's integer kernels do it.

ONNX's QLinearConv and QLinearMatMul define the output as
``saturate(round_half_even(acc * x_scale * w_scale / y_scale) + y_zp)`` but leave open in which
precision the multiplier and the product are formed. onnxruntime's CPU kernels (QLinearConv,
QLinearMatMul, its fused QGemm; MLAS's ``MlasRequantizeOutput``) work in float32 throughout:

    multiplier = float32(float32(x_scale * w_scale) / y_scale)     # per output channel
    value      = float32(acc) * multiplier                         # acc + bias, int32 -> float32
    value      = clamp(value, qmin - y_zp, qmax - y_zp)
    y          = round_half_even(value) + y_zp                     # cvtps2dq, default rounding mode

The float64 product (ONNX's formula read in exact arithmetic) agrees with it except where
``acc * multiplier`` lies within float32 rounding (2^-24 relative) of a half step: there the two
round to neighbouring integers. Over a deep network such a one-step difference early on grows
through the later layers, so an engine that should give onnxruntime's integers must round as
it does; `tests/quant/test_requantization.py` pins this against onnxruntime's QLinearConv and a
numpy oracle written from the formula above.
"""
from __future__ import annotations

import numpy as np


def float32_multiplier(x_scale, w_scale, y_scale) -> np.ndarray:
    """float32(float32(x_scale * w_scale) / y_scale), per element of `w_scale` (a 1-D float32 array)."""
    xs = np.float32(np.asarray(x_scale, np.float32).reshape(()))
    ys = np.float32(np.asarray(y_scale, np.float32).reshape(()))
    ws = np.asarray(w_scale, np.float32).reshape(-1)
    return (ws * xs) / ys  # float32 ufuncs: each operation rounds to float32, as in C++ float arithmetic


def requantize_float32(acc: np.ndarray, multiplier: np.ndarray, zero_point: int, dtype: np.dtype) -> np.ndarray:
    """saturate(round_half_even(float32(acc) * multiplier) + zero_point) in `dtype`, every step in float32.

    `acc` holds exact integers (int32 range) in any numeric dtype; `multiplier` is float32,
    broadcastable to `acc`."""
    info = np.iinfo(dtype)
    y = np.asarray(acc).astype(np.float32)  # int32 -> float32: round to nearest even beyond 2**24, as cvtdq2ps
    np.multiply(y, np.asarray(multiplier, np.float32), out=y)
    np.clip(y, np.float32(int(info.min) - zero_point), np.float32(int(info.max) - zero_point), out=y)
    np.rint(y, out=y)
    y += np.float32(zero_point)  # integers below 2**8 in magnitude: exact
    return y.astype(dtype)


__all__ = ["float32_multiplier", "requantize_float32"]
