"""Activation family: pointwise non-linearities, Softmax/LogSoftmax/Hardmax, Clip, Shrink and Dropout.

Pointwise functions compute in float32 for 16-bit floats and cast back, and are written in forms
that neither overflow nor warn (sigmoid through tanh, softplus through logaddexp). Before opset 13
the softmax family flattens the input to 2-D at `axis` and normalizes each row as a whole.
"""
from __future__ import annotations

import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.op_elementwise import broadcasts_onto
from xgraph.kernels.registry import builtin_kernel as kernel
from xgraph.kernels.windows import FLOAT_TYPES, compute_dtype

SIGNED_INT_TYPES = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64))
INT_TYPES = SIGNED_INT_TYPES + tuple(np.dtype(t) for t in (np.uint8, np.uint16, np.uint32, np.uint64))


def _work(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(compute_dtype(x.dtype), copy=False)


def _back(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    return y.astype(x.dtype, copy=False)


def _positive_part_plus(v: np.ndarray, negative: np.ndarray) -> np.ndarray:
    """max(v, 0) + negative, in place on `negative`: the branch-free form of a piecewise activation.

    np.where over a data-dependent mask is many times slower than two SIMD passes.
    """
    negative += np.maximum(v, 0)
    return negative


def _sigmoid(v: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-v)) without overflow for large |v|."""
    y = np.tanh(v * 0.5)
    y += 1
    y *= 0.5
    return y


def _erfc(v: np.ndarray) -> np.ndarray:
    """erfc via a Chebyshev fit (fractional error < 1.2e-7 everywhere, Numerical Recipes `erfcc`).

    numpy has no erf; the relative accuracy holds in both tails, which 1 + erf(x) would lose.
    """
    z = np.abs(v)
    t = 1.0 / (1.0 + 0.5 * z)
    poly = -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (-0.18628806 + t * (
        0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277))))))))
    tail = t * np.exp(-z * z + poly)  # erfc(|v|); erfc(-a) = 2 - erfc(a)
    return (tail + (v < 0) * (2.0 - 2.0 * tail)).astype(v.dtype, copy=False)


# --------------------------------------------------------------------------- pointwise


@kernel("Relu", since=1, dtypes=FLOAT_TYPES + SIGNED_INT_TYPES)
def relu(x, *, consumed_inputs=None):
    """ONNX Relu-1/6/13/14: max(x, 0)."""
    return np.maximum(x, np.zeros((), dtype=x.dtype))


@kernel("LeakyRelu", since=1, dtypes=FLOAT_TYPES)
def leaky_relu(x, *, alpha=0.01, consumed_inputs=None):
    """ONNX LeakyRelu-1/6/16: x for x >= 0, alpha * x otherwise."""
    v = _work(x)
    return _back(_positive_part_plus(v, v.dtype.type(alpha) * np.minimum(v, 0)), x)


@kernel("PRelu", since=1, dtypes=FLOAT_TYPES + INT_TYPES)
def prelu_1(x, slope, *, consumed_inputs=None):
    """ONNX PRelu-1/6: a 1-D slope of C values applies per channel (axis 1)."""
    slope = np.asarray(slope)
    if x.ndim > 2 and slope.ndim == 1 and slope.size == x.shape[1] and slope.size > 1:
        slope = slope.reshape((-1,) + (1,) * (x.ndim - 2))
    return prelu(x, slope)


@kernel("PRelu", since=7, dtypes=FLOAT_TYPES + INT_TYPES)
def prelu(x, slope):
    """ONNX PRelu-7/9/16: x for x >= 0, slope * x otherwise, slope broadcast to x (unidirectional)."""
    slope = np.asarray(slope)
    if not broadcasts_onto(slope.shape, x.shape):
        raise KernelError(f"PRelu: slope of shape {slope.shape} does not broadcast to X of shape {x.shape}")
    v = _work(x)
    return _back(_positive_part_plus(v, slope.astype(v.dtype, copy=False) * np.minimum(v, 0)), x)


@kernel("Elu", since=1, dtypes=FLOAT_TYPES)
def elu(x, *, alpha=1.0, consumed_inputs=None):
    """ONNX Elu-1/6/22: x for x > 0, alpha * (exp(x) - 1) otherwise."""
    v = _work(x)
    return _back(_positive_part_plus(v, v.dtype.type(alpha) * np.expm1(np.minimum(v, 0))), x)


@kernel("Selu", since=1, dtypes=FLOAT_TYPES)
def selu(x, *, alpha=1.67326319217681884765625, gamma=1.05070102214813232421875, consumed_inputs=None):
    """ONNX Selu-1/6/22: gamma * (x for x > 0, alpha * (exp(x) - 1) otherwise)."""
    v = _work(x)
    y = _positive_part_plus(v, v.dtype.type(alpha) * np.expm1(np.minimum(v, 0)))
    y *= v.dtype.type(gamma)
    return _back(y, x)


@kernel("Celu", since=12, dtypes=FLOAT_TYPES)
def celu(x, *, alpha=1.0):
    """ONNX Celu-12/28: max(0, x) + min(0, alpha * (exp(x / alpha) - 1))."""
    v = _work(x)
    a = v.dtype.type(alpha)
    return _back(_positive_part_plus(v, np.minimum(0, a * np.expm1(np.minimum(v, 0) / a))), x)


@kernel("Sigmoid", since=1, dtypes=FLOAT_TYPES)
def sigmoid(x, *, consumed_inputs=None):
    """ONNX Sigmoid-1/6/13: 1 / (1 + exp(-x))."""
    return _back(_sigmoid(_work(x)), x)


@kernel("HardSigmoid", since=1, dtypes=FLOAT_TYPES)
def hard_sigmoid(x, *, alpha=0.2, beta=0.5, consumed_inputs=None):
    """ONNX HardSigmoid-1/6/22: clip(alpha * x + beta, 0, 1)."""
    v = _work(x)
    return _back(np.clip(v * v.dtype.type(alpha) + v.dtype.type(beta), 0, 1), x)


@kernel("HardSwish", since=14, dtypes=FLOAT_TYPES)
def hard_swish(x):
    """ONNX HardSwish-14/22: x * clip(x / 6 + 1/2, 0, 1)."""
    v = _work(x)
    return _back(v * np.clip(v / 6 + 0.5, 0, 1), x)


@kernel("Softplus", since=1, dtypes=FLOAT_TYPES)
def softplus(x):
    """ONNX Softplus-1/22: log(1 + exp(x)), via logaddexp so large x stays finite."""
    return _back(np.logaddexp(0, _work(x)), x)


@kernel("Softsign", since=1, dtypes=FLOAT_TYPES)
def softsign(x):
    """ONNX Softsign-1/22: x / (1 + |x|)."""
    v = _work(x)
    return _back(v / (1 + np.abs(v)), x)


@kernel("Tanh", since=1, dtypes=FLOAT_TYPES)
def tanh(x, *, consumed_inputs=None):
    """ONNX Tanh-1/6/13: hyperbolic tangent."""
    return _back(np.tanh(_work(x)), x)


@kernel("Gelu", since=20, dtypes=FLOAT_TYPES)
def gelu(x, *, approximate="none"):
    """ONNX Gelu-20: x * Phi(x) exactly (approximate='none') or with the tanh formula."""
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    v = _work(x)
    if approximate == "tanh":
        inner = np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)
        return _back(0.5 * v * (1 + np.tanh(inner)), x)
    if approximate != "none":
        raise KernelError(f"Gelu: approximate={approximate!r} is not 'none' or 'tanh'")
    return _back(0.5 * v * _erfc(-v / v.dtype.type(np.sqrt(2))), x)


@kernel("Mish", since=18, dtypes=FLOAT_TYPES)
def mish(x):
    """ONNX Mish-18/22: x * tanh(softplus(x))."""
    v = _work(x)
    return _back(v * np.tanh(np.logaddexp(0, v)), x)


@kernel("ThresholdedRelu", since=10, dtypes=FLOAT_TYPES)
def thresholded_relu(x, *, alpha=1.0):
    """ONNX ThresholdedRelu-10/22: x where x > alpha, 0 elsewhere."""
    return np.where(x > alpha, x, np.zeros((), dtype=x.dtype))


@kernel("Swish", since=24, dtypes=FLOAT_TYPES)
def swish(x, *, alpha=1.0):
    """ONNX Swish-24: x * sigmoid(alpha * x)."""
    v = _work(x)
    return _back(v * _sigmoid(v * v.dtype.type(alpha)), x)


@kernel("Shrink", since=9, dtypes=FLOAT_TYPES + INT_TYPES)
def shrink(x, *, bias=0.0, lambd=0.5):
    """ONNX Shrink-9: x + bias below -lambd, x - bias above lambd, 0 between."""
    v = x.astype(np.float64) if x.dtype.kind in "iu" else _work(x)
    y = np.where(v < -lambd, v + bias, np.where(v > lambd, v - bias, 0))
    return y.astype(x.dtype)


# --------------------------------------------------------------------------- softmax family


def _axis(op: str, axis: int, rank: int) -> int:
    if not -max(rank, 1) <= axis < max(rank, 1):
        raise KernelError(f"{op}: axis={axis} is out of range for a rank-{rank} input")
    return axis % max(rank, 1)


def _softmax(v: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(v - v.max(axis=axis, keepdims=True))
    e /= e.sum(axis=axis, keepdims=True)
    return e


def _log_softmax(v: np.ndarray, axis: int) -> np.ndarray:
    shifted = v - v.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def _hardmax(v: np.ndarray, axis: int) -> np.ndarray:
    first = np.expand_dims(np.argmax(v, axis=axis), axis)
    y = np.zeros(v.shape, dtype=v.dtype)
    np.put_along_axis(y, first, 1, axis=axis)
    return y


def _coerced_2d(op: str, fn, x: np.ndarray, axis: int) -> np.ndarray:
    """Opset < 13 semantics: flatten to (prod(shape[:axis]), prod(shape[axis:])) and apply along rows."""
    a = _axis(op, int(axis), x.ndim) if x.ndim else 0
    v = _work(x)
    rows = int(np.prod(x.shape[:a]))
    return _back(fn(v.reshape(rows, -1), 1).reshape(x.shape), x)


@kernel("Softmax", since=1, dtypes=FLOAT_TYPES)
def softmax_1(x, *, axis=1):
    """ONNX Softmax-1/11: softmax over the input flattened to 2-D at `axis`."""
    return _coerced_2d("Softmax", _softmax, x, axis)


@kernel("Softmax", since=13, dtypes=FLOAT_TYPES)
def softmax(x, *, axis=-1):
    """ONNX Softmax-13: max-subtracted softmax along one axis."""
    return _back(_softmax(_work(x), _axis("Softmax", int(axis), x.ndim)), x)


@kernel("LogSoftmax", since=1, dtypes=FLOAT_TYPES)
def log_softmax_1(x, *, axis=1):
    """ONNX LogSoftmax-1/11: log-softmax over the input flattened to 2-D at `axis`."""
    return _coerced_2d("LogSoftmax", _log_softmax, x, axis)


@kernel("LogSoftmax", since=13, dtypes=FLOAT_TYPES)
def log_softmax(x, *, axis=-1):
    """ONNX LogSoftmax-13: x - max - log(sum(exp(x - max))) along one axis."""
    return _back(_log_softmax(_work(x), _axis("LogSoftmax", int(axis), x.ndim)), x)


@kernel("Hardmax", since=1, dtypes=FLOAT_TYPES)
def hardmax_1(x, *, axis=1):
    """ONNX Hardmax-1/11: one-hot of the first maximum of each row of the 2-D-coerced input."""
    return _coerced_2d("Hardmax", _hardmax, x, axis)


@kernel("Hardmax", since=13, dtypes=FLOAT_TYPES)
def hardmax(x, *, axis=-1):
    """ONNX Hardmax-13: one-hot of the first maximum along one axis."""
    return _back(_hardmax(_work(x), _axis("Hardmax", int(axis), x.ndim)), x)


# --------------------------------------------------------------------------- Clip / Dropout


def _bound(value, dtype: np.dtype) -> np.ndarray:
    """A clip bound in x's dtype; a float32-range default becomes +-inf in float16, as the cast says."""
    with np.errstate(over="ignore"):
        return np.asarray(value).astype(dtype)


def _clip(x: np.ndarray, low, high) -> np.ndarray:
    y = x
    if low is not None:
        y = np.maximum(y, _bound(low, x.dtype))
    if high is not None:
        y = np.minimum(y, _bound(high, x.dtype))
    return y if y is not x else x.copy()


@kernel("Clip", since=1, dtypes=FLOAT_TYPES)
def clip_1(x, *, consumed_inputs=None, max=None, min=None):  # noqa: A002 - ONNX attribute names
    """ONNX Clip-1: bounds are attributes; an absent bound does not clip."""
    return _clip(x, min, max)


@kernel("Clip", since=6, dtypes=FLOAT_TYPES)
def clip_6(x, *, max=3.4028234663852886e38, min=-3.4028234663852886e38):  # noqa: A002 - ONNX attribute names
    """ONNX Clip-6: bounds are attributes defaulting to the float32 range."""
    return _clip(x, min, max)


@kernel("Clip", since=11, dtypes=FLOAT_TYPES + INT_TYPES)
def clip(x, min=None, max=None):  # noqa: A002 - ONNX input names
    """ONNX Clip-11/12/13: bounds are optional scalar inputs; with min > max every value becomes max."""
    for name, bound in (("min", min), ("max", max)):
        if bound is not None and np.size(bound) != 1:
            raise KernelError(f"Clip: input {name!r} must be a scalar, got shape {np.shape(bound)}")
    return _clip(x, None if min is None else np.asarray(min).reshape(()),
                 None if max is None else np.asarray(max).reshape(()))


@kernel("Dropout", since=1, dtypes=FLOAT_TYPES)
def dropout_1(x, *, consumed_inputs=None, is_test=0, ratio=0.5):
    """ONNX Dropout-1/6/7: identity at inference; the mask output (same dtype as x) is all ones."""
    return x, np.ones(x.shape, dtype=x.dtype)


@kernel("Dropout", since=10, dtypes=FLOAT_TYPES)
def dropout_10(x, *, ratio=0.5):
    """ONNX Dropout-10: identity at inference; the boolean mask output is all True."""
    return x, np.ones(x.shape, dtype=bool)


@kernel("Dropout", since=12, dtypes=FLOAT_TYPES)
def dropout(x, ratio=None, training_mode=None, *, seed=None):
    """ONNX Dropout-12/13/22: identity unless training_mode; then keep with probability 1-ratio and rescale.

    The training mask is drawn from numpy's RandomState(seed), so a fixed seed is reproducible.
    """
    r = 0.5 if ratio is None else float(np.asarray(ratio).reshape(()))
    training = training_mode is not None and bool(np.asarray(training_mode).reshape(()))
    if not training or r == 0:
        return x, np.ones(x.shape, dtype=bool)
    if not 0 <= r < 1:
        raise KernelError(f"Dropout: ratio={r} must be in [0, 1) in training mode")
    rng = np.random.RandomState(None if seed is None else int(seed) % (2 ** 32))
    mask = rng.uniform(0.0, 1.0, x.shape) >= r
    y = _work(x) * mask * (1.0 / (1.0 - r))
    return _back(y, x), mask
