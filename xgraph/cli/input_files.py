"""Input values from files for `xgraph run`, `verify` and `bench`: .npy, .npz and images.

Files are read by xgraph's one input reader (`xgraph.ir.array_reader`: regular files of sane
size, arrays never unpickled, headers checked before allocation) and images by its one image
reader (`xgraph.ir.image_reader`: allow-listed formats, the decompression-bomb limit).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from xgraph.errors import XGraphError
from xgraph.ir.array_reader import read_arrays, read_input_file
from xgraph.ir.image_reader import IMAGE_SUFFIXES, read_pixels

if TYPE_CHECKING:
    from xgraph.ir import Tensor

def _load_image(path: Path, tensor: "Tensor", what: str) -> np.ndarray:
    """Raw bytes for a 1-D uint8 input (encoded image), else decoded uint8 pixels (HWC, or HW for rank 2)."""
    data = read_input_file(path, what)
    if tensor.dtype == np.uint8 and tensor.shape is not None and len(tensor.shape) == 1:
        return np.frombuffer(data, dtype=np.uint8).copy()
    rank = None if tensor.shape is None else len(tensor.shape)
    pixels = read_pixels(data, what, "L" if rank == 2 else "RGB")
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
        loaded = read_arrays(path, what)
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
