"""Sliding-window geometry shared by the convolution, pooling and image kernels, and their dtype lists.

`window_geometry` turns auto_pad/pads/strides/dilations/ceil_mode into pads and output extent;
`pad_spatial` pads the spatial axes; `windows` is a read-only strided view of every window.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from xgraph.errors import KernelError

try:  # ml_dtypes ships with onnx; without it bfloat16 tensors cannot exist anyway
    from ml_dtypes import bfloat16 as _bfloat16

    _BFLOAT16: tuple = (np.dtype(_bfloat16),)
except ImportError:  # pragma: no cover
    _BFLOAT16 = ()

FLOAT_TYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64), *_BFLOAT16)
INT8_TYPES = (np.dtype(np.uint8), np.dtype(np.int8))


def per_axis_ints(op: str, name: str, value, rank: int, default: int) -> list[int]:
    """An attribute list of length `rank` (the ONNX default when absent), validated."""
    if value is None or len(value) == 0:
        return [default] * rank
    out = [int(v) for v in value]
    if len(out) != rank:
        raise KernelError(f"{op}: attribute {name}={out} has {len(out)} values, expected {rank} "
                          f"(one per spatial axis)")
    return out


def window_geometry(op: str, spatial: Sequence[int], kernel_shape: Sequence[int], *,
                    strides=None, dilations=None, pads=None, auto_pad: str = "NOTSET",
                    ceil_mode: int = 0) -> tuple[list[int], list[int], list[int], list[int], list[int]]:
    """(strides, dilations, pads_begin, pads_end, output extent) of a sliding window, per ONNX Conv/Pool.

    SAME_* pads so that output = ceil(input / stride), the odd pad going to the end (UPPER) or the
    beginning (LOWER); ceil_mode keeps a last partial window only if it starts inside the input or
    its leading pad. Extra room a ceil_mode window needs beyond the explicit pads is *not* added here.
    """
    rank = len(spatial)
    kernel_shape = [int(k) for k in kernel_shape]
    strides = per_axis_ints(op, "strides", strides, rank, 1)
    dilations = per_axis_ints(op, "dilations", dilations, rank, 1)
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations) or any(k < 1 for k in kernel_shape):
        raise KernelError(f"{op}: strides {strides}, dilations {dilations} and kernel_shape "
                          f"{kernel_shape} must all be positive")
    extent = [(k - 1) * d + 1 for k, d in zip(kernel_shape, dilations)]
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-n // s) for n, s in zip(spatial, strides)]
        total = [max(0, (o - 1) * s + e - n) for o, s, e, n in zip(out, strides, extent, spatial)]
        small = [t // 2 for t in total]
        if auto_pad == "SAME_UPPER":
            begin, end = small, [t - h for t, h in zip(total, small)]
        else:
            begin, end = [t - h for t, h in zip(total, small)], small
    elif auto_pad == "VALID":
        begin, end = [0] * rank, [0] * rank
    elif auto_pad in ("NOTSET", ""):
        p = per_axis_ints(op, "pads", pads, 2 * rank, 0)
        begin, end = p[:rank], p[rank:]
    else:
        raise KernelError(f"{op}: auto_pad={auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    out = []
    for n, b, e, x, s in zip(spatial, begin, end, extent, strides):
        span = n + b + e - x
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= n + b:
            o -= 1  # the last window would start in the trailing pad
        out.append(o)
    if any(o < 1 for o in out):
        raise KernelError(f"{op}: input spatial shape {list(spatial)} with pads {begin + end} is smaller "
                          f"than the window {extent} (kernel {kernel_shape}, dilations {dilations})")
    return strides, dilations, begin, end, out


def pad_spatial(x: np.ndarray, begin: Sequence[int], end: Sequence[int], value=0) -> np.ndarray:
    """`x` with its trailing spatial axes padded by `value` (no copy when nothing is padded).

    Negative amounts crop, which is how a window that never reaches an edge is expressed.
    """
    if not any(begin) and not any(end):
        return x
    rank = len(begin)
    lead = x.ndim - rank
    crop = tuple([slice(None)] * lead + [slice(max(-b, 0), n - max(-e, 0))
                                         for b, e, n in zip(begin, end, x.shape[lead:])])
    x = x[crop]
    begin = [max(b, 0) for b in begin]
    end = [max(e, 0) for e in end]
    if not any(begin) and not any(end):
        return x
    shape = x.shape[:lead] + tuple(n + b + e for n, b, e in zip(x.shape[lead:], begin, end))
    out = np.empty(shape, dtype=x.dtype)
    inner = tuple([slice(None)] * lead + [slice(b, b + n) for b, n in zip(begin, x.shape[lead:])])
    out[inner] = x
    for axis in range(rank):  # fill only the borders: cheaper than np.full + copy
        idx = [slice(None)] * x.ndim
        if begin[axis]:
            idx[lead + axis] = slice(0, begin[axis])
            out[tuple(idx)] = value
        if end[axis]:
            idx[lead + axis] = slice(shape[lead + axis] - end[axis], None)
            out[tuple(idx)] = value
    return out


def windows(xp: np.ndarray, kernel_shape: Sequence[int], strides: Sequence[int],
            dilations: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """Read-only (N, C, *kernel, *out) view of padded `xp`: element [.., k.., o..] is xp[.., o*s + k*d]."""
    lead = xp.ndim - len(kernel_shape)
    st = xp.strides[lead:]
    shape = xp.shape[:lead] + tuple(kernel_shape) + tuple(out)
    step = xp.strides[:lead] + tuple(s * d for s, d in zip(st, dilations)) + tuple(s * t for s, t in zip(st, strides))
    return as_strided(xp, shape, step, writeable=False)


def compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype arithmetic happens in: float32 for 16-bit floats, the dtype itself otherwise."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.itemsize < 4 or dtype == np.float16 else dtype
