"""Region pools: MaxRoiPool and RoiAlign, pooling boxes of a feature map into fixed-size bins."""
from __future__ import annotations

import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.windows import FLOAT_TYPES, compute_dtype
from xgraph.kernels.registry import builtin_kernel as kernel


@kernel("MaxRoiPool", since=1, dtypes=FLOAT_TYPES)
def max_roi_pool(x, rois, *, pooled_shape=None, spatial_scale=1.0):
    """ONNX MaxRoiPool-1/22 (Caffe ROIPooling): max over each of pooled_shape bins of a rounded, scaled box."""
    op = "MaxRoiPool"
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 5:
        raise KernelError(f"{op}: expected X (N, C, H, W) and rois (R, 5), got {x.shape} and {rois.shape}")
    if pooled_shape is None or len(pooled_shape) != 2:
        raise KernelError(f"{op}: pooled_shape={pooled_shape} must be [pooled_h, pooled_w]")
    ph, pw = (int(v) for v in pooled_shape)
    n, c, h, w = x.shape
    y = np.zeros((rois.shape[0], c, ph, pw), dtype=x.dtype)
    scale = np.float32(spatial_scale)
    for r, (batch, *box) in enumerate(np.asarray(rois, dtype=np.float32)):
        b = int(batch)
        if not 0 <= b < n:
            raise KernelError(f"{op}: roi {r} names batch index {b}, but X has {n} images")
        # scaled in float32 (5 * 0.9f is 4.5 there) and rounded half away from zero, as Caffe does
        x1, y1, x2, y2 = (int(np.sign(v) * np.floor(abs(v) + 0.5)) for v in (c * scale for c in box))
        bin_h = max(y2 - y1 + 1, 1) / ph
        bin_w = max(x2 - x1 + 1, 1) / pw
        rows = [(min(max(int(np.floor(i * bin_h)) + y1, 0), h), min(max(int(np.ceil((i + 1) * bin_h)) + y1, 0), h))
                for i in range(ph)]
        cols = [(min(max(int(np.floor(j * bin_w)) + x1, 0), w), min(max(int(np.ceil((j + 1) * bin_w)) + x1, 0), w))
                for j in range(pw)]
        for i, (hs, he) in enumerate(rows):
            if he <= hs:
                continue
            strip = x[b, :, hs:he, :].max(axis=1)  # (C, W)
            for j, (ws, we) in enumerate(cols):
                if we > ws:
                    y[r, :, i, j] = strip[:, ws:we].max(axis=1)
    return y


def _roi_axis_weights(start, bin_size, bins: int, grid: int, size: int):
    """Per-sample (low index, high index, low weight, high weight) along one axis, RoiAlign's clamping rules.

    Positions are float32, as in the reference and onnxruntime: whether a sample lands exactly on
    an edge (and so which pixels it reads) depends on that rounding.
    """
    f = np.float32
    pos = (start + np.arange(bins, dtype=f)[:, None] * bin_size
           + (np.arange(grid, dtype=f)[None, :] + f(0.5)) * bin_size / f(grid)).ravel()
    outside = (pos < -1.0) | (pos > size)
    pos = np.maximum(pos, f(0))
    low = np.floor(pos).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    frac = np.where(at_end, f(0), pos - low.astype(f))
    w_low, w_high = f(1) - frac, frac
    w_low[outside] = 0
    w_high[outside] = 0
    return low, high, w_low, w_high


