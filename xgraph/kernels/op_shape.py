"""Shape and Size, plus the shape arithmetic the data-movement and indexing kernels share.

Shape-family ops sit on the hot path of transformer graphs (Shape -> Gather -> Concat ->
Reshape on every layer), so Shape answers from a small cache of read-only int64 arrays and
the helpers below turn shape tensors into tuples without building intermediate arrays.

Aliasing policy (shared by op_tensor and op_index): kernels that only change metadata
(Identity, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Slice, Split, Expand, Constant)
return views of their input, never copies, and mark those views read-only with `readonly`.
A consumer that tries to write into such an output gets a ValueError instead of silently
changing the producer's input. A runtime that recycles buffers must keep an input buffer
alive while an output that shares its memory (``np.shares_memory``) is still in use.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Iterable

import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.registry import builtin_kernel as kernel


def kernel_error(op: str, message: str) -> KernelError:
    """The error a kernel raises for invalid input: names the op, then what is wrong."""
    return KernelError(f"{op}: {message}")


def readonly(view: np.ndarray) -> np.ndarray:
    """`view` marked read-only, so a write through an aliasing output fails loudly."""
    view.flags.writeable = False
    return view


def ints_of(tensor, op: str, what: str) -> list[int]:
    """A 0-D or 1-D integer tensor (or a list of ints) as a list of Python ints."""
    if isinstance(tensor, (list, tuple)):
        return [int(v) for v in tensor]
    a = np.asarray(tensor)
    if a.ndim > 1:
        raise kernel_error(op, f"{what} must be 0-D or 1-D, got shape {a.shape}")
    if a.size and a.dtype.kind not in "iu":
        raise kernel_error(op, f"{what} must be an integer tensor, got dtype {a.dtype}")
    return [int(v) for v in a.reshape(-1).tolist()]


def dims_of(tensor, op: str, what: str = "shape") -> tuple[int, ...]:
    """A shape tensor as a tuple of non-negative dims (KernelError on a negative dim)."""
    dims = ints_of(tensor, op, what)
    if any(d < 0 for d in dims):
        raise kernel_error(op, f"{what} {dims} has a negative dimension")
    return tuple(dims)


def normalize_axis(axis: int, rank: int, op: str, what: str = "axis") -> int:
    """`axis` in [-rank, rank-1] mapped to [0, rank-1]."""
    axis = int(axis)
    if not -rank <= axis < rank:
        raise kernel_error(op, f"{what} {axis} is out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def normalize_axes(axes: Iterable[int], rank: int, op: str, what: str = "axes") -> list[int]:
    """Each axis normalized; repeated axes are an error."""
    out = [normalize_axis(a, rank, op, what) for a in axes]
    if len(set(out)) != len(out):
        raise kernel_error(op, f"{what} {list(axes)} repeats an axis")
    return out


@lru_cache(maxsize=4096)
def _shape_array(dims: tuple[int, ...], start: int, end: int | None) -> np.ndarray:
    return readonly(np.array(dims[start:end], dtype=np.int64))


@kernel("Shape", since=1)
def shape(data: np.ndarray, *, start: int = 0, end: int | None = None) -> np.ndarray:
    """ONNX Shape (start/end from opset 15, clamped like Python slicing); a cached read-only int64 vector."""
    return _shape_array(np.shape(data), int(start), None if end is None else int(end))


@kernel("Size", since=1)
def size(data: np.ndarray) -> np.ndarray:
    """ONNX Size: the element count as an int64 scalar."""
    return np.array(np.size(data), dtype=np.int64)
