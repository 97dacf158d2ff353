"""ONNX attributes <-> plain Python values, losslessly.

Ops keep attributes as Python values (int, float, str, lists of them, numpy arrays for
tensors, ``onnx.GraphProto`` for nested graphs) together with the ONNX attribute type they
came with, so an exported model carries exactly what was imported. Strings are decoded as
UTF-8 with ``surrogateescape`` so that bytes which are not UTF-8 still round-trip.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import AttributeProto, helper, numpy_helper

from xgraph.errors import GraphError

A = AttributeProto


def _decode(b: bytes) -> str:
    return b.decode("utf-8", errors="surrogateescape")


def _encode(s: str | bytes) -> bytes:
    return s if isinstance(s, bytes) else s.encode("utf-8", errors="surrogateescape")


def tensor_to_array(t: onnx.TensorProto) -> np.ndarray:
    """A TensorProto (with its data inline) as a numpy array."""
    return numpy_helper.to_array(t)


def array_to_tensor(a: np.ndarray, name: str = "") -> onnx.TensorProto:
    """A numpy array as a TensorProto named `name`."""
    tensor = onnx.TensorProto()
    fill_tensor(tensor, a, name)
    return tensor


#: element types onnx packs several to a byte (`numpy_helper.from_array` writes them)
_PACKED = frozenset({onnx.TensorProto.INT4, onnx.TensorProto.UINT4, onnx.TensorProto.FLOAT4E2M1, onnx.TensorProto.INT2,
                     onnx.TensorProto.UINT2, onnx.TensorProto.FLOAT6E2M3, onnx.TensorProto.FLOAT6E3M2})


def fill_tensor(tensor: onnx.TensorProto, a: np.ndarray, name: str = "") -> None:
    """Write `array_to_tensor(a, name)` into `tensor`, an empty TensorProto (e.g. `graph.initializer.add()`): a
    weight's bytes are copied into the message once, where building one and appending it copies them twice.
    Strings and packed element types are what `numpy_helper.from_array` writes."""
    a = np.asarray(a)
    kind = None if a.dtype == object or np.issubdtype(a.dtype, np.str_) else helper.np_dtype_to_tensor_dtype(a.dtype)
    if kind is None or kind in _PACKED:
        tensor.CopyFrom(numpy_helper.from_array(a, name))
        return
    tensor.dims.extend(a.shape)
    if name:
        tensor.name = name
    tensor.data_type = kind
    tensor.raw_data = numpy_helper.tobytes_little_endian(a)


def attribute_to_python(attr: onnx.AttributeProto) -> tuple[Any, int]:
    """(value, onnx attribute type) of an AttributeProto; tensors become numpy arrays."""
    t = attr.type
    if attr.ref_attr_name:
        return attr.ref_attr_name, -1  # a function-body reference; kept by name
    if t == A.STRING:
        return _decode(attr.s), t
    if t == A.STRINGS:
        return [_decode(s) for s in attr.strings], t
    if t == A.TENSOR:
        return tensor_to_array(attr.t), t
    if t == A.TENSORS:
        return [tensor_to_array(x) for x in attr.tensors], t
    value = helper.get_attribute_value(attr)
    if t == A.GRAPH:
        g = onnx.GraphProto()
        g.CopyFrom(value)
        return g, t
    if t == A.GRAPHS:
        out = []
        for v in value:
            g = onnx.GraphProto()
            g.CopyFrom(v)
            out.append(g)
        return out, t
    if t in (A.SPARSE_TENSOR, A.TYPE_PROTO):
        copy = type(value)()
        copy.CopyFrom(value)
        return copy, t
    if t in (A.SPARSE_TENSORS, A.TYPE_PROTOS):
        out = []
        for v in value:
            c = type(v)()
            c.CopyFrom(v)
            out.append(c)
        return out, t
    return value, t


def infer_attribute_type(value: Any) -> int:
    """The ONNX attribute type a Python value is stored as when no type was recorded."""
    if isinstance(value, (bool, int, np.integer)):
        return A.INT
    if isinstance(value, (float, np.floating)):
        return A.FLOAT
    if isinstance(value, (str, bytes)):
        return A.STRING
    if isinstance(value, np.ndarray):
        return A.TENSOR
    if isinstance(value, onnx.GraphProto):
        return A.GRAPH
    if isinstance(value, onnx.TypeProto):
        return A.TYPE_PROTO
    if isinstance(value, onnx.SparseTensorProto):
        return A.SPARSE_TENSOR
    if isinstance(value, (list, tuple)):
        if not value:
            return A.INTS
        kinds = {infer_attribute_type(v) for v in value}
        if kinds <= {A.INT, A.FLOAT}:
            return A.FLOATS if A.FLOAT in kinds else A.INTS
        if len(kinds) == 1:
            k = kinds.pop()
            plural = {A.STRING: A.STRINGS, A.TENSOR: A.TENSORS, A.GRAPH: A.GRAPHS,
                      A.TYPE_PROTO: A.TYPE_PROTOS, A.SPARSE_TENSOR: A.SPARSE_TENSORS}
            if k in plural:
                return plural[k]
    raise TypeError(f"cannot store {type(value).__name__} value {value!r:.80} as an ONNX attribute")


def check_inferable(attrs: dict[str, Any], where: str) -> None:
    """GraphError naming `where` when a value of `attrs` has no ONNX attribute type."""
    for value in attrs.values():
        try:
            infer_attribute_type(value)
        except TypeError as e:
            raise GraphError(f"{where}: {e}") from None


def python_to_attribute(name: str, value: Any, attr_type: int | None = None) -> onnx.AttributeProto:
    """An AttributeProto named `name` for `value`, of `attr_type` when given (else inferred)."""
    t = infer_attribute_type(value) if attr_type is None else attr_type
    a = A(name=name, type=t)
    if t == -1:
        return A(name=name, ref_attr_name=str(value))
    if t == A.INT:
        a.i = int(value)
    elif t == A.FLOAT:
        a.f = float(value)
    elif t == A.STRING:
        a.s = _encode(value)
    elif t == A.INTS:
        a.ints.extend(int(v) for v in value)
    elif t == A.FLOATS:
        a.floats.extend(float(v) for v in value)
    elif t == A.STRINGS:
        a.strings.extend(_encode(v) for v in value)
    elif t == A.TENSOR:
        a.t.CopyFrom(array_to_tensor(value))
    elif t == A.TENSORS:
        a.tensors.extend(array_to_tensor(v) for v in value)
    elif t == A.GRAPH:
        a.g.CopyFrom(value)
    elif t == A.GRAPHS:
        a.graphs.extend(value)
    elif t == A.SPARSE_TENSOR:
        a.sparse_tensor.CopyFrom(value)
    elif t == A.SPARSE_TENSORS:
        a.sparse_tensors.extend(value)
    elif t == A.TYPE_PROTO:
        a.tp.CopyFrom(value)
    elif t == A.TYPE_PROTOS:
        a.type_protos.extend(value)
    else:
        raise TypeError(f"attribute {name!r}: unsupported ONNX attribute type {t}")
    return a


def node_attributes(node: onnx.NodeProto) -> dict[str, Any]:
    """A NodeProto's attributes as {name: python value} (types dropped), e.g. for calling a kernel."""
    return {a.name: attribute_to_python(a)[0] for a in node.attribute}
