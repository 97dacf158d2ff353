"""A folder of input files as a Ray Dataset: one row per file, decoded on the cluster's workers.

The decoding rules are those of `xgraph run --input` (xgraph/runners/input_files.py).
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from xgraph.errors import XGraphError
from xgraph.runners.input_files import decode_file, input_specs, list_files

if TYPE_CHECKING:
    from xgraph.ir import Tensor


def read_files(directory: str | Path, inputs: "Sequence[Tensor]") -> Any:
    """A Ray Dataset with one row per file of `directory`: "path" and a column per model input."""
    from xgraph.ray.session import connect, require_ray
    ray = require_ray()
    connect()
    files = [str(p) for p in list_files(directory)]
    specs = input_specs(inputs)
    if not specs:
        raise XGraphError("the model has no inputs, so there is nothing to read files into")

    def decode(row: dict[str, Any]) -> dict[str, Any]:
        return {"path": row["path"], **decode_file(bytes(row["bytes"]), row["path"], specs)}

    # Zero CPUs: replicas that reserve every CPU would otherwise leave the reads none, and Ray Data
    # waits for them forever (ray-project/ray#44687). Reading is light; decoding shares the host.
    try:
        reads = ray.data.read_binary_files(files, include_paths=True, num_cpus=0)
    except TypeError:  # Ray before the named remote parameters
        reads = ray.data.read_binary_files(files, include_paths=True, ray_remote_args={"num_cpus": 0})
    return reads.map(decode, num_cpus=0)
