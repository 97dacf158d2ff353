"""Image family: Resize/Upsample, DepthToSpace, SpaceToDepth, GridSample, AffineGrid, Col2Im, CenterCropPad.

Resize is separable: each resized axis maps output positions to source coordinates once (a 1-D
float64 computation), turns them into a few (index, weight) taps per output position, and the
tensor is then gathered along that axis tap by tap. Nearest is a single gather and keeps the dtype.
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from xgraph.errors import KernelError
from xgraph.runners.kernels.op_nn_conv import col2im_add
from xgraph.runners.kernels.windows import FLOAT_TYPES, compute_dtype, window_geometry
from xgraph.runners.kernels.registry import kernel

# --------------------------------------------------------------------------- Resize: coordinates and taps

_COORDINATE_MODES = ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                     "tf_half_pixel_for_nn", "tf_crop_and_resize")
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


def _source_coordinates(mode: str, out: int, size: int, scale: float, roi: tuple[float, float]) -> np.ndarray:
    """Source coordinate of each of `out` output positions along an axis of length `size`.

    The arithmetic is float32, as in onnxruntime: with float32 scales it lands exactly on the
    integers and halves that nearest rounding must see (1.5 / 0.6 - 0.5 == 2), where float64
    arithmetic on the same float32 scale gives 1.9999999.
    """
    f = np.float32
    y = np.arange(out, dtype=f)
    scale, size_f = f(scale), f(size)
    length = scale * size_f  # the real-valued resized length the spec's formulas use
    half = f(0.5)
    if mode == "half_pixel":
        return (y + half) / scale - half
    if mode == "half_pixel_symmetric":
        offset = size_f / f(2) * (f(1) - f(out) / length)
        return offset + (y + half) / scale - half
    if mode == "pytorch_half_pixel":
        return (y + half) / scale - half if length > 1 else np.zeros(out, dtype=f)
    if mode == "align_corners":
        return y * (size_f - f(1)) / (length - f(1)) if length != 1 else np.zeros(out, dtype=f)
    if mode == "asymmetric":
        return y / scale
    if mode == "tf_half_pixel_for_nn":
        return (y + half) / scale
    # tf_crop_and_resize
    start, end = f(roi[0]), f(roi[1])
    if length == 1:
        return np.full(out, (end - start) * (size_f - f(1)) / f(2) + start * (size_f - f(1)), dtype=f)
    return start * (size_f - f(1)) + y * (end - start) * (size_f - f(1)) / (length - f(1))


def _nearest_index(x: np.ndarray, nearest_mode: str, downsampling: bool) -> np.ndarray:
    if nearest_mode == "round_prefer_floor":
        idx = np.ceil(x - 0.5)
    elif nearest_mode == "round_prefer_ceil":
        idx = np.floor(x + 0.5)
    elif nearest_mode == "floor":
        idx = np.floor(x)
    elif nearest_mode == "ceil":
        idx = np.ceil(x)
    else:  # "legacy": Upsample and Resize-10 truncate when enlarging and round up when shrinking
        idx = np.ceil(x) if downsampling else np.trunc(x)
    return idx.astype(np.int64)


def _cubic(d: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel at distance |d|."""
    d = np.abs(d)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


def _interpolation_taps(x: np.ndarray, mode: str, scale: float, cubic_a: float, antialias: bool):
    """(indices, weights), each (out, taps): source positions around x and their interpolation weights.

    The window is anchored at base = ceil(x) - 1 so an exact integer x sits at the window's right
    half (ratio 1), matching the reference implementation's tie handling.
    """
    base = np.ceil(x) - 1
    ratio = x - base  # in (0, 1]
    s = min(scale, 1.0) if antialias else 1.0
    if mode == "linear":
        start = int(math.floor(-1 / s)) + 1 if antialias else 0
        offsets = np.arange(start, 2 - start)
        weights = np.clip(1 - np.abs((offsets[None, :] - ratio[:, None]) * s), 0, None)
    else:  # cubic
        start = int(math.floor(-2 / s)) + 1 if antialias else -1
        offsets = np.arange(start, 2 - start)
        weights = _cubic((offsets[None, :] - ratio[:, None]) * s, cubic_a)
    if antialias:
        weights = weights / weights.sum(axis=1, keepdims=True)
    indices = base.astype(np.int64)[:, None] + offsets[None, :]
    return indices, weights


