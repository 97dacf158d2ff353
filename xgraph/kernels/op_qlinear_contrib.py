"""onnxruntime's quantized contrib ops (com.microsoft), as its quantizer writes QOperator models.

    QLinearAdd:  C = saturate(round((A_scale (A - A_zp) + B_scale (B - B_zp)) / C_scale) + C_zp)
    QLinearMul:  C = saturate(round(A_scale B_scale (A - A_zp)(B - B_zp) / C_scale) + C_zp)
    QLinearGlobalAveragePool:  Y = saturate(round(x_scale mean(X - x_zp) / y_scale) + y_zp), per (n, c)
    QGemm:  acc = (A' - a_zp)(B' - b_zp) + C (int32, scale a_scale b_scale), exact;
            Y = alpha a_scale b_scale acc, quantized to y_scale / y_zp when given, else float32

(A', B' transposed by transA/transB; b_scale/b_zp per tensor or per column.) Rounding is half to
even (as QuantizeLinear), computed in float64; onnxruntime forms the same products in float32,
so a value within float32 rounding of a half step may land one step away.
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


@kernel("QLinearGlobalAveragePool", domain="com.microsoft", since=1, dtypes=_TYPES)
def qlinear_global_average_pool(x, x_scale, x_zero_point, y_scale, y_zero_point=None, *, channels_last=0):
    """com.microsoft QLinearGlobalAveragePool: the mean of the dequantized input over the spatial axes."""
    op = "QLinearGlobalAveragePool"
    x = np.asarray(x)
    if x.ndim < 3:
        raise KernelError(f"{op}: X must be (N, C, spatial...) or channels last, got shape {x.shape}")
    axes = tuple(range(1, x.ndim - 1)) if channels_last else tuple(range(2, x.ndim))
    mean = _centred(op, "x", x, x_scale, x_zero_point).mean(axis=axes, keepdims=True)
    return _requantize(op, mean, y_scale, y_zero_point, x)


def _per_column(op: str, name: str, value, n: int) -> np.ndarray:
    value = np.asarray(value)
    if value.size not in (1, n):
        raise KernelError(f"{op}: {name} must be a scalar or one value per output column ({n}), got {value.shape}")
    return value.reshape(-1).astype(np.float64) if value.size == n else value.reshape(()).astype(np.float64)


@kernel("QGemm", domain="com.microsoft", since=1, dtypes=_TYPES)
def qgemm(a, a_scale, a_zero_point, b, b_scale, b_zero_point, c=None, y_scale=None, y_zero_point=None, *,
          alpha=1.0, transA=0, transB=0):
    """com.microsoft QGemm: exact integer product plus the int32 bias, then scaled (and requantized)."""
    op = "QGemm"
    a, b = np.asarray(a), np.asarray(b)
    if a.ndim != 2 or b.ndim != 2:
        raise KernelError(f"{op}: A and B must be 2-D, got shapes {a.shape} and {b.shape}")
    left = a.T if transA else a
    right = b.T if transB else b
    if left.shape[1] != right.shape[0]:
        raise KernelError(f"{op}: inner dimensions differ: A' is {left.shape}, B' is {right.shape}")
    n = right.shape[1]
    a_zp = 0.0 if a_zero_point is None else float(np.asarray(a_zero_point).reshape(()))
    b_zp = 0.0 if b_zero_point is None else _per_column(op, "b_zero_point", b_zero_point, n)
    acc = np.rint((left.astype(np.float64) - a_zp) @ (right.astype(np.float64) - b_zp))  # exact below 2**53
    if c is not None:
        acc = acc + np.asarray(c).astype(np.float64)
    scale = float(alpha) * float(np.asarray(a_scale).reshape(())) * _per_column(op, "b_scale", b_scale, n)
    value = acc * scale
    if y_scale is None:
        return value.astype(np.float32)
    return _requantize(op, value, y_scale, y_zero_point, a)
