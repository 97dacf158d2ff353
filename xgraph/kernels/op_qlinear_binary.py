"""com.microsoft QLinearAdd and QLinearMul: onnxruntime's quantized elementwise ops (QOperator models).

Both read two quantized tensors (with numpy broadcasting) and write a third in C's scale and
zero point, as onnxruntime's contrib-op schema defines them:

    QLinearAdd:  C = saturate(round((A_scale (A - A_zp) + B_scale (B - B_zp)) / C_scale) + C_zp)
    QLinearMul:  C = saturate(round(A_scale B_scale (A - A_zp)(B - B_zp) / C_scale) + C_zp)

Rounding is half to even (as QuantizeLinear), computed in float64. onnxruntime forms the same
sums in float32, so a value within float32 rounding of a half step may land one step away.
"""
from __future__ import annotations

import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.registry import builtin_kernel as kernel

_TYPES = (np.int8, np.uint8)


def _centred(op: str, name: str, q, scale, zero_point) -> np.ndarray:
    q = np.asarray(q)
    scale = np.asarray(scale, np.float64)
    if scale.size != 1:
        raise KernelError(f"{op}: {name}_scale must be a scalar (per-tensor), got shape {scale.shape}")
    zp = 0 if zero_point is None else np.asarray(zero_point)
    if zero_point is not None and (zp.size != 1 or zp.dtype != q.dtype):
        raise KernelError(f"{op}: {name}_zero_point must be one {q.dtype} value, got {zp.dtype} of shape {zp.shape}")
    return (q.astype(np.float64) - np.float64(zp if np.isscalar(zp) else zp.reshape(()))) * scale.reshape(())


def _requantize(op: str, value: np.ndarray, c_scale, c_zero_point, like: np.ndarray) -> np.ndarray:
    dtype = np.asarray(c_zero_point).dtype if c_zero_point is not None else like.dtype
    if dtype not in (np.dtype(t) for t in _TYPES):
        raise KernelError(f"{op}: C_zero_point must be int8 or uint8, got {dtype}")
    zp = 0.0 if c_zero_point is None else float(np.asarray(c_zero_point).reshape(()))
    info = np.iinfo(dtype)
    return np.clip(np.rint(value / float(np.asarray(c_scale).reshape(()))) + zp, info.min, info.max).astype(dtype)


@kernel("QLinearAdd", domain="com.microsoft", since=1, dtypes=_TYPES)
def qlinear_add(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
    """com.microsoft QLinearAdd: the sum of the dequantized inputs, requantized to C's scale and zero point."""
    value = _centred("QLinearAdd", "A", a, a_scale, a_zero_point) + _centred("QLinearAdd", "B", b, b_scale,
                                                                             b_zero_point)
    return _requantize("QLinearAdd", value, c_scale, c_zero_point, np.asarray(a))


@kernel("QLinearMul", domain="com.microsoft", since=1, dtypes=_TYPES)
def qlinear_mul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c_scale, c_zero_point=None):
    """com.microsoft QLinearMul: the product of the dequantized inputs, requantized to C's scale and zero point."""
    value = _centred("QLinearMul", "A", a, a_scale, a_zero_point) * _centred("QLinearMul", "B", b, b_scale,
                                                                             b_zero_point)
    return _requantize("QLinearMul", value, c_scale, c_zero_point, np.asarray(a))
