"""A folder of input files as a Ray Dataset: one row per file, decoded on the cluster's workers.

The decoding rules are those of `xgraph run --input` (xgraph/runners/input_files.py); a file
that cannot be read becomes a row carrying its error, so one bad file never ends the job.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from xgraph.errors import XGraphError
from xgraph.ray.batch import READ_ERROR
from xgraph.runners.input_files import input_specs, list_files, read_file

if TYPE_CHECKING:
    from xgraph.ir import Tensor


def read_files(directory: str | Path, inputs: "Sequence[Tensor]") -> Any:
    """A Ray Dataset with one row per file of `directory`: "path", "read_error" and a column per model input.

    A file that cannot be read or decoded keeps its row, with its one-line error in "read_error"
    (empty for the others): `ModelReplica` reports such a row as failed instead of running it.
    """
    from xgraph.ray.session import connect, require_ray
    ray = require_ray()
    connect()
    files = [str(p) for p in list_files(directory)]
    specs = input_specs(inputs)
    if not specs:
        raise XGraphError("the model has no inputs, so there is nothing to read files into")

    placeholders = {name: np.zeros((0,) * len(shape) if shape else (0,), dtype)
                    for name, dtype, shape in specs}

    def decode(row: dict[str, Any]) -> dict[str, Any]:
        """The row's inputs, or its read error and empty inputs of the right dtype (the replica runs it not)."""
        try:
            return {"path": row["path"], READ_ERROR: "", **read_file(Path(row["path"]), specs)}
        except XGraphError as e:
            return {"path": row["path"], READ_ERROR: str(e), **placeholders}

    # Zero CPUs: replicas that reserve every CPU would otherwise leave the reads none, and Ray Data
    # waits for them forever (ray-project/ray#44687). Reading is light; decoding shares the host.
    # Each worker reads its file through the one checked input reader (size and type checked first).
    return ray.data.from_items([{"path": f} for f in files]).map(decode, num_cpus=0)
