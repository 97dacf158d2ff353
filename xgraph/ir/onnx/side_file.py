"""An .xmodel's side data file: the large weights of an .xmodel, next to it as ``NAME.xmodel.<16 hex>.data``.

Each save writes a side file of its own, named by the save's token (`side_name`), before the
.xmodel that names it is renamed into place: the pair changes with that one rename, so a
reader finds the whole old pair or the whole new one. The side files the new .xmodel no longer
names (older saves, saves killed before their rename, and ``NAME.xmodel.data`` written by
xgraph before 0.x) are removed after the rename (`remove_superseded`), each only once no one
has it locked (a save still writing it). Names longer than the folder allows are shortened
with a hash (`xgraph.ir.temp_files.fit_name`), so any legal .xmodel name gets a side file.

Layout: a 64-byte header (``MAGIC``, then the 16-byte token of the save that wrote it), then
each weight's raw little-endian bytes at a 4096-byte-aligned offset (as `onnx.save` aligns
them), so a loader maps every weight page-aligned. The .xmodel refers to each weight with
ONNX's external-data convention (``location``, ``offset``, ``length``), so ``onnx.load`` and
Netron open the pair like any external-data model. One extra external tensor, the token
(`TOKEN_TENSOR`, bytes 16..32 of the header), ties the pair: the .xmodel records the token
it was saved with, and a loader that finds another one in the side file refuses the pair
(an .xmodel and a side file from different saves are never mixed).

Weights that are views of a mapped data file are copied file to file (`os.copy_file_range`):
the bytes never pass through this process's memory. Others are written in chunks.
"""
from __future__ import annotations

import mmap
import os
import re
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np
import onnx
from onnx import TensorProto, helper

from xgraph.errors import ModelFileError
from xgraph.ir.temp_files import fit_name, name_max, remove_unlocked
from xgraph.ir.onnx.mapped import MAP_MIN_BYTES, PLAIN_TYPES, origin

SIDE_SUFFIX = ".data"
#: Hex digits of the token in a side file's name.
NAME_TOKEN_HEX = 16
MAGIC = b"XGRAPH-SIDEDATA\0"  # 16 bytes
HEADER_BYTES = 64
ALIGN = 4096
#: The reserved initializer holding the token (uint8[16] at bytes 16..32 of the side file).
TOKEN_TENSOR = "xgraph.attr/side_file_token"
#: Bytes written per chunk for weights held in memory.
CHUNK = 1 << 26
T = TypeVar("T")  # what a load returns (`read_consistently`)


def side_path(xmodel: str | os.PathLike) -> Path:
    """The side data file name xgraph wrote before side files were named by their save
    (``NAME.xmodel.data``): still read (the .xmodel names it), removed by the next save."""
    p = Path(xmodel)
    return p.with_name(p.name + SIDE_SUFFIX)


def _stem(xmodel: Path) -> str:
    folder = xmodel.parent if str(xmodel.parent) else Path(".")
    return fit_name(xmodel.name, name_max(folder) - len(f".{'0' * NAME_TOKEN_HEX}{SIDE_SUFFIX}"))


def side_name(xmodel: str | os.PathLike, token: bytes) -> Path:
    """The side file a save with `token` writes for `xmodel`: ``NAME.xmodel.<16 hex>.data`` beside it,
    the name shortened (with a hash) when it would pass the folder's NAME_MAX."""
    p = Path(xmodel)
    return p.with_name(f"{_stem(p)}.{token.hex()[:NAME_TOKEN_HEX]}{SIDE_SUFFIX}")


def side_files(xmodel: str | os.PathLike) -> list[Path]:
    """Every file beside `xmodel` named as one of its side files (any save's, the old naming included)."""
    p = Path(xmodel)
    folder = p.parent if str(p.parent) else Path(".")
    ours = re.compile(re.escape(_stem(p)) + rf"\.[0-9a-f]{{{NAME_TOKEN_HEX}}}" + re.escape(SIDE_SUFFIX))
    legacy = side_path(p).name
    try:
        names = [e.name for e in os.scandir(folder) if e.name == legacy or ours.fullmatch(e.name)]
    except OSError:
        return []
    return [p.with_name(n) for n in sorted(names)]


def remove_superseded(xmodel: str | os.PathLike, keep: Path | None, written: os.stat_result | None) -> list[Path]:
    """After a save of `xmodel` (its side file `keep`, or None): remove the other side files of
    `xmodel` that no one has locked, as long as `xmodel` is still the file this save renamed into
    place (`written`: its inode); the files removed. A save that renamed its .xmodel later than
    this one removes ours in turn; one still writing holds its side file's lock."""
    p = Path(xmodel)

    def still_ours() -> bool:
        try:
            now = os.lstat(p)
        except OSError:
            return False
        return written is not None and (now.st_dev, now.st_ino) == (written.st_dev, written.st_ino)

    return [f for f in side_files(p) if f != keep and remove_unlocked(f, still_ours)]


def external_elem_type(array: np.ndarray) -> int | None:
    """The ONNX element type whose raw bytes are this array's bytes, or None (then it stays inline)."""
    dtype = array.dtype
    if dtype.byteorder == ">" or (dtype.byteorder == "=" and not np.little_endian) or dtype.hasobject:
        return None
    try:
        elem = helper.np_dtype_to_tensor_dtype(dtype)
    except (KeyError, ValueError, TypeError):
        return None
    return elem if elem in PLAIN_TYPES else None


