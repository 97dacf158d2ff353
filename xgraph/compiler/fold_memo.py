"""What a constant fold depends on, as a key: ops of one kind on the same small weights fold alike.

A transformer's blocks repeat the same `Shape -> Gather -> Unsqueeze -> Concat` arithmetic on the
same small weights thousands of times, so folding evaluates a handful of distinct nodes and looks
the rest up. A fold's key (`FoldKeys.key`) names everything a fold's outcome (its size estimate from `fold_sizes`, the
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
from xgraph.ir.index import GraphIndex

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


def _static_key(op: Op) -> tuple | None:
    """(type, domain, ONNX attributes, what else the size estimate reads) of a fold's key; None when an
    attribute holds something other than numbers and strings."""
    attrs = []
    for name, value in op.get_onnx_attrs().items():
        key = _attr_key(value)
        if key is None:
            return None
        attrs.append((name, op.get_attr_kind(name), key))
    extra = None
    if op.type == "Gemm":  # the size estimate reads transA/transB with annotations included
        every = op.get_attrs()
        extra = (_attr_key(every.get("transA", 0)), _attr_key(every.get("transB", 0)))
        if None in extra:
            return None
    return op.type, op.domain, tuple(attrs), extra


class FoldKeys:
    """The keys of one folding pass, from numbers given out once per distinct thing: two folds get
    equal keys exactly when the op's type, domain, ONNX attributes, omitted inputs, input values and
    outputs are equal, and an op's attributes and each input array are looked at once per distinct
    object, not per op.

    An array is numbered once by its contents (arrays folded once and read by many ops are the same
    object); attributes once per distinct attribute identity (`xgraph.ir.index.GraphIndex.fold_identity`:
    ops decoded from equal ONNX attributes share the value objects). Everything numbered is kept
    alive by this object, so an id seen again is the same object."""

    def __init__(self, index: GraphIndex) -> None:
        self._index = index  # the graph's index: each op's attribute identity
        self._arrays: dict[int, tuple] = {}  # id(array) -> (array, number or None, nbytes)
        self._contents: dict[tuple, int] = {}  # (dtype, shape, bytes) -> number
        self._attributes: dict[tuple, tuple] = {}  # attribute identity -> (values, number or None)
        self._statics: dict[tuple, int] = {}  # `_static_key` -> number

    def _array(self, v) -> tuple:
        seen = self._arrays.get(id(v))
        if seen is None:
            if not isinstance(v, np.ndarray) or v.dtype.kind == "O" or v.nbytes > SMALL_VALUES:
                number = None
            else:
                number = self._contents.setdefault((v.dtype.str, v.shape, v.tobytes()), len(self._contents))
            seen = self._arrays[id(v)] = (v, number, v.nbytes if isinstance(v, np.ndarray) else 0)
        return seen

    def key(self, op: Op, values: list) -> tuple | None:
        """The key of folding `op` on `values` (None for omitted inputs); None when the fold is not to be looked up
        (a large or object input, an attribute other than numbers and strings)."""
        numbers, total = [], 0
        arrays = self._arrays
        for v in values:
            if v is None:
                numbers.append(None)
                continue
            seen = arrays.get(id(v))
            if seen is None:
                seen = self._array(v)
            if seen[1] is None:
                return None
            total += seen[2]
            if total > SMALL_VALUES:
                return None
            numbers.append(seen[1])
        identity, attr_values, outputs = self._index.fold_identity(op)
        seen = self._attributes.get(identity)
        if seen is None:
            static = _static_key(op)
            seen = self._attributes[identity] = (
                attr_values, None if static is None else self._statics.setdefault(static, len(self._statics)))
        if seen[1] is None:
            return None
        return seen[1], tuple(numbers), outputs


__all__ = ["SMALL_VALUES", "FoldKeys", "values_key"]
