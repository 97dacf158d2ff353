"""Normalization family: BatchNormalization, LayerNormalization, RMSNormalization, InstanceNormalization,
GroupNormalization, LRN, LpNormalization, MeanVarianceNormalization.

Statistics are computed in float32 (or float64 for float64 input) whatever the tensor dtype, which
is what stash_type=1 asks for and what keeps float16 sums from overflowing. BatchNormalization in
inference folds its four per-channel vectors into one scale and one shift applied in place.
"""
from __future__ import annotations

from functools import partial
from typing import Callable

import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.parallel import chunks, run_parallel, split_count_elements
from xgraph.kernels.windows import FLOAT_TYPES, compute_dtype
from xgraph.kernels.registry import builtin_kernel as kernel


def _stash(x: np.ndarray, stash_type: int = 1) -> np.ndarray:
    """x in the dtype statistics are kept in: float32 (stash_type=1) unless x is float64."""
    if int(stash_type) == 1:
        return x.astype(np.float64 if x.dtype == np.float64 else np.float32, copy=False)
    return x.astype(compute_dtype(x.dtype), copy=False)


def _channel_vector(op: str, name: str, v: np.ndarray, x: np.ndarray, per_activation: bool) -> np.ndarray:
    """A per-channel parameter shaped to broadcast against x (N, C, ...); (C, ...) when per activation."""
    v = np.asarray(v)
    c = x.shape[1]
    if per_activation and v.size == int(np.prod(x.shape[1:])) and v.size != c:
        return v.reshape(x.shape[1:])
    if v.size != c:
        raise KernelError(f"{op}: {name} has {v.size} values but X has {c} channels (X shape {x.shape})")
    return v.reshape((c,) + (1,) * (x.ndim - 2))


# --------------------------------------------------------------------------- BatchNormalization


def batch_norm_scale_shift(scale, bias, mean, var, epsilon: float = 1e-5) -> tuple[np.ndarray, np.ndarray]:
    """(a, b) in float64 with BatchNormalization(x) == a * x + b per channel.

    The inference kernel applies exactly this; a graph pass can fold it into a preceding Conv
    (W * a per output channel, B * a + b) and drop the op. Float32 parameters give onnxruntime's
    float32 values (a = scale * (1 / sqrt(var + epsilon)), b = bias - mean * a, each operation
    rounded to float32), so a float BatchNormalization between two quantizers rounds as there.
    """
    params = [np.asarray(v) for v in (scale, bias, mean, var)]
    if all(v.dtype == np.float32 for v in params):
        scale32, bias32, mean32, var32 = params
        inv_std = np.float32(1) / np.sqrt(var32 + np.float32(epsilon))
        a32 = inv_std * scale32
        return a32.astype(np.float64), (bias32 - mean32 * a32).astype(np.float64)
    a = np.asarray(scale, dtype=np.float64) / np.sqrt(np.asarray(var, dtype=np.float64) + float(epsilon))
    return a, np.asarray(bias, dtype=np.float64) - np.asarray(mean, dtype=np.float64) * a


#: Each thread applies a per-channel affine a block of rows at a time, at most this many bytes, so
#: the multiply, the add and the activation find the block still in cache.
AFFINE_BLOCK_BYTES = 1 << 18


