"""The one reader of input files and of .npy/.npz arrays: `xgraph run`, `verify`, `bench`,
`run --input-dir` (locally and on Ray's workers) and quantize's calibration sets read through it.

An input file is read on one checked handle (a regular file, not a FIFO or device, of at most
`max_input_bytes()`), then decoded from its bytes. Arrays are never unpickled, and every .npy
header (an .npz member's too) is checked before anything is allocated: it may not declare more
bytes than it carries, so a 100-byte file cannot ask for terabytes, and an .npz may not unpack
to more than the input limit.

    >>> arrays = load_arrays(Path("x.npz").read_bytes(), "--input x.npz")   # doctest: +SKIP
    {'x': array(...)}
"""
from __future__ import annotations

import io
import math
import os
import tokenize
import zipfile
from pathlib import Path  # noqa: F401 - the doctest's

import numpy as np

from xgraph.errors import ModelFileError
from xgraph.ir.file_handles import read_checked_file

ARRAY_SUFFIXES = frozenset({".npy", ".npz"})
_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"


def max_input_bytes() -> int:
    """The largest input file (or unpacked .npz) read: a quarter of this host's memory."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4
    except (ValueError, OSError, AttributeError):
        return 1 << 32


def read_input_file(path: str | os.PathLike, what: str) -> bytes:
    """The bytes of the input file `path`, read on one handle checked to be a regular file of sane size."""
    return read_checked_file(path, what, max_input_bytes(), "for an input file (a quarter of this host's memory)")


def _header(f, source: str) -> tuple[int, int]:
    """(bytes the .npy header read from `f` declares, header length), before any of the array is allocated."""
    try:
        version = np.lib.format.read_magic(f)
        shape, _, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                           else np.lib.format.read_array_header_2_0(f))
    except (ValueError, OSError, SyntaxError, TypeError, EOFError, tokenize.TokenError, RecursionError,
            MemoryError) as e:  # numpy parses the header as Python literals: every way that fails
        raise ModelFileError(f"{source}: not a valid .npy header ({e})") from None
    if dtype.hasobject:
        raise ModelFileError(f"{source}: holds Python objects ({dtype}), which are read only by unpickling; save "
                             "the array with plain dtypes (numeric, bool or fixed-width strings)")
    return math.prod(shape) * dtype.itemsize, f.tell()


def _load_npy(data: bytes, source: str) -> np.ndarray:
    declared, start = _header(io.BytesIO(data), source)
    body = len(data) - start
    if declared > body:
        raise ModelFileError(f"{source}: declares an array of {declared} bytes but holds {body}; the file is "
                             "truncated or damaged")
    try:
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError) as e:
        raise ModelFileError(f"{source}: cannot be read as a plain .npy array ({e})") from None


def _load_npz(data: bytes, source: str) -> dict[str, np.ndarray]:
    limit = max_input_bytes()
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
            unpacked = sum(info.file_size for info in members)
            if unpacked > limit:
                raise ModelFileError(f"{source}: unpacks to {unpacked} bytes, over the {limit}-byte limit for an "
                                     "input file (a quarter of this host's memory)")
            arrays = {}
            for info in members:
                source_member = f"{source}:{info.filename}"
                with archive.open(info) as f:  # the header first: nothing unpacked for a member that lies
                    declared, start = _header(f, source_member)
                if declared > info.file_size - start:
                    raise ModelFileError(f"{source_member}: declares an array of {declared} bytes but holds "
                                         f"{info.file_size - start}; the archive is damaged")
                name = info.filename[:-4] if info.filename.endswith(".npy") else info.filename
                arrays[name] = _load_npy(archive.read(info), source_member)
            return arrays
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, ValueError, OSError, EOFError,
            RuntimeError) as e:  # RuntimeError: an encrypted member
        raise ModelFileError(f"{source}: not a readable .npz archive ({e})") from None


def load_arrays(data: bytes, what: str) -> np.ndarray | dict[str, np.ndarray]:
    """The array of an .npy file's bytes, or {name: array} of an .npz's; ModelFileError naming `what` otherwise."""
    if data.startswith(_NPY_MAGIC):
        return _load_npy(data, what)
    if data.startswith(_ZIP_MAGIC) or data.startswith(b"PK\x05\x06"):
        return _load_npz(data, what)
    raise ModelFileError(f"{what}: not a .npy or .npz file (neither the .npy magic nor a zip archive); save arrays "
                         "with numpy's np.save or np.savez")


def read_arrays(path: str | os.PathLike, what: str) -> np.ndarray | dict[str, np.ndarray]:
    """`load_arrays` of the file at `path`."""
    return load_arrays(read_input_file(path, what), what)


__all__ = ["ARRAY_SUFFIXES", "load_arrays", "max_input_bytes", "read_arrays", "read_input_file"]
