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
from xgraph.ir.onnx.file_handles import MAX_MODEL_FILE_BYTES, open_regular, read_exactly, read_model_file
from xgraph.ir.onnx.mapped import MappedFile, map_file, plain_dtype, tensors_to_map

#: A tensor declaring more bytes than this is refused before any allocation (1 TiB).
MAX_TENSOR_BYTES = 1 << 40
#: Nested graphs (If/Loop/Scan bodies) deeper than this are refused.
MAX_GRAPH_DEPTH = 64
#: Sparse tensors are expanded to dense arrays, so a few bytes of indices could ask for gigabytes:
#: the dense sizes of all sparse tensors in one model may add up to at most this (1 GiB).
MAX_SPARSE_DENSE_BYTES = 1 << 30
#: Arrays (numpy's limit) and so sparse tensors, which are expanded to arrays, have at most this many dims.
MAX_RANK = 64

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


class Inventory:
    """Everything a model carries in nested places, found in one walk over its nodes.

    Protobuf field access from Python is slow, and hostile-file checks need the graphs,
    tensors and sparse tensors of every scope: one walk collects them all.
    """

    __slots__ = ("graphs", "tensors", "sparse")

    def __init__(self) -> None:
        self.graphs: list[onnx.GraphProto] = []
        self.tensors: list[onnx.TensorProto] = []
        self.sparse: list[onnx.SparseTensorProto] = []

    def add_graph(self, graph: onnx.GraphProto, label: str, depth: int) -> None:
        """Record `graph` (refusing absurd nesting), its initializers and everything in its nodes."""
        if depth > MAX_GRAPH_DEPTH:
            raise ModelFileError(f"{label}: graphs nested more than {MAX_GRAPH_DEPTH} levels deep (If/Loop/Scan bodies)")
        self.graphs.append(graph)
        self.tensors.extend(graph.initializer)
        self.sparse.extend(graph.sparse_initializer)
        self.add_nodes(graph.node, label, depth)

    def add_nodes(self, nodes, label: str, depth: int) -> None:
        """Record the attribute contents of `nodes`.

        Fields are read whatever an attribute's declared type says: a graph or tensor hidden
        behind a wrong type tag is still checked.
        """
        for node in nodes:
            attributes = node.attribute
            if not attributes:
                continue
            for a in attributes:
                if a.HasField("t"):
                    self.tensors.append(a.t)
                self.tensors.extend(a.tensors)
                if a.HasField("sparse_tensor"):
                    self.sparse.append(a.sparse_tensor)
                self.sparse.extend(a.sparse_tensors)
                if a.HasField("g"):
                    self.add_graph(a.g, label, depth + 1)
                for g in a.graphs:
                    self.add_graph(g, label, depth + 1)


def inventory(model: onnx.ModelProto, label: str) -> Inventory:
    """The graphs (main first), tensors and sparse tensors of the model, function bodies included."""
    inv = Inventory()
    inv.add_graph(model.graph, label, 0)
    for f in model.functions:
        inv.add_nodes(f.node, label, 1)
    return inv


def iter_graphs(graph: onnx.GraphProto, label: str) -> Iterator[onnx.GraphProto]:
    """The graph and every graph nested in node attributes, refusing absurd nesting."""
    inv = Inventory()
    inv.add_graph(graph, label, 0)
    yield from inv.graphs


def iter_sparse_tensors(model: onnx.ModelProto, label: str, inv: Inventory | None = None) -> Iterator[onnx.SparseTensorProto]:
    """Every SparseTensorProto: sparse initializers and sparse attribute values, in every scope."""
    yield from (inv or inventory(model, label)).sparse


def iter_tensors(model: onnx.ModelProto, label: str, inv: Inventory | None = None) -> Iterator[onnx.TensorProto]:
    """Every TensorProto in the model: initializers, sparse tensors' parts and attribute tensors, in
    the main graph, nested graphs and function bodies."""
    inv = inv or inventory(model, label)
    yield from inv.tensors
    for s in inv.sparse:
        yield s.values
        yield s.indices


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


def _safe_external_path(base_dir: Path, location: str, label: str, tensor: str) -> Path:
    if not location:
        raise ModelFileError(f"{label}: tensor {tensor!r} has external data with no location")
    if "\0" in location:
        raise ModelFileError(f"{label}: tensor {tensor!r} external data location {location!r} contains a NUL byte")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        raise ModelFileError(f"{label}: tensor {tensor!r} external data location {location!r} is absolute; "
                             "external data must stay inside the model's folder")
    parts = Path(location.replace("\\", "/")).parts
    if ".." in parts:
        raise ModelFileError(f"{label}: tensor {tensor!r} external data location {location!r} contains '..'; "
                             "external data must stay inside the model's folder")
    try:
        root = base_dir.resolve()
        resolved = (base_dir / location).resolve()
        is_file = resolved.is_file()
    except (OSError, RuntimeError) as e:  # name too long, symlink loop, unreadable folder
        raise ModelFileError(f"{label}: tensor {tensor!r} external data location {location!r} cannot be "
                             f"resolved ({getattr(e, 'strerror', None) or e})") from None
    if root != resolved and root not in resolved.parents:
        raise ModelFileError(f"{label}: tensor {tensor!r} external data {location!r} resolves outside the "
                             f"model's folder ({resolved}); symlinks out of the folder are refused")
    if not is_file:
        raise ModelFileError(f"{label}: tensor {tensor!r} external data file {location!r} does not exist "
                             "or is not a regular file")
    return resolved


