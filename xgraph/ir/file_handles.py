"""Opening files xgraph reads: one no-follow, non-blocking handle whose type and size are checked
with fstat before a byte is read (model files, their external data and input files alike)."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from xgraph.errors import ModelFileError
from xgraph.ir.files import describe_kind

#: A model file larger than this cannot be one protobuf message (protobuf's 2 GiB limit): refused unread.
MAX_MODEL_FILE_BYTES = (1 << 31) - 1


def open_regular(path: str | os.PathLike, what: str) -> tuple[int, os.stat_result]:
    """(descriptor, fstat) of a regular file, opened without following a final link and without blocking.

    `O_NONBLOCK` makes opening a FIFO return at once instead of waiting for a writer, and the
    type is checked with `fstat` on the descriptor itself, before any read: a device (`/dev/zero`),
    FIFO, socket or folder is refused, whatever the path looked like when it was checked.
    `what` starts the error message ("model.onnx", "tensor 'w' external data 'w.bin'").
    """
    flags = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    try:
        fd = os.open(path, flags)
    except OSError as e:
        hint = "; it may have been replaced by a link" if getattr(e, "errno", None) == getattr(os, "ELOOP", -1) else ""
        raise ModelFileError(f"{what} cannot be opened ({e.strerror or e}){hint}") from None
    except ValueError as e:  # a NUL byte in the path
        raise ModelFileError(f"{what} cannot be opened ({e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ModelFileError(f"{what} is {describe_kind(st.st_mode)}, not a regular file")
        if getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd, st


def read_exactly(fd: int, offset: int, length: int) -> bytes:
    """`length` bytes at `offset` (fewer only if the file shrank meanwhile)."""
    chunks, done = [], 0
    while done < length:
        chunk = os.pread(fd, min(length - done, 1 << 26), offset + done)
        if not chunk:
            break
        chunks.append(chunk)
        done += len(chunk)
    return b"".join(chunks)


def read_checked_file(path: str | os.PathLike, label: str, limit: int, limit_reason: str) -> bytes:
    """The bytes of the file at `path`, after checking on one handle that it is a regular file of at most `limit`
    bytes (`limit_reason` says why, in the refusal).

    A link the user gave as the path is followed once (the path is resolved first), but the
    file read is the one whose type and size were checked.
    """
    try:
        real = Path(path).resolve(strict=True)
    except FileNotFoundError:
        raise ModelFileError(f"{label}: no such file") from None
    except (OSError, RuntimeError, ValueError) as e:  # link loop, NUL byte, name too long
        raise ModelFileError(f"{label}: cannot read ({getattr(e, 'strerror', None) or e})") from None
    fd, st = open_regular(real, label + ":")
    try:
        if st.st_size > limit:
            raise ModelFileError(f"{label}: is {st.st_size} bytes, over the {limit}-byte limit {limit_reason}")
        data = read_exactly(fd, 0, st.st_size)
    except OSError as e:
        raise ModelFileError(f"{label}: cannot read ({e.strerror or e})") from None
    finally:
        os.close(fd)
    if len(data) != st.st_size:
        raise ModelFileError(f"{label}: changed while being read")
    return data


def read_model_file(path: Path, label: str) -> bytes:
    """The bytes of a model file (`read_checked_file`), at most one protobuf message's 2 GiB."""
    return read_checked_file(path, label, MAX_MODEL_FILE_BYTES, "of one protobuf message; a large model keeps its "
                             "weights in external data files")


__all__ = ["MAX_MODEL_FILE_BYTES", "open_regular", "read_checked_file", "read_exactly", "read_model_file"]
