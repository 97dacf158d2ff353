"""ONNX value types decoded for the IR: TypeProto -> (shape, numpy dtype, is it a tensor)."""
from __future__ import annotations

from operator import attrgetter

import numpy as np
import onnx
from onnx import helper


_DTYPES: dict[int, np.dtype | None] = {}


def _np_dtype(elem_type: int) -> np.dtype | None:
    if elem_type not in _DTYPES:
        try:
            _DTYPES[elem_type] = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)) if elem_type else None
        except Exception:  # onnx has no numpy type for this element type
            _DTYPES[elem_type] = None
    return _DTYPES[elem_type]


TYPE_CACHE: dict[bytes, tuple] = {}
TYPE_CACHE_LIMIT = 4096


def type_to_shape_dtype(tp: onnx.TypeProto) -> tuple[tuple | None, np.dtype | None, bool]:
    """(shape, dtype, is_tensor) of a TypeProto; shape None when the rank is unknown.

    Most tensors of a model share a handful of types, so decoded types are cached by their
    serialized bytes (a C call) instead of walking the proto's dims in Python every time.
    """
    return decode_type_key(tp.SerializeToString(), tp)


class NotText(ValueError):
    """A string field of a type that is not valid UTF-8 (turned into a ModelFileError with the file's label)."""


def _decode_type(tp: onnx.TypeProto) -> tuple[tuple | None, np.dtype | None, bool]:
    which = tp.WhichOneof("value")
    if which not in ("tensor_type", "sparse_tensor_type"):
        return None, None, which is None
    tt = getattr(tp, which)
    dtype = _np_dtype(tt.elem_type)
    if not tt.HasField("shape"):
        return None, dtype, True
    dims = []
    for d in tt.shape.dim:
        kind = d.WhichOneof("value")
        if kind == "dim_value":
            dims.append(d.dim_value)
        elif kind == "dim_param" and d.dim_param:
            if type(d.dim_param) is not str:  # protobuf hands over non-UTF-8 text as bytes
                raise NotText(d.dim_param)
            dims.append(d.dim_param)
        else:
            dims.append(None)
    return tuple(dims), dtype, True


_NAME, _TYPE, _SERIALIZE = attrgetter("name"), attrgetter("type"), onnx.TypeProto.SerializeToString


def decode_type_key(key: bytes, tp: onnx.TypeProto) -> tuple[tuple | None, np.dtype | None, bool]:
    """`type_to_shape_dtype(tp)`, where `key` is ``tp.SerializeToString()`` (as `value_type_keys` gives them)."""
    hit = TYPE_CACHE.get(key)
    if hit is None:
        hit = _decode_type(tp)
        if len(TYPE_CACHE) >= TYPE_CACHE_LIMIT:
            TYPE_CACHE.clear()
        TYPE_CACHE[key] = hit
    return hit


def value_type_keys(g: onnx.GraphProto) -> tuple[dict[str, bytes], dict[bytes, onnx.TypeProto]]:
    """`value_types` with each type as its serialized bytes (one C call per value), and one TypeProto per
    distinct bytes: a 100k-op model's types are decoded once per distinct type, not once per tensor."""
    keys: dict[str, bytes] = {}
    protos: dict[bytes, onnx.TypeProto] = {}
    for infos in (g.value_info, g.input, g.output):  # later lists win, as in `value_types`
        names = list(map(_NAME, infos))
        tps = list(map(_TYPE, infos))
        found = list(map(_SERIALIZE, tps))
        distinct = dict(zip(found, tps))
        untyped = {key for key, tp in distinct.items() if tp.WhichOneof("value") is None}
        protos.update(distinct)
        keys.update([row for row in zip(names, found) if row[1] not in untyped] if untyped else zip(names, found))
    keys.pop("", None)
    return keys, protos


def value_types(g: onnx.GraphProto) -> dict[str, onnx.TypeProto]:
    """Declared or inferred types by value name (graph inputs and outputs win over value_info)."""
    types = {}
    for infos in (g.value_info, g.input, g.output):
        for vi in infos:
            tp = vi.type
            if tp.WhichOneof("value") is not None:
                types[vi.name] = tp
    types.pop("", None)
    return types
