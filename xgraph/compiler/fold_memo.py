"""What a constant fold depends on, as a key: ops of one kind on the same small weights fold alike.

A transformer's blocks repeat the same `Shape -> Gather -> Unsqueeze -> Concat` arithmetic on the
same small weights thousands of times, so folding evaluates a handful of distinct nodes and looks
the rest up. `fold_key` names everything a fold's outcome (its size estimate from `fold_sizes`, the
reference evaluator's results, the size limit's verdict) depends on within one graph: the op's type,
domain and ONNX attributes, which inputs are omitted, the inputs' values, and the outputs' count,
inferred shapes and dtypes. It is None when an input is large or of object dtype, or an attribute
holds something other than numbers and strings: such folds are not looked up. The graph's opsets
and functions are the same for every op of a fold, so they are not part of the key.
"""
from __future__ import annotations

import struct

import numpy as np

from xgraph.ir import Op

#: Folded inputs up to this many bytes in all are compared by value to reuse an earlier result.
SMALL_VALUES = 4096

_PLAIN = (int, str, bytes, bool)


def values_key(values: list) -> tuple | None:
    """The inputs of a fold as a hashable key (dtype, shape, bytes), or None when they are large or objects."""
    key, total = [], 0
    for v in values:
        if v is None:
            key.append(None)
            continue
        if not isinstance(v, np.ndarray) or v.dtype.kind == "O":
            return None
        total += v.nbytes
        if total > SMALL_VALUES:
            return None
        key.append((v.dtype.str, v.shape, v.tobytes()))
    return tuple(key)


def _attr_key(value) -> tuple | None:
    """An attribute value as an exact hashable key (floats by their bits, so 0.0 and -0.0 differ); None
    for anything but numbers, strings and lists of them."""
    kind = type(value)
    if kind in _PLAIN:
        return kind, value
    if kind is float:
        return kind, struct.pack("<d", value)
    if kind in (list, tuple):
        parts = tuple(_attr_key(v) for v in value)
        return None if None in parts else (kind, parts)
    return None


def fold_key(op: Op, values: list) -> tuple | None:
    """The key of folding `op` on `values` (its inputs' arrays, None for omitted ones); None when the
    fold is not to be looked up."""
    vkey = values_key(values)
    if vkey is None:
        return None
    attrs = []
    for name, value in op.get_onnx_attrs().items():
        key = _attr_key(value)
        if key is None:
            return None
        attrs.append((name, op.get_attr_kind(name), key))
    outputs = tuple((t.shape, t.dtype) for t in op.get_output_tensors())
    extra = None
    if op.type == "Gemm":  # the size estimate reads transA/transB with annotations included
        every = op.get_attrs()
        extra = (_attr_key(every.get("transA", 0)), _attr_key(every.get("transB", 0)))
        if None in extra:
            return None
    return op.type, op.domain, tuple(attrs), vkey, outputs, extra


__all__ = ["SMALL_VALUES", "fold_key", "values_key"]
