"""Linear-algebra and quantization ONNX ops: MatMul, Gemm, the integer and quantized matmuls, Einsum,
CumSum, Det, Trilu, TopK and the Quantize/Dequantize family.

Float products go to BLAS through ``np.matmul`` (float16 and bfloat16 are multiplied in float32 and
rounded once at the end). Integer and quantized products are computed in float64, which is exact
for 8-bit operands at any realistic inner dimension and still runs on BLAS.
"""
from __future__ import annotations

from functools import partial

import ml_dtypes
import numpy as np
from onnx import helper

from xgraph.errors import KernelError
from xgraph.kernels.op_elementwise import (
    BOOL, FLOAT8, FLOATS, NARROW_FLOATS, NUMERIC, STRING, broadcasts_onto, normalize_axis, operands, widen,
)
from xgraph.kernels.parallel import chunks, run_parallel, split_count
from xgraph.kernels.registry import builtin_kernel as kernel
from xgraph.kernels.requantization import requantize_float32

MATMUL_TYPES = FLOATS + (np.int32, np.int64, np.uint32, np.uint64)
_FLOAT8 = frozenset(np.dtype(t) for t in FLOAT8)
_SMALL_INTS = frozenset(np.dtype(t) for t in (ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2, ml_dtypes.uint2))
#: Types QuantizeLinear can produce and DequantizeLinear can read (besides int32 for the latter).
QUANTIZED = (np.int8, np.uint8, np.int16, np.uint16, ml_dtypes.int4, ml_dtypes.uint4, ml_dtypes.int2,
             ml_dtypes.uint2, *FLOAT8, ml_dtypes.float4_e2m1fn, ml_dtypes.float6_e2m3fn, ml_dtypes.float6_e3m2fn)


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype to multiply in: float32 for float16 and ml_dtypes floats, else the type itself."""
    return np.dtype(np.float32) if dtype == np.float16 or dtype in NARROW_FLOATS else dtype


def _blas_ready(x: np.ndarray) -> np.ndarray:
    """`x` itself when BLAS can read it in place, else a C-contiguous copy."""
    return x if x.flags.c_contiguous or x.flags.f_contiguous else np.ascontiguousarray(x)


def _matmul(op: str, a: np.ndarray, b: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """np.matmul in `dtype`, with numpy's shape errors turned into a KernelError naming `op`.

    A large 2-D product is cut into blocks of rows (or of columns, for few rows) that run on
    the intra-op threads.
    """
    if a.ndim == 0 or b.ndim == 0:
        raise KernelError(f"{op}: inputs must have rank >= 1, got shapes {a.shape} and {b.shape}")
    a, b = _blas_ready(a.astype(dtype, copy=False)), _blas_ready(b.astype(dtype, copy=False))
    if a.ndim == 2 and b.ndim == 2 and a.shape[1] == b.shape[0] and dtype.kind == "f":
        parts = split_count(a.shape[0] * a.shape[1] * b.shape[1])
        if parts > 1:
            return _matmul_blocks(a, b, parts)
    try:
        return np.matmul(a, b)
    except ValueError:
        raise KernelError(f"{op}: cannot multiply shapes {a.shape} and {b.shape} "
                          f"(inner dimensions must agree, batch dimensions broadcast)") from None


def _matmul_blocks(a: np.ndarray, b: np.ndarray, parts: int) -> np.ndarray:
    m, n = a.shape[0], b.shape[1]
    out = np.empty((m, n), dtype=np.result_type(a.dtype, b.dtype))
    if m >= 8 * parts:
        blocks = [partial(np.matmul, a[lo:hi], b, out=out[lo:hi]) for lo, hi in chunks(m, parts)]
    else:
        blocks = [partial(np.matmul, a, b[:, lo:hi], out=out[:, lo:hi]) for lo, hi in chunks(n, parts)]
    run_parallel(blocks)
    return out


def _scalar_int(op: str, name: str, value) -> int:
    """The single integer held by a 0-D or one-element input."""
    value = np.asarray(value)
    if value.size != 1 or value.dtype.kind not in "iu":
        raise KernelError(f"{op}: input {name!r} must hold one integer, got {value.dtype} of shape {value.shape}")
    return int(value.reshape(-1)[0])


@kernel("MatMul", since=1, dtypes=MATMUL_TYPES)
def matmul(a, b):
    """ONNX MatMul: numpy.matmul semantics (batch dimensions broadcast, 1-D operands promoted then dropped)."""
    a, b = operands("MatMul", a, b)
    return np.asarray(_matmul("MatMul", a, b, _compute_dtype(a.dtype))).astype(a.dtype, copy=False)


def _scaled(y: np.ndarray, factor: float) -> np.ndarray:
    if factor == 1:
        return y
    if y.dtype.kind == "f":
        return y * y.dtype.type(factor)
    return (y * factor).astype(y.dtype)


@kernel("Gemm", since=7, dtypes=MATMUL_TYPES)
def gemm(a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):
    """ONNX Gemm: alpha * A' @ B' + beta * C, with C broadcast to the (M, N) result."""
    a, b, *rest = operands("Gemm", a, b, *(() if c is None else (c,)))
    if a.ndim != 2 or b.ndim != 2:
        raise KernelError(f"Gemm: A and B must be 2-D, got shapes {a.shape} and {b.shape}")
    a = a.T if transA else a
    b = b.T if transB else b
    if a.shape[1] != b.shape[0]:
        raise KernelError(f"Gemm: inner dimensions differ: A' is {a.shape}, B' is {b.shape} "
                          f"(transA={transA}, transB={transB})")
    y = _scaled(_matmul("Gemm", a, b, _compute_dtype(a.dtype)), alpha)
    if rest:
        c = rest[0]
        if not broadcasts_onto(c.shape, y.shape):
            raise KernelError(f"Gemm: C of shape {c.shape} does not broadcast to the result shape {y.shape}")
        y = y + _scaled(c.astype(y.dtype, copy=False), beta)
    return y.astype(a.dtype, copy=False)


@kernel("Gemm", since=1, dtypes=MATMUL_TYPES)
def gemm_legacy(a, b, c, *, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):
    """ONNX Gemm before opset 7: C must already be (M, N) unless broadcast=1."""
    result = gemm(a, b, c, alpha=alpha, beta=beta, transA=transA, transB=transB)
    if not broadcast and np.shape(c) != result.shape:
        raise KernelError(f"Gemm: broadcast=0 (opset < 7) needs C of shape {result.shape}, got {np.shape(c)}")
    return result


def _per_row(value: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """A zero point or scale of a left operand: a 1-D vector of M entries applies per row."""
    value = np.asarray(value)
    if value.ndim == 1 and value.size > 1 and matrix.ndim >= 2:
        return value.reshape(-1, 1)
    return value.reshape(()) if value.size == 1 else value


def _centred_product(op: str, a, a_zero_point, b, b_zero_point) -> np.ndarray:
    """(A - a_zero_point) @ (B - b_zero_point), exact, as float64."""
    a, b = np.asarray(a), np.asarray(b)
    left = widen(a).astype(np.float64)
    right = widen(b).astype(np.float64)
    for name, operand, zero_point in (("a", a, a_zero_point), ("b", b, b_zero_point)):
        dtype = None if zero_point is None else np.asarray(zero_point).dtype
        if dtype is not None and dtype != operand.dtype:
            raise KernelError(f"{op}: {name}_zero_point is {dtype} but {name} is {operand.dtype}")
    if a_zero_point is not None:
        left = left - widen(_per_row(a_zero_point, a)).astype(np.float64)
    if b_zero_point is not None:
        right = right - widen(np.asarray(b_zero_point)).astype(np.float64)
    return _matmul(op, left, right, np.dtype(np.float64))


@kernel("MatMulInteger", since=10, dtypes=(np.int8, np.uint8))
def matmul_integer(a, b, a_zero_point=None, b_zero_point=None):
    """ONNX MatMulInteger: (A - a_zero_point) @ (B - b_zero_point) as int32 (per-row / per-column zero points)."""
    return _centred_product("MatMulInteger", a, a_zero_point, b, b_zero_point).astype(np.int32)


@np.errstate(invalid="ignore")
def _saturate(values: np.ndarray, zero_point, dtype: np.dtype, saturate: bool = True) -> np.ndarray:
    """Round `values` (already divided by the scale), add the zero point and clamp into `dtype`."""
    if dtype.kind in "iu" or dtype in _SMALL_INTS:
        info = ml_dtypes.iinfo(dtype)
        if values.dtype == np.float32 and info.bits <= 16:
            # The same result in float32, without float64 temporaries: rint is exact, and a zero
            # point of at most 16 bits added to an integer-valued float32 is exact below 2**24
            # (beyond, the value saturates either way).
            q = np.asarray(np.rint(values))
            if zero_point is not None:
                q = np.add(q, zero_point.astype(np.float32), out=q if q.shape == np.broadcast_shapes(
                    q.shape, np.shape(zero_point)) else None)
            np.clip(q, info.min, info.max, out=q)
            return q.astype(dtype)
        q = np.rint(values.astype(np.float64, copy=False))
        if zero_point is not None:
            q = q + zero_point.astype(np.float64)
        return np.asarray(np.clip(q, info.min, info.max)).astype(dtype)
    q = values.astype(np.float32, copy=False)
    if zero_point is not None:
        q = q + zero_point.astype(np.float32)
    if saturate or dtype not in _FLOAT8:  # float4/float6 have no inf or NaN: they always saturate
        info = ml_dtypes.finfo(dtype)
        q = np.clip(q, float(info.min), float(info.max))  # NaN stays NaN
    return np.asarray(q).astype(dtype)


@kernel("QLinearMatMul", since=10, dtypes=(np.int8, np.uint8) + FLOAT8)
def qlinear_matmul(a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point):
    """ONNX QLinearMatMul: the exact product of the centred inputs, requantized to y's scale and zero point."""
    product = _centred_product("QLinearMatMul", a, a_zero_point, b, b_zero_point)
    # The combined scale is formed in the scales' own type, as the ONNX reference does.
    multiplier = _per_row(a_scale, np.asarray(a)) * np.asarray(b_scale) / np.asarray(y_scale)
    y_zero_point = np.asarray(y_zero_point)
    if multiplier.dtype == np.float32 and y_zero_point.dtype in (np.dtype(np.int8), np.dtype(np.uint8)):
        # float32 scales to 8-bit integers: the product and rounding in float32 as onnxruntime's kernel
        return requantize_float32(product, multiplier, int(y_zero_point.reshape(())), y_zero_point.dtype)
    return _saturate(product * widen(np.asarray(multiplier)).astype(np.float64), y_zero_point, y_zero_point.dtype)


