"""Image family: DepthToSpace, SpaceToDepth, GridSample, AffineGrid, Col2Im, CenterCropPad (Resize: op_resize)."""
from __future__ import annotations

import itertools

import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.op_nn_conv import col2im_add
from xgraph.kernels.op_resize import cubic_weight
from xgraph.kernels.windows import FLOAT_TYPES, compute_dtype, window_geometry
from xgraph.kernels.registry import builtin_kernel as kernel


# --------------------------------------------------------------------------- depth <-> space


def _check_4d(op: str, x: np.ndarray, blocksize) -> int:
    if x.ndim != 4:
        raise KernelError(f"{op}: input must be 4-D (N, C, H, W), got shape {x.shape}")
    if blocksize is None or int(blocksize) < 1:
        raise KernelError(f"{op}: blocksize must be a positive integer, got {blocksize}")
    return int(blocksize)


@kernel("DepthToSpace", since=1)
def depth_to_space_1(x, *, blocksize=None):
    """ONNX DepthToSpace-1: the DCR channel order (blocks outermost)."""
    return depth_to_space(x, blocksize=blocksize, mode="DCR")


@kernel("DepthToSpace", since=11)
def depth_to_space(x, *, blocksize=None, mode="DCR"):
    """ONNX DepthToSpace-11/13/28: move channel blocks into b x b spatial tiles (DCR or CRD order)."""
    op = "DepthToSpace"
    b = _check_4d(op, x, blocksize)
    n, c, h, w = x.shape
    if c % (b * b):
        raise KernelError(f"{op}: {c} channels are not divisible by blocksize^2 = {b * b}")
    if mode == "DCR":
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    elif mode == "CRD":
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        raise KernelError(f"{op}: mode={mode!r} is not DCR or CRD")
    return y.reshape(n, c // (b * b), h * b, w * b)


@kernel("SpaceToDepth", since=1)
def space_to_depth_1(x, *, blocksize=None):
    """ONNX SpaceToDepth-1/13: the inverse of DepthToSpace in DCR order."""
    return space_to_depth(x, blocksize=blocksize, mode="DCR")


@kernel("SpaceToDepth", since=28)
def space_to_depth(x, *, blocksize=None, mode="DCR"):
    """ONNX SpaceToDepth-28: b x b spatial tiles become channels, in DCR or CRD order."""
    op = "SpaceToDepth"
    b = _check_4d(op, x, blocksize)
    n, c, h, w = x.shape
    if h % b or w % b:
        raise KernelError(f"{op}: spatial shape {(h, w)} is not divisible by blocksize {b}")
    t = x.reshape(n, c, h // b, b, w // b, b)
    if mode == "DCR":
        t = t.transpose(0, 3, 5, 1, 2, 4)
    elif mode == "CRD":
        t = t.transpose(0, 1, 3, 5, 2, 4)
    else:
        raise KernelError(f"{op}: mode={mode!r} is not DCR or CRD")
    return t.reshape(n, c * b * b, h // b, w // b)


# --------------------------------------------------------------------------- GridSample / AffineGrid


def _reflect(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Fold coordinates outside [lo, hi] back in by repeated mirroring at the borders."""
    span = hi - lo
    if span <= 0:
        return np.full_like(v, lo)
    below, above = v < lo, v > hi
    dx = np.where(below, lo - v, v - hi)
    flips = np.floor(dx / span)
    rest = dx - flips * span
    even = flips % 2 == 0
    return np.where(below, np.where(even, lo + rest, hi - rest),
                    np.where(above, np.where(even, hi - rest, lo + rest), v))


def _grid_taps(c: np.ndarray, size: int, mode: str, padding_mode: str, align_corners: bool):
    """Per-axis list of (index, weight) taps for sampling coordinate `c` (normalized to [-1, 1])."""
    if align_corners:
        v, lo, hi = (c + 1) / 2 * (size - 1), 0.0, size - 1.0
    else:
        v, lo, hi = ((c + 1) * size - 1) / 2, -0.5, size - 0.5
    if mode == "nearest":
        v = np.rint(v)
    if padding_mode == "border" and mode != "cubic":  # cubic clamps each tap instead, as PyTorch does
        v = np.where((v < lo) | (v > hi), np.clip(v, 0, size - 1), v)
    elif padding_mode == "reflection":
        v = _reflect(v, lo, hi)
    if mode == "nearest":
        taps = [(np.trunc(v).astype(np.int64), np.ones_like(v))]
    else:
        i0 = np.floor(v)
        t = v - i0
        i0 = i0.astype(np.int64)
        if mode == "linear":
            taps = [(i0, 1 - t), (i0 + 1, t)]
        else:
            taps = [(i0 + k, cubic_weight(t - k, -0.75)) for k in (-1, 0, 1, 2)]
    fixed = []
    for idx, w in taps:
        if padding_mode == "zeros":
            w = np.where((idx >= 0) & (idx < size), w, 0.0)
        elif padding_mode == "reflection":
            idx = np.trunc(_reflect(idx.astype(np.float64), lo, hi)).astype(np.int64)
        fixed.append((np.clip(idx, 0, size - 1), w))
    return fixed


def _grid_sample(x, grid, *, align_corners, mode, padding_mode):
    op = "GridSample"
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if mode not in ("nearest", "linear", "cubic"):
        raise KernelError(f"{op}: mode={mode!r} is not nearest, linear or cubic")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise KernelError(f"{op}: padding_mode={padding_mode!r} is not zeros, border or reflection")
    rank = x.ndim - 2
    if rank < 1 or grid.ndim != x.ndim or grid.shape[0] != x.shape[0] or grid.shape[-1] != rank:
        raise KernelError(f"{op}: grid of shape {grid.shape} does not fit X of shape {x.shape} "
                          f"(expected (N, *out, {rank}))")
    if mode == "cubic" and rank != 2:
        raise KernelError(f"{op}: cubic mode is defined for 2-D inputs only, got X of shape {x.shape}")
    work = compute_dtype(x.dtype) if x.dtype.kind == "f" else np.dtype(np.float64)
    g = grid.astype(np.float64)
    # grid's last axis lists coordinates innermost-first (x, y, z), so axis i of X uses g[..., rank-1-i]
    per_axis = [_grid_taps(g[..., rank - 1 - i], x.shape[2 + i], mode, padding_mode, bool(align_corners))
                for i in range(rank)]
    n = x.shape[0]
    batch = np.arange(n).reshape((n,) + (1,) * (grid.ndim - 2))
    src = x.astype(work, copy=False)
    acc = np.zeros(grid.shape[:-1] + (x.shape[1],), dtype=work)
    for combo in itertools.product(*per_axis):
        weight = np.prod([w for _, w in combo], axis=0)
        if not weight.any():
            continue
        index = (batch, slice(None)) + tuple(i for i, _ in combo)
        acc += src[index] * weight[..., None].astype(work)
    return np.moveaxis(acc, -1, 1).astype(x.dtype, copy=False)


@kernel("GridSample", since=16)
def grid_sample_16(x, grid, *, align_corners=0, mode="bilinear", padding_mode="zeros"):
    """ONNX GridSample-16: sample X at normalized grid points (modes bilinear, nearest, bicubic)."""
    return _grid_sample(x, grid, align_corners=align_corners, mode=mode, padding_mode=padding_mode)


@kernel("GridSample", since=20)
def grid_sample(x, grid, *, align_corners=0, mode="linear", padding_mode="zeros"):
    """ONNX GridSample-20/22: N-D sampling (modes linear, nearest, cubic); nearest rounds half to even."""
    return _grid_sample(x, grid, align_corners=align_corners, mode=mode, padding_mode=padding_mode)


@kernel("AffineGrid", since=20, dtypes=FLOAT_TYPES)
def affine_grid(theta, size, *, align_corners=0):
    """ONNX AffineGrid-20: theta (N, 2, 3) or (N, 3, 4) applied to the normalized [-1, 1] grid of `size`."""
    op = "AffineGrid"
    size = [int(v) for v in np.asarray(size).ravel()]
    rank = len(size) - 2
    if rank not in (2, 3) or theta.shape != (size[0], rank, rank + 1):
        raise KernelError(f"{op}: theta of shape {theta.shape} does not fit size {size} "
                          f"(expected (N, 2, 3) with 4-D size or (N, 3, 4) with 5-D size)")
    spatial = size[2:]
    lines = []
    for n in spatial:
        if align_corners:
            lines.append(np.linspace(-1.0, 1.0, n) if n > 1 else np.array([-1.0]))
        else:
            lines.append((np.arange(n) * 2.0 + 1.0) / n - 1.0)
    mesh = np.meshgrid(*lines, indexing="ij")  # each (*spatial); coordinate of axis i
    base = np.stack([m for m in reversed(mesh)] + [np.ones(spatial)], axis=-1)  # (..., x, y[, z], 1)
    work = compute_dtype(theta.dtype)
    grid = np.einsum("...k,njk->n...j", base.astype(work), theta.astype(work, copy=False))
    return grid.astype(theta.dtype, copy=False)


# --------------------------------------------------------------------------- Col2Im / CenterCropPad


@kernel("Col2Im", since=18)
def col2im(x, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    """ONNX Col2Im-18: sum (N, C*prod(block), L) column blocks back into (N, C, *image_shape)."""
    op = "Col2Im"
    image = [int(v) for v in np.asarray(image_shape).ravel()]
    block = [int(v) for v in np.asarray(block_shape).ravel()]
    rank = len(image)
    taps = int(np.prod(block))
    if len(block) != rank or x.ndim != 3 or x.shape[1] % taps:
        raise KernelError(f"{op}: input of shape {x.shape} with image_shape {image} and block_shape {block} "
                          f"is inconsistent (need (N, C*prod(block_shape), L))")
    strides_, dilations_, begin, end, blocks = window_geometry(op, image, block, strides=strides,
                                                               dilations=dilations, pads=pads)
    if int(np.prod(blocks)) != x.shape[2]:
        raise KernelError(f"{op}: input has {x.shape[2]} blocks, but the geometry gives {blocks} = "
                          f"{int(np.prod(blocks))}")
    n, c = x.shape[0], x.shape[1] // taps
    canvas = np.zeros((n, c) + tuple(i + b + e for i, b, e in zip(image, begin, end)), dtype=x.dtype)
    col2im_add(x.reshape((n, c) + tuple(block) + tuple(blocks)), canvas, block, strides_, dilations_, blocks)
    return canvas[(slice(None), slice(None)) + tuple(slice(b, b + i) for b, i in zip(begin, image))].copy()


@kernel("CenterCropPad", since=18)
def center_crop_pad(x, shape, *, axes=None):
    """ONNX CenterCropPad-18: crop or zero-pad each listed axis to `shape`, centred (odd excess at the end)."""
    op = "CenterCropPad"
    rank = x.ndim
    axes = list(range(rank)) if axes is None or not len(axes) else [int(a) for a in axes]
    shape = [int(v) for v in np.asarray(shape).ravel()]
    if len(shape) != len(axes) or any(not -rank <= a < rank for a in axes):
        raise KernelError(f"{op}: shape {shape} and axes {axes} must match and name axes of a rank-{rank} input")
    src = [slice(None)] * rank
    dst = [slice(None)] * rank
    out_shape = list(x.shape)
    for a, want in zip((a % rank for a in axes), shape):
        have = x.shape[a]
        out_shape[a] = want
        if want < have:
            start = (have - want) // 2
            src[a] = slice(start, start + want)
        elif want > have:
            start = (want - have) // 2
            dst[a] = slice(start, start + have)
    y = np.zeros(out_shape, dtype=x.dtype)
    y[tuple(dst)] = x[tuple(src)]
    return y
