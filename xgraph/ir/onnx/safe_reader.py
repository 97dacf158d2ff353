"""Reading ONNX model bytes safely: protobuf parsing, external data inside the model's folder
(`external_data.py`), and tensor sizes checked against the bytes they carry before anything is
allocated (the walk over what a model holds: `tensor_inventory.py`)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError
from onnx import TensorProto

from xgraph.errors import ModelFileError
from xgraph.ir.onnx.external_data import load_external_data
from xgraph.ir.file_handles import read_model_file
from xgraph.ir.onnx.nodes import Nodes
from xgraph.ir.onnx.tensor_inventory import (MAX_RANK, MAX_SPARSE_DENSE_BYTES, Inventory,
                                             declared_bytes, element_bits, inventory, iter_sparse_tensors,
                                             iter_tensors)

_TYPED_FIELDS = ("float_data", "int32_data", "int64_data", "double_data", "uint64_data")


def check_inline_tensor(t: onnx.TensorProto, label: str) -> None:
    """Refuse a tensor whose inline data does not match its declared shape."""
    if t.data_type not in _KNOWN_TYPES:
        raise ModelFileError(f"{label}: tensor {t.name!r} has data type {t.data_type}, which is not an ONNX "
                             "tensor element type")
    nbytes = declared_bytes(t, label)
    if t.data_location == TensorProto.EXTERNAL:
        if nbytes is None:
            raise ModelFileError(f"{label}: tensor {t.name!r} of type {_type_name(t.data_type)} cannot use external "
                                 "data (only fixed-size element types can)")
        return
    if t.data_type == TensorProto.STRING:
        numel = int(np.prod(t.dims, dtype=object)) if t.dims else 1
        if len(t.string_data) != numel:
            raise ModelFileError(f"{label}: tensor {t.name!r} declares dims {list(t.dims)} ({numel} strings) "
                                 f"but carries {len(t.string_data)} strings")
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


_KNOWN_TYPES = frozenset(v for v in TensorProto.DataType.values() if v != TensorProto.UNDEFINED)


def _type_name(data_type: int) -> str:
    try:
        return TensorProto.DataType.Name(data_type)
    except ValueError:
        return str(data_type)


def check_sparse_tensor(s: onnx.SparseTensorProto, label: str) -> tuple[int, np.ndarray]:
    """Refuse a malformed sparse tensor before it is expanded: (dense size in bytes, flat indices).

    Its values and indices must already be inline and size-checked (`check_inline_tensor`).
    """
    from onnx import numpy_helper

    name = s.values.name or s.indices.name
    for d in s.dims:
        if d < 0:
            raise ModelFileError(f"{label}: sparse tensor {name!r} has a negative dimension {d}")
    if len(s.dims) > MAX_RANK:
        raise ModelFileError(f"{label}: sparse tensor {name!r} has rank {len(s.dims)}, over the limit of "
                             f"{MAX_RANK} dimensions an array can have")
    shape = tuple(int(d) for d in s.dims)
    numel = int(np.prod(shape, dtype=object)) if shape else 1
    nnz = s.values.dims[0] if len(s.values.dims) == 1 else None
    if nnz is None:
        raise ModelFileError(f"{label}: sparse tensor {name!r} has values of dims {list(s.values.dims)}; "
                             "values must be 1-D [NNZ]")
    if s.indices.data_type != TensorProto.INT64 or list(s.indices.dims) not in ([nnz], [nnz, len(shape)]):
        raise ModelFileError(f"{label}: sparse tensor {name!r} has indices of type "
                             f"{_type_name(s.indices.data_type)} and dims {list(s.indices.dims)}; they must be "
                             f"INT64 of dims [{nnz}] or [{nnz}, {len(shape)}]")
    if nnz > numel:
        raise ModelFileError(f"{label}: sparse tensor {name!r} has {nnz} values for {numel} elements")
    dense_bytes = (numel * (element_bits(s.values.data_type) or 64) + 7) // 8
    if dense_bytes > MAX_SPARSE_DENSE_BYTES:
        raise ModelFileError(f"{label}: sparse tensor {name!r} would expand to {dense_bytes} bytes, over the "
                             f"{MAX_SPARSE_DENSE_BYTES}-byte limit for sparse data")
    indices = numpy_helper.to_array(s.indices)
    if indices.ndim == 2:
        if ((indices < 0) | (indices >= np.array(shape, dtype=np.int64))).any():
            raise ModelFileError(f"{label}: sparse tensor {name!r} has an index outside its shape {list(shape)}")
        # numel fits in int64 (the dense size is bounded above), so the row-major strides do too;
        # np.ravel_multi_index would stop at 32 dimensions
        strides = np.array([int(np.prod(shape[i + 1:], dtype=object)) for i in range(len(shape))], dtype=np.int64)
        flat = indices @ strides if indices.size else np.zeros(0, np.int64)
    else:
        flat = indices.reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= numel):
            raise ModelFileError(f"{label}: sparse tensor {name!r} has an index outside its {numel} elements")
    return dense_bytes, flat


def sparse_to_dense(s: onnx.SparseTensorProto, label: str) -> np.ndarray:
    """The dense array of a sparse tensor, after `check_sparse_tensor`."""
    from onnx import numpy_helper

    _, flat = check_sparse_tensor(s, label)
    values = numpy_helper.to_array(s.values)
    shape = tuple(int(d) for d in s.dims)
    dense = np.zeros(int(np.prod(shape, dtype=object)) if shape else 1, dtype=values.dtype)
    dense[flat] = values
    return dense.reshape(shape)


def read_model(src, label: str | None = None, mapped: dict[str, np.ndarray] | None = None
               ) -> tuple[onnx.ModelProto, Path | None, str]:
    """(ModelProto with all data inline and checked, its folder, a label for messages) from a path, bytes or proto.

    With `mapped` (a dict to fill), large external initializers stay external in the proto and
    come back in `mapped` as read-only memory maps instead (`load_external_data`).
    """
    model, base_dir, label, _ = read_model_inventory(src, label, mapped)
    return model, base_dir, label


def read_model_inventory(src, label: str | None = None, mapped: dict[str, np.ndarray] | None = None
                         ) -> tuple[onnx.ModelProto, Path | None, str, Inventory]:
    """read_model, plus the inventory of the model's nested graphs and tensors that its checks walked."""
    base_dir = None
    if isinstance(src, onnx.ModelProto):
        label = label or f"model {src.graph.name!r}"
        model = onnx.ModelProto()
        try:
            model.CopyFrom(src)
        except (DecodeError, RuntimeError, ValueError) as e:  # e.g. nesting beyond protobuf's depth limit
            raise ModelFileError(f"{label}: cannot be copied ({e})") from None
    elif isinstance(src, (bytes, bytearray, memoryview)):
        label = label or "model bytes"
        model = parse_model_bytes(bytes(src), label)
    elif isinstance(src, (str, os.PathLike)):
        path = Path(src)
        label = label or str(path)
        data = read_model_file(path, label)
        model = parse_model_bytes(data, label)
        base_dir = path.parent
    else:
        raise ModelFileError(f"cannot load a model from {type(src).__name__}; give a path, bytes or onnx.ModelProto")
    nodes = Nodes(model.graph.node, None)  # read once, here: the walk below and the importer share the columns
    inv = inventory(model, label, nodes.attributes)
    inv.nodes = nodes
    external = False
    for t in iter_tensors(model, label, inv):
        check_inline_tensor(t, label)
        external = external or t.data_location == TensorProto.EXTERNAL
    if external:
        load_external_data(model, base_dir, label, mapped)
    sparse_bytes = sum(check_sparse_tensor(s, label)[0] for s in iter_sparse_tensors(model, label, inv))
    if sparse_bytes > MAX_SPARSE_DENSE_BYTES:
        raise ModelFileError(f"{label}: sparse tensors expand to {sparse_bytes} bytes, over the "
                             f"{MAX_SPARSE_DENSE_BYTES}-byte limit for sparse data")
    return model, base_dir, label, inv


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
