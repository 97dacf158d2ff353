"""Hostile input files (images, .npy, .npz) as bytes: the seeds of the input-file fuzz targets and
the cases of tests/security/test_input_files.py."""
from __future__ import annotations

import io
import struct
import zlib
from pathlib import Path

import numpy as np


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_declaring(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height RGB pixels and whose data is a few bytes."""
    return (b"\x89PNG\r\n\x1a\n" + _chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + _chunk(b"IDAT", zlib.compress(b"\0" * 16)) + _chunk(b"IEND", b""))


#: An EPS file: Pillow hands these to Ghostscript when it is asked to decode one.
EPS = b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 10 10\n%%EndComments\nshowpage\n"


def npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """An .npy header (version 1.0) for `shape`, with no array data after it."""
    header = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"  # the data starts 64-byte aligned
    return b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header.encode()


def pickled_npz() -> bytes:
    """An .npz whose member is an object array: readable only by unpickling."""
    buffer = io.BytesIO()
    np.savez(buffer, x=np.array([{"a": 1}, None], dtype=object))
    return buffer.getvalue()


def encrypted_npz() -> bytes:
    """An .npz whose member is marked encrypted (zipfile then asks for a password)."""
    data = bytearray(npz_of(x=np.zeros((1, 4), np.float32)))
    for signature, flag_at in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # local and central headers
        at = data.find(signature)
        data[at + flag_at] |= 1
    return bytes(data)


def npz_of(**arrays: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def npy_of(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array)
    return buffer.getvalue()


def png_of(pixels: np.ndarray) -> bytes:
    from PIL import Image
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return buffer.getvalue()


#: 4 TiB of float32 declared by a 128-byte file.
HUGE_NPY = npy_header((1 << 40,))


def sparse_npy(path: Path, nbytes: int) -> Path:
    """An .npy of `nbytes` zero bytes of float32 data, written as a sparse file (no disk blocks)."""
    header = npy_header((nbytes // 4,))
    with open(path, "wb") as f:
        f.write(header)
        f.truncate(len(header) + nbytes // 4 * 4)
    return path


__all__ = ["EPS", "HUGE_NPY", "encrypted_npz", "npy_header", "npy_of", "npz_of", "pickled_npz", "png_declaring", "png_of",
           "sparse_npy"]
