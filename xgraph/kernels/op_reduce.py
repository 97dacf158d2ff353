"""Reduction ONNX ops: ReduceSum/Mean/Max/Min/Prod/L1/L2/LogSum/LogSumExp/SumSquare and ArgMax/ArgMin.

Each reduction is a (pre-op, numpy reduction, post-op) over a tuple of axes. The axes arrive as an
attribute before opset 13 (ReduceSum) or 18 (the rest) and as an optional input after. An empty
set of axes reduces everything, unless noop_with_empty_axes is set: then the reduction runs over
no axes at all, so only the elementwise parts apply (ReduceSumSquare squares, ReduceL1 takes |x|).
A reduction over zero elements gives the identity: 0 for sums, 1 for products, -inf for LogSum,
the lowest (highest) value of the type for Max (Min).
"""
from __future__ import annotations

import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.op_elementwise import BOOL, NARROW_FLOATS, NUMERIC, named, normalize_axis, widen
from xgraph.kernels.registry import builtin_kernel as kernel


def _reduction_axes(op: str, rank: int, axes, noop_with_empty_axes: int) -> tuple[int, ...]:
    """The sorted axes to reduce; () when the reduction is a no-op."""
    values = np.asarray([] if axes is None else axes).reshape(-1)
    if values.size == 0:
        return () if noop_with_empty_axes else tuple(range(rank))
    if values.dtype.kind not in "iu":
        raise KernelError(f"{op}: axes must be integers, got {values.dtype}")
    normalized = sorted(normalize_axis(op, int(a), rank) for a in values)
    if len(set(normalized)) != len(normalized):
        raise KernelError(f"{op}: axes {values.tolist()} name the same dimension twice (rank {rank})")
    return tuple(normalized)


def _accumulator(dtype: np.dtype) -> np.dtype:
    """Sums and products run in the input type, float16 and ml_dtypes floats in float32."""
    return np.dtype(np.float32) if dtype == np.float16 or dtype in NARROW_FLOATS else dtype


def _real(dtype: np.dtype) -> np.dtype:
    """Means, roots and logarithms of integers run in float64, then truncate back to the input type."""
    return np.dtype(np.float64) if dtype.kind in "iub" else _accumulator(dtype)


def _extreme(dtype: np.dtype, highest: bool):
    """The identity of Min (`highest`) or Max over `dtype`."""
    if dtype == np.bool_:
        return highest
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return info.max if highest else info.min
    return np.inf if highest else -np.inf


def _sum(x, axes, keepdims):
    return np.sum(x, axis=axes, dtype=_accumulator(x.dtype), keepdims=keepdims)


def _mean(x, axes, keepdims):
    dtype = _real(x.dtype)
    count = int(np.prod([x.shape[a] for a in axes]))
    return np.sum(x, axis=axes, dtype=dtype, keepdims=keepdims) / dtype.type(count)


def _max(x, axes, keepdims):
    x = widen(x)
    return np.max(x, axis=axes, keepdims=keepdims, initial=_extreme(x.dtype, highest=False))


def _min(x, axes, keepdims):
    x = widen(x)
    return np.min(x, axis=axes, keepdims=keepdims, initial=_extreme(x.dtype, highest=True))


def _prod(x, axes, keepdims):
    return np.prod(x, axis=axes, dtype=_accumulator(x.dtype), keepdims=keepdims)


def _l1(x, axes, keepdims):
    return np.sum(np.abs(x.astype(_accumulator(x.dtype), copy=False)), axis=axes, keepdims=keepdims)


def _sum_square(x, axes, keepdims):
    x = x.astype(_accumulator(x.dtype), copy=False)
    return np.sum(x * x, axis=axes, keepdims=keepdims)


def _l2(x, axes, keepdims):
    x = x.astype(_real(x.dtype), copy=False)
    return np.sqrt(np.sum(x * x, axis=axes, keepdims=keepdims))


def _log_sum(x, axes, keepdims):
    return np.log(np.sum(x, axis=axes, dtype=_real(x.dtype), keepdims=keepdims))


def _log_sum_exp(x, axes, keepdims):
    x = x.astype(_real(x.dtype), copy=False)
    # Subtracting the maximum keeps exp from overflowing; an infinite or empty maximum shifts by 0.
    peak = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    peak = np.where(np.isfinite(peak), peak, 0)
    result = np.log(np.sum(np.exp(x - peak), axis=axes, keepdims=True)) + peak
    return result if keepdims else np.squeeze(result, axis=axes)


