"""Casting kernels: Cast and CastLike, strings and float8 (saturating, with the rounding modes) included."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from xgraph.kernels.op_shape import kernel_error, readonly
from xgraph.kernels.registry import builtin_kernel as kernel


_FLOAT8 = {TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2, TensorProto.FLOAT8E5M2FNUZ}
_SPECIAL_STRINGS = {np.inf: "INF", -np.inf: "-INF"}


def _type_code(to, op: str) -> int:
    if isinstance(to, str):
        try:
            return TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise kernel_error(op, f"'to' {to!r} is not an ONNX data type name") from None
    return int(to)


def numpy_dtype(code: int, op: str) -> np.dtype:
    """The numpy dtype of ONNX data type `code`; a KernelError naming `op` when numpy has none."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(code))
    except (KeyError, ValueError, TypeError):
        raise kernel_error(op, f"data type {code} has no numpy equivalent") from None


def _is_string(x: np.ndarray) -> bool:
    return x.dtype == object or x.dtype.kind in "US"


def _to_strings(x: np.ndarray) -> np.ndarray:
    """Numbers as plain decimal strings; infinities and NaN as the spec's INF, -INF, NaN."""
    if _is_string(x):
        return x.astype(object)
    if x.dtype.kind not in "biuf":  # bfloat16, float8, int4, ...
        x = x.astype(np.float32)
    out = x.astype(np.str_).astype(object)
    if x.dtype.kind == "f":
        out[np.isnan(x)] = "NaN"
        for value, text in _SPECIAL_STRINGS.items():
            out[x == value] = text
    return out


def _parse(text, target: np.dtype, op: str):
    """One ONNX string as a Python number for `target` ("100.5" truncates for integer targets)."""
    s = text.decode("utf-8") if isinstance(text, bytes) else str(text)
    if target.kind == "b" and s.strip().lower() in ("true", "false"):
        return s.strip().lower() == "true"
    try:
        if target.kind in "iu":
            try:
                return int(s)
            except ValueError:
                return int(float(s))
        return float(s)
    except (ValueError, OverflowError):
        raise kernel_error(op, f"string {s!r} is not a number of type {target}") from None


def _cast(x: np.ndarray, to, saturate: int, round_mode: str, op: str = "Cast") -> np.ndarray:
    code = _type_code(to, op)
    if code == TensorProto.STRING:
        return _to_strings(x)
    dtype = numpy_dtype(code, op)
    if _is_string(x):
        parsed = [_parse(s, dtype, op) for s in x.reshape(-1).tolist()]
        x = np.array(parsed, dtype=np.int64 if dtype.kind in "iu" else np.float64).reshape(x.shape)
    elif x.dtype == dtype:
        return readonly(x.view())
    with np.errstate(over="ignore", invalid="ignore"):
        if code == TensorProto.FLOAT8E8M0:
            if round_mode not in ("up", "down", "nearest"):
                raise kernel_error(op, f"round_mode {round_mode!r} is not one of up, down, nearest")
            return numpy_helper.to_float8e8m0(x, bool(saturate), round_mode).astype(dtype)
        if saturate and code in _FLOAT8:
            import ml_dtypes  # onnx's own dependency for its float8 types

            info = ml_dtypes.finfo(dtype)
            wide = x.astype(np.float32) if x.dtype.kind not in "iuf" else x
            return np.clip(wide, float(info.min), float(info.max)).astype(dtype)
        return x.astype(dtype)


@kernel("Cast", since=1)
def cast_1(x: np.ndarray, *, to=None) -> np.ndarray:
    """ONNX Cast-1: `to` as a type name ("FLOAT") or code."""
    if to is None:
        raise kernel_error("Cast", "attribute 'to' is required")
    return _cast(x, to, 1, "up")


@kernel("Cast", since=6)
def cast(x: np.ndarray, *, to: int | None = None, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """ONNX Cast-6/19/24: numeric and string casts; float8 saturates unless saturate=0."""
    if to is None:
        raise kernel_error("Cast", "attribute 'to' is required")
    return _cast(x, to, saturate, round_mode)


@kernel("CastLike", since=15)
def cast_like(x: np.ndarray, target_type: np.ndarray, *, saturate: int = 1, round_mode: str = "up") -> np.ndarray:
    """ONNX CastLike: Cast to the element type of `target_type`."""
    code = TensorProto.STRING if _is_string(target_type) else onnx.helper.np_dtype_to_tensor_dtype(target_type.dtype)
    return _cast(x, code, saturate, round_mode, "CastLike")
