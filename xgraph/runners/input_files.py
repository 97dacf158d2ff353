"""A folder of input files as model inputs: one file per run, images, .npy or .npz.

The same rule as `xgraph run --input`: an image stays its encoded bytes when the input is a
1-D uint8 tensor (a DVPP decoder's input), else Pillow decodes it to uint8 pixels; an .npy
file is the array of the model's only input; an .npz holds arrays named like the inputs.
Plain functions on bytes, so the same decoding runs in `xgraph run --input-dir` and on a
Ray cluster's workers (`xgraph.ray.read_files`).
"""
from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from xgraph.errors import ModelFileError

if TYPE_CHECKING:
    from xgraph.ir import Tensor

#: File suffixes read as images (through Pillow), as `xgraph run --input` reads them.
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".tif", ".tiff", ".webp", ".ppm", ".pgm"})
ARRAY_SUFFIXES = frozenset({".npy", ".npz"})

InputSpec = tuple[str, str, "tuple | None"]   # (name, dtype, shape): what decoding needs of a Tensor


def input_specs(tensors: "Sequence[Tensor]") -> list[InputSpec]:
    """The model inputs as plain (name, dtype, shape) tuples, cheap to send to workers."""
    return [(t.name, str(t.dtype), None if t.shape is None else tuple(t.shape)) for t in tensors]


def list_files(directory: str | Path) -> list[Path]:
    """The image, .npy and .npz files directly inside `directory`, sorted by name."""
    folder = Path(directory)
    if not folder.is_dir():
        raise ModelFileError(f"input folder {directory}: not a folder")
    files = sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES | ARRAY_SUFFIXES)
    if not files:
        raise ModelFileError(f"input folder {directory}: holds no image, .npy or .npz files")
    return files


def decode_file(data: bytes, path: str, inputs: Sequence[InputSpec]) -> dict[str, Any]:
    """{input name: value} from one file's bytes; ModelFileError naming the file when it does not fit."""
    suffix = Path(path).suffix.lower()
    names = [name for name, _, _ in inputs]
    if suffix == ".npz":
        with np.load(io.BytesIO(data), allow_pickle=False) as archive:
            arrays = {k: archive[k] for k in archive.files}
        missing = [n for n in names if n not in arrays]
        if missing and not (len(names) == 1 and len(arrays) == 1):
            raise ModelFileError(f"{path}: holds {', '.join(arrays) or 'no arrays'}, not input {missing[0]!r}; "
                                 f"name the arrays like the inputs: {', '.join(names)}")
        return {names[0]: next(iter(arrays.values()))} if missing else {n: arrays[n] for n in names}
    if len(inputs) != 1:
        raise ModelFileError(f"{path}: the model has {len(inputs)} inputs ({', '.join(names)}); give each run "
                             f"as an .npz holding one array per input")
    name, dtype, shape = inputs[0]
    if suffix == ".npy":
        try:
            return {name: np.load(io.BytesIO(data), allow_pickle=False)}
        except ValueError as e:
            raise ModelFileError(f"{path}: not a plain .npy array ({e})") from None
    if suffix not in IMAGE_SUFFIXES:
        raise ModelFileError(f"{path}: not an image, .npy or .npz file")
    if dtype == "uint8" and shape is not None and len(shape) == 1:
        return {name: np.frombuffer(data, dtype=np.uint8).copy()}  # encoded: the model decodes it
    from PIL import Image, UnidentifiedImageError
    rank = None if shape is None else len(shape)
    try:
        with Image.open(io.BytesIO(data)) as image:
            pixels = np.asarray(image.convert("L" if rank == 2 else "RGB"), dtype=np.uint8)
    except (UnidentifiedImageError, OSError) as e:
        raise ModelFileError(f"{path}: not an image Pillow can decode: {e}") from None
    return {name: pixels[np.newaxis] if rank == 4 else pixels}
