"""Elementwise ONNX ops: broadcasting arithmetic, bitwise, comparison and logic ops, unary math,
variadic Max/Min/Sum/Mean and Where.

Results keep the input dtype exactly (ONNX types are not numpy's promotion rules): both operands
of a binary op must share one dtype, and Python scalars passed by a caller take the dtype of the
array operand. Types numpy lacks natively (bfloat16, float8, ...) come from ml_dtypes, as in
``onnx.numpy_helper``; their transcendental functions are evaluated in float32.

The dtype groups and the small input helpers at the top (`operands`, `broadcast_shape`,
`normalize_axis`, `widen`, `named`) are shared with the other math families (op_math, op_reduce).
"""
from __future__ import annotations

import functools
import math
import re

import ml_dtypes
import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.registry import builtin_kernel as kernel

FLOATS = (np.float16, np.float32, np.float64, ml_dtypes.bfloat16)
SIGNED = (np.int8, np.int16, np.int32, np.int64)
UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)
INTEGERS = SIGNED + UNSIGNED
NUMERIC = FLOATS + INTEGERS
BOOL = (np.bool_,)
STRING = (np.object_,)
FLOAT8 = (ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e4m3fnuz, ml_dtypes.float8_e5m2, ml_dtypes.float8_e5m2fnuz)
#: Float types numpy has no native arithmetic for; math on them runs in float32.
NARROW_FLOATS = frozenset(np.dtype(t) for t in (
    ml_dtypes.bfloat16, *FLOAT8, ml_dtypes.float4_e2m1fn, ml_dtypes.float6_e2m3fn,
    ml_dtypes.float6_e3m2fn, ml_dtypes.float8_e8m0fnu))


def is_float(dtype) -> bool:
    """True for numpy and ml_dtypes floating-point dtypes."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype in NARROW_FLOATS


def widen(x: np.ndarray) -> np.ndarray:
    """`x` as float32 when its dtype is an ml_dtypes float, else unchanged."""
    return x.astype(np.float32) if x.dtype in NARROW_FLOATS else x


def named(fn, op: str, doc: str, suffix: str = ""):
    """`fn` renamed after `op` (snake_case plus `suffix`) with `doc`, so generated kernels read like written ones."""
    fn.__name__ = fn.__qualname__ = re.sub(r"(?<!^)(?=[A-Z])", "_", op).lower() + suffix
    fn.__doc__ = doc
    return fn


def _as_type(op: str, value, dtype: np.dtype | None) -> np.ndarray:
    """A Python value as an array of `dtype`, refusing values the type cannot hold."""
    plain = np.asarray(value)
    if dtype is None or plain.dtype == dtype:
        return plain
    try:
        typed = np.asarray(value, dtype=dtype)
        exact = dtype == object or is_float(dtype) or bool(np.all(typed == plain))
    except (OverflowError, ValueError, TypeError):
        exact = False
    if not exact:
        raise KernelError(f"{op}: the value {value!r} cannot be represented as {dtype}")
    return typed


def operands(op: str, *values) -> list[np.ndarray]:
    """The inputs as arrays of one dtype; Python scalars take the dtype of the array operands."""
    if all(type(v) is np.ndarray and v.dtype == values[0].dtype for v in values):
        return list(values)
    typed = [v for v in values if isinstance(v, (np.ndarray, np.generic))]
    dtype = np.asarray(typed[0]).dtype if typed else None
    arrays = [np.asarray(v) if isinstance(v, (np.ndarray, np.generic)) else _as_type(op, v, dtype)
              for v in values]
    dtypes = {a.dtype for a in arrays}
    if len(dtypes) > 1:
        raise KernelError(f"{op}: inputs must share one dtype, got {', '.join(str(a.dtype) for a in arrays)}; "
                          f"insert a Cast so they match")
    return arrays


def broadcast_shape(op: str, *arrays: np.ndarray) -> tuple[int, ...]:
    """The numpy broadcast of the arrays' shapes, or a KernelError naming `op` and the shapes."""
    shapes = [a.shape for a in arrays]
    if all(shape == shapes[0] for shape in shapes):
        return shapes[0]
    try:
        return np.broadcast_shapes(*shapes)
    except ValueError:
        raise KernelError(f"{op}: input shapes {', '.join(str(a.shape) for a in arrays)} "
                          f"do not broadcast (numpy rules)") from None


