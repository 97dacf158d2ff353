"""Indexing kernels: gathers, scatters, one-hot, and the data-dependent NonZero, Unique, NMS.

Indices may be negative (counted from the end of their axis) wherever ONNX allows it; an
index outside [-dim, dim-1] is a KernelError naming the op and the offending value. Scatters
copy `data` once and write with numpy fancy indexing or `ufunc.at` (so duplicate indices
accumulate under add/mul/max/min).
"""
from __future__ import annotations

import math

import numpy as np

from xgraph.kernels.op_shape import kernel_error, normalize_axis
from xgraph.kernels.registry import builtin_kernel as kernel

_IRREGULAR = ("AICPU", "CPU")  # data-dependent output shapes: not for the dense AI Core


def _indices(indices: np.ndarray, dims, op: str) -> np.ndarray:
    """Integer `indices` checked against `dims` (broadcast over the last axis) with negatives wrapped."""
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise kernel_error(op, f"indices must be integers, got dtype {idx.dtype}")
    idx = idx.astype(np.int64, copy=False)
    if idx.size == 0:
        return idx
    dims = np.asarray(dims, dtype=np.int64)
    bad = (idx < -dims) | (idx >= dims)
    if bad.any():
        where = tuple(int(i) for i in np.argwhere(bad)[0])
        raise kernel_error(op, f"index {int(idx[where])} at {list(where)} is out of range for dimension size(s) {dims.tolist()}")
    return np.where(idx < 0, idx + dims, idx)


