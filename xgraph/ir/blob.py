"""Compiled blobs: what a plugin's vendor compiler produced for one subgraph, stored once in the .xmodel.

A plugin's ``compile(subgraph)`` hands the subgraph to its compiler and keeps the result with
``subgraph.set_blob(data, weights=..., compat=...)``; its runner reads it back with
``subgraph.get_blob()``. The blob lives in the subgraph's ``"blob"`` attr as one read-only
``uint8`` array, so the .xmodel stores it like any attr array: inline when small, in the side
file beside the large weights when the weights go there (then it is mapped, not read, at load).

``weights="shared"`` says the blob holds no copy of the weights the graph already holds: the
runner takes them from the subgraph (`Subgraph.get_const_tensors`, read-only arrays, mapped
for external-data models) when it loads the blob. ``weights="embedded"`` says the blob is
self-contained. ``compat`` is the plugin's compatibility string ("sdk-2026.4;opset=17"): at
load the plugin's ``check_blob(compat)`` answers "ok", "recompile" or "unsupported"
(`xgraph.plugins.blobs`).
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import numpy as np

from xgraph.errors import GraphError

#: The subgraph attr holding the blob: {"data": uint8 array, "weights": str, "compat": str}.
BLOB_ATTR = "blob"
WEIGHT_MODES = ("shared", "embedded")
#: A blob file larger than this is refused when read from a path (the declared-size limit of the .xmodel reader).
MAX_BLOB_BYTES = 1 << 40

BlobData = Union[bytes, bytearray, memoryview, np.ndarray, str, os.PathLike]


@dataclass(frozen=True)
class Blob:
    """A subgraph's compiled blob: its bytes (a read-only uint8 array), weight mode and compatibility string."""

    data: np.ndarray
    weights: str
    compat: str

    @property
    def nbytes(self) -> int:
        """Size of the blob in bytes."""
        return int(self.data.nbytes)

    def tobytes(self) -> bytes:
        """The blob as bytes (a copy; `data` is the zero-copy view)."""
        return self.data.tobytes()


def _read_path(path: Path, where: str) -> np.ndarray:
    try:
        st = os.stat(path)
    except OSError as e:
        raise GraphError(f"{where}: blob file {str(path)!r} cannot be read ({e.strerror}); give the compiler's "
                         "output file or its bytes") from None
    if not stat.S_ISREG(st.st_mode):
        raise GraphError(f"{where}: blob path {str(path)!r} is not a regular file; give the compiler's output file")
    if st.st_size > MAX_BLOB_BYTES:
        raise GraphError(f"{where}: blob file {str(path)!r} has {st.st_size} bytes, over the 1 TiB limit")
    return np.frombuffer(path.read_bytes(), np.uint8)


def blob_array(data: BlobData, where: str) -> np.ndarray:
    """`data` (bytes-like, a uint8 array, or a file path) as a read-only 1-D uint8 array."""
    if isinstance(data, (str, os.PathLike)):
        array = _read_path(Path(data), where)
    elif isinstance(data, np.ndarray):
        if data.dtype != np.uint8:
            raise GraphError(f"{where}: a blob array must be uint8, got {data.dtype}; pass bytes or a file path")
        array = np.ascontiguousarray(data).reshape(-1)
    elif isinstance(data, (bytes, bytearray, memoryview)):
        array = np.frombuffer(bytes(data) if not isinstance(data, bytes) else data, np.uint8)
    else:
        raise GraphError(f"{where}: a blob is bytes, a uint8 array or a file path, got {type(data).__name__}")
    if array.size == 0:
        raise GraphError(f"{where}: the blob is empty; store what the compiler produced")
    if array.flags.writeable:  # the caller's array stays the caller's: the subgraph keeps its own read-only copy
        array = array.copy()
        array.flags.writeable = False
    return array


def make_blob_attr(data: BlobData, weights: str, compat: str, where: str) -> dict[str, Any]:
    """The checked value of the "blob" attr."""
    if weights not in WEIGHT_MODES:
        raise GraphError(f"{where}: set_blob weights={weights!r}; use 'shared' (the blob holds no weights: the "
                         "runner takes the graph's) or 'embedded' (the blob holds them)")
    if not isinstance(compat, str) or not compat.strip():
        raise GraphError(f"{where}: set_blob compat={compat!r}; give the compiler's compatibility string, "
                         "e.g. 'sdk-2026.4;opset=17'")
    return {"data": blob_array(data, where), "weights": weights, "compat": compat}


def blob_problem(value: Any) -> str | None:
    """Why a loaded "blob" attr is malformed (the .xmodel reader's check), or None."""
    if not isinstance(value, dict) or set(value) != {"data", "weights", "compat"}:
        return "a dict with keys data, weights, compat"
    data = value["data"]
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 1:
        return "a 1-D uint8 array under 'data'"
    if value["weights"] not in WEIGHT_MODES or not isinstance(value["compat"], str):
        return f"'weights' one of {WEIGHT_MODES} and 'compat' a str"
    return None


def blob_from_attr(value: dict[str, Any]) -> Blob:
    """The Blob of a "blob" attr value."""
    return Blob(value["data"], value["weights"], value["compat"])


def blob_arrays(graph: Any) -> list[np.ndarray]:
    """The blob arrays of every subgraph of `graph` (what an .xmodel save stores beside the weights), breadth first."""
    index = graph.index()
    return [value["data"] for value in index.attr_column(index.subgraphs(), BLOB_ATTR)
            if value is not None and blob_problem(value) is None]  # a hand-set malformed value is saved as any attr


__all__ = ["BLOB_ATTR", "WEIGHT_MODES", "Blob", "blob_array", "blob_arrays", "blob_from_attr", "blob_problem",
           "make_blob_attr"]
