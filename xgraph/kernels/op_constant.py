"""Constant makers: Constant, ConstantOfShape, EyeLike and Range."""
from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from xgraph.kernels.op_cast import numpy_dtype
from xgraph.kernels.op_shape import dims_of, kernel_error, readonly
from xgraph.kernels.registry import builtin_kernel as kernel


def _dense(sparse: onnx.SparseTensorProto) -> np.ndarray:
    values = numpy_helper.to_array(sparse.values)
    indices = numpy_helper.to_array(sparse.indices)
    out = np.zeros(tuple(sparse.dims), dtype=values.dtype)
    if indices.ndim == 1:
        out.reshape(-1)[indices] = values
    else:
        out[tuple(indices.T)] = values
    return out


_LITERALS = {"value_float": np.float32, "value_floats": np.float32, "value_int": np.int64,
             "value_ints": np.int64, "value_string": object, "value_strings": object}


@kernel("Constant", since=1)
def constant(*, value=None, sparse_value=None, value_float=None, value_floats=None, value_int=None,
             value_ints=None, value_string=None, value_strings=None) -> np.ndarray:
    """ONNX Constant: exactly one of value, sparse_value, value_float(s), value_int(s), value_string(s)."""
    attributes = dict(locals())  # exactly the keyword arguments above
    given = {k: v for k, v in attributes.items() if v is not None}
    if len(given) != 1:
        raise kernel_error("Constant", f"needs exactly one value attribute, got {sorted(given) or 'none'}")
    (name, v), = given.items()
    if name == "value":
        return readonly(np.asarray(v).view())
    if name == "sparse_value":
        return _dense(v)
    return np.array(list(v) if isinstance(v, (list, tuple)) else v, dtype=_LITERALS[name])


@kernel("ConstantOfShape", since=9)
def constant_of_shape(shape: np.ndarray, *, value=None) -> np.ndarray:
    """ONNX ConstantOfShape: fill with the one-element `value` tensor (float32 zero by default)."""
    dims = dims_of(shape, "ConstantOfShape")
    if value is None:
        return np.zeros(dims, dtype=np.float32)
    v = np.asarray(value)
    if v.size != 1:
        raise kernel_error("ConstantOfShape", f"value must hold one element, got shape {v.shape}")
    return np.full(dims, v.reshape(()), dtype=v.dtype)


@kernel("EyeLike", since=9)
def eye_like(x: np.ndarray, *, dtype: int | None = None, k: int = 0) -> np.ndarray:
    """ONNX EyeLike: ones on diagonal k of a matrix shaped like x (x's dtype unless `dtype`)."""
    if x.ndim != 2:
        raise kernel_error("EyeLike", f"input must be 2-D, got shape {x.shape}")
    out_dtype = x.dtype if dtype is None else numpy_dtype(dtype, "EyeLike")
    return np.eye(x.shape[0], x.shape[1], k=k, dtype=out_dtype)


def _range(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, compute) -> np.ndarray:
    dtype = np.asarray(start).dtype
    if dtype.kind in "iu":
        s, stop, d = (int(np.asarray(v).item()) for v in (start, limit, delta))  # 1-element 1-D too, as floats
        if d == 0:
            raise kernel_error("Range", "delta is 0")
        n = max(0, -((s - stop) // d))
        return (s + np.arange(n, dtype=np.int64) * d).astype(dtype)
    s, stop, d = (np.asarray(v).astype(compute).item() for v in (start, limit, delta))
    count = (stop - s) / d if d else math.nan
    if not math.isfinite(count):
        raise kernel_error("Range", f"start {s}, limit {stop}, delta {d} do not give a finite length")
    n = max(0, math.ceil(count))
    return (compute(s) + np.arange(n, dtype=compute) * compute(d)).astype(dtype)


@kernel("Range", since=11)
def range_(start: np.ndarray, limit: np.ndarray, delta: np.ndarray) -> np.ndarray:
    """ONNX Range-11: start + i * delta for i < ceil((limit - start) / delta); floats via float64."""
    return _range(start, limit, delta, np.float64)


_STASH = {TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64}


@kernel("Range", since=27)
def range_27(start: np.ndarray, limit: np.ndarray, delta: np.ndarray, *, stash_type: int = 1) -> np.ndarray:
    """ONNX Range-27: float16/bfloat16 computed in the `stash_type` precision."""
    if stash_type not in _STASH:
        raise kernel_error("Range", f"stash_type {stash_type} is not FLOAT (1) or DOUBLE (11)")
    low_precision = np.asarray(start).dtype.itemsize == 2 and np.asarray(start).dtype.kind not in "iu"
    return _range(start, limit, delta, _STASH[stash_type] if low_precision else np.float64)
