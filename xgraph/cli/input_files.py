"""Input values from files for `xgraph run`, `verify` and `bench`: .npy, .npz and images.

Array files are read without unpickling, and their headers are checked before anything is
allocated: an .npy may not declare more bytes than it holds, and no array (in an .npz
either) more than this host's memory, so a 100-byte file cannot ask for terabytes.
"""
from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from xgraph.errors import ModelFileError, XGraphError

if TYPE_CHECKING:
    from xgraph.ir import Tensor

#: File suffixes read as images (through Pillow).
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})


def _load_array_file(path: Path, what: str) -> np.ndarray | dict[str, np.ndarray]:
    """An .npy array or the arrays of an .npz, refusing pickled objects."""
    _check_regular(path, what)
    _check_declared_sizes(path, what)
    try:
        loaded = np.load(path, allow_pickle=False)
    except ValueError as e:
        raise ModelFileError(f"{what}: {path} cannot be read without unpickling ({e}); save it with plain "
                             f"dtypes (np.save of a numeric or fixed-width string array)") from e
    except OSError as e:
        raise ModelFileError(f"{what}: {path} is not a .npy/.npz file: {e}") from e
    if isinstance(loaded, np.ndarray):
        return loaded
    with loaded:
        return {k: loaded[k] for k in loaded.files}


def _check_regular(path: Path, what: str) -> None:
    """Refuse a missing input file, or one that is not a regular file (a FIFO would block, a device never end)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ModelFileError(f"{what}: no such file {str(path)!r}") from None
    except (OSError, ValueError) as e:
        raise ModelFileError(f"{what}: {str(path)!r} cannot be read ({getattr(e, 'strerror', None) or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelFileError(f"{what}: {str(path)!r} is not a regular file (a folder, FIFO or device); give a "
                             ".npy, .npz or image file")


def _memory_bytes() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def _declared_bytes(f, what: str, source: str) -> int:
    """Bytes an .npy header (read from `f`) says its array takes, before any of it is allocated."""
    try:
        version = np.lib.format.read_magic(f)
        shape, _, dtype = (np.lib.format.read_array_header_1_0(f) if version == (1, 0)
                           else np.lib.format.read_array_header_2_0(f))
    except (ValueError, OSError, SyntaxError, TypeError) as e:
        raise ModelFileError(f"{what}: {source} does not start with a valid .npy header ({e})") from None
    return math.prod(shape) * dtype.itemsize


def _check_declared_sizes(path: Path, what: str) -> None:
    """Refuse an .npy whose header declares more bytes than the file holds (or any array over this host's
    memory, also inside an .npz), so a 100-byte file cannot ask for terabytes."""
    import zipfile
    limit = _memory_bytes()
    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as archive:
                for info in archive.infolist():
                    if info.filename.endswith(".npy"):
                        with archive.open(info) as f:
                            declared = _declared_bytes(f, what, f"{path.name}:{info.filename}")
                        if declared > min(limit, info.file_size):
                            raise ModelFileError(f"{what}: {path.name}:{info.filename} declares an array of "
                                                 f"{declared} bytes but holds {info.file_size}")
            return
        with open(path, "rb") as f:
            declared = _declared_bytes(f, what, path.name)
            body = os.fstat(f.fileno()).st_size - f.tell()
    except (OSError, zipfile.BadZipFile) as e:
        raise ModelFileError(f"{what}: {path} cannot be read: {e}") from None
    if declared > min(limit, body):
        raise ModelFileError(f"{what}: {path.name} declares an array of {declared} bytes but holds {body}; the file "
                             "is truncated or damaged")


def _load_image(path: Path, tensor: "Tensor", what: str) -> np.ndarray:
    """Raw bytes for a 1-D uint8 input (encoded image), else decoded uint8 pixels (HWC, or HW for rank 2)."""
    _check_regular(path, what)
    if tensor.dtype == np.uint8 and tensor.shape is not None and len(tensor.shape) == 1:
        return np.frombuffer(path.read_bytes(), dtype=np.uint8).copy()
    from PIL import Image, UnidentifiedImageError
    rank = None if tensor.shape is None else len(tensor.shape)
    try:
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("L" if rank == 2 else "RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as e:
        raise ModelFileError(f"{what}: {path} is not an image Pillow can decode: {e}") from e
    return pixels[np.newaxis] if rank == 4 else pixels


def read_inputs(specs: Sequence[str], tensors: "Sequence[Tensor]") -> dict[str, Any]:
    """{input name: value} from --input specs ("NAME=FILE" or "FILE") for the model's input tensors."""
    by_name = {t.name: t for t in tensors}
    names = ", ".join(by_name) or "none"
    feeds: dict[str, Any] = {}
    for spec in specs:
        name, sep, file = spec.partition("=")
        if not sep or (name not in by_name and Path(spec).exists()):
            name, file = "", spec
        path = Path(file)
        what = f"--input {spec}"
        if name and name not in by_name:
            raise XGraphError(f"{what}: the model has no input {name!r}; its inputs are: {names}")
        if path.suffix.lower() in IMAGE_SUFFIXES:
            if not name:
                if len(by_name) != 1:
                    raise XGraphError(f"{what}: say which input the image is for (NAME=FILE); inputs: {names}")
                name = next(iter(by_name))
            pixels = _load_image(path, by_name[name], what)
            wanted = by_name[name].dtype
            if wanted is not None and pixels.dtype != wanted:
                raise XGraphError(f"{what}: input {name!r} takes {wanted}, but an image file gives uint8 pixels; "
                                  f"preprocess the image into a {wanted} array saved as .npy (resize, scale, "
                                  f"normalise as the model expects) and pass --input {name}=FILE.npy")
            feeds[name] = pixels
            continue
        loaded = _load_array_file(path, what)
        if isinstance(loaded, dict):
            if name:
                if name in loaded:
                    feeds[name] = loaded[name]
                elif len(loaded) == 1:
                    feeds[name] = next(iter(loaded.values()))
                else:
                    raise XGraphError(f"{what}: {path.name} holds {len(loaded)} arrays ({', '.join(loaded)}) and "
                                      f"none is named {name!r}")
                continue
            unknown = [k for k in loaded if k not in by_name]
            if unknown:
                raise XGraphError(f"{what}: {path.name} holds array {unknown[0]!r}, which is not a model input; "
                                  f"the inputs are: {names}")
            feeds.update(loaded)
            continue
        if not name:
            if len(by_name) != 1:
                raise XGraphError(f"{what}: say which input the array is for (NAME=FILE); inputs: {names}")
            name = next(iter(by_name))
        feeds[name] = loaded
    for name, value in feeds.items():
        wanted = by_name[name].dtype
        if isinstance(value, np.ndarray) and wanted is not None and by_name[name].is_tensor_value and value.dtype != wanted:
            raise XGraphError(f"--input {name}: the file holds a {value.dtype} array but input {name!r} takes "
                              f"{wanted}; save the array as {wanted} (e.g. numpy's astype before np.save) and pass "
                              "it again")
    return feeds


__all__ = ["IMAGE_SUFFIXES", "read_inputs"]
