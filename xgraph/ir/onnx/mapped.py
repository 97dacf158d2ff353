"""Weights as read-only memory maps of their external data file: import never copies them.

A model whose weights live in an external data file (``onnx.save(..., save_as_external_data=True)``,
or an .xmodel's side file) gets each large weight as a read-only numpy view of one
``mmap.ACCESS_READ`` mapping per file. Pages are read from the page cache when a kernel
first touches them, and nothing in compile touches them: a 4 GB model compiles in the
memory its graph structure needs.

The mapping is made over the descriptor the safe reader checked (opened without following
links, a regular file with one hard link, large enough for every range), so the bytes mapped
are the bytes checked. The mapping keeps that file (the inode) alive: saving an .xmodel over
the same path writes a new side file and never changes a mapped one. Another program writing
into the mapped file in place changes the weights of a running model under it; the runners
check their mapped files after their runs (`FileWatch`: one `fstat` per file, at most every
`CHECK_INTERVAL` seconds), which refuses every run from the check on once a file's size or
modification time differ from what they were when it was mapped. A
file truncated in place while mapped makes reads of the lost pages fail (SIGBUS), as with
any memory-mapped model loader (onnxruntime's included).

`origin(array)` says which mapped file and offset an array views, so a writer can copy its
bytes file-to-file (`os.copy_file_range`) without reading them into memory.
"""
from __future__ import annotations

import mmap
import os
import sys
import time
import weakref
from collections import Counter
from pathlib import Path
from typing import Iterable

import numpy as np
import onnx
from onnx import TensorProto

from xgraph.errors import ModelFileError
from xgraph.ir.file_handles import open_regular

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
    #: (size, modification time in ns) when mapped: `check_unchanged` compares the file's with it.
    stamp: tuple[int, int]

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
    mapped.path, mapped.fd, mapped.stamp = path, fd, (st.st_size, st.st_mtime_ns)
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


def tensors_to_map(model: onnx.ModelProto, external: list[tuple[TensorProto, Path, int]]
                   ) -> dict[str, tuple[TensorProto, Path]]:
    """name -> (tensor, file) of the external tensors (tensor, file, length) to map:
    main-graph initializers of a plain type, at least MAP_MIN_BYTES (integers: more than
    MAP_MIN_INTEGERS elements), whose name no other external tensor shares."""
    names = Counter(t.name for t, _, _ in external)
    initializers = {t.name for t in model.graph.initializer if t.data_location == TensorProto.EXTERNAL}
    out = {}
    for t, path, length in external:
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


def mapped_files(arrays: "Iterable[np.ndarray | None]") -> tuple[MappedFile, ...]:
    """The distinct mapped files the given arrays view, in first-seen order."""
    found: dict[int, MappedFile] = {}
    for array in arrays:
        hit = origin(array) if isinstance(array, np.ndarray) else None
        if hit is not None:
            found.setdefault(id(hit[0]), hit[0])
    return tuple(found.values())


def check_unchanged(files: "Iterable[MappedFile]") -> None:
    """Refuse (ModelFileError naming the file) when a mapped file was written in place since it was
    mapped: its size or modification time differ, so the weights read from it may have changed.

    A write that keeps both (one within the file system's timestamp granularity of the previous
    write, or followed by resetting the time) is not seen; docs/security.md says so.
    """
    for mapped in files:
        try:
            st = os.fstat(mapped.fd)
        except OSError as e:
            raise ModelFileError(f"external data file {str(mapped.path)!r} cannot be checked ({e.strerror or e})"
                                 ) from None
        if (st.st_size, st.st_mtime_ns) != mapped.stamp:
            raise ModelFileError(f"external data file {str(mapped.path)!r} was written in place after the model "
                                 "was loaded, so the weights it maps changed under the running model; load the "
                                 "model again, and replace data files by renaming a new file over them instead")


#: Seconds between two checks of a runner's mapped files: an `fstat` costs about 1.5 us, 2-4% of a
#: small model's run when done on every run; at most once per interval it is below 0.01%.
CHECK_INTERVAL = 0.05


class FileWatch:
    """`check_unchanged` over some mapped files, at most once per `interval` seconds (the first
    call checks). Once a check fails, every call checks again (and fails)."""

    __slots__ = ("files", "interval", "_next")

    def __init__(self, files: "Iterable[MappedFile]", interval: float = CHECK_INTERVAL) -> None:
        self.files, self.interval, self._next = tuple(files), interval, 0.0

    def check(self) -> None:
        """Refuse (ModelFileError) when a watched file was written in place; cheap between checks."""
        if not self.files:
            return
        now = time.monotonic()
        if now < self._next:
            return
        check_unchanged(self.files)
        self._next = now + self.interval


def is_mapped(array: np.ndarray) -> bool:
    """Whether `array` is a view of a mapped data file (not a copy in memory)."""
    return origin(array) is not None


__all__ = ["CHECK_INTERVAL", "MAP_MIN_BYTES", "MAP_MIN_INTEGERS", "PLAIN_TYPES", "FileWatch", "MappedFile", "check_unchanged", "is_mapped",
           "map_file", "mapped_files", "origin", "plain_dtype", "tensors_to_map"]
