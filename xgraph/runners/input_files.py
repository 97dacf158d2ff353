"""A folder of input files as model inputs: one file per run, images, .npy or .npz.

The same rule as `xgraph run --input`: an image stays its encoded bytes when the input is a
1-D uint8 tensor (a DVPP decoder's input), else xgraph's one image reader decodes it to uint8
pixels; an .npy file is the array of the model's only input; an .npz holds arrays named like
the inputs (both through the one array reader, never unpickled).
Plain functions on bytes, so the same decoding runs in `xgraph run --input-dir` and on a
Ray cluster's workers (`xgraph.ray.read_files`).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from xgraph.errors import ModelFileError
from xgraph.ir.array_reader import ARRAY_SUFFIXES, load_arrays, read_input_file
from xgraph.ir.image_reader import IMAGE_SUFFIXES, read_pixels

if TYPE_CHECKING:
    from xgraph.ir import Tensor


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
    if suffix in ARRAY_SUFFIXES:
        arrays = load_arrays(data, path)
        if isinstance(arrays, dict):
            missing = [n for n in names if n not in arrays]
            if missing and not (len(names) == 1 and len(arrays) == 1):
                raise ModelFileError(f"{path}: holds {', '.join(arrays) or 'no arrays'}, not input {missing[0]!r}; "
                                     f"name the arrays like the inputs: {', '.join(names)}")
            return {names[0]: next(iter(arrays.values()))} if missing else {n: arrays[n] for n in names}
    if len(inputs) != 1:
        raise ModelFileError(f"{path}: the model has {len(inputs)} inputs ({', '.join(names)}); give each run "
                             f"as an .npz holding one array per input")
    name, dtype, shape = inputs[0]
    if suffix in ARRAY_SUFFIXES:
        return {name: arrays}
    if suffix not in IMAGE_SUFFIXES:
        raise ModelFileError(f"{path}: not an image, .npy or .npz file")
    if dtype == "uint8" and shape is not None and len(shape) == 1:
        return {name: np.frombuffer(data, dtype=np.uint8).copy()}  # encoded: the model decodes it
    rank = None if shape is None else len(shape)
    pixels = read_pixels(data, path, "L" if rank == 2 else "RGB")
    return {name: pixels[np.newaxis] if rank == 4 else pixels}


def read_file(path: Path, inputs: Sequence[InputSpec]) -> dict[str, Any]:
    """`decode_file` of the file at `path`, read by the one checked input reader."""
    return decode_file(read_input_file(path, str(path)), str(path), inputs)
