"""What `xgraph run` and `--input-dir` do with outputs: one-line summaries, and files whose names
never collide, all written as one unit through xgraph's file writer."""
from __future__ import annotations

import hashlib
import io
import re
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from xgraph.errors import XGraphError


def summarize(value: Any) -> str:
    """A one-line summary: shape, dtype and a few statistics or values."""
    if value is None:
        return "empty optional (None)"
    if isinstance(value, list):
        inner = ", ".join(f"{np.asarray(v).dtype}{list(np.shape(v))}" for v in value[:4])
        return f"sequence of {len(value)} tensors [{inner}{', ...' if len(value) > 4 else ''}]"
    a = np.asarray(value)
    head = f"{a.dtype} {tuple(a.shape)}"
    if a.size == 0:
        return f"{head} (empty)"
    if a.dtype.kind in "OUS":
        return f"{head} values {[str(v) for v in a.ravel()[:5]]}{' ...' if a.size > 5 else ''}"
    if a.size <= 6:
        return f"{head} values {np.array2string(a.ravel(), precision=5, separator=', ')}"
    numeric = a.astype(np.float64) if a.dtype.kind not in "fc" or a.dtype.isbuiltin != 1 else a
    if numeric.dtype.kind == "c":
        return f"{head} max|x| {np.abs(numeric).max():.6g}"
    with np.errstate(all="ignore"):
        flat = numeric.ravel()
        if np.isnan(flat).all():
            return f"{head} all NaN"
        extra = ""
        if a.ndim == 2 and a.shape[-1] > 1 and a.dtype.kind == "f":  # (batch, classes): the top class
            extra = f" argmax(last axis)[0] {int(np.nanargmax(numeric.reshape(-1, a.shape[-1])[0]))}"
        return (f"{head} min {np.nanmin(flat):.6g} max {np.nanmax(flat):.6g} mean {np.nanmean(flat):.6g}"
                f"{extra}{' (has NaN)' if np.isnan(flat).any() else ''}")


#: Output file stems are cut to this many characters (plus a tag), well inside any NAME_MAX.
MAX_STEM = 120


def output_file_name(name: str) -> str:
    """A file name stem for tensor `name`: letters, digits, '.', '_', '-' kept, others become '_'.

    A name that had to change (or was cut) gets a tag from a hash of the original, so distinct
    tensors never share a file (`y/0` -> `y_0-3f2a9c1d`, while `y_0` stays `y_0`).
    """
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".")[:MAX_STEM] or "output"
    if safe != name:
        safe = f"{safe}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
    return safe


def distinct_file_names(names: Sequence[str]) -> list[str]:
    """`output_file_name` of each name, in order, made distinct even on case-insensitive file systems
    (a repeated name gets -2, -3, ...): none is empty, starts with a dot or holds a separator."""
    stems: list[str] = []
    used: set[str] = set()
    for name in names:
        stem, n = output_file_name(name), 1
        while stem.lower() in used:
            n += 1
            stem = f"{output_file_name(name)}-{n}"
        used.add(stem.lower())
        stems.append(stem)
    return stems


def output_files(names: Sequence[str]) -> dict[str, str]:
    """{tensor name: file stem}, distinct even on case-insensitive file systems."""
    return dict(zip(names, distinct_file_names(names)))


def encode_output(value: Any) -> tuple[str, bytes] | None:
    """(suffix, file bytes) of an output: .npy, a sequence as .npz (arr_0...); None for an empty optional."""
    if value is None:
        return None
    buffer = io.BytesIO()
    if isinstance(value, list):
        np.savez(buffer, *[np.asarray(v) for v in value])
        return ".npz", buffer.getvalue()
    array = np.asarray(value)
    if array.dtype == object:
        array = array.astype(str)  # np.save of an object array would need pickle to load
    np.save(buffer, array)
    return ".npy", buffer.getvalue()


def save_outputs(directory: Path, values: dict[str, Any]) -> dict[str, Path | None]:
    """Write every output into `directory` as one unit: all files replaced, or none (and no temp left)."""
    from xgraph.ir.files import all_or_nothing, write_bytes
    stems = output_files(list(values))
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise XGraphError(f"--output-dir {directory}: cannot create it ({e.strerror or e})") from None
    saved: dict[str, Path | None] = {}
    with all_or_nothing():
        for name, value in values.items():
            encoded = encode_output(value)
            if encoded is None:
                saved[name] = None
                continue
            path = directory / f"{stems[name]}{encoded[0]}"
            write_bytes(path, encoded[1], "--output-dir")
            saved[name] = path
    return saved


__all__ = ["distinct_file_names", "encode_output", "output_file_name", "output_files", "save_outputs", "summarize"]