def channel_affine(x: np.ndarray, scale: np.ndarray, shift: np.ndarray,
                   activation: Callable[[np.ndarray], object] | None = None,
                   into: np.ndarray | None = None) -> np.ndarray:
    """scale * x + shift, then `activation(block)` in place, for float32 x of shape (N, C, ...).

    `scale` and `shift` are float32 vectors with one value per channel (C values), or one value
    for every element. The work is cut into blocks of (image, channel) rows (of elements, for
    one value) on the intra-op threads, and each block goes through the multiply, the add and
    the activation while it is in cache. `into`, a C-contiguous float32 array of x's shape,
    receives the result.
    """
    usable = into is not None and into.shape == x.shape and into.dtype == np.float32 and into.flags.c_contiguous
    y = into if usable else np.empty(x.shape, dtype=np.float32)
    if not x.size:
        return y
    x = np.ascontiguousarray(x)
    if scale.size > 1:  # rows of one (image, channel) each
        rows = int(np.prod(x.shape[:2]))
        a, b = np.tile(scale, rows // scale.size).reshape(rows, 1), np.tile(shift, rows // scale.size).reshape(rows, 1)
        xs, ys = x.reshape(rows, -1), y.reshape(rows, -1)
        per = max(1, AFFINE_BLOCK_BYTES // max(1, 4 * xs.shape[1]))
    else:  # one value pair: any run of elements
        rows = x.size
        a, b = np.broadcast_to(scale.reshape(1), (rows,)), np.broadcast_to(shift.reshape(1), (rows,))
        xs, ys = x.reshape(-1), y.reshape(-1)
        per = AFFINE_BLOCK_BYTES // 4

    def block(start: int, stop: int) -> None:
        for lo in range(start, stop, per):
            hi = min(lo + per, stop)
            out = ys[lo:hi]
            np.multiply(xs[lo:hi], a[lo:hi], out=out)
            out += b[lo:hi]
            if activation is not None:
                activation(out)
    run_parallel([partial(block, lo, hi) for lo, hi in chunks(rows, split_count_elements(3 * x.size))])
    return y


def _batch_norm_inference(op, x, scale, bias, mean, var, epsilon, per_activation=False):
    if x.ndim < 2:
        raise KernelError(f"{op}: input X must be (N, C, ...), got shape {x.shape}")
    work = compute_dtype(x.dtype)
    a, shift = batch_norm_scale_shift(*(_channel_vector(op, name, v, x, per_activation) for name, v in (
        ("scale", scale), ("B", bias), ("mean", mean), ("var", var))), epsilon)
    if x.dtype == np.float32 and a.size == x.shape[1]:
        return channel_affine(x, a.astype(np.float32).reshape(-1), shift.astype(np.float32).reshape(-1))
    y = np.multiply(x, a.astype(work), dtype=work)
    y += shift.astype(work)
    return y.astype(x.dtype, copy=False)


def _batch_norm_training(op, x, scale, bias, mean, var, epsilon, momentum):
    """(Y from batch statistics, updated running mean, updated running var, batch mean, batch var)."""
    axes = (0,) + tuple(range(2, x.ndim))
    work = _stash(x)
    batch_mean = work.mean(axis=axes)
    batch_var = work.var(axis=axes)
    y = _batch_norm_inference(op, x, scale, bias, batch_mean, batch_var, epsilon)
    running_mean = np.asarray(mean) * momentum + batch_mean * (1 - momentum)
    running_var = np.asarray(var) * momentum + batch_var * (1 - momentum)
    dt = np.asarray(mean).dtype
    return y, running_mean.astype(dt), running_var.astype(dt), batch_mean.astype(dt), batch_var.astype(dt)


@kernel("BatchNormalization", since=1, dtypes=FLOAT_TYPES)
def batch_normalization_1(x, scale, bias, mean, var, *, consumed_inputs=None, epsilon=1e-5, is_test=0,
                          momentum=0.9, spatial=1):
    """ONNX BatchNormalization-1/6/7/9: inference with running statistics (spatial=0: per-activation stats).

    Training in these opsets is signalled by is_test=0 or by the number of outputs, neither of which
    an inference runtime acts on; the optional outputs echo the running statistics unchanged.
    """
    op = "BatchNormalization"
    y = _batch_norm_inference(op, x, scale, bias, mean, var, epsilon, per_activation=not spatial)
    return y, mean, var, mean, var


@kernel("BatchNormalization", since=14, dtypes=FLOAT_TYPES)
def batch_normalization(x, scale, bias, mean, var, *, epsilon=1e-5, momentum=0.9, training_mode=0):
    """ONNX BatchNormalization-14/15: training_mode=1 normalizes with batch statistics and returns updated running ones."""
    op = "BatchNormalization"
    if training_mode:
        y, running_mean, running_var, _, _ = _batch_norm_training(op, x, scale, bias, mean, var, epsilon, momentum)
        return y, running_mean, running_var
    return _batch_norm_inference(op, x, scale, bias, mean, var, epsilon)


# --------------------------------------------------------------------------- Layer / RMS / Instance / Group


def _axis(op: str, axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise KernelError(f"{op}: axis={axis} is out of range for a rank-{rank} input")
    return axis % rank


@kernel("LayerNormalization", since=17, dtypes=FLOAT_TYPES)
def layer_normalization(x, scale, bias=None, *, axis=-1, epsilon=1e-5, stash_type=1):
    """ONNX LayerNormalization-17: normalize over axes [axis, rank); returns Y, Mean, InvStdDev (stash dtype)."""
    op = "LayerNormalization"
    a = _axis(op, int(axis), x.ndim)
    axes = tuple(range(a, x.ndim))
    work = _stash(x, stash_type)
    mean = work.mean(axis=axes, keepdims=True)
    centered = work - mean
    var = np.mean(np.square(centered), axis=axes, keepdims=True)
    inv_std = 1.0 / np.sqrt(var + np.asarray(epsilon, dtype=work.dtype))
    y = centered
    y *= inv_std
    y *= np.asarray(scale).astype(work.dtype, copy=False)
    if bias is not None:
        y += np.asarray(bias).astype(work.dtype, copy=False)
    stat_dtype = work.dtype if int(stash_type) == 1 else x.dtype
    return y.astype(x.dtype, copy=False), mean.astype(stat_dtype), inv_std.astype(stat_dtype)


@kernel("RMSNormalization", since=23, dtypes=FLOAT_TYPES)
def rms_normalization(x, scale, *, axis=-1, epsilon=1e-5, stash_type=1):
    """ONNX RMSNormalization-23: x / sqrt(mean(x^2) + epsilon) over axes [axis, rank), times scale."""
    op = "RMSNormalization"
    a = _axis(op, int(axis), x.ndim)
    work = _stash(x, stash_type)
    ms = np.mean(np.square(work), axis=tuple(range(a, x.ndim)), keepdims=True)
    y = work / np.sqrt(ms + np.asarray(epsilon, dtype=work.dtype))
    y *= np.asarray(scale).astype(work.dtype, copy=False)
    return y.astype(x.dtype, copy=False)


def _normalize_groups(op: str, x: np.ndarray, groups: int, epsilon: float, stash_type: int = 1) -> np.ndarray:
    """x (N, C, ...) normalized over each of `groups` channel groups and all spatial positions, in the stash dtype."""
    n, c = x.shape[:2]
    if groups < 1 or c % groups:
        raise KernelError(f"{op}: {c} channels cannot be split into {groups} groups")
    work = _stash(x, stash_type).reshape(n, groups, -1)
    mean = work.mean(axis=2, keepdims=True)
    centered = work - mean
    var = np.mean(np.square(centered), axis=2, keepdims=True)
    centered *= 1.0 / np.sqrt(var + np.asarray(epsilon, dtype=work.dtype))
    return centered.reshape(x.shape)


@kernel("InstanceNormalization", since=1, dtypes=FLOAT_TYPES)
def instance_normalization(x, scale, bias, *, consumed_inputs=None, epsilon=1e-5):
    """ONNX InstanceNormalization-1/6/22: per (image, channel) normalization over spatial axes, then scale/bias."""
    op = "InstanceNormalization"
    if x.ndim < 3:
        raise KernelError(f"{op}: input X must be (N, C, spatial...), got shape {x.shape}")
    y = _normalize_groups(op, x, x.shape[1], epsilon)
    y *= _channel_vector(op, "scale", scale, x, False).astype(y.dtype)
    y += _channel_vector(op, "B", bias, x, False).astype(y.dtype)
    return y.astype(x.dtype, copy=False)


@kernel("GroupNormalization", since=18, dtypes=FLOAT_TYPES)
def group_normalization_18(x, scale, bias, *, epsilon=1e-5, num_groups=None):
    """ONNX GroupNormalization-18: scale and bias hold one value per group."""
    op = "GroupNormalization"
    groups = _num_groups(op, num_groups, x)
    if np.size(scale) != groups or np.size(bias) != groups:
        raise KernelError(f"{op}-18: scale and bias must have num_groups={groups} values, got "
                          f"{np.size(scale)} and {np.size(bias)}")
    per_channel = x.shape[1] // groups
    return _group_norm(op, x, np.repeat(np.asarray(scale).ravel(), per_channel),
                       np.repeat(np.asarray(bias).ravel(), per_channel), groups, epsilon, 1)


@kernel("GroupNormalization", since=21, dtypes=FLOAT_TYPES)
def group_normalization(x, scale, bias, *, epsilon=1e-5, num_groups=None, stash_type=1):
    """ONNX GroupNormalization-21: statistics per group, scale and bias per channel."""
    op = "GroupNormalization"
    return _group_norm(op, x, scale, bias, _num_groups(op, num_groups, x), epsilon, stash_type)


def _num_groups(op: str, num_groups, x: np.ndarray) -> int:
    if num_groups is None:
        raise KernelError(f"{op}: the num_groups attribute is required")
    if x.ndim < 2:
        raise KernelError(f"{op}: input X must be (N, C, ...), got shape {x.shape}")
    return int(num_groups)


def _group_norm(op, x, scale, bias, groups, epsilon, stash_type):
    y = _normalize_groups(op, x, groups, epsilon, stash_type)
    y *= _channel_vector(op, "scale", scale, x, False).astype(y.dtype)
    y += _channel_vector(op, "bias", bias, x, False).astype(y.dtype)
    return y.astype(x.dtype, copy=False)


# --------------------------------------------------------------------------- LRN / Lp / MVN


@kernel("LRN", since=1, dtypes=FLOAT_TYPES)
def lrn(x, *, alpha=1e-4, beta=0.75, bias=1.0, size=None):
    """ONNX LRN-1/13: x / (bias + alpha/size * sum of squares over `size` neighbouring channels)^beta."""
    op = "LRN"
    if size is None or int(size) < 1:
        raise KernelError(f"{op}: the size attribute must be a positive integer, got {size}")
    if x.ndim < 3:
        raise KernelError(f"{op}: input X must be (N, C, spatial...), got shape {x.shape}")
    size = int(size)
    work = x.astype(compute_dtype(x.dtype), copy=False)
    before, after = (size - 1) // 2, size - 1 - (size - 1) // 2
    sq = np.square(work)
    c = x.shape[1]
    # running sum over channels: window [c - before, c + after] is csum[c + after + 1] - csum[c - before]
    csum = np.zeros((x.shape[0], c + 1) + x.shape[2:], dtype=np.float64 if work.dtype == np.float64 else np.float32)
    np.cumsum(sq, axis=1, out=csum[:, 1:])
    hi = np.minimum(np.arange(c) + after + 1, c)
    lo = np.maximum(np.arange(c) - before, 0)
    window = csum[:, hi] - csum[:, lo]
    y = work / np.power(bias + (alpha / size) * window, beta)
    return y.astype(x.dtype, copy=False)


@kernel("LpNormalization", since=1, dtypes=FLOAT_TYPES)
def lp_normalization(x, *, axis=-1, p=2):
    """ONNX LpNormalization-1/22: x divided by its L1 or L2 norm along `axis` (0 where the norm is 0)."""
    op = "LpNormalization"
    a = _axis(op, int(axis), x.ndim)
    if int(p) not in (1, 2):
        raise KernelError(f"{op}: p={p} must be 1 or 2")
    work = x.astype(compute_dtype(x.dtype), copy=False)
    norm = (np.abs(work).sum(axis=a, keepdims=True) if int(p) == 1
            else np.sqrt(np.square(work).sum(axis=a, keepdims=True)))
    safe = np.where(norm == 0, 1, norm)
    return np.where(norm == 0, 0, work / safe).astype(x.dtype, copy=False)


@kernel("MeanVarianceNormalization", since=9, dtypes=FLOAT_TYPES)
def mean_variance_normalization(x, *, axes=(0, 2, 3)):
    """ONNX MeanVarianceNormalization-9/13: (x - mean) / (std + 1e-9) over `axes`, as the function body says."""
    op = "MeanVarianceNormalization"
    axes = tuple(_axis(op, int(a), x.ndim) for a in axes)
    work = _stash(x)
    mean = work.mean(axis=axes, keepdims=True)
    centered = work - mean
    std = np.sqrt(np.mean(np.square(centered), axis=axes, keepdims=True))
    return (centered / (std + 1e-9)).astype(x.dtype, copy=False)
