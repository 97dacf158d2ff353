"""Convolution family: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv, and com.microsoft
FusedConv (Conv + residual + activation), all on (N, C, *spatial) tensors.

Everything is lowered to matrix products so BLAS does the arithmetic:

* a 1x1 kernel is one matmul on the input viewed as (C, H*W), without copying it;
* a larger kernel gathers an im2col matrix (C*kH*kW, OH*OW) from a strided view of the padded
  input into a reused per-thread buffer, then does one matmul per image (grouped convolutions
  batch the per-group products);
* a depthwise kernel (one input channel per group) accumulates kH*kW shifted, scaled slices;
* ConvTranspose is a matmul to columns followed by a col2im scatter-add, one slice per kernel tap.

`window_geometry` (pads and output extent from auto_pad/pads/strides/dilations/ceil_mode) is
shared with the pooling family.
"""
from __future__ import annotations

import itertools
import threading
from functools import partial
from typing import Callable, Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from xgraph.errors import KernelError
from xgraph.runners.kernels.parallel import chunks, run_parallel, split_count, split_count_elements
from xgraph.runners.kernels.registry import kernel

try:  # ml_dtypes ships with onnx; without it bfloat16 tensors cannot exist anyway
    from ml_dtypes import bfloat16 as _bfloat16

    _BFLOAT16: tuple = (np.dtype(_bfloat16),)
except ImportError:  # pragma: no cover
    _BFLOAT16 = ()

FLOAT_TYPES = (np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.float64), *_BFLOAT16)
INT8_TYPES = (np.dtype(np.uint8), np.dtype(np.int8))


# --------------------------------------------------------------------------- geometry


def _ints(op: str, name: str, value, rank: int, default: int) -> list[int]:
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
    strides = _ints(op, "strides", strides, rank, 1)
    dilations = _ints(op, "dilations", dilations, rank, 1)
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
        p = _ints(op, "pads", pads, 2 * rank, 0)
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


# --------------------------------------------------------------------------- Conv core

#: im2col matrices up to this size are built in a reused per-thread buffer: a fresh multi-megabyte
#: array costs a page fault per 4 KiB on first touch, as much as the copy into it. Larger ones are
#: allocated per call so an occasional huge convolution does not pin its memory.
SCRATCH_LIMIT_BYTES = 64 << 20
_scratch = threading.local()


def _im2col(view: np.ndarray, rows: int, length: int) -> np.ndarray:
    """The (rows, length) matrix of a (C, *K, *O) window view, valid until this thread's next call."""
    nbytes = rows * length * view.dtype.itemsize
    if nbytes > SCRATCH_LIMIT_BYTES:
        return view.reshape(rows, length)
    buffer = getattr(_scratch, "buffer", None)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = _scratch.buffer = np.empty(nbytes, dtype=np.uint8)
    col = buffer[:nbytes].view(view.dtype).reshape(rows, length)
    np.copyto(col.reshape(view.shape), view)
    return col


def _check_conv_shapes(op: str, x: np.ndarray, w: np.ndarray, group: int, kernel_shape) -> tuple[int, ...]:
    if x.ndim < 3:
        raise KernelError(f"{op}: input X must be (N, C, spatial...), got shape {x.shape}")
    if w.ndim != x.ndim:
        raise KernelError(f"{op}: weight W has rank {w.ndim} but X has rank {x.ndim} (shapes {w.shape}, {x.shape})")
    group = int(group)
    if group < 1 or x.shape[1] != w.shape[1] * group or w.shape[0] % group:
        raise KernelError(f"{op}: channel mismatch: X has {x.shape[1]} channels, W is {w.shape} and group={group} "
                          f"(need C == W.shape[1] * group and M divisible by group)")
    ks = tuple(w.shape[2:])
    if kernel_shape is not None and len(kernel_shape) and tuple(int(k) for k in kernel_shape) != ks:
        raise KernelError(f"{op}: kernel_shape={list(kernel_shape)} does not match weight spatial shape {list(ks)}")
    return ks


