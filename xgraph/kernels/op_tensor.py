"""Data-movement kernels: reshaping, joining, slicing and padding (casting: op_cast; constants: op_constant).

Metadata-only ops return read-only views of their input (see the aliasing policy in
op_shape); everything else returns a fresh array. Shape-like inputs (Reshape's shape,
Slice's starts, ...) are read as Python ints once, so the numpy work is a single call.
"""
from __future__ import annotations

import math

import numpy as np

from xgraph.kernels.op_shape import (
    dims_of, ints_of, kernel_error, normalize_axes, normalize_axis, readonly)
from xgraph.kernels.registry import builtin_kernel as kernel

_IRREGULAR = ("AICPU", "CPU")  # data-dependent output shapes: not for the dense AI Core


@kernel("Identity", since=1)
def identity(x):
    """ONNX Identity: a read-only view of a tensor; sequences and optionals pass through."""
    if isinstance(x, np.ndarray):
        return readonly(x.view())
    return (list(x),) if isinstance(x, list) else x  # a 1-tuple: a bare list would read as one value per output


# -- reshaping ---------------------------------------------------------------------------

def _reshape_dims(in_shape: tuple[int, ...], target: list[int], allowzero: int) -> tuple[int, ...]:
    dims = list(target)
    if dims.count(-1) > 1:
        raise kernel_error("Reshape", f"shape {target} has more than one -1")
    if allowzero and 0 in dims and -1 in dims:
        raise kernel_error("Reshape", f"shape {target} mixes 0 and -1 with allowzero=1")
    for i, d in enumerate(dims):
        if d < -1:
            raise kernel_error("Reshape", f"shape {target} has invalid dimension {d}")
        if d == 0 and not allowzero:
            if i >= len(in_shape):
                raise kernel_error("Reshape", f"shape {target}: 0 at position {i} copies a dimension "
                                   f"the input {in_shape} does not have")
            dims[i] = in_shape[i]
    total = math.prod(in_shape)
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or total % known:
            raise kernel_error("Reshape", f"cannot infer -1 in shape {target} for input shape {in_shape}")
        dims[dims.index(-1)] = total // known
    if math.prod(dims) != total:
        raise kernel_error("Reshape", f"shape {target} does not hold the {total} elements of input shape {in_shape}")
    return tuple(dims)


@kernel("Reshape", since=1)
def reshape_1(data: np.ndarray, *, shape=(), consumed_inputs=()) -> np.ndarray:
    """ONNX Reshape-1: the target shape as an attribute (0 copies, -1 infers)."""
    return readonly(data.reshape(_reshape_dims(data.shape, list(shape), 0)))


@kernel("Reshape", since=5)
def reshape(data: np.ndarray, shape: np.ndarray, *, allowzero: int = 0) -> np.ndarray:
    """ONNX Reshape-5/14: 0 copies the input dim unless allowzero=1, one -1 is inferred."""
    return readonly(data.reshape(_reshape_dims(data.shape, ints_of(shape, "Reshape", "shape"), allowzero)))


