"""Weights as read-only memory maps of their external data file: import never copies them.

A model whose weights live in an external data file (``onnx.save(..., save_as_external_data=True)``,
or an .xmodel's side file) gets each large weight as a read-only numpy view of one
``mmap.ACCESS_READ`` mapping per file. Pages are read from the page cache when a kernel
first touches them, and nothing in compile touches them: a 4 GB model compiles in the
memory its graph structure needs.

The mapping is made over the descriptor the safe reader checked (opened without following
links, a regular file with one hard link, large enough for every range), so the bytes mapped
are the bytes checked. The mapping keeps that file (the inode) alive: saving an .xmodel over
the same path renames a new file into place and never changes a mapped one. A file truncated
in place by another program while mapped makes reads of the lost pages fail (SIGBUS), as
with any memory-mapped model loader (onnxruntime's included).

`origin(array)` says which mapped file and offset an array views, so a writer can copy its
bytes file-to-file (`os.copy_file_range`) without reading them into memory.
"""
from __future__ import annotations

import mmap
import os
import sys
import weakref
from collections import Counter
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto

from xgraph.errors import ModelFileError
from xgraph.ir.onnx.file_handles import open_regular

#: External tensors smaller than this are read into memory as before (shape inference and
#: constant folding read small ones, and a page per tiny tensor would waste more than it saves).
MAP_MIN_BYTES = 4096

#: ONNX element types whose raw little-endian bytes are exactly the numpy array (packed 4-bit
#: types, bfloat16 and float8 need a conversion, so they are read).
PLAIN_TYPES = {
    TensorProto.FLOAT: np.float32, TensorProto.DOUBLE: np.float64, TensorProto.FLOAT16: np.float16,
    TensorProto.INT8: np.int8, TensorProto.UINT8: np.uint8, TensorProto.INT16: np.int16,
    TensorProto.UINT16: np.uint16, TensorProto.INT32: np.int32, TensorProto.UINT32: np.uint32,
    TensorProto.INT64: np.int64, TensorProto.UINT64: np.uint64, TensorProto.BOOL: np.bool_,
    TensorProto.COMPLEX64: np.complex64, TensorProto.COMPLEX128: np.complex128,
}


class MappedFile(mmap.mmap):
    """A read-only mapping of one whole data file, with the descriptor it was made from.

    Arrays made by `array` keep it alive (numpy holds the buffer), and the descriptor is
    closed when the last of them goes.
    """

    path: Path
    fd: int
    address: int

    def array(self, offset: int, length: int, dtype: np.dtype, shape: tuple[int, ...]) -> np.ndarray:
        """The read-only array of `shape` over bytes offset..offset+length (no copy)."""
        count = length // np.dtype(dtype).itemsize
        return np.frombuffer(self, dtype=dtype, count=count, offset=offset).reshape(shape)


def map_file(path: Path, what: str, need: int) -> MappedFile:
    """Map `path` read-only through a checked descriptor: a regular file, one hard link, >= `need` bytes.

    `what` starts error messages ("model.onnx: tensor 'w' external data 'w.bin'").
    """
    fd, st = open_regular(path, what)
    try:
        if st.st_nlink > 1:
            raise ModelFileError(f"{what} has several hard links; refusing a file that may alias one outside "
                                 "the model's folder")
        if st.st_size < need:
            raise ModelFileError(f"{what} has {st.st_size} bytes but the model reads up to byte {need}; "
                                 "the file is truncated or belongs to another model")
        try:
            mapped = MappedFile(fd, 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError) as e:
            raise ModelFileError(f"{what} cannot be mapped ({getattr(e, 'strerror', None) or e})") from None
    except BaseException:
        os.close(fd)
        raise
    mapped.path, mapped.fd = path, fd
    mapped.address = np.frombuffer(mapped, dtype=np.uint8, count=1).ctypes.data
    weakref.finalize(mapped, os.close, fd)
    return mapped


def plain_dtype(t: TensorProto) -> np.dtype | None:
    """The numpy dtype a mapped view of `t` has, or None when its bytes need converting (then it is read)."""
    if sys.byteorder != "little":
        return None
    dtype = PLAIN_TYPES.get(t.data_type)
    return None if dtype is None else np.dtype(dtype)


#: Integer tensors up to this many elements are read, not mapped: shape inference's budget
#: check reads their values (shape tensors), and they are small.
MAP_MIN_INTEGERS = 4096


def tensors_to_map(model: onnx.ModelProto, planned: list[tuple[TensorProto, Path, int]]
                   ) -> dict[str, tuple[TensorProto, Path]]:
    """name -> (tensor, file) of the planned external tensors (tensor, file, length) to map:
    main-graph initializers of a plain type, at least MAP_MIN_BYTES (integers: more than
    MAP_MIN_INTEGERS elements), whose name no other external tensor shares."""
    names = Counter(t.name for t, _, _ in planned)
    initializers = {t.name for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    out = {}
    for t, path, length in planned:
        dtype = plain_dtype(t)
        if (t.name in initializers and names[t.name] == 1 and length >= MAP_MIN_BYTES and dtype is not None
                and (dtype.kind in "fc" or length // dtype.itemsize > MAP_MIN_INTEGERS)):
            out[t.name] = (t, path)
    return out


def origin(array: np.ndarray) -> tuple[MappedFile, int] | None:
    """(mapped file, byte offset) when `array` is a C-contiguous view of a mapped file, else None."""
    base = array
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if not isinstance(base, MappedFile) or not array.flags.c_contiguous or array.size == 0:
        return None
    offset = array.ctypes.data - base.address
    if offset < 0 or offset + array.nbytes > len(base):
        return None
    return base, offset


def is_mapped(array: np.ndarray) -> bool:
    """Whether `array` is a view of a mapped data file (not a copy in memory)."""
    return origin(array) is not None


__all__ = ["MAP_MIN_BYTES", "MAP_MIN_INTEGERS", "PLAIN_TYPES", "MappedFile", "is_mapped", "map_file", "origin",
           "plain_dtype", "tensors_to_map"]
