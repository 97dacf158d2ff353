"""Reading ONNX model bytes safely: protobuf parsing, external data inside the model's folder,
and tensor sizes checked against the bytes they carry before anything is allocated."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto, helper

from xgraph.errors import ModelFileError

#: A tensor declaring more bytes than this is refused before any allocation (1 TiB).
MAX_TENSOR_BYTES = 1 << 40
#: Nested graphs (If/Loop/Scan bodies) deeper than this are refused.
MAX_GRAPH_DEPTH = 64

_BITS = {TensorProto.INT4: 4, TensorProto.UINT4: 4}
if hasattr(TensorProto, "FLOAT4E2M1"):
    _BITS[TensorProto.FLOAT4E2M1] = 4
if hasattr(TensorProto, "INT2"):
    _BITS[TensorProto.INT2] = 2
    _BITS[TensorProto.UINT2] = 2


def element_bits(elem_type: int) -> int | None:
    """Bits per element of an ONNX tensor type (None for strings and unknown types)."""
    if elem_type in _BITS:
        return _BITS[elem_type]
    if elem_type in (TensorProto.STRING, TensorProto.UNDEFINED):
        return None
    try:
        return np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).itemsize * 8
    except Exception:  # onnx raises KeyError/ValueError for types it cannot map
        return None


def iter_graphs(graph: onnx.GraphProto, label: str, depth: int = 0) -> Iterator[onnx.GraphProto]:
    """The graph and every graph nested in node attributes, refusing absurd nesting."""
    if depth > MAX_GRAPH_DEPTH:
        raise ModelFileError(f"{label}: graphs nested more than {MAX_GRAPH_DEPTH} levels deep (If/Loop/Scan bodies)")
    yield graph
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from iter_graphs(a.g, label, depth + 1)
            elif a.type == onnx.AttributeProto.GRAPHS:
                for g in a.graphs:
                    yield from iter_graphs(g, label, depth + 1)


def iter_tensors(model: onnx.ModelProto, label: str) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in the model: initializers, sparse initializers, attribute tensors, nested graphs."""
    for g in iter_graphs(model.graph, label):
        yield from g.initializer
        for s in g.sparse_initializer:
            yield s.values
            yield s.indices
        for node in g.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    yield a.t
                elif a.type == onnx.AttributeProto.TENSORS:
                    yield from a.tensors
    for f in model.functions:
        for node in f.node:
            for a in node.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    yield a.t


def declared_bytes(t: onnx.TensorProto, label: str) -> int | None:
    """Bytes the tensor's dims and type call for (None for strings); refuses negative or absurd dims."""
    numel = 1
    for d in t.dims:
        if d < 0:
            raise ModelFileError(f"{label}: tensor {t.name!r} has a negative dimension {d}")
        numel *= d
    bits = element_bits(t.data_type)
    if bits is None:
        return None
    nbytes = (numel * bits + 7) // 8
    if nbytes > MAX_TENSOR_BYTES:
        raise ModelFileError(f"{label}: tensor {t.name!r} declares {nbytes} bytes (dims {list(t.dims)}), "
                             f"over the {MAX_TENSOR_BYTES}-byte limit")
    return nbytes


_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")