def goes_external(array: np.ndarray) -> bool:
    """Whether a weight is stored in the side file: large enough and of a plain element type."""
    return array.nbytes >= MAP_MIN_BYTES and external_elem_type(array) is not None


def external_reference(name: str, array: np.ndarray, location: str, offset: int) -> onnx.TensorProto:
    """A TensorProto naming `array`'s bytes in `location` at `offset` (no data copied)."""
    t = onnx.TensorProto(name=name, data_type=external_elem_type(array), dims=array.shape,
                         data_location=TensorProto.EXTERNAL)
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(array.nbytes))):
        entry = t.external_data.add()
        entry.key, entry.value = key, value
    return t


@dataclass
class SideLayout:
    """Where each weight goes in the side file (pure: nothing is written until `writer` runs)."""

    location: str
    token: bytes = field(default_factory=lambda: secrets.token_bytes(16))
    offsets: dict[str, int] = field(default_factory=dict)
    arrays: list[tuple[int, np.ndarray]] = field(default_factory=list)
    size: int = HEADER_BYTES

    def add(self, name: str, array: np.ndarray) -> onnx.TensorProto:
        """Reserve room for `array`; its external reference."""
        offset = -(-self.size // ALIGN) * ALIGN
        self.offsets[name] = offset
        self.arrays.append((offset, array))
        self.size = offset + array.nbytes
        return external_reference(name, array, self.location, offset)

    def token_reference(self) -> onnx.TensorProto:
        """The reserved external tensor over the header's token bytes."""
        return external_reference(TOKEN_TENSOR, np.frombuffer(self.token, np.uint8), self.location, 16)

    def writer(self) -> Callable[[int], None]:
        """The function that writes the whole side file to a descriptor (for `xgraph.ir.files.write_with`)."""
        def write(fd: int) -> None:
            _pwrite_all(fd, memoryview(MAGIC + self.token), 0)
            for offset, array in self.arrays:
                copy_array(fd, array, offset)
            os.ftruncate(fd, self.size)
        return write


def _pwrite_all(fd: int, view: memoryview, offset: int) -> None:
    pwrite = getattr(os, "pwrite", None)
    if pwrite is None:  # Windows: seek, then write
        os.lseek(fd, offset, os.SEEK_SET)
    while view:
        n = pwrite(fd, view, offset) if pwrite is not None else os.write(fd, view)
        view, offset = view[n:], offset + n


def copy_array(fd: int, array: np.ndarray, offset: int) -> None:
    """Write `array`'s raw bytes at `offset` of `fd`: file to file when it views a mapped file."""
    found = origin(array)
    if found is not None and _copy_file_range(found[0].fd, found[1], fd, offset, array.nbytes):
        return
    flat = memoryview(np.ascontiguousarray(array).reshape(-1)).cast("B")
    for start in range(0, len(flat), CHUNK):
        _pwrite_all(fd, flat[start:start + CHUNK], offset + start)
        if found is not None:  # drop the pages just read from this process's resident set
            _drop_pages(found[0], found[1] + start, min(CHUNK, len(flat) - start))


def _copy_file_range(src: int, src_offset: int, dst: int, dst_offset: int, length: int) -> bool:
    """Copy in the kernel; False when the file systems cannot (the caller then writes the bytes)."""
    if not hasattr(os, "copy_file_range"):
        return False
    done = 0
    try:
        while done < length:
            n = os.copy_file_range(src, dst, length - done, src_offset + done, dst_offset + done)
            if n == 0:
                return False
            done += n
    except OSError:
        return False
    return True


def _drop_pages(mapped: mmap.mmap, start: int, length: int) -> None:
    if not hasattr(mmap, "MADV_DONTNEED"):
        return
    page = mmap.PAGESIZE
    begin = (start // page) * page
    try:
        mapped.madvise(mmap.MADV_DONTNEED, begin, start + length - begin)
    except (OSError, ValueError):
        pass  # only a hint: the pages stay resident until the kernel needs them


#: Loads of a path tried while a save keeps replacing it (each retry follows a completed rename). A
#: process saving in a tight loop beside a slowed reader (a busy 2-core machine) outran 8 attempts in
#: about one load of 10,000; each attempt that fails costs the failed read, not the weights.
READ_ATTEMPTS = 32


def _identity(path: str | os.PathLike) -> tuple | None:
    """What changes when a save replaces the pair at `path`: the .xmodel's inode, size and time, and the
    names of the side files beside it (each save's has a new random token). The names matter when a
    file system reuses a freed inode for the next save's .xmodel within its timestamps' granularity:
    the stat alone then reads the same after a replacement."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, tuple(p.name for p in side_files(path))


def read_consistently(src: object, once: "Callable[[], T]") -> T:
    """`once()` (a load of `src`), tried again when it failed while the file at `src` was replaced: a
    save renamed a new .xmodel into place and removed the side file the old one named between our
    reading the two. The error stands when the file did not change (a damaged or mismatched pair),
    or after READ_ATTEMPTS."""
    if not isinstance(src, (str, os.PathLike)):
        return once()
    for _ in range(READ_ATTEMPTS - 1):
        before = _identity(src)
        try:
            return once()
        except ModelFileError:
            if before is None or _identity(src) == before:
                raise
    return once()


__all__ = ["ALIGN", "HEADER_BYTES", "MAGIC", "SIDE_SUFFIX", "TOKEN_TENSOR", "SideLayout", "copy_array",
           "external_reference", "goes_external", "read_consistently", "remove_superseded", "side_files", "side_name", "side_path"]