@kernel("Flatten", since=1)
def flatten(x: np.ndarray, *, axis: int = 1) -> np.ndarray:
    """ONNX Flatten: a 2-D view, dims before `axis` folded into rows (axis in [-r, r])."""
    rank = x.ndim
    if not -rank <= axis <= rank:
        raise kernel_error("Flatten", f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    return readonly(x.reshape(math.prod(x.shape[:axis]), math.prod(x.shape[axis:])))


def _squeeze(op: str, data: np.ndarray, axes) -> np.ndarray:
    if axes is None or len(axes) == 0:
        return readonly(data.reshape([d for d in data.shape if d != 1]))
    drop = normalize_axes(axes, data.ndim, op)
    for a in drop:
        if data.shape[a] != 1:
            raise kernel_error(op, f"cannot squeeze axis {a} of size {data.shape[a]} (shape {data.shape})")
    return readonly(data.reshape([d for i, d in enumerate(data.shape) if i not in drop]))


@kernel("Squeeze", since=1)
def squeeze_1(data: np.ndarray, *, axes=None) -> np.ndarray:
    """ONNX Squeeze-1/11: axes as an attribute; all size-1 dims when absent."""
    return _squeeze("Squeeze", data, axes)


@kernel("Squeeze", since=13)
def squeeze(data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    """ONNX Squeeze-13: axes as an optional input; all size-1 dims when absent."""
    return _squeeze("Squeeze", data, None if axes is None else ints_of(axes, "Squeeze", "axes"))


def _unsqueeze(data: np.ndarray, axes) -> np.ndarray:
    if axes is None:
        raise kernel_error("Unsqueeze", "axes are required")
    rank = data.ndim + len(axes)
    inserted = set(normalize_axes(axes, rank, "Unsqueeze"))
    it = iter(data.shape)
    return readonly(data.reshape([1 if i in inserted else next(it) for i in range(rank)]))


@kernel("Unsqueeze", since=1)
def unsqueeze_1(data: np.ndarray, *, axes=None) -> np.ndarray:
    """ONNX Unsqueeze-1/11: axes (relative to the output rank) as an attribute."""
    return _unsqueeze(data, axes)


@kernel("Unsqueeze", since=13)
def unsqueeze(data: np.ndarray, axes: np.ndarray | None = None) -> np.ndarray:
    """ONNX Unsqueeze-13: axes (relative to the output rank) as an input."""
    return _unsqueeze(data, None if axes is None else ints_of(axes, "Unsqueeze", "axes"))


@kernel("Transpose", since=1)
def transpose(data: np.ndarray, *, perm=None) -> np.ndarray:
    """ONNX Transpose: a read-only strided view; reversed axes when perm is absent."""
    if perm is None:
        return readonly(data.T)
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(data.ndim)):
        raise kernel_error("Transpose", f"perm {perm} is not a permutation of the {data.ndim} axes")
    return readonly(data.transpose(perm))


@kernel("Expand", since=8)
def expand(data: np.ndarray, shape: np.ndarray) -> np.ndarray:
    """ONNX Expand: a read-only broadcast view to the two-way broadcast of data and shape."""
    target = dims_of(shape, "Expand")
    try:
        return np.broadcast_to(data, np.broadcast_shapes(data.shape, target))
    except ValueError:
        raise kernel_error("Expand", f"input shape {data.shape} does not broadcast with shape {list(target)}") from None


@kernel("Tile", since=1)
def tile_1(x: np.ndarray, tiles: np.ndarray, axis: np.ndarray) -> np.ndarray:
    """ONNX Tile-1: repeat `tiles` times along one `axis`."""
    reps = [1] * x.ndim
    reps[normalize_axis(ints_of(axis, "Tile", "axis")[0], x.ndim, "Tile")] = ints_of(tiles, "Tile", "tiles")[0]
    return tile(x, np.array(reps, dtype=np.int64))


@kernel("Tile", since=6)
def tile(x: np.ndarray, repeats: np.ndarray) -> np.ndarray:
    """ONNX Tile-6: one non-negative repeat count per axis."""
    reps = ints_of(repeats, "Tile", "repeats")
    if len(reps) != x.ndim or min(reps, default=0) < 0:
        raise kernel_error("Tile", f"repeats {reps} must be {x.ndim} non-negative counts for input shape {x.shape}")
    return np.tile(x, reps)


# -- joining and slicing -----------------------------------------------------------------

def _concat(inputs, axis: int) -> np.ndarray:
    if not inputs:
        raise kernel_error("Concat", "needs at least one input")
    first = inputs[0]
    axis = normalize_axis(axis, first.ndim, "Concat")
    for x in inputs[1:]:
        if x.dtype != first.dtype or x.ndim != first.ndim or any(
                a != b for i, (a, b) in enumerate(zip(x.shape, first.shape)) if i != axis):
            raise kernel_error("Concat", f"input {x.dtype}{list(x.shape)} does not match "
                               f"{first.dtype}{list(first.shape)} outside axis {axis}")
    return np.concatenate(inputs, axis=axis)


@kernel("Concat", since=1)
def concat_1(*inputs: np.ndarray, axis: int = 1) -> np.ndarray:
    """ONNX Concat-1: axis defaults to 1."""
    return _concat(inputs, axis)


@kernel("Concat", since=4)
def concat(*inputs: np.ndarray, axis: int | None = None) -> np.ndarray:
    """ONNX Concat-4: join along a required axis (negative from opset 11)."""
    if axis is None:
        raise kernel_error("Concat", "attribute 'axis' is required")
    return _concat(inputs, axis)


def _split(x: np.ndarray, sizes, axis: int, num_outputs) -> tuple[np.ndarray, ...]:
    axis = normalize_axis(axis, x.ndim, "Split")
    dim = x.shape[axis]
    if sizes is not None and len(sizes):
        sizes = [int(s) for s in sizes]
        if sum(sizes) != dim or min(sizes) < 0:
            raise kernel_error("Split", f"split {sizes} does not partition axis {axis} of size {dim}")
    elif num_outputs:
        n = int(num_outputs)
        chunk = -(-dim // n)
        sizes = [chunk] * (n - 1) + [dim - chunk * (n - 1)]
        if sizes[-1] < 0:
            raise kernel_error("Split", f"axis {axis} of size {dim} cannot be split into {n} outputs")
    else:
        raise kernel_error("Split", "needs 'split' or the node's output count passed as num_outputs")
    lead = (slice(None),) * axis
    bounds = np.cumsum([0] + sizes).tolist()
    return tuple(readonly(x[lead + (slice(a, b),)]) for a, b in zip(bounds[:-1], bounds[1:]))


@kernel("Split", since=1)
def split_1(x: np.ndarray, split_input: np.ndarray | None = None, *, axis: int = 0, split=None,
            num_outputs: int | None = None) -> tuple[np.ndarray, ...]:
    """ONNX Split-1: sizes from the optional second input or the `split` attribute."""
    sizes = split if split_input is None else ints_of(split_input, "Split", "split")
    return _split(x, sizes, axis, num_outputs)


@kernel("Split", since=2)
def split_2(x: np.ndarray, *, axis: int = 0, split=None, num_outputs: int | None = None) -> tuple[np.ndarray, ...]:
    """ONNX Split-2/11: sizes as an attribute; `num_outputs` carries the node's output count otherwise."""
    return _split(x, split, axis, num_outputs)


@kernel("Split", since=13)
def split(x: np.ndarray, split: np.ndarray | None = None, *, axis: int = 0,
          num_outputs: int | None = None) -> tuple[np.ndarray, ...]:
    """ONNX Split-13/18: sizes as an input, else num_outputs chunks (the last one smaller)."""
    return _split(x, None if split is None else ints_of(split, "Split", "split"), axis, num_outputs)


def _onnx_slice(start: int, end: int, step: int, dim: int) -> slice:
    """One axis of ONNX Slice: negative bounds count from the end, then clamp per the spec."""
    start = start + dim if start < 0 else start
    end = end + dim if end < 0 else end
    if step > 0:
        return slice(min(max(start, 0), dim), min(max(end, 0), dim), step)
    start, end = min(max(start, 0), dim - 1), min(max(end, -1), dim - 1)
    return slice(start, None if end < 0 else end, step)


def _slice(data: np.ndarray, starts, ends, axes, steps) -> np.ndarray:
    starts, ends = ints_of(starts, "Slice", "starts"), ints_of(ends, "Slice", "ends")
    n = len(starts)
    axes = list(range(n)) if axes is None else normalize_axes(ints_of(axes, "Slice", "axes"), data.ndim, "Slice")
    steps = [1] * n if steps is None else ints_of(steps, "Slice", "steps")
    if not len(ends) == len(axes) == len(steps) == n:
        raise kernel_error("Slice", f"starts {starts}, ends {ends}, axes {axes} and steps {steps} differ in length")
    if 0 in steps:
        raise kernel_error("Slice", f"steps {steps} contains 0")
    index = [slice(None)] * data.ndim
    for start, end, axis, step in zip(starts, ends, axes, steps):
        index[axis] = _onnx_slice(start, end, step, data.shape[axis])
    return readonly(data[tuple(index)])


@kernel("Slice", since=1)
def slice_1(data: np.ndarray, *, starts=None, ends=None, axes=None) -> np.ndarray:
    """ONNX Slice-1: starts/ends/axes as attributes, unit steps."""
    if starts is None or ends is None:
        raise kernel_error("Slice", "attributes 'starts' and 'ends' are required")
    return _slice(data, starts, ends, axes, None)


@kernel("Slice", since=10)
def slice_(data: np.ndarray, starts: np.ndarray, ends: np.ndarray, axes: np.ndarray | None = None,
           steps: np.ndarray | None = None) -> np.ndarray:
    """ONNX Slice-10/13: a read-only view; out-of-range bounds clamp, negative steps walk back."""
    return _slice(data, starts, ends, axes, steps)


@kernel("Compress", since=9, devices=_IRREGULAR)
def compress(x: np.ndarray, condition: np.ndarray, *, axis: int | None = None) -> np.ndarray:
    """ONNX Compress: keep slices whose condition is true (flattened input when axis is absent)."""
    data = x.reshape(-1) if axis is None else x
    axis = 0 if axis is None else normalize_axis(axis, x.ndim, "Compress")
    cond = np.asarray(condition).reshape(-1).astype(bool)
    n = data.shape[axis]
    if cond.size > n:
        if cond[n:].any():
            raise kernel_error("Compress", f"condition of length {cond.size} selects past axis {axis} of size {n}")
        cond = cond[:n]
    return np.compress(cond, data, axis=axis)


@kernel("ReverseSequence", since=10)
def reverse_sequence(x: np.ndarray, sequence_lens: np.ndarray, *, batch_axis: int = 1,
                     time_axis: int = 0) -> np.ndarray:
    """ONNX ReverseSequence: reverse the first sequence_lens[b] steps of each batch entry."""
    if x.ndim < 2 or {batch_axis, time_axis} != {0, 1}:
        raise kernel_error("ReverseSequence", f"batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 "
                           f"of an input of rank >= 2 (got shape {x.shape})")
    steps, batch = x.shape[time_axis], x.shape[batch_axis]
    lens = np.asarray(sequence_lens, dtype=np.int64).reshape(-1)
    if lens.size != batch or (lens.size and (lens.min() < 0 or lens.max() > steps)):
        raise kernel_error("ReverseSequence", f"sequence_lens {lens.tolist()} must be {batch} lengths in [0, {steps}]")
    t = np.arange(steps)[:, None]
    source = np.where(t < lens, lens - 1 - t, t)  # [time, batch]
    if time_axis == 1:
        source = source.T
    return np.take_along_axis(x, source.reshape(source.shape + (1,) * (x.ndim - 2)), axis=time_axis)


# -- padding -----------------------------------------------------------------------------

def _pad(data: np.ndarray, pads, mode: str, value, axes=None) -> np.ndarray:
    rank = data.ndim
    axes = list(range(rank)) if axes is None else normalize_axes(axes, rank, "Pad")
    pads = [int(p) for p in pads]
    if len(pads) != 2 * len(axes):
        raise kernel_error("Pad", f"pads {pads} must hold 2 values per padded axis ({len(axes)} axes)")
    before, after = [0] * rank, [0] * rank
    for i, a in enumerate(axes):
        before[a], after[a] = pads[i], pads[i + len(axes)]
    if min(before + after, default=0) < 0:  # negative pads crop first
        crop = tuple(slice(max(-b, 0), d - max(-e, 0)) for b, e, d in zip(before, after, data.shape))
        if any(s.start > s.stop for s in crop):
            raise kernel_error("Pad", f"pads {pads} crop more than the input shape {data.shape}")
        data = data[crop]
    width = [(max(b, 0), max(e, 0)) for b, e in zip(before, after)]
    if mode not in ("constant", "reflect", "edge", "wrap"):
        raise kernel_error("Pad", f"mode {mode!r} is not one of constant, reflect, edge, wrap")
    if not any(b or e for b, e in width):
        return data.copy()
    if mode == "constant":
        if value is None:
            value = "" if data.dtype == object else 0
        return np.pad(data, width, mode="constant", constant_values=np.asarray(value).astype(data.dtype))
    if any(w != (0, 0) and d == 0 for w, d in zip(width, data.shape)):
        raise kernel_error("Pad", f"mode {mode!r} cannot pad an empty axis (shape {data.shape})")
    return np.pad(data, width, mode=mode)


@kernel("Pad", since=1)
def pad_1(data: np.ndarray, *, paddings=None, mode: str = "constant", value: float = 0.0) -> np.ndarray:
    """ONNX Pad-1: `paddings` attribute, float `value`."""
    if paddings is None:
        raise kernel_error("Pad", "attribute 'paddings' is required")
    return _pad(data, paddings, mode, value)


@kernel("Pad", since=2)
def pad_2(data: np.ndarray, *, pads=None, mode: str = "constant", value: float = 0.0) -> np.ndarray:
    """ONNX Pad-2: `pads` attribute, float `value`."""
    if pads is None:
        raise kernel_error("Pad", "attribute 'pads' is required")
    return _pad(data, pads, mode, value)


@kernel("Pad", since=11)
def pad(data: np.ndarray, pads: np.ndarray, constant_value: np.ndarray | None = None,
        axes: np.ndarray | None = None, *, mode: str = "constant") -> np.ndarray:
    """ONNX Pad-11/18/19: pads (and axes from 18) as inputs; negative pads crop; wrap from 19."""
    value = None if constant_value is None or np.size(constant_value) == 0 else np.asarray(constant_value).reshape(-1)[0]
    return _pad(data, ints_of(pads, "Pad", "pads"), mode, value,
                None if axes is None else ints_of(axes, "Pad", "axes"))