def check_inline_tensor(t: onnx.TensorProto, label: str) -> None:
    """Refuse a tensor whose inline data does not match its declared shape."""
    nbytes = declared_bytes(t, label)
    if t.data_location == TensorProto.EXTERNAL or nbytes is None:
        return
    if t.HasField("raw_data") or t.raw_data:
        if len(t.raw_data) != nbytes:
            raise ModelFileError(f"{label}: tensor {t.name!r} declares dims {list(t.dims)} ({nbytes} bytes) "
                                 f"but carries {len(t.raw_data)} bytes")
        return
    count = sum(len(getattr(t, f)) for f in _TYPED_FIELDS)
    if count == 0 and nbytes == 0:
        return
    numel = int(np.prod(t.dims, dtype=object)) if t.dims else 1
    per = 2 if t.data_type in (TensorProto.COMPLEX64, TensorProto.COMPLEX128) else 1
    bits = element_bits(t.data_type) or 8
    expected = {numel * per}
    if bits < 8:
        expected.add((numel * bits + 7) // 8)
        expected.add((numel * bits + 31) // 32)
    if count not in expected:
        raise ModelFileError(f"{label}: tensor {t.name!r} declares dims {list(t.dims)} ({numel} elements) "
                             f"but carries {count} values")


def _safe_external_path(base_dir: Path, location: str, label: str, tensor: str) -> Path:
    if not location:
        raise ModelFileError(f"{label}: tensor {tensor!r} has external data with no location")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        raise ModelFileError(f"{label}: tensor {tensor!r} external data location {location!r} is absolute; "
                             "external data must stay inside the model's folder")
    parts = Path(location.replace("\\", "/")).parts
    if ".." in parts:
        raise ModelFileError(f"{label}: tensor {tensor!r} external data location {location!r} contains '..'; "
                             "external data must stay inside the model's folder")
    root = base_dir.resolve()
    path = (base_dir / location)
    resolved = path.resolve()
    if root != resolved and root not in resolved.parents:
        raise ModelFileError(f"{label}: tensor {tensor!r} external data {location!r} resolves outside the "
                             f"model's folder ({resolved}); symlinks out of the folder are refused")
    if not resolved.is_file():
        raise ModelFileError(f"{label}: tensor {tensor!r} external data file {location!r} does not exist")
    if resolved.stat().st_nlink > 1:
        raise ModelFileError(f"{label}: tensor {tensor!r} external data file {location!r} has several hard links; "
                             "refusing a file that may alias one outside the model's folder")
    return resolved


def load_external_data(model: onnx.ModelProto, base_dir: Path | None, label: str) -> None:
    """Pull external tensor data into the model after checking every location and length."""
    for t in iter_tensors(model, label):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        if base_dir is None:
            raise ModelFileError(f"{label}: tensor {t.name!r} uses external data, which needs the model loaded from a path")
        path = _safe_external_path(base_dir, info.get("location", ""), label, t.name)
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if info.get("length") not in (None, "") else None
        except ValueError:
            raise ModelFileError(f"{label}: tensor {t.name!r} has a non-integer external data offset/length") from None
        nbytes = declared_bytes(t, label)
        size = path.stat().st_size
        if length is None:
            length = nbytes if nbytes is not None else size - offset
        if offset < 0 or length < 0 or offset + length > size:
            raise ModelFileError(f"{label}: tensor {t.name!r} reads bytes {offset}..{offset + length} of "
                                 f"{info.get('location')!r}, which has only {size}")
        if nbytes is not None and length != nbytes:
            raise ModelFileError(f"{label}: tensor {t.name!r} declares dims {list(t.dims)} ({nbytes} bytes) "
                                 f"but its external data is {length} bytes")
        with open(path, "rb") as f:
            f.seek(offset)
            t.raw_data = f.read(length)
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT


def read_model(src, label: str | None = None) -> tuple[onnx.ModelProto, Path | None, str]:
    """(ModelProto with all data inline and checked, its folder, a label for messages) from a path, bytes or proto."""
    base_dir = None
    if isinstance(src, onnx.ModelProto):
        label = label or f"model {src.graph.name!r}"
        model = onnx.ModelProto()
        model.CopyFrom(src)
    elif isinstance(src, (bytes, bytearray, memoryview)):
        label = label or "model bytes"
        model = parse_model_bytes(bytes(src), label)
    elif isinstance(src, (str, os.PathLike)):
        path = Path(src)
        label = label or str(path)
        if not path.exists():
            raise ModelFileError(f"{label}: no such file")
        if path.is_dir():
            raise ModelFileError(f"{label}: is a folder, not a model file")
        try:
            data = path.read_bytes()
        except OSError as e:
            raise ModelFileError(f"{label}: cannot read ({e.strerror})") from None
        model = parse_model_bytes(data, label)
        base_dir = path.parent
    else:
        raise ModelFileError(f"cannot load a model from {type(src).__name__}; give a path, bytes or onnx.ModelProto")
    external = False
    for t in iter_tensors(model, label):
        check_inline_tensor(t, label)
        external = external or t.data_location == TensorProto.EXTERNAL
    if external:
        load_external_data(model, base_dir, label)
    return model, base_dir, label


def parse_model_bytes(data: bytes, label: str) -> onnx.ModelProto:
    """Parse protobuf bytes as an ONNX ModelProto, with a clear error for anything else."""
    if not data:
        raise ModelFileError(f"{label}: the file is empty")
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise ModelFileError(f"{label}: not a valid ONNX model (protobuf parse failed: {e}); "
                             "the file may be truncated or corrupted") from None
    if not model.HasField("graph") or (model.ir_version == 0 and not model.opset_import):
        raise ModelFileError(f"{label}: not an ONNX model (no graph or no ir_version/opset_import); "
                             "the file may be truncated, corrupted, or another format")
    return model
