"""External tensor data, read safely: every location inside the model's folder (no absolute
path, no '..', no symlink out, no special file), every byte range inside its file and equal to
the size the tensor declares, read through one checked descriptor; large initializers of the
main graph mapped read-only instead of read (`xgraph.ir.onnx.mapped`)."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from xgraph.errors import ModelFileError
from xgraph.ir.file_handles import open_regular, read_exactly
from xgraph.ir.onnx.mapped import MappedFile, map_file, plain_dtype, tensors_to_map
from xgraph.ir.onnx.tensor_inventory import declared_bytes, iter_tensors


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
    reads = []
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
        try:
            size = path.stat().st_size
        except OSError as e:  # removed or replaced since its path was checked
            raise ModelFileError(f"{label}: tensor {t.name!r} external data file {location!r} cannot be read "
                                 f"({e.strerror or e})") from None
        length = _check_range(location, offset, length, nbytes, size, label, t.name)
        if length:
            ranges.setdefault(path, []).append((offset, offset + length, t.name))
        reads.append((t, path, location, offset, length, nbytes))
    for path, spans in ranges.items():
        spans.sort()
        for (_, end, first), (start, _, second) in zip(spans, spans[1:]):
            if start < end:
                raise ModelFileError(f"{label}: tensors {first!r} and {second!r} read overlapping bytes of "
                                     f"external data file {path.name!r}; each tensor needs its own bytes")
    to_map = tensors_to_map(model, [(t, path, length) for t, path, _, _, length, _ in reads]) \
        if mapped is not None else {}
    files: dict[Path, MappedFile] = {}
    for path in {to_map[name][1] for name in to_map}:
        files[path] = map_file(path, f"{label}: external data file {path.name!r}",
                               max(end for _, end, _ in ranges[path]))
    for t, path, location, offset, length, nbytes in reads:
        if t.name in to_map and to_map[t.name][0] is t:
            mapped[t.name] = files[path].array(offset, length, plain_dtype(t), tuple(int(d) for d in t.dims))
            continue
        t.raw_data = _read_external(path, location, offset, length, nbytes, label, t.name)
        del t.external_data[:]
        t.data_location = TensorProto.DEFAULT


__all__ = ["load_external_data"]