def conv_core(op: str, x: np.ndarray, w: np.ndarray, *, group: int = 1, kernel_shape=None,
              strides=None, dilations=None, pads=None, auto_pad: str = "NOTSET",
              bias: np.ndarray | None = None, residual: np.ndarray | None = None,
              activation: Callable[[np.ndarray], object] | None = None) -> np.ndarray:
    """Cross-correlation of x (N, C, *S) with w (M, C/group, *K) in x's dtype, then the epilogue:
    + bias (M values), + residual (the output's shape), then `activation(block)` in place.

    With one group the output is cut into blocks (of output rows, or of output channels when
    the image is small) that run on the intra-op threads; each block gets its epilogue while it
    is still in cache, so a fused Conv + Add + Relu makes one pass over memory.
    """
    ks = _check_conv_shapes(op, x, w, group, kernel_shape)
    group = int(group)
    n, c = x.shape[:2]
    m = w.shape[0]
    strides, dilations, begin, end, out = window_geometry(
        op, x.shape[2:], ks, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad)
    length = int(np.prod(out))
    taps = int(np.prod(ks))
    dtype = np.result_type(x.dtype, w.dtype)
    out_shape = (n, m) + tuple(out)
    epilogue = _Epilogue(op, out_shape, dtype, bias, residual, activation)

    if group == 1:
        y = np.empty((n, m, length), dtype=dtype)
        wm = w.reshape(m, c * taps)
        if taps == 1 and not any(begin) and not any(end):
            # 1x1: subsample for strides, then the input already is the (C, L) matrix
            sub = x[(slice(None), slice(None)) + tuple(slice(0, o * s, s) for o, s in zip(out, strides))]
            cols = np.ascontiguousarray(sub).reshape(n, c, length)
            for i in range(n):
                _matmul_blocks(wm, cols[i], y[i], epilogue, i)
        else:
            view = windows(pad_spatial(x, begin, end), ks, strides, dilations, out)  # (N, C, *K, *O)
            for i in range(n):
                _im2col_matmul(view[i], wm, y[i], epilogue, i, out)
        return y.reshape(out_shape)

    xp = pad_spatial(x, begin, end)
    view = windows(xp, ks, strides, dilations, out)  # (N, C, *K, *O)
    if c // group == 1 and m == group and len(ks) == 2 and tuple(strides) == (1, 1):
        y = _depthwise_rows(xp, w, dilations, out)
    elif c // group == 1:
        y = _depthwise(view, w, group, out)
    else:
        y = _grouped(view, w, group, taps, length)
    y = y.reshape(n, m, length)
    for i in range(n):
        epilogue(y[i], slice(None), slice(None), i)
    return y.reshape(out_shape)


class ResidualNotInPlace(KernelError):
    """A residual that cannot be added into the convolution's output in place (it would grow the shape)."""


class _Epilogue:
    """Bias, residual and activation applied in place to one (channels, positions) block of an output image."""

    __slots__ = ("bias", "residual", "activation", "active")

    def __init__(self, op: str, out_shape: tuple[int, ...], dtype: np.dtype, bias, residual, activation) -> None:
        n, m = out_shape[:2]
        self.bias = None
        if bias is not None:
            bias = np.asarray(bias)
            if bias.size != m:
                raise KernelError(f"{op}: bias B has {bias.size} values but the output has {m} channels")
            self.bias = bias.astype(dtype, copy=False).reshape(m, 1)
        self.residual = None
        if residual is not None:
            residual = np.asarray(residual)
            if tuple(residual.shape) != tuple(out_shape):
                try:
                    grown = np.broadcast_shapes(residual.shape, out_shape)
                except ValueError:
                    grown = None
                if grown != tuple(out_shape):
                    raise ResidualNotInPlace(f"{op}: the residual input has shape {tuple(residual.shape)}, which "
                                             f"does not broadcast to the convolution output {tuple(out_shape)}")
                residual = np.broadcast_to(residual, out_shape)
            self.residual = residual.astype(dtype, copy=False).reshape(n, m, -1)
        self.activation = activation
        self.active = self.bias is not None or self.residual is not None or activation is not None

    def __call__(self, block: np.ndarray, rows: slice, cols: slice, image: int) -> None:
        if self.bias is not None:
            block += self.bias[rows]
        if self.residual is not None:
            block += self.residual[image, rows, cols]
        if self.activation is not None:
            self.activation(block)


#: Each thread works through its share of an output in sub-blocks whose gathered input and
#: output columns take at most this many bytes, so the epilogue finds them still in cache.
SUB_BLOCK_BYTES = 1 << 20
#: ...but never fewer output positions per matrix product than this (BLAS needs some width).
MIN_SUB_BLOCK_COLUMNS = 128