def _roi_align(op, x, rois, batch_indices, *, half_pixel, mode, output_height, output_width, sampling_ratio,
               spatial_scale):
    if x.ndim != 4 or rois.ndim != 2 or rois.shape[1] != 4:
        raise KernelError(f"{op}: expected X (N, C, H, W) and rois (R, 4), got {x.shape} and {rois.shape}")
    if batch_indices.shape != (rois.shape[0],):
        raise KernelError(f"{op}: batch_indices has shape {batch_indices.shape}; expected ({rois.shape[0]},)")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("avg", "max"):
        raise KernelError(f"{op}: mode={mode!r} is not 'avg' or 'max'")
    n, c, h, w = x.shape
    ph, pw = int(output_height), int(output_width)
    work = x.astype(compute_dtype(x.dtype), copy=False)
    y = np.empty((rois.shape[0], c, ph, pw), dtype=work.dtype)
    f = np.float32  # box geometry in float32, like the reference: the sampling grid size depends on it
    offset = f(0.5) if half_pixel else f(0)
    for r, (box, b) in enumerate(zip(np.asarray(rois, dtype=f), np.asarray(batch_indices))):
        b = int(b)
        if not 0 <= b < n:
            raise KernelError(f"{op}: roi {r} names batch index {b}, but X has {n} images")
        x1, y1, x2, y2 = box * f(spatial_scale) - offset
        roi_w, roi_h = x2 - x1, y2 - y1
        if not half_pixel:
            roi_w, roi_h = max(roi_w, f(1)), max(roi_h, f(1))
        bin_h, bin_w = roi_h / f(ph), roi_w / f(pw)
        gh = int(sampling_ratio) if sampling_ratio > 0 else int(np.ceil(roi_h / f(ph)))
        gw = int(sampling_ratio) if sampling_ratio > 0 else int(np.ceil(roi_w / f(pw)))
        gh, gw = max(gh, 1), max(gw, 1)
        ylo, yhi, wylo, wyhi = _roi_axis_weights(y1, bin_h, ph, gh, h)
        xlo, xhi, wxlo, wxhi = _roi_axis_weights(x1, bin_w, pw, gw, w)
        img = work[b]
        if mode == "avg":
            # bilinear sampling is separable: rows then columns as two small dense matmuls
            ay = np.zeros((ph * gh, h))
            np.add.at(ay, (np.arange(ph * gh), ylo), wylo)
            np.add.at(ay, (np.arange(ph * gh), yhi), wyhi)
            ax = np.zeros((pw * gw, w))
            np.add.at(ax, (np.arange(pw * gw), xlo), wxlo)
            np.add.at(ax, (np.arange(pw * gw), xhi), wxhi)
            ay = ay.reshape(ph, gh, h).sum(axis=1) / (gh * gw)
            ax = ax.reshape(pw, gw, w).sum(axis=1)
            y[r] = ay.astype(work.dtype) @ img @ ax.T.astype(work.dtype)
        else:
            corners = [wy[:, None] * wx[None, :] * img[:, yi[:, None], xi[None, :]]
                       for yi, wy in ((ylo, wylo), (yhi, wyhi)) for xi, wx in ((xlo, wxlo), (xhi, wxhi))]
            best = np.maximum(np.maximum(corners[0], corners[1]), np.maximum(corners[2], corners[3]))
            y[r] = best.reshape(c, ph, gh, pw, gw).max(axis=(2, 4))
    return y.astype(x.dtype, copy=False)


@kernel("RoiAlign", since=10, dtypes=FLOAT_TYPES)
def roi_align_10(x, rois, batch_indices, *, mode="avg", output_height=1, output_width=1, sampling_ratio=0,
                 spatial_scale=1.0):
    """ONNX RoiAlign-10: bilinear samples averaged (or maxed) per bin; pixel corners at integers."""
    return _roi_align("RoiAlign", x, rois, batch_indices, half_pixel=False, mode=mode, output_height=output_height,
                      output_width=output_width, sampling_ratio=sampling_ratio, spatial_scale=spatial_scale)


@kernel("RoiAlign", since=16, dtypes=FLOAT_TYPES)
def roi_align(x, rois, batch_indices, *, coordinate_transformation_mode="half_pixel", mode="avg", output_height=1,
              output_width=1, sampling_ratio=0, spatial_scale=1.0):
    """ONNX RoiAlign-16/22: as RoiAlign-10, but half_pixel (the default) shifts boxes by -0.5."""
    ctm = coordinate_transformation_mode
    ctm = ctm.decode() if isinstance(ctm, bytes) else ctm
    if ctm not in ("half_pixel", "output_half_pixel"):
        raise KernelError(f"RoiAlign: coordinate_transformation_mode={ctm!r} is not half_pixel or output_half_pixel")
    return _roi_align("RoiAlign", x, rois, batch_indices, half_pixel=ctm == "half_pixel", mode=mode,
                      output_height=output_height, output_width=output_width, sampling_ratio=sampling_ratio,
                      spatial_scale=spatial_scale)
