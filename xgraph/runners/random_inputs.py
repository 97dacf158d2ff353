"""Seeded random values for a graph's inputs (what `xgraph run --random`, `verify` and `xgraph.bisect` feed).

Normal floats, small non-negative ints (valid as indices and lengths), random bools; unknown or
symbolic dims taken as 1.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from xgraph.errors import XGraphError

if TYPE_CHECKING:
    from xgraph.ir import Tensor

#: Random inputs larger than this are refused (give a file instead).
MAX_RANDOM_BYTES = 1 << 30
MAX_RANK = 64


def _is_tensor(t: "Tensor") -> bool:
    return t.is_tensor_value


def concrete_shape(t: "Tensor") -> tuple[int, ...]:
    """The tensor's shape with every unknown or symbolic dim taken as 1."""
    if t.shape is None:
        raise XGraphError(f"input {t.name!r} has unknown rank, so no random value can be made for it; "
                          f"pass it with --input {t.name}=FILE")
    shape = tuple(d if isinstance(d, int) else 1 for d in t.shape)
    itemsize = t.dtype.itemsize if t.dtype is not None and t.dtype.itemsize else 8
    if len(shape) > MAX_RANK or any(d < 0 for d in shape) or math.prod(shape) * itemsize > MAX_RANDOM_BYTES:
        raise XGraphError(f"input {t.name!r} declares shape {t.shape}, for which no random value is made (rank at "
                          f"most {MAX_RANK}, dims >= 0, at most {MAX_RANDOM_BYTES} bytes); pass it with "
                          f"--input {t.name}=FILE")
    return shape


def random_value(t: "Tensor", rng: np.random.Generator) -> np.ndarray:
    """A seeded random value for input `t`: normal floats, small non-negative ints, random bools."""
    if not _is_tensor(t) or t.dtype is None:
        raise XGraphError(f"input {t.name!r} is not a plain tensor (a sequence, optional or untyped value), so no "
                          f"random value can be made for it; pass it with --input {t.name}=FILE")
    shape = concrete_shape(t)
    dtype = t.dtype
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if dtype.kind in "iu":
        high = 256 if dtype == np.uint8 else 4
        return rng.integers(0, high, shape).astype(dtype)
    if dtype.kind in "OUS":
        return np.full(shape, "x", dtype=object)
    if dtype.kind == "c":
        return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)
    return rng.standard_normal(shape).astype(np.float32).astype(dtype)


def complete_inputs(feeds: dict[str, Any], tensors: "Sequence[Tensor]", seed: int) -> tuple[dict[str, Any], list[str]]:
    """`feeds` with every missing input filled by `random_value` (seeded); also the names filled."""
    rng = np.random.default_rng(seed)
    filled = [t.name for t in tensors if t.name not in feeds]
    feeds = dict(feeds)
    for t in tensors:
        if t.name not in feeds:
            feeds[t.name] = random_value(t, rng)
    return feeds, filled


__all__ = ["MAX_RANDOM_BYTES", "MAX_RANK", "complete_inputs", "concrete_shape", "random_value"]