@kernel("Gather", since=1)
def gather(data: np.ndarray, indices: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """ONNX Gather: np.take along `axis`; the output rank is r + q - 1."""
    axis = normalize_axis(axis, data.ndim, "Gather")
    if np.asarray(indices).dtype.kind not in "iu":
        raise kernel_error("Gather", f"indices must be integers, got dtype {np.asarray(indices).dtype}")
    try:
        return np.asarray(np.take(data, indices, axis=axis))
    except IndexError:
        idx = np.asarray(indices)
        raise kernel_error("Gather", f"indices in [{idx.min()}, {idx.max()}] are out of range for axis {axis} "
                           f"of size {data.shape[axis]}") from None


@kernel("GatherElements", since=11)
def gather_elements(data: np.ndarray, indices: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """ONNX GatherElements: output[i][j] = data[indices[i][j]][j] (for axis 0), output shaped like indices."""
    axis = normalize_axis(axis, data.ndim, "GatherElements")
    idx = _indices(indices, data.shape[axis], "GatherElements")
    if idx.ndim != data.ndim or any(i > d for a, (i, d) in enumerate(zip(idx.shape, data.shape)) if a != axis):
        raise kernel_error("GatherElements", f"indices shape {idx.shape} does not fit data shape {data.shape}")
    window = tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(idx.shape))
    return np.take_along_axis(data[window], idx, axis=axis)


@kernel("GatherND", since=11)
def gather_nd(data: np.ndarray, indices: np.ndarray, *, batch_dims: int = 0) -> np.ndarray:
    """ONNX GatherND (batch_dims from 12): index tuples in the last axis of `indices` pick data slices."""
    b = int(batch_dims)
    idx = np.asarray(indices)
    k = idx.shape[-1] if idx.ndim else 0
    if idx.ndim < 1 or not 0 <= b < min(data.ndim, idx.ndim) or data.shape[:b] != idx.shape[:b] or b + k > data.ndim:
        raise kernel_error("GatherND", f"indices shape {idx.shape} with batch_dims {b} does not fit data shape {data.shape}")
    idx = _indices(idx, data.shape[b:b + k], "GatherND")
    batch_shape, query_shape = data.shape[:b], idx.shape[b:-1]
    nb, nq = math.prod(batch_shape), math.prod(query_shape)
    flat = data.reshape((nb,) + data.shape[b:])
    idx = idx.reshape(nb, nq, k)
    selector = (np.broadcast_to(np.arange(nb)[:, None], (nb, nq)),) + tuple(idx[..., j] for j in range(k))
    return flat[selector].reshape(batch_shape + query_shape + data.shape[b + k:])


_UFUNC = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _write(out: np.ndarray, index: tuple, updates: np.ndarray, reduction: str, op: str) -> np.ndarray:
    if reduction == "none":
        out[index] = updates
    elif reduction in _UFUNC:
        _UFUNC[reduction].at(out, index, updates)
    else:
        raise kernel_error(op, f"reduction {reduction!r} is not one of none, add, mul, max, min")
    return out


def _scatter_elements(op: str, data, indices, updates, axis: int, reduction: str) -> np.ndarray:
    axis = normalize_axis(axis, data.ndim, op)
    idx = _indices(indices, data.shape[axis], op)
    updates = np.asarray(updates)
    if idx.shape != updates.shape or idx.ndim != data.ndim or any(
            i > d for a, (i, d) in enumerate(zip(idx.shape, data.shape)) if a != axis):
        raise kernel_error(op, f"indices {idx.shape} and updates {updates.shape} do not fit data shape {data.shape}")
    index = list(np.indices(idx.shape, sparse=True))
    index[axis] = idx
    return _write(data.copy(), tuple(index), updates, reduction, op)


@kernel("Scatter", since=9)
def scatter(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int = 0) -> np.ndarray:
    """ONNX Scatter-9 (deprecated at 11): ScatterElements without reduction."""
    return _scatter_elements("Scatter", data, indices, updates, axis, "none")


@kernel("ScatterElements", since=11)
def scatter_elements(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, axis: int = 0,
                     reduction: str = "none") -> np.ndarray:
    """ONNX ScatterElements (reduction add/mul from 16, max/min from 18): a copy of data with updates written."""
    return _scatter_elements("ScatterElements", data, indices, updates, axis, reduction)


@kernel("ScatterND", since=11)
def scatter_nd(data: np.ndarray, indices: np.ndarray, updates: np.ndarray, *, reduction: str = "none") -> np.ndarray:
    """ONNX ScatterND (reduction from 16/18): index tuples in the last axis of `indices` address data slices."""
    idx = np.asarray(indices)
    k = idx.shape[-1] if idx.ndim else 0
    updates = np.asarray(updates)
    if idx.ndim < 1 or k > data.ndim or updates.shape != idx.shape[:-1] + data.shape[k:]:
        raise kernel_error("ScatterND", f"indices {idx.shape} and updates {updates.shape} do not fit data shape {data.shape}")
    idx = _indices(idx, data.shape[:k], "ScatterND")
    return _write(data.copy(), tuple(idx[..., j] for j in range(k)), updates, reduction, "ScatterND")


@kernel("TensorScatter", since=24)
def tensor_scatter(past_cache: np.ndarray, update: np.ndarray, write_indices: np.ndarray | None = None, *,
                   axis: int = -2, mode: str = "linear") -> np.ndarray:
    """ONNX TensorScatter: write `update` into a KV cache at per-batch offsets (wrapping when circular)."""
    axis = normalize_axis(axis, past_cache.ndim, "TensorScatter")
    if axis == 0 or mode not in ("linear", "circular"):
        raise kernel_error("TensorScatter", f"axis {axis} must not be the batch axis and mode {mode!r} must be "
                           "linear or circular")
    if update.ndim != past_cache.ndim or update.shape[axis] > past_cache.shape[axis] or any(
            u != c for a, (u, c) in enumerate(zip(update.shape, past_cache.shape)) if a != axis):
        raise kernel_error("TensorScatter", f"update shape {update.shape} does not fit cache shape {past_cache.shape} "
                           f"on axis {axis}")
    batch, length, steps = past_cache.shape[0], past_cache.shape[axis], update.shape[axis]
    starts = np.zeros(batch, np.int64) if write_indices is None else np.asarray(write_indices, np.int64).reshape(-1)
    if starts.size != batch:
        raise kernel_error("TensorScatter", f"write_indices {starts.tolist()} must hold one offset per batch entry ({batch})")
    positions = starts[:, None] + np.arange(steps)  # [batch, steps]
    if mode == "circular":
        positions %= length
    elif positions.size and (positions.min() < 0 or positions.max() >= length):
        raise kernel_error("TensorScatter", f"write_indices {starts.tolist()} + {steps} steps run past cache length {length}")
    out = past_cache.copy()
    np.moveaxis(out, axis, 1)[np.arange(batch)[:, None], positions] = np.moveaxis(update, axis, 1)
    return out


def _one_hot(indices, depth, values, axis: int, allow_negative: bool) -> np.ndarray:
    d = np.asarray(depth).reshape(-1)
    vals = np.asarray(values).reshape(-1)
    if d.size != 1 or vals.size != 2 or int(d[0]) < 1:
        raise kernel_error("OneHot", f"depth {d.tolist()} must be one positive number and values {vals.size} "
                           "elements must be [off, on]")
    depth = int(d[0])
    idx = np.asarray(indices)
    idx = idx.astype(np.int64) if idx.dtype.kind != "i" else idx
    if allow_negative:
        idx = np.where(idx < 0, idx + depth, idx)
    axis = int(axis)
    if not -idx.ndim - 1 <= axis <= idx.ndim:
        raise kernel_error("OneHot", f"axis {axis} is out of range for indices of rank {idx.ndim}")
    hot = idx[..., None] == np.arange(depth)
    return np.take(vals, np.moveaxis(hot, -1, axis).astype(np.intp))


@kernel("OneHot", since=9)
def one_hot_9(indices: np.ndarray, depth: np.ndarray, values: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """ONNX OneHot-9: indices outside [0, depth) give all-off rows."""
    return _one_hot(indices, depth, values, axis, allow_negative=False)


@kernel("OneHot", since=11)
def one_hot(indices: np.ndarray, depth: np.ndarray, values: np.ndarray, *, axis: int = -1) -> np.ndarray:
    """ONNX OneHot-11: negative indices count back from depth; out-of-range rows are all off."""
    return _one_hot(indices, depth, values, axis, allow_negative=True)


@kernel("NonZero", since=9, devices=_IRREGULAR)
def non_zero(x: np.ndarray) -> np.ndarray:
    """ONNX NonZero: int64 [rank, count] coordinates of the non-zero elements, row-major order."""
    if x.ndim == 0:
        return np.zeros((0, int(bool(x))), dtype=np.int64)
    return np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)


@kernel("Unique", since=11, devices=_IRREGULAR)
def unique(x: np.ndarray, *, axis: int | None = None, sorted: int = 1):
    """ONNX Unique: (values, first indices, inverse indices, counts), sorted or in order of first appearance."""
    if axis is None:
        data, axis = x.reshape(-1), 0
    else:
        data, axis = x, normalize_axis(axis, x.ndim, "Unique")
    y, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True, return_counts=True,
                                          axis=None if data.ndim == 1 else axis)
    inverse = inverse.reshape(-1)
    if not sorted:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        y, first, counts, inverse = np.take(y, order, axis=axis), first[order], counts[order], rank[inverse]
    return y, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)