@kernel("Einsum", since=12, dtypes=NUMERIC)
def einsum(*inputs, equation):
    """ONNX Einsum: numpy.einsum, with the contraction order optimised so pairwise products use BLAS."""
    arrays = operands("Einsum", *inputs)
    dtype = arrays[0].dtype if arrays else np.dtype(np.float32)
    compute = _compute_dtype(dtype)
    try:
        result = np.einsum(equation.replace(" ", ""), *(a.astype(compute, copy=False) for a in arrays),
                           optimize=len(arrays) > 1)
    except ValueError as e:
        raise KernelError(f"Einsum: equation {equation!r} does not fit inputs of shapes "
                          f"{[a.shape for a in arrays]}: {e}") from None
    result = np.asarray(result)
    if any(np.may_share_memory(result, a) for a in arrays):  # transposes and diagonals come back as views
        result = result.copy()
    return result.astype(dtype, copy=False)


@kernel("CumSum", since=11, dtypes=MATMUL_TYPES)
def cumsum(x, axis, *, exclusive=0, reverse=0):
    """ONNX CumSum along `axis`; exclusive drops the current element, reverse sums from the end."""
    x = np.asarray(x)
    ax = normalize_axis("CumSum", _scalar_int("CumSum", "axis", axis), x.ndim)
    data = np.flip(x, ax) if reverse else x
    total = np.cumsum(data, axis=ax, dtype=_compute_dtype(x.dtype))
    if exclusive:
        shifted = np.zeros_like(total)
        dst, src = [slice(None)] * x.ndim, [slice(None)] * x.ndim
        dst[ax], src[ax] = slice(1, None), slice(None, -1)
        shifted[tuple(dst)] = total[tuple(src)]
        total = shifted
    if reverse:
        total = np.flip(total, ax)
    return np.ascontiguousarray(total.astype(x.dtype, copy=False))