def _resize_axis(data: np.ndarray, axis: int, out: int, scale: float, roi: tuple[float, float], *, mode: str,
                 coordinate_mode: str, nearest_mode: str, cubic_a: float, exclude_outside: bool,
                 extrapolation_value: float, antialias: bool, work: np.dtype) -> np.ndarray:
    size = data.shape[axis]
    x = _source_coordinates(coordinate_mode, out, size, scale, roi)
    if mode == "nearest":
        idx = np.clip(_nearest_index(x, nearest_mode, scale < 1), 0, size - 1)
        result = np.take(data, idx, axis=axis)
    else:
        indices, weights = _interpolation_taps(x, mode, scale, cubic_a, antialias)
        outside = (indices < 0) | (indices >= size)
        if exclude_outside and outside.any():
            weights = np.where(outside, 0.0, weights)
            total = weights.sum(axis=1, keepdims=True)
            weights = weights / np.where(total == 0, 1.0, total)
        indices = np.clip(indices, 0, size - 1)
        shape = [1] * data.ndim
        shape[axis] = out
        src = data.astype(work, copy=False)
        result = None
        for t in range(indices.shape[1]):
            w = weights[:, t]
            if not w.any():
                continue  # a tap no output position uses (antialias footprints, exclude_outside)
            term = np.take(src, indices[:, t], axis=axis)
            term *= w.astype(work).reshape(shape)
            if result is None:
                result = term
            else:
                result += term
        if result is None:
            shape_out = list(data.shape)
            shape_out[axis] = out
            result = np.zeros(shape_out, dtype=work)
    if coordinate_mode == "tf_crop_and_resize":
        beyond = (x < 0) | (x > size - 1)
        if beyond.any():
            shape = [1] * data.ndim
            shape[axis] = out
            result = np.where(beyond.reshape(shape), np.asarray(extrapolation_value).astype(result.dtype), result)
    return result


def _optional(v) -> np.ndarray | None:
    """An optional tensor input; an empty tensor counts as absent (Resize-11 passes empty scales)."""
    if v is None:
        return None
    v = np.asarray(v)
    return None if v.size == 0 else v


def _resize(op: str, x: np.ndarray, roi, scales, sizes, *, mode: str, coordinate_mode: str, nearest_mode: str,
            cubic_a: float = -0.75, exclude_outside: int = 0, extrapolation_value: float = 0.0,
            antialias: int = 0, axes=None, keep_aspect_ratio_policy: str = "stretch") -> np.ndarray:
    rank = x.ndim
    if mode not in ("nearest", "linear", "cubic"):
        raise KernelError(f"{op}: mode={mode!r} is not nearest, linear or cubic")
    if coordinate_mode not in _COORDINATE_MODES:
        raise KernelError(f"{op}: coordinate_transformation_mode={coordinate_mode!r} is not one of {_COORDINATE_MODES}")
    if nearest_mode not in _NEAREST_MODES + ("legacy",):
        raise KernelError(f"{op}: nearest_mode={nearest_mode!r} is not one of {_NEAREST_MODES}")
    axes = list(range(rank)) if axes is None or not len(axes) else [int(a) for a in axes]
    if any(not -rank <= a < rank for a in axes) or len({a % rank for a in axes}) != len(axes):
        raise KernelError(f"{op}: axes={axes} must be distinct axes of a rank-{rank} input")
    axes = [a % rank for a in axes]
    scales, sizes, roi = _optional(scales), _optional(sizes), _optional(roi)
    if (scales is None) == (sizes is None):
        raise KernelError(f"{op}: exactly one of 'scales' and 'sizes' must be given (non-empty)")
    given = scales if scales is not None else sizes
    if given.shape != (len(axes),):
        raise KernelError(f"{op}: {'scales' if scales is not None else 'sizes'} has shape {given.shape}; "
                          f"expected ({len(axes)},), one value per resized axis")
    in_shape = [x.shape[a] for a in axes]
    if scales is not None:
        factors = [float(s) for s in scales.astype(np.float64)]
        if any(f <= 0 for f in factors):
            raise KernelError(f"{op}: scales {factors} must be positive")
        out = [int(math.floor(f * n)) for f, n in zip(factors, in_shape)]
    else:
        wanted = [int(v) for v in sizes]
        factors = [w / n for w, n in zip(wanted, in_shape)]
        if keep_aspect_ratio_policy == "stretch":
            out = wanted
        elif keep_aspect_ratio_policy in ("not_larger", "not_smaller"):
            f = min(factors) if keep_aspect_ratio_policy == "not_larger" else max(factors)
            factors = [f] * len(axes)
            out = [int(f * n + 0.5) for n in in_shape]
        else:
            raise KernelError(f"{op}: keep_aspect_ratio_policy={keep_aspect_ratio_policy!r} is not stretch, "
                              f"not_larger or not_smaller")
    if roi is not None and roi.size != 2 * len(axes):
        raise KernelError(f"{op}: roi has {roi.size} values; expected {2 * len(axes)} (starts then ends)")
    rois = ([(float(roi[i]), float(roi[len(axes) + i])) for i in range(len(axes))] if roi is not None
            else [(0.0, 1.0)] * len(axes))
    if coordinate_mode == "tf_crop_and_resize" and roi is None:
        raise KernelError(f"{op}: coordinate_transformation_mode='tf_crop_and_resize' needs the roi input")
    wide = x.dtype == np.float64 or (x.dtype.kind in "iu" and x.dtype.itemsize >= 4)
    work = np.dtype(np.float64) if wide else np.dtype(np.float32)
    y = x
    for a, n, o, f, r in zip(axes, in_shape, out, factors, rois):
        if o == n and f == 1.0 and coordinate_mode != "tf_crop_and_resize":
            continue
        y = _resize_axis(y, a, o, f, r, mode=mode, coordinate_mode=coordinate_mode, nearest_mode=nearest_mode,
                         cubic_a=cubic_a, exclude_outside=bool(exclude_outside),
                         extrapolation_value=extrapolation_value, antialias=bool(antialias) and mode != "nearest",
                         work=work)
    if y.dtype == x.dtype:
        return y if y is not x else x.copy()
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        return np.clip(np.rint(y), info.min, info.max).astype(x.dtype)
    return y.astype(x.dtype)