def _check_range(location: str, offset: int, length: int | None, nbytes: int, size: int,
                 label: str, tensor: str) -> int:
    """The number of bytes to read, after checking the range against the file size and the declared size."""
    if length is None:
        length = nbytes
    if offset < 0 or length < 0 or offset + length > size:
        raise ModelFileError(f"{label}: tensor {tensor!r} reads bytes {offset}..{offset + length} of "
                             f"{location!r}, which has only {size}")
    if length != nbytes:
        raise ModelFileError(f"{label}: tensor {tensor!r} declares {nbytes} bytes but its external data is "
                             f"{length} bytes")
    return length


def _read_external(path: Path, location: str, offset: int, length: int, nbytes: int, label: str, tensor: str) -> bytes:
    """The checked byte range of an external data file, read through one descriptor.

    The descriptor is opened without following a final symlink or blocking on a FIFO and checked
    with fstat before anything is read, so a file swapped for a link, FIFO, folder or hard link
    after the path checks is still refused.
    """
    fd, st = open_regular(path, f"{label}: tensor {tensor!r} external data {location!r}")
    try:
        if st.st_nlink > 1:
            raise ModelFileError(f"{label}: tensor {tensor!r} external data file {location!r} has several hard "
                                 "links; refusing a file that may alias one outside the model's folder")
        _check_range(location, offset, length, nbytes, st.st_size, label, tensor)
        data = read_exactly(fd, offset, length)
    except OSError as e:
        raise ModelFileError(f"{label}: tensor {tensor!r} external data file {location!r} cannot be read "
                             f"({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(data) != length:
        raise ModelFileError(f"{label}: tensor {tensor!r} external data file {location!r} changed while being read")
    return data


def load_external_data(model: onnx.ModelProto, base_dir: Path | None, label: str,
                       mapped: dict[str, np.ndarray] | None = None) -> None:
    """Pull external tensor data into the model after checking every location and length.

    Everything is checked before the first byte is read. Byte ranges of one file may not
    overlap: otherwise many tensors could read the same bytes and a small file on disk would
    become far more memory.

    With `mapped` (a dict to fill), large initializers of the main graph are not read: each
    becomes a read-only view of its file's one memory map (`xgraph.ir.onnx.mapped`), stored
    under its name, and its proto keeps its external reference (dims and type only).
    """
    plan = []
    ranges: dict[Path, list[tuple[int, int, str]]] = {}
    for t in iter_tensors(model, label):
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        if not all(type(k) is str and type(v) is str for k, v in info.items()):  # protobuf gives bytes for bad UTF-8
            raise ModelFileError(f"{label}: tensor {t.name!r} has external data entries that are not valid UTF-8")
        if base_dir is None:
            raise ModelFileError(f"{label}: tensor {t.name!r} uses external data, which needs the model loaded from a path")
        location = info.get("location", "")
        path = _safe_external_path(base_dir, location, label, t.name)
        try:
            offset = int(info.get("offset", 0) or 0)
            length = int(info["length"]) if info.get("length") not in (None, "") else None
        except ValueError:
            raise ModelFileError(f"{label}: tensor {t.name!r} has a non-integer external data offset/length") from None
        nbytes = declared_bytes(t, label)
        if nbytes is None:  # check_inline_tensor refuses these first; kept for direct callers
            raise ModelFileError(f"{label}: tensor {t.name!r} has no fixed size and cannot use external data")
        length = _check_range(location, offset, length, nbytes, path.stat().st_size, label, t.name)
        if length:
            ranges.setdefault(path, []).append((offset, offset + length, t.name))
        plan.append((t, path, location, offset, length, nbytes))
    for path, spans in ranges.items():
        spans.sort()
        for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
            if start < end:
                raise ModelFileError(f"{label}: tensors {first!r} and {second!r} read overlapping bytes of "
                                     f"external data file {path.name!r}; each tensor needs its own bytes")
    to_map = tensors_to_map(model, [(t, path, length) for t, path, _, _, length, _ in plan]) \
        if mapped is not None else {}
    files: dict[Path, MappedFile] = {}
    for path in {to_map[name][1] for name in to_map}:
        files[path] = map_file(path, f"{label}: external data file {path.name!r}",
                               max(end for _, end, _ in ranges[path]))
    for t, path, location, offset, length, nbytes in plan:
        if t.name in to_map and to_map[t.name][0] is t:
            mapped[t.name] = files[path].array(offset, length, plain_dtype(t), tuple(int(d) for d in t.dims))
            continue
        t.raw_data = _read_external(path, location, offset, length, nbytes, label, t.name)
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT


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
    inv = inventory(model, label)
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