@kernel("Det", since=11, dtypes=FLOATS)
def det(x):
    """ONNX Det: determinants of the square matrices in the last two dimensions."""
    x = np.asarray(x)
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise KernelError(f"Det: input must be [..., M, M], got shape {x.shape}")
    compute = np.float64 if x.dtype == np.float64 else np.float32
    return np.asarray(np.linalg.det(x.astype(compute, copy=False))).astype(x.dtype)


@kernel("Trilu", since=14, dtypes=NUMERIC + BOOL + STRING + (np.complex64, np.complex128))
def trilu(x, k=None, *, upper=1):
    """ONNX Trilu: keep the upper (or lower) triangle from diagonal k of the last two dimensions, zero the rest."""
    x = np.asarray(x)
    if x.ndim < 2:
        raise KernelError(f"Trilu: input must have rank >= 2, got shape {x.shape}")
    diagonal = 0 if k is None else _scalar_int("Trilu", "k", k)
    offset = np.arange(x.shape[-1])[None, :] - np.arange(x.shape[-2])[:, None]
    keep = offset >= diagonal if upper else offset <= diagonal
    zero = np.array("" if x.dtype == object else 0, dtype=x.dtype)
    return np.where(keep, x, zero)


def _top_k(x, k: int, axis: int, largest: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.asarray(x)
    if x.ndim == 0:
        raise KernelError("TopK: input must have rank >= 1, got a scalar")
    ax = normalize_axis("TopK", axis, x.ndim)
    n = x.shape[ax]
    if not 0 <= k <= n:
        raise KernelError(f"TopK: k={k} is outside [0, {n}] for axis {axis} of shape {x.shape}")
    keys = widen(x)
    if largest:
        # Reversing a stable ascending sort of the reversed data gives descending values with ties
        # in ascending index order, which is the ONNX tie-break.
        order = n - 1 - np.flip(np.argsort(np.flip(keys, ax), axis=ax, kind="stable"), ax)
    else:
        order = np.argsort(keys, axis=ax, kind="stable")
    first = [slice(None)] * x.ndim
    first[ax] = slice(0, k)
    indices = np.ascontiguousarray(order[tuple(first)]).astype(np.int64, copy=False)
    return np.take_along_axis(x, indices, axis=ax), indices


@kernel("TopK", since=10, dtypes=NUMERIC)
def top_k(x, k, *, axis=-1, largest=1, sorted=1):
    """ONNX TopK (K as an input): the k largest (or smallest) along `axis`, sorted, lower index first on ties."""
    return _top_k(x, _scalar_int("TopK", "K", k), axis, largest)


@kernel("TopK", since=1, dtypes=NUMERIC)
def top_k_legacy(x, *, k, axis=-1):
    """ONNX TopK-1 (k as an attribute): the k largest along `axis`, lower index first on ties."""
    return _top_k(x, int(k), axis, largest=1)


def _expand(op: str, name: str, value: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int) -> np.ndarray:
    """A scale or zero point broadcastable to `shape`: per tensor, per `axis`, or per block along `axis`."""
    if value.size == 1 and (value.ndim <= 1 or not block_size):
        return value.reshape(())
    ax = normalize_axis(op, axis, len(shape))
    if not block_size:
        if value.ndim != 1 or value.shape[0] != shape[ax]:
            raise KernelError(f"{op}: per-axis {name} must be 1-D of length {shape[ax]} (axis {axis} of {shape}), "
                              f"got shape {value.shape}")
        return value.reshape([-1 if i == ax else 1 for i in range(len(shape))])
    blocks = -(-shape[ax] // block_size)
    expected = tuple(blocks if i == ax else d for i, d in enumerate(shape))
    if block_size < 0 or value.shape != expected:
        raise KernelError(f"{op}: blocked {name} for input {shape}, axis {axis}, block_size {block_size} "
                          f"must have shape {expected}, got {value.shape}")
    return np.repeat(value, block_size, axis=ax).take(np.arange(shape[ax]), axis=ax)


def _onnx_dtype(op: str, code: int) -> np.dtype:
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(code))
    except (KeyError, ValueError, TypeError):
        raise KernelError(f"{op}: unknown ONNX element type {code}") from None


@kernel("QuantizeLinear", since=10, dtypes=(np.float32, np.float16, ml_dtypes.bfloat16, np.int32))
@np.errstate(divide="ignore", invalid="ignore")
def quantize_linear(x, y_scale, y_zero_point=None, *, axis=1, saturate=1, block_size=0, output_dtype=0,
                    precision=0):
    """ONNX QuantizeLinear: saturate(round_half_even(x / y_scale) + y_zero_point), per tensor, axis or block."""
    x, scale = np.asarray(x), np.asarray(y_scale)
    dtype = _onnx_dtype("QuantizeLinear", output_dtype) if output_dtype else None
    if y_zero_point is not None:
        y_zero_point = np.asarray(y_zero_point)
        if dtype is not None and dtype != y_zero_point.dtype:
            raise KernelError(f"QuantizeLinear: output_dtype {dtype} differs from y_zero_point's {y_zero_point.dtype}")
        dtype = y_zero_point.dtype
    dtype = np.dtype(np.uint8) if dtype is None else dtype
    if dtype not in {np.dtype(t) for t in QUANTIZED}:
        raise KernelError(f"QuantizeLinear: cannot quantize to {dtype}; supported: "
                          f"{', '.join(np.dtype(t).name for t in QUANTIZED)}")
    scale = _expand("QuantizeLinear", "y_scale", scale, x.shape, axis, block_size)
    if precision:
        compute = _onnx_dtype("QuantizeLinear", precision)
        ratio = widen(np.asarray(x.astype(compute) / scale.astype(compute)))
    else:
        ratio = widen(x) / widen(scale)
    zero_point = None if y_zero_point is None else _expand(
        "QuantizeLinear", "y_zero_point", y_zero_point, x.shape, axis, block_size)
    return _saturate(np.asarray(ratio), None if zero_point is None else widen(zero_point), dtype, bool(saturate))


@kernel("DequantizeLinear", since=10, dtypes=QUANTIZED + (np.int32,))
def dequantize_linear(x, x_scale, x_zero_point=None, *, axis=1, block_size=0, output_dtype=0):
    """ONNX DequantizeLinear: (x - x_zero_point) * x_scale, per tensor, axis or block."""
    x, scale = np.asarray(x), np.asarray(x_scale)
    dtype = _onnx_dtype("DequantizeLinear", output_dtype) if output_dtype else scale.dtype
    compute = np.float64 if x.dtype == np.int32 else np.float32
    values = np.asarray(widen(x).astype(compute))  # a new array: the steps below work in place in it
    if x_zero_point is not None:
        x_zero_point = np.asarray(x_zero_point)
        if x_zero_point.dtype != x.dtype:
            raise KernelError(f"DequantizeLinear: x_zero_point is {x_zero_point.dtype} but x is {x.dtype}")
        zero_point = _expand("DequantizeLinear", "x_zero_point", x_zero_point, x.shape, axis, block_size)
        values = _in_place(np.subtract, values, widen(zero_point).astype(compute))
    scale = _expand("DequantizeLinear", "x_scale", scale, x.shape, axis, block_size)
    return _in_place(np.multiply, values, widen(scale).astype(compute)).astype(dtype, copy=False)


def _in_place(ufunc, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """ufunc(a, b), written into `a` when the result has a's shape (no temporary)."""
    return ufunc(a, b, out=a if np.broadcast_shapes(a.shape, np.shape(b)) == a.shape else None)


@kernel("DynamicQuantizeLinear", since=11, dtypes=(np.float32,))
def dynamic_quantize_linear(x):
    """ONNX DynamicQuantizeLinear: uint8 quantization over the data's range widened to include 0."""
    x = np.asarray(x, dtype=np.float32)
    high = max(np.float32(0), x.max()) if x.size else np.float32(0)
    low = min(np.float32(0), x.min()) if x.size else np.float32(0)
    # An all-zero input has no range; scale 1 (as onnxruntime) keeps every output at the zero point.
    scale = np.float32(1) if high == low else np.float32((high - low) / np.float32(255))
    zero_point = np.rint(np.clip(-low / scale, 0, 255))
    y = np.clip(np.rint(x / scale) + zero_point, 0, 255).astype(np.uint8)
    return y, np.array(scale, dtype=np.float32), np.array(zero_point, dtype=np.uint8)