@kernel("Resize", since=10)
def resize_10(x, scales, *, mode="nearest"):
    """ONNX Resize-10: scales only, asymmetric coordinates, nearest truncates (the Upsample rules)."""
    return _resize("Resize", x, None, scales, None, mode=mode, coordinate_mode="asymmetric", nearest_mode="legacy")


@kernel("Resize", since=11)
def resize_11(x, roi=None, scales=None, sizes=None, *, coordinate_transformation_mode="half_pixel",
              cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, mode="nearest",
              nearest_mode="round_prefer_floor"):
    """ONNX Resize-11/13: scales or sizes, six coordinate transformations, cubic with parameter a."""
    return _resize("Resize", x, roi, scales, sizes, mode=mode, coordinate_mode=coordinate_transformation_mode,
                   nearest_mode=nearest_mode, cubic_a=cubic_coeff_a, exclude_outside=exclude_outside,
                   extrapolation_value=extrapolation_value)


@kernel("Resize", since=18)
def resize(x, roi=None, scales=None, sizes=None, *, antialias=0, axes=None,
           coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, exclude_outside=0,
           extrapolation_value=0.0, keep_aspect_ratio_policy="stretch", mode="nearest",
           nearest_mode="round_prefer_floor"):
    """ONNX Resize-18/19: adds antialiased downsampling, a subset of axes and aspect-ratio-keeping sizes."""
    return _resize("Resize", x, roi, scales, sizes, mode=mode, coordinate_mode=coordinate_transformation_mode,
                   nearest_mode=nearest_mode, cubic_a=cubic_coeff_a, exclude_outside=exclude_outside,
                   extrapolation_value=extrapolation_value, antialias=antialias, axes=axes,
                   keep_aspect_ratio_policy=keep_aspect_ratio_policy)


def _upsample(x, scales, mode):
    mode = {"bilinear": "linear", "trilinear": "linear"}.get(mode, mode)
    if mode not in ("nearest", "linear"):
        raise KernelError(f"Upsample: mode={mode!r} is not nearest or linear")
    scales = np.asarray(scales, dtype=np.float64).ravel()
    if scales.size != x.ndim or (scales < 1).any():
        raise KernelError(f"Upsample: scales {scales.tolist()} must give one value >= 1 per axis of X {x.shape}")
    return _resize("Upsample", x, None, scales, None, mode=mode, coordinate_mode="asymmetric", nearest_mode="legacy")


@kernel("Upsample", since=1)
def upsample_1(x, *, height_scale=None, width_scale=None, mode="nearest"):
    """ONNX Upsample-1: NCHW with height_scale/width_scale attributes."""
    if height_scale is None or width_scale is None or x.ndim != 4:
        raise KernelError(f"Upsample-1: needs height_scale, width_scale and a 4-D input, got X {x.shape}")
    return _upsample(x, [1, 1, height_scale, width_scale], mode)


@kernel("Upsample", since=7)
def upsample_7(x, *, mode="nearest", scales=None):
    """ONNX Upsample-7: per-axis scales attribute."""
    if scales is None:
        raise KernelError("Upsample-7: the scales attribute is required")
    return _upsample(x, scales, mode)


@kernel("Upsample", since=9)
def upsample(x, scales, *, mode="nearest"):
    """ONNX Upsample-9/10: per-axis scales input."""
    return _upsample(x, scales, mode)


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
            taps = [(i0 + k, _cubic(t - k, -0.75)) for k in (-1, 0, 1, 2)]
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
