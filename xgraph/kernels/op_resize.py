"""Resize and Upsample.

Resize is separable: each resized axis maps output positions to source coordinates once (a 1-D
float64 computation), turns them into a few (index, weight) taps per output position, and the
tensor is then gathered along that axis tap by tap. Nearest is a single gather and keeps the dtype.
"""
from __future__ import annotations

import math

import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.registry import builtin_kernel as kernel


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


def cubic_weight(d: np.ndarray, a: float) -> np.ndarray:
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
        weights = cubic_weight((offsets[None, :] - ratio[:, None]) * s, cubic_a)
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