def broadcasts_onto(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """True when an array of `shape` broadcasts to exactly `target` (ONNX unidirectional broadcasting)."""
    try:
        return np.broadcast_shapes(tuple(shape), tuple(target)) == tuple(target)
    except ValueError:
        return False


def normalize_axis(op: str, axis: int, rank: int) -> int:
    """`axis` in [0, rank), or a KernelError naming `op` when it is outside [-rank, rank)."""
    if not -rank <= axis < rank:
        raise KernelError(f"{op}: axis {axis} is out of range for rank {rank}")
    return axis % rank


def _legacy_align(op: str, a: np.ndarray, b: np.ndarray, broadcast: int, axis: int | None) -> np.ndarray:
    """`b` reshaped for the opset < 7 rule: broadcast only when asked, aligned at `axis` of `a`."""
    if not broadcast:
        if a.shape != b.shape:
            raise KernelError(f"{op}: broadcast=0 (opset < 7) needs equal shapes, got {a.shape} and {b.shape}")
        return b
    start = a.ndim - b.ndim if axis is None else axis + a.ndim if axis < 0 else axis
    if not 0 <= start <= a.ndim - b.ndim:
        raise KernelError(f"{op}: axis={axis} cannot align B of shape {b.shape} inside A of shape {a.shape}")
    b = b.reshape(b.shape + (1,) * (a.ndim - start - b.ndim))
    if broadcast_shape(op, a, b) != a.shape:
        raise KernelError(f"{op}: B of shape {b.shape} does not broadcast to A's shape {a.shape}")
    return b


def _no_zero_divisor(op: str, b: np.ndarray) -> None:
    if b.dtype.kind in "iu" and not np.all(b):
        at = tuple(int(i) for i in np.unravel_index(np.argmin(b != 0), b.shape))
        raise KernelError(f"{op}: integer division by zero (divisor B is 0 at index {at})")


def _divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Division; integers truncate toward zero as in C (numpy floors)."""
    _no_zero_divisor("Div", b)
    if a.dtype.kind == "u":
        return np.floor_divide(a, b)
    if a.dtype.kind == "i":
        # a - fmod(a, b) is an exact multiple of b, so flooring it is truncation.
        return np.floor_divide(a - np.fmod(a, b), b)
    return np.true_divide(a, b)


def _binary(op: str, fn, legacy: bool, doc: str):
    """Kernels for a same-type binary op: numpy broadcasting, plus the opset < 7 form if `legacy`."""

    @np.errstate(all="ignore")
    def run(a, b):
        a, b = operands(op, a, b)
        broadcast_shape(op, a, b)
        return np.asarray(fn(a, b))

    def run_legacy(a, b, *, axis=None, broadcast=0, consumed_inputs=None):
        a, b = operands(op, a, b)
        return run(a, _legacy_align(op, a, b, broadcast, axis))

    named(run, op, f"ONNX {op}: {doc}, numpy broadcasting.")
    named(run_legacy, op, f"ONNX {op} before opset 7: {doc}, B broadcast into A only with broadcast=1 (at `axis`).",
          "_legacy")
    return run, (run_legacy if legacy else None)


#: (op, numpy function, dtypes of the first input, first opset, has the opset 1/6 broadcast attributes, doc)
_BINARY = (
    ("Add", np.add, NUMERIC, 1, True, "A + B"),
    ("Sub", np.subtract, NUMERIC, 1, True, "A - B"),
    ("Mul", np.multiply, NUMERIC, 1, True, "A * B"),
    ("Div", _divide, NUMERIC, 1, True, "A / B, integers truncated toward zero"),
    ("Equal", np.equal, NUMERIC + BOOL + STRING, 1, True, "A == B"),
    ("Greater", np.greater, NUMERIC, 1, True, "A > B"),
    ("Less", np.less, NUMERIC, 1, True, "A < B"),
    ("GreaterOrEqual", np.greater_equal, NUMERIC, 12, False, "A >= B"),
    ("LessOrEqual", np.less_equal, NUMERIC, 12, False, "A <= B"),
    ("And", np.logical_and, BOOL, 1, True, "logical A and B"),
    ("Or", np.logical_or, BOOL, 1, True, "logical A or B"),
    ("Xor", np.logical_xor, BOOL, 1, True, "logical A xor B"),
    ("BitwiseAnd", np.bitwise_and, INTEGERS, 18, False, "bitwise A & B"),
    ("BitwiseOr", np.bitwise_or, INTEGERS, 18, False, "bitwise A | B"),
    ("BitwiseXor", np.bitwise_xor, INTEGERS, 18, False, "bitwise A ^ B"),
)

for _op, _fn, _dtypes, _since, _legacy, _doc in _BINARY:
    _modern, _old = _binary(_op, _fn, _legacy, _doc)
    if _old is not None:
        kernel(_op, since=_since, dtypes=_dtypes)(_old)
    kernel(_op, since=7 if _legacy else _since, dtypes=_dtypes)(_modern)


@np.errstate(all="ignore")
def _power(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if is_float(x.dtype):
        base = widen(x)
        exponent = y.astype(base.dtype) if not is_float(y.dtype) or y.dtype in NARROW_FLOATS else y
        return np.asarray(np.power(base, exponent)).astype(x.dtype, copy=False)
    if is_float(y.dtype):
        return np.asarray(np.power(x.astype(np.float64), widen(y))).astype(x.dtype)
    negative = y < 0
    result = np.power(x.astype(np.int64), np.where(negative, 0, y).astype(np.int64))
    if np.any(negative):
        # x ** -n truncates to 0 except for x = 1 and x = -1 (sign by the parity of n).
        odd = (y % 2) != 0
        inverse = np.where(x == 1, 1, np.where(x == -1, np.where(odd, -1, 1), 0))
        result = np.where(negative, inverse, result)
    return np.asarray(result).astype(x.dtype)


@kernel("Pow", since=7, dtypes=NUMERIC)
def pow_(x, y):
    """ONNX Pow: X ** Y with numpy broadcasting; the result has X's type whatever Y's is."""
    x = np.asarray(x)
    y = np.asarray(y) if isinstance(y, (np.ndarray, np.generic)) else np.asarray(y, dtype=x.dtype)
    broadcast_shape("Pow", x, y)
    return _power(x, y)


@kernel("Pow", since=1, dtypes=NUMERIC)
def pow_legacy(x, y, *, axis=None, broadcast=0):
    """ONNX Pow before opset 7: Y broadcast into X only with broadcast=1 (at `axis`)."""
    x, y = operands("Pow", x, y)
    return _power(x, _legacy_align("Pow", x, y, broadcast, axis))


@kernel("Mod", since=10, dtypes=NUMERIC)
@np.errstate(all="ignore")
def mod(a, b, *, fmod=0):
    """ONNX Mod: fmod=0 takes the divisor's sign (floored), fmod=1 the dividend's (C fmod)."""
    if fmod not in (0, 1):
        raise KernelError(f"Mod: fmod must be 0 or 1, got {fmod!r}")
    a, b = operands("Mod", a, b)
    broadcast_shape("Mod", a, b)
    _no_zero_divisor("Mod", b)
    fn = np.fmod if fmod else np.remainder
    if a.dtype in NARROW_FLOATS:
        return np.asarray(fn(widen(a), widen(b))).astype(a.dtype)
    return np.asarray(fn(a, b))


@kernel("BitShift", since=11, dtypes=INTEGERS)
def bit_shift(x, y, *, direction):
    """ONNX BitShift; shifting by < 0 or >= the bit width gives 0, or -1 right-shifting a negative X."""
    x, y = operands("BitShift", x, y)
    broadcast_shape("BitShift", x, y)
    direction = direction.decode() if isinstance(direction, bytes) else direction
    if direction == "LEFT":
        return np.asarray(np.left_shift(x, y))
    if direction == "RIGHT":
        return np.asarray(np.right_shift(x, y))
    raise KernelError(f"BitShift: direction must be 'LEFT' or 'RIGHT', got {direction!r}")


@kernel("Where", since=9, dtypes=BOOL)
def where(condition, x, y):
    """ONNX Where: X where the condition holds, else Y, all three broadcast together."""
    condition = np.asarray(condition)
    if condition.dtype != np.bool_:
        raise KernelError(f"Where: condition must be bool, got {condition.dtype}")
    x, y = operands("Where", x, y)
    broadcast_shape("Where", condition, x, y)
    return np.where(condition, x, y)


@kernel("IsInf", since=10, dtypes=FLOATS + FLOAT8)
def is_inf(x, *, detect_negative=1, detect_positive=1):
    """ONNX IsInf: which elements are infinite, optionally only one sign of infinity."""
    x = widen(np.asarray(x))
    if detect_negative and detect_positive:
        return np.asarray(np.isinf(x))
    if detect_positive:
        return np.asarray(np.isposinf(x))
    if detect_negative:
        return np.asarray(np.isneginf(x))
    return np.zeros(x.shape, dtype=np.bool_)


_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf, computed in float64: a positive-term series for small |x|, the erfc continued fraction above.

    The term counts are sized for the input type: float64 results are within ~2e-15 relative error,
    narrower types within ~1e-8 (far below their own rounding).
    """
    series_terms, fraction_terms, cut = (45, 30, 3.0) if x.dtype == np.float64 else (25, 12, 2.5)
    a = np.abs(x.astype(np.float64))
    out = np.empty_like(a)
    small = a < cut
    s = a[small]
    # erf(s) = 2/sqrt(pi) exp(-s^2) sum_n (2 s^2)^n s / (1*3*...*(2n+1)): no cancellation.
    term, total = s.copy(), s.copy()
    for n in range(1, series_terms):
        term *= 2.0 * s * s / (2 * n + 1)
        total += term
    out[small] = _TWO_OVER_SQRT_PI * np.exp(-s * s) * total
    big = a[~small]  # also NaN and inf
    with np.errstate(all="ignore"):
        # erfc(z) = exp(-z^2)/sqrt(pi) / (z + (1/2)/(z + 1/(z + (3/2)/(z + 2/(z + ...))))), evaluated bottom-up.
        fraction = big.copy()
        for k in range(fraction_terms, 0, -1):
            fraction = big + (k / 2.0) / fraction
        tail = np.exp(-big * big) / (math.sqrt(math.pi) * fraction)
        out[~small] = np.where(np.isinf(big), 1.0, 1.0 - tail)
    return np.copysign(out, x.astype(np.float64))


def _unary(op: str, fn, doc: str, float_math: bool):
    """The kernel for a one-input op: `fn` on the input, float32 for ml_dtypes floats when `float_math`."""

    @np.errstate(all="ignore")
    def run(x):
        x = np.asarray(x)
        if float_math and x.dtype in NARROW_FLOATS:
            return np.asarray(fn(x.astype(np.float32))).astype(x.dtype)
        return np.asarray(fn(x))

    def run_legacy(x, *, consumed_inputs=None):
        return run(x)

    named(run, op, f"ONNX {op}: {doc}.")
    named(run_legacy, op, f"ONNX {op}-1: {doc}; the consumed_inputs attribute is ignored.", "_legacy")
    return run, run_legacy


def _in_input_type(fn):
    """`fn` with its result rounded back to the input's dtype."""
    return lambda x: np.asarray(fn(x)).astype(x.dtype, copy=False)


#: (op, function, dtypes, first opset, has the opset 1 consumed_inputs attribute, doc)
_UNARY = (
    ("Abs", np.abs, NUMERIC, 1, True, "|X|"),
    ("Neg", np.negative, FLOATS + SIGNED, 1, True, "-X"),
    ("Exp", np.exp, FLOATS, 1, True, "e ** X"),
    ("Log", np.log, FLOATS, 1, True, "natural logarithm"),
    ("Sqrt", np.sqrt, FLOATS, 1, True, "square root"),
    ("Reciprocal", np.reciprocal, FLOATS, 1, True, "1 / X"),
    ("Floor", np.floor, FLOATS, 1, True, "round down"),
    ("Ceil", np.ceil, FLOATS, 1, True, "round up"),
    ("Round", np.rint, FLOATS, 11, False, "round half to even"),
    ("Sign", np.sign, NUMERIC, 9, False, "-1, 0 or 1 by sign (NaN stays NaN)"),
    ("Sin", np.sin, FLOATS, 7, False, "sine"),
    ("Cos", np.cos, FLOATS, 7, False, "cosine"),
    ("Tan", np.tan, FLOATS, 7, False, "tangent"),
    ("Asin", np.arcsin, FLOATS, 7, False, "arcsine"),
    ("Acos", np.arccos, FLOATS, 7, False, "arccosine"),
    ("Atan", np.arctan, FLOATS, 7, False, "arctangent"),
    ("Sinh", np.sinh, FLOATS, 9, False, "hyperbolic sine"),
    ("Cosh", np.cosh, FLOATS, 9, False, "hyperbolic cosine"),
    ("Asinh", np.arcsinh, FLOATS, 9, False, "inverse hyperbolic sine"),
    ("Acosh", np.arccosh, FLOATS, 9, False, "inverse hyperbolic cosine"),
    ("Atanh", np.arctanh, FLOATS, 9, False, "inverse hyperbolic tangent"),
    ("Erf", _in_input_type(_erf), FLOATS, 9, False, "Gauss error function"),
    ("IsNaN", np.isnan, FLOATS + FLOAT8, 9, False, "which elements are NaN"),
    ("Not", np.logical_not, BOOL, 1, False, "logical not"),
    ("BitwiseNot", np.invert, INTEGERS, 18, False, "bitwise not"),
)

for _op, _fn, _dtypes, _since, _legacy, _doc in _UNARY:
    _modern, _old = _unary(_op, _fn, _doc, float_math=_dtypes is not BOOL)
    if _legacy:
        kernel(_op, since=1, dtypes=_dtypes)(_old)
    kernel(_op, since=6 if _legacy else _since, dtypes=_dtypes)(_modern)


def _variadic(op: str, combine, doc: str, mean: bool = False):
    """The kernel for a Max/Min/Sum/Mean-style op folding any number of broadcast inputs."""

    @np.errstate(all="ignore")
    def run(*inputs):
        if not inputs:
            raise KernelError(f"{op}: needs at least one input")
        arrays = operands(op, *inputs)
        broadcast_shape(op, *arrays)
        if len(arrays) == 1:
            return arrays[0].copy()
        result = functools.reduce(combine, arrays)
        if mean:
            result = result / result.dtype.type(len(arrays))
        return np.asarray(result)

    def run_legacy(*inputs, consumed_inputs=None):
        return run(*inputs)

    named(run, op, f"ONNX {op}: {doc} of all inputs, numpy broadcasting.")
    named(run_legacy, op, f"ONNX {op}-1: {doc} of all inputs; the consumed_inputs attribute is ignored.", "_legacy")
    return run, run_legacy


for _op, _fn, _dtypes, _doc in (("Max", np.maximum, NUMERIC, "elementwise maximum"),
                                ("Min", np.minimum, NUMERIC, "elementwise minimum"),
                                ("Sum", np.add, FLOATS, "elementwise sum"),
                                ("Mean", np.add, FLOATS, "elementwise mean")):
    _modern, _old = _variadic(_op, _fn, _doc, mean=_op == "Mean")
    kernel(_op, since=1, dtypes=_dtypes)(_old)
    kernel(_op, since=6, dtypes=_dtypes)(_modern)

del _op, _fn, _dtypes, _since, _legacy, _doc, _modern, _old