def _sub_blocks(a: int, b: int, unit_bytes: int, unit_columns: int) -> list[tuple[int, int]]:
    """[a, b) cut into runs of units of `unit_bytes` each that fit SUB_BLOCK_BYTES (see above)."""
    per = max(SUB_BLOCK_BYTES // max(unit_bytes, 1), -(-MIN_SUB_BLOCK_COLUMNS // max(unit_columns, 1)), 1)
    return [(i, min(i + per, b)) for i in range(a, b, per)]


def _matmul_blocks(wm: np.ndarray, cols: np.ndarray, y: np.ndarray, epilogue: _Epilogue, image: int) -> None:
    """y = wm @ cols (+ epilogue), cut into blocks of output channels (rows of y).

    Row blocks of y are contiguous: numpy's element-wise epilogue runs twice as fast on them as
    on column blocks (rows with a stride), and for thin products (few input channels) the
    epilogue costs as much as the product itself.
    """
    m, length = y.shape
    parts = split_count(m * wm.shape[1] * length)
    per = max(8, SUB_BLOCK_BYTES // max(length * y.itemsize, 1))

    def block(a: int, b: int) -> None:
        for lo in range(a, b, per):
            hi = min(lo + per, b)
            np.matmul(wm[lo:hi], cols, out=y[lo:hi])
            if epilogue.active:
                epilogue(y[lo:hi], slice(lo, hi), slice(None), image)
    run_parallel([partial(block, a, b) for a, b in chunks(m, parts)])


def _im2col_matmul(view: np.ndarray, wm: np.ndarray, y: np.ndarray, epilogue: _Epilogue, image: int,
                   out: Sequence[int]) -> None:
    """y = wm @ im2col(view) (+ epilogue) for one image; view is (C, *K, *O).

    Large images are cut along the first output axis: each block gathers only its own columns
    (into its thread's scratch buffer, a cache-sized piece at a time) and multiplies them. Small
    images (fewer positions than output channels) are cut along the input channels instead:
    each block gathers and multiplies its channels' rows only, and the partial products are
    summed before the epilogue.
    """
    m, length = y.shape
    rows = wm.shape[1]
    channels = view.shape[0]
    taps = rows // channels
    parts = split_count(m * rows * length)
    if parts == 1:
        np.matmul(wm, _im2col(view, rows, length), out=y)
        if epilogue.active:
            epilogue(y, slice(None), slice(None), image)
        return
    if length < m or out[0] < parts:
        ranges = chunks(channels, parts)
        partial_sums: list[np.ndarray] = [y] + [np.empty_like(y) for _ in ranges[1:]]

        def reduce_block(k: int, a: int, b: int) -> None:
            piece = view[a:b]
            np.matmul(wm[:, a * taps:b * taps], _im2col(piece, (b - a) * taps, length), out=partial_sums[k])
        run_parallel([partial(reduce_block, k, a, b) for k, (a, b) in enumerate(ranges)])
        for extra in partial_sums[1:]:
            y += extra
        if epilogue.active:
            epilogue(y, slice(None), slice(None), image)
        return
    inner = length // out[0]  # positions per step of the first output axis
    lead = (slice(None),) * (view.ndim - len(out))

    def block(a: int, b: int) -> None:
        for lo, hi in _sub_blocks(a, b, (m + rows) * inner * y.itemsize, inner):
            cols = slice(lo * inner, hi * inner)
            col = _im2col(view[lead + (slice(lo, hi),)], rows, (hi - lo) * inner)
            if not epilogue.active:
                np.matmul(wm, col, out=y[:, cols])
                continue
            # the epilogue runs twice as fast on a contiguous block as on y's strided columns
            piece = np.matmul(wm, col)
            epilogue(piece, slice(None), cols, image)
            y[:, cols] = piece
    run_parallel([partial(block, a, b) for a, b in chunks(out[0], parts)])


def _grouped(view: np.ndarray, w: np.ndarray, group: int, taps: int, length: int) -> np.ndarray:
    """Grouped convolution: one matrix product per group, the groups in blocks on the intra-op threads."""
    n, c = view.shape[:2]
    m = w.shape[0]
    rows = (c // group) * taps
    cols = view.reshape(n, group, rows, length)  # (N, g, C/g * K, L): a copy when the view has gaps
    wg = w.reshape(group, m // group, rows)
    y = np.empty((n, group, m // group, length), dtype=np.result_type(view.dtype, w.dtype))

    def block(a: int, b: int) -> None:
        np.matmul(wg[a:b], cols[:, a:b], out=y[:, a:b])
    run_parallel([partial(block, a, b) for a, b in chunks(group, split_count(m * rows * length * n))])
    return y


def _depthwise_rows(xp: np.ndarray, w: np.ndarray, dilations: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """A 2-D depthwise convolution with stride 1 (one filter per channel), on flattened image rows.

    Each padded channel is one flat row of Hp*Wp values, so every tap reads one contiguous run
    of OH*Wp values per channel (long inner loops instead of OW-long ones); the Wp - OW extra
    columns this computes per output row are dropped at the end. Channels are cut into blocks
    on the intra-op threads.
    """
    n, c, hp, wp = xp.shape
    kh, kw = w.shape[2:]
    dh, dw = dilations
    oh, ow = out
    length = oh * wp
    slack = (kw - 1) * dw  # the last tap's run reaches this far past the padded image
    flat = np.empty((n, c, hp * wp + slack), dtype=np.result_type(xp.dtype, w.dtype))
    flat[:, :, hp * wp:] = 0
    flat[:, :, :hp * wp].reshape(n, c, hp, wp)[...] = xp
    taps = w.reshape(c, kh * kw).astype(flat.dtype, copy=False)
    y = np.empty((n, c, oh, ow), dtype=flat.dtype)

    def block(i: int, a: int, b: int) -> None:
        acc = np.empty((b - a, length), dtype=flat.dtype)
        tmp = np.empty_like(acc)
        for t in range(kh * kw):
            r, q = divmod(t, kw)
            offset = r * dh * wp + q * dw
            run = flat[i, a:b, offset:offset + length]
            if t == 0:
                np.multiply(run, taps[a:b, t:t + 1], out=acc)
            else:
                np.multiply(run, taps[a:b, t:t + 1], out=tmp)
                acc += tmp
        y[i, a:b] = acc.reshape(b - a, oh, wp)[:, :, :ow]
    parts = split_count_elements(c * length * kh * kw * 2)
    run_parallel([partial(block, i, a, b) for i in range(n) for a, b in chunks(c, parts)])
    return y


def _depthwise(view: np.ndarray, w: np.ndarray, group: int, out: Sequence[int]) -> np.ndarray:
    """One input channel per group: sum over taps of weight * shifted slice (no per-channel Python loop)."""
    n = view.shape[0]
    m = w.shape[0]
    mult = m // group
    rank = len(out)
    ks = w.shape[2:]
    wt = w.reshape(group, mult, -1)
    acc = np.zeros((n, group, mult) + tuple(out), dtype=np.result_type(view.dtype, w.dtype))
    expand = (slice(None), slice(None)) + (None,) * rank
    for t, tap in enumerate(itertools.product(*(range(k) for k in ks))):
        piece = view[(slice(None), slice(None)) + tap]  # (N, C, *O)
        acc += wt[:, :, t][expand] * piece[:, :, None]
    return acc.reshape((n, m) + tuple(out))


def _add_bias(op: str, y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if b is None:
        return y
    b = np.asarray(b)
    if b.size != y.shape[1]:
        raise KernelError(f"{op}: bias B has {b.size} values but the output has {y.shape[1]} channels")
    y += b.reshape((1, -1) + (1,) * (y.ndim - 2)).astype(y.dtype, copy=False)
    return y


@kernel("Conv", since=1, dtypes=FLOAT_TYPES)
def conv(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
         strides=None):
    """ONNX Conv-1/11/22 (same semantics, wider type lists): cross-correlation, optional bias, groups."""
    work = compute_dtype(x.dtype)
    y = conv_core("Conv", x.astype(work, copy=False), w.astype(work, copy=False), group=group,
                  kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad,
                  bias=b)
    return y.astype(x.dtype, copy=False)


def activation_in_place(activation: str, params: Sequence[float] | None = None) -> Callable[[np.ndarray], None]:
    """A FusedConv activation as a function updating an output block in place (no allocation)."""
    p = [float(v) for v in params or ()]
    if activation == "Relu":
        return lambda y: np.maximum(y, 0, out=y)
    if activation == "LeakyRelu":
        alpha = p[0] if p else 0.01

        def leaky(y):
            negative = np.minimum(y, 0)
            negative *= alpha - 1
            y += negative
        return leaky
    if activation == "Tanh":
        return lambda y: np.tanh(y, out=y)
    if activation == "Sigmoid":
        def sigmoid(y):
            y *= 0.5
            np.tanh(y, out=y)
            y += 1
            y *= 0.5
        return sigmoid
    if activation == "Clip":
        low, high = (p[0] if p else -np.inf), (p[1] if len(p) > 1 else np.inf)
        return lambda y: np.clip(y, low, high, out=y)
    if activation == "HardSigmoid":
        alpha, beta = (p[0] if p else 0.2), (p[1] if len(p) > 1 else 0.5)

        def hard_sigmoid(y):
            y *= alpha
            y += beta
            np.clip(y, 0, 1, out=y)
        return hard_sigmoid
    raise KernelError(f"FusedConv: activation={activation!r} is not one of Relu, LeakyRelu, Tanh, Sigmoid, "
                      f"Clip, HardSigmoid")


@kernel("FusedConv", domain="com.microsoft", since=1, dtypes=FLOAT_TYPES)
def fused_conv(x, w, b=None, z=None, *, activation="", activation_params=None, auto_pad="NOTSET", dilations=None,
               group=1, kernel_shape=None, pads=None, strides=None):
    """com.microsoft FusedConv (onnxruntime's fusion of Conv, an optional residual Z and an activation).

    activation(Conv(X, W, B) + Z), updated in place on the convolution's own output: the target a
    graph pass can fuse Conv/Add/Relu chains into (with BatchNormalization folded into W and B).
    """
    work = compute_dtype(x.dtype)
    act = activation_in_place(activation, activation_params) if activation else None
    y = conv_core("FusedConv", x.astype(work, copy=False), w.astype(work, copy=False), group=group,
                  kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad,
                  bias=b, residual=z, activation=act)
    return y.astype(x.dtype, copy=False)


# --------------------------------------------------------------------------- ConvTranspose


def col2im_add(cols: np.ndarray, canvas: np.ndarray, kernel_shape: Sequence[int], strides: Sequence[int],
               dilations: Sequence[int], positions: Sequence[int]) -> np.ndarray:
    """Scatter-add cols (N, C, *K, *P) into canvas (N, C, *F) at f = p*stride + k*dilation; one slice per tap."""
    for tap in itertools.product(*(range(k) for k in kernel_shape)):
        region = tuple(slice(t * d, t * d + (p - 1) * s + 1, s)
                       for t, d, p, s in zip(tap, dilations, positions, strides))
        canvas[(slice(None), slice(None)) + region] += cols[(slice(None), slice(None)) + tap]
    return canvas


def _crop_or_extend(full: np.ndarray, begin: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """full[..., b:b+o] per spatial axis, zero-extended where the window runs past the end."""
    rank = len(out)
    if all(b == 0 and o == f for b, o, f in zip(begin, out, full.shape[-rank:])):
        return full
    res = np.zeros(full.shape[:-rank] + tuple(out), dtype=full.dtype)
    src, dst = [], []
    for b, o, f in zip(begin, out, full.shape[-rank:]):
        lo, hi = max(b, 0), min(b + o, f)
        src.append(slice(lo, max(hi, lo)))
        dst.append(slice(lo - b, lo - b + max(hi - lo, 0)))
    lead = (slice(None),) * (full.ndim - rank)
    res[lead + tuple(dst)] = full[lead + tuple(src)]
    return res


@kernel("ConvTranspose", since=1, dtypes=FLOAT_TYPES)
def conv_transpose(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    """ONNX ConvTranspose-1/11/22: the gradient of Conv; output_shape, when given, decides the pads."""
    op = "ConvTranspose"
    if x.ndim < 3 or w.ndim != x.ndim:
        raise KernelError(f"{op}: X {x.shape} and W {w.shape} must both be (N|C, C|M/group, spatial...)")
    group = int(group)
    n, c = x.shape[:2]
    if group < 1 or c % group or w.shape[0] != c:
        raise KernelError(f"{op}: channel mismatch: X has {c} channels, W is {w.shape}, group={group} "
                          f"(need W.shape[0] == C and C divisible by group)")
    ks = tuple(w.shape[2:])
    if kernel_shape is not None and len(kernel_shape) and tuple(int(k) for k in kernel_shape) != ks:
        raise KernelError(f"{op}: kernel_shape={list(kernel_shape)} does not match weight spatial shape {list(ks)}")
    rank = len(ks)
    spatial = x.shape[2:]
    strides = _ints(op, "strides", strides, rank, 1)
    dilations = _ints(op, "dilations", dilations, rank, 1)
    output_padding = _ints(op, "output_padding", output_padding, rank, 0)
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    full = [s * (i - 1) + op_ + (k - 1) * d + 1
            for s, i, op_, k, d in zip(strides, spatial, output_padding, ks, dilations)]
    if output_shape is not None and len(output_shape):
        target = [int(v) for v in output_shape][-rank:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [i * s for i, s in zip(spatial, strides)]
    else:
        target = None
    if target is not None:  # "If output_shape is specified pads values are ignored"
        total = [max(f - t, 0) for f, t in zip(full, target)]
        if auto_pad == "SAME_UPPER":
            begin = [t // 2 for t in total]
        else:  # SAME_LOWER and NOTSET put the odd pad first
            begin = [t - t // 2 for t in total]
        out = target
    else:
        if auto_pad not in ("NOTSET", "VALID", "", "SAME_UPPER", "SAME_LOWER"):
            raise KernelError(f"{op}: auto_pad={auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
        p = _ints(op, "pads", None if auto_pad == "VALID" else pads, 2 * rank, 0)
        begin = p[:rank]
        out = target or [f - pb - pe for f, pb, pe in zip(full, p[:rank], p[rank:])]
    if any(o < 1 for o in out):
        raise KernelError(f"{op}: computed output shape {out} is not positive (pads {pads}, output_shape {output_shape})")

    work = compute_dtype(x.dtype)
    xw, ww = x.astype(work, copy=False), w.astype(work, copy=False)
    m_g = w.shape[1]
    taps = int(np.prod(ks))
    length = int(np.prod(spatial))
    wg = ww.reshape(group, c // group, m_g * taps).transpose(0, 2, 1)  # (g, M/g*K, C/g)
    cols = np.matmul(wg, xw.reshape(n, group, c // group, length))      # (N, g, M/g*K, L)
    cols = cols.reshape((n, group * m_g) + ks + tuple(spatial))
    canvas = np.zeros((n, group * m_g) + tuple(max(f, bb + o) for f, bb, o in zip(full, begin, out)), dtype=work)
    col2im_add(cols, canvas, ks, strides, dilations, spatial)
    y = _crop_or_extend(canvas, begin, out)
    return _add_bias(op, y, b).astype(x.dtype, copy=False)


# --------------------------------------------------------------------------- integer / quantized


def _zero_point_shift(op: str, name: str, a: np.ndarray, zero_point, per_channel_axis_len: int | None) -> np.ndarray:
    """`a` as float64 minus its zero point (scalar, or one per output channel for weights)."""
    out = a.astype(np.float64)
    if zero_point is None:
        return out
    zp = np.asarray(zero_point).astype(np.float64)
    if zp.size == 1:
        return out - zp.reshape(())
    if per_channel_axis_len is not None and zp.ndim == 1 and zp.size == per_channel_axis_len:
        return out - zp.reshape((-1,) + (1,) * (a.ndim - 1))
    raise KernelError(f"{op}: {name} has shape {zp.shape}; expected a scalar"
                      + (f" or one value per output channel ({per_channel_axis_len})" if per_channel_axis_len else ""))


def _integer_conv(op, x, w, x_zero_point, w_zero_point, attrs) -> np.ndarray:
    """Exact integer convolution of zero-point-shifted operands, accumulated in float64 (BLAS) then int64."""
    xs = _zero_point_shift(op, "x_zero_point", x, x_zero_point, None)
    ws = _zero_point_shift(op, "w_zero_point", w, w_zero_point, w.shape[0])
    y = conv_core(op, xs, ws, **attrs)
    return np.rint(y).astype(np.int64)


@kernel("ConvInteger", since=10, dtypes=INT8_TYPES)
def conv_integer(x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    """ONNX ConvInteger-10: int32 convolution of (x - x_zero_point) and (w - w_zero_point); pads are 0 after the shift."""
    attrs = dict(group=group, kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads,
                 auto_pad=auto_pad)
    return _integer_conv("ConvInteger", x, w, x_zero_point, w_zero_point, attrs).astype(np.int32)


@kernel("QLinearConv", since=10, dtypes=INT8_TYPES)
def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, b=None, *,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    """ONNX QLinearConv-10: integer conv + int32 bias, requantized with round-half-even and saturation."""
    op = "QLinearConv"
    attrs = dict(group=group, kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads,
                 auto_pad=auto_pad)
    acc = _integer_conv(op, x, w, x_zero_point, w_zero_point, attrs)
    if b is not None:
        acc = acc + np.asarray(b).astype(np.int64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    ws = np.asarray(w_scale, dtype=np.float64)
    if ws.size > 1:
        if ws.ndim != 1 or ws.size != w.shape[0]:
            raise KernelError(f"{op}: w_scale has shape {ws.shape}; expected a scalar or {w.shape[0]} values")
        ws = ws.reshape((1, -1) + (1,) * (acc.ndim - 2))
    multiplier = np.float64(np.asarray(x_scale).reshape(())) * ws / np.float64(np.asarray(y_scale).reshape(()))
    out_dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else x.dtype
    zp = 0.0 if y_zero_point is None else np.float64(np.asarray(y_zero_point).reshape(()))
    y = np.rint(acc * multiplier) + zp
    info = np.iinfo(out_dtype)
    return np.clip(y, info.min, info.max).astype(out_dtype)


# --------------------------------------------------------------------------- DeformConv


@kernel("DeformConv", since=19, dtypes=FLOAT_TYPES)
def deform_conv(x, w, offset, b=None, mask=None, *, dilations=None, group=1, kernel_shape=None, offset_group=1,
                pads=None, strides=None):
    """ONNX DeformConv-19/22 (2-D): each tap samples the input bilinearly at its learned offset, zero outside."""
    op = "DeformConv"
    ks = _check_conv_shapes(op, x, w, group, kernel_shape)
    if len(ks) != 2:
        raise KernelError(f"{op}: only 2-D inputs are supported, got X of shape {x.shape}")
    group, offset_group = int(group), int(offset_group)
    n, c, h, wd = x.shape
    m = w.shape[0]
    kh, kw = ks
    strides, dilations, begin, _end, out = window_geometry(op, (h, wd), ks, strides=strides, dilations=dilations,
                                                           pads=pads)
    oh, ow = out
    if offset_group < 1 or c % offset_group:
        raise KernelError(f"{op}: offset_group={offset_group} does not divide the {c} input channels")
    if offset.shape != (n, offset_group * kh * kw * 2, oh, ow):
        raise KernelError(f"{op}: offset has shape {offset.shape}; expected {(n, offset_group * kh * kw * 2, oh, ow)}")
    work = compute_dtype(x.dtype)
    off = offset.astype(work, copy=False).reshape(n, offset_group, kh, kw, 2, oh, ow)
    base_y = (np.arange(oh) * strides[0] - begin[0])[None, :] + (np.arange(kh) * dilations[0])[:, None]
    base_x = (np.arange(ow) * strides[1] - begin[1])[None, :] + (np.arange(kw) * dilations[1])[:, None]
    sy = base_y[None, None, :, None, :, None] + off[:, :, :, :, 0]  # (N, G, kh, kw, OH, OW)
    sx = base_x[None, None, None, :, None, :] + off[:, :, :, :, 1]
    y0, x0 = np.floor(sy), np.floor(sx)
    ly, lx = sy - y0, sx - x0
    y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
    xr = x.astype(work, copy=False).reshape(n, offset_group, c // offset_group, h * wd)
    sampled = 0
    for dy, dx, weight in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx), (1, 0, ly * (1 - lx)), (1, 1, ly * lx)):
        yy, xx = y0 + dy, x0 + dx
        inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < wd)
        flat = (np.clip(yy, 0, h - 1) * wd + np.clip(xx, 0, wd - 1)).reshape(n, offset_group, 1, -1)
        vals = np.take_along_axis(xr, flat, axis=3)  # (N, G, C/G, kh*kw*OH*OW)
        sampled = sampled + vals * np.where(inside, weight, 0).astype(work).reshape(n, offset_group, 1, -1)
    if mask is not None:
        if mask.shape != (n, offset_group * kh * kw, oh, ow):
            raise KernelError(f"{op}: mask has shape {mask.shape}; expected {(n, offset_group * kh * kw, oh, ow)}")
        sampled = sampled * mask.astype(work, copy=False).reshape(n, offset_group, 1, -1)
    cols = sampled.reshape(n, group, (c // group) * kh * kw, oh * ow)
    y = np.matmul(w.astype(work, copy=False).reshape(group, m // group, -1), cols).reshape(n, m, oh, ow)
    return _add_bias(op, y, b).astype(x.dtype, copy=False)
