"""Convolution lowered to matrix products, run in blocks on the intra-op threads.

* a 1x1 kernel is one matmul on the input viewed as (C, H*W), cut into blocks of output channels;
* a larger kernel gathers an im2col matrix (C*kH*kW, OH*OW) from a strided view of the padded
  input into a reused per-thread buffer: large images in blocks of output rows (each block
  gathers only its own columns, a cache-sized piece at a time), small images in blocks of
  input channels whose partial products are summed;
* grouped convolutions run one matmul per group, the groups in blocks;
* a depthwise kernel (one input channel per group) accumulates kH*kW shifted, scaled slices,
  with stride 1 on flattened image rows.

The epilogue (bias, residual, activation) is applied to each output block right after its
product, in place, while the block is in cache: the target of the run mode's fusion
(`xgraph.runners.fusion`) and of com.microsoft FusedConv.
"""
from __future__ import annotations

import itertools
import threading
from functools import partial
from typing import Callable, Sequence

import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.op_elementwise import broadcasts_onto
from xgraph.kernels.parallel import chunks, run_parallel, split_count, split_count_elements
from xgraph.kernels.windows import pad_spatial, window_geometry, windows

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


def check_conv_shapes(op: str, x: np.ndarray, w: np.ndarray, group: int, kernel_shape) -> tuple[int, ...]:
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
              activation: Callable[[np.ndarray], object] | None = None,
              into: np.ndarray | None = None) -> np.ndarray:
    """Cross-correlation of x (N, C, *S) with w (M, C/group, *K) in x's dtype, then the epilogue:
    + bias (M values), + residual (the output's shape), then `activation(block)` in place.

    `into`, when it is a C-contiguous array of the output's shape and dtype, receives the result
    and is returned (one group only; otherwise a new array is returned).

    With one group the output is cut into blocks (of output rows, or of output channels when
    the image is small) that run on the intra-op threads; each block gets its epilogue while it
    is still in cache, so a fused Conv + Add + Relu makes one pass over memory.
    """
    ks = check_conv_shapes(op, x, w, group, kernel_shape)
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
        usable = into is not None and into.shape == out_shape and into.dtype == dtype and into.flags.c_contiguous
        y = into.reshape(n, m, length) if usable else np.empty((n, m, length), dtype=dtype)
        wm = w.reshape(m, c * taps)
        if taps == 1 and not any(begin) and not any(end):
            # 1x1: subsample for strides, then the input already is the (C, L) matrix
            sub = x[(slice(None), slice(None)) + tuple(slice(0, o * s, s) for o, s in zip(out, strides))]
            cols = np.ascontiguousarray(sub).reshape(n, c, length)
            for i in range(n):
                _matmul_blocks(wm, cols[i], y[i], epilogue, i)
        elif len(ks) == 2 and tuple(strides) == (1, 1) and 2 * m <= c and length >= SHIFTED_MIN_POSITIONS:
            # few output channels on a large image: the im2col copy would cost more than the products
            xp = pad_spatial(x, begin, end)
            flat = _flat_rows(xp, (ks[1] - 1) * dilations[1])
            for i in range(n):
                _shifted_matmul(flat[i], xp.shape[3], w, y[i], epilogue, i, out, dilations)
        else:
            view = windows(pad_spatial(x, begin, end), ks, strides, dilations, out)  # (N, C, *K, *O)
            for i in range(n):
                _im2col_matmul(view[i], wm, y[i], epilogue, i, out)
        return into if usable else y.reshape(out_shape)

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
                if not broadcasts_onto(residual.shape, out_shape):
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


#: Below this many output positions im2col with channel blocks is as fast (measured on 14x14).
SHIFTED_MIN_POSITIONS = 512


def _flat_rows(xp: np.ndarray, slack: int) -> np.ndarray:
    """(N, C, Hp*Wp + slack): each padded image channel as one flat row, zeros after it.

    On a flat row, the taps of a stride-1 2-D window are contiguous runs: tap (r, q) of every
    output position (oh, ow) reads flat[(oh + r*dh) * Wp + ow + q*dw], so a tap's values for
    all positions are the run of OH*Wp values starting at r*dh*Wp + q*dw (the Wp - OW extra
    values per output row are computed and dropped). The last run reaches `slack` past the image.
    """
    n, c, hp, wp = xp.shape
    flat = np.empty((n, c, hp * wp + slack), dtype=xp.dtype)
    flat[:, :, hp * wp:] = 0
    flat[:, :, :hp * wp].reshape(n, c, hp, wp)[...] = xp
    return flat


def _shifted_matmul(flat: np.ndarray, wp: int, w: np.ndarray, y: np.ndarray, epilogue: _Epilogue, image: int,
                    out: Sequence[int], dilations: Sequence[int]) -> None:
    """y = sum over taps of W[:, :, r, q] @ (the tap's run of the flat rows), + epilogue; one image (rows Wp long).

    For convolutions with few output channels this beats im2col: each tap is one matrix
    product straight on the input (no gathered copy), and summing the small products is cheap.
    Cut into blocks of output rows on the intra-op threads.
    """
    m, c, kh, kw = w.shape
    oh, ow = out
    dh, dw = dilations
    per_tap = np.ascontiguousarray(w.transpose(2, 3, 0, 1)).astype(y.dtype, copy=False)  # (kh, kw, M, C)
    y3 = y.reshape(m, oh, ow)
    parts = split_count(m * c * kh * kw * oh * ow)

    def block(a: int, b: int) -> None:
        start, length = a * wp, (b - a) * wp
        acc = np.empty((m, length), dtype=y.dtype)
        tmp = np.empty_like(acc)
        for t in range(kh * kw):
            r, q = divmod(t, kw)
            offset = r * dh * wp + q * dw + start
            run = flat[:, offset:offset + length]
            np.matmul(per_tap[r, q], run, out=acc if t == 0 else tmp)
            if t:
                acc += tmp
        y3[:, a:b] = acc.reshape(m, b - a, wp)[:, :, :ow]
        if epilogue.active:
            cols = slice(a * ow, b * ow)
            epilogue(y[:, cols], slice(None), cols, image)
    run_parallel([partial(block, a, b) for a, b in chunks(oh, parts)])


def _depthwise_rows(xp: np.ndarray, w: np.ndarray, dilations: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """A 2-D depthwise convolution with stride 1 (one filter per channel), on flattened image rows.

    Every tap is one contiguous run per channel (see `_flat_rows`: long inner loops instead of
    OW-long ones). Channels are cut into blocks on the intra-op threads.
    """
    n, c, hp, wp = xp.shape
    kh, kw = w.shape[2:]
    dh, dw = dilations
    oh, ow = out
    length = oh * wp
    flat = _flat_rows(xp.astype(np.result_type(xp.dtype, w.dtype), copy=False), (kw - 1) * dw)
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