@np.errstate(all="ignore")
def _reduce(op: str, reducer, data, axes, keepdims: int, noop_with_empty_axes: int) -> np.ndarray:
    data = np.asarray(data)
    axes = _reduction_axes(op, data.ndim, axes, noop_with_empty_axes)
    return np.asarray(reducer(data, axes, bool(keepdims))).astype(data.dtype, copy=False)


def _reduce_kernels(op: str, reducer, doc: str):
    """The axes-as-attribute and axes-as-input kernels of one reduction."""

    def with_attribute(data, *, axes=None, keepdims=1):
        return _reduce(op, reducer, data, axes, keepdims, 0)

    def with_input(data, axes=None, *, keepdims=1, noop_with_empty_axes=0):
        return _reduce(op, reducer, data, axes, keepdims, noop_with_empty_axes)

    named(with_attribute, op, f"ONNX {op} with axes as an attribute: {doc}.", "_axes_attribute")
    named(with_input, op, f"ONNX {op} with axes as an optional input: {doc}.")
    return with_attribute, with_input


#: (op, reducer, dtypes, opset where axes became an input, doc)
_REDUCTIONS = (
    ("ReduceSum", _sum, NUMERIC, 13, "sum"),
    ("ReduceMean", _mean, NUMERIC, 18, "arithmetic mean"),
    ("ReduceMax", _max, NUMERIC + BOOL, 18, "maximum"),
    ("ReduceMin", _min, NUMERIC + BOOL, 18, "minimum"),
    ("ReduceProd", _prod, NUMERIC, 18, "product"),
    ("ReduceL1", _l1, NUMERIC, 18, "sum of absolute values"),
    ("ReduceL2", _l2, NUMERIC, 18, "square root of the sum of squares"),
    ("ReduceSumSquare", _sum_square, NUMERIC, 18, "sum of squares"),
    ("ReduceLogSum", _log_sum, NUMERIC, 18, "natural logarithm of the sum"),
    ("ReduceLogSumExp", _log_sum_exp, NUMERIC, 18, "log of the sum of exponentials, max-shifted against overflow"),
)

for _op, _reducer, _dtypes, _input_since, _doc in _REDUCTIONS:
    _old, _new = _reduce_kernels(_op, _reducer, _doc)
    kernel(_op, since=1, dtypes=_dtypes)(_old)
    kernel(_op, since=_input_since, dtypes=_dtypes)(_new)
del _op, _reducer, _dtypes, _input_since, _doc, _old, _new


def _arg(op: str, find, data, axis: int, keepdims: int, select_last_index: int) -> np.ndarray:
    data = widen(np.asarray(data))
    if data.ndim == 0:
        raise KernelError(f"{op}: input must have rank >= 1, got a scalar")
    ax = normalize_axis(op, axis, data.ndim)
    n = data.shape[ax]
    if n == 0:
        raise KernelError(f"{op}: axis {axis} of shape {data.shape} is empty; there is no index to return")
    if select_last_index:
        index = n - 1 - find(np.flip(data, ax), axis=ax, keepdims=bool(keepdims))
    else:
        index = find(data, axis=ax, keepdims=bool(keepdims))
    return np.asarray(index, dtype=np.int64)


@kernel("ArgMax", since=12, dtypes=NUMERIC)
def arg_max(data, *, axis=0, keepdims=1, select_last_index=0):
    """ONNX ArgMax: int64 index of the maximum along `axis`, first (or last) on ties."""
    return _arg("ArgMax", np.argmax, data, axis, keepdims, select_last_index)


@kernel("ArgMax", since=1, dtypes=NUMERIC)
def arg_max_legacy(data, *, axis=0, keepdims=1):
    """ONNX ArgMax before opset 12: int64 index of the first maximum along `axis`."""
    return _arg("ArgMax", np.argmax, data, axis, keepdims, 0)


@kernel("ArgMin", since=12, dtypes=NUMERIC)
def arg_min(data, *, axis=0, keepdims=1, select_last_index=0):
    """ONNX ArgMin: int64 index of the minimum along `axis`, first (or last) on ties."""
    return _arg("ArgMin", np.argmin, data, axis, keepdims, select_last_index)


@kernel("ArgMin", since=1, dtypes=NUMERIC)
def arg_min_legacy(data, *, axis=0, keepdims=1):
    """ONNX ArgMin before opset 12: int64 index of the first minimum along `axis`."""
    return _arg("ArgMin", np.argmin, data, axis, keepdims, 0)