def _corners(boxes: np.ndarray, center_point_box: int):
    """(ymin, xmin, ymax, xmax) per box from either ONNX box encoding."""
    if center_point_box == 0:
        y1, x1, y2, x2 = np.moveaxis(boxes, -1, 0)
        return np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)
    if center_point_box == 1:
        xc, yc, w, h = np.moveaxis(boxes, -1, 0)
        return yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2
    raise kernel_error("NonMaxSuppression", f"center_point_box {center_point_box} is not 0 or 1")


def _suppressed(i: int, rest: np.ndarray, corners, areas: np.ndarray, threshold) -> np.ndarray:
    """Which of `rest` overlap box i by IoU > threshold (degenerate boxes never suppress)."""
    ymin, xmin, ymax, xmax = corners
    ih = np.minimum(ymax[i], ymax[rest]) - np.maximum(ymin[i], ymin[rest])
    iw = np.minimum(xmax[i], xmax[rest]) - np.maximum(xmin[i], xmin[rest])
    inter = ih * iw
    union = areas[i] + areas[rest] - inter
    valid = (ih > 0) & (iw > 0) & (areas[i] > 0) & (areas[rest] > 0) & (union > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return valid & (inter / np.where(valid, union, 1) > threshold)


def _scalar(t, default):
    return default if t is None or np.size(t) == 0 else np.asarray(t).reshape(-1)[0]


@kernel("NonMaxSuppression", since=10, devices=_IRREGULAR)
def non_max_suppression(boxes: np.ndarray, scores: np.ndarray, max_output_boxes_per_class: np.ndarray | None = None,
                        iou_threshold: np.ndarray | None = None, score_threshold: np.ndarray | None = None, *,
                        center_point_box: int = 0) -> np.ndarray:
    """ONNX NonMaxSuppression: greedy per (batch, class) selection; int64 [n, 3] rows of (batch, class, box)."""
    if boxes.ndim != 3 or boxes.shape[2] != 4 or scores.ndim != 3 or scores.shape[0] != boxes.shape[0] \
            or scores.shape[2] != boxes.shape[1]:
        raise kernel_error("NonMaxSuppression", f"boxes {boxes.shape} must be [B, N, 4] and scores {scores.shape} [B, C, N]")
    limit = max(int(_scalar(max_output_boxes_per_class, 0)), 0)
    iou = np.asarray(_scalar(iou_threshold, 0.0), dtype=boxes.dtype)
    min_score = _scalar(score_threshold, None)
    rows = []
    for b in range(boxes.shape[0] if limit else 0):
        corners = _corners(boxes[b], center_point_box)
        areas = (corners[2] - corners[0]) * (corners[3] - corners[1])
        for c in range(scores.shape[1]):
            s = scores[b, c]
            candidates = np.arange(s.size) if min_score is None else np.flatnonzero(s > min_score)
            order = candidates[np.argsort(-s[candidates], kind="stable")]
            kept = []
            while order.size and len(kept) < limit:
                best, order = order[0], order[1:]
                kept.append(best)
                order = order[~_suppressed(best, order, corners, areas, iou)]
            rows.extend((b, c, int(k)) for k in kept)
    return np.array(rows, dtype=np.int64).reshape(-1, 3)
