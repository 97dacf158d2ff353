"""xgraph beyond one machine, on Ray (`pip install 'xgraph[ray]'`).

- `create_graph_runner(graph, ...)`: the graph runner's interface, each device's subgraphs in a
  Ray actor placed by Ray resources, tensors between actors in Ray's object store.
- `map_batches(dataset, "model.xmodel", batch_size=..., concurrency=...)`: replicas of a
  compiled model over a Ray Dataset; returns the output Dataset. `ModelReplica` is the class
  behind it, usable with `Dataset.map_batches` directly.

Names resolve on first use, so `import xgraph.ray` costs nothing and works without Ray;
using one of them without Ray installed raises a RunnerError saying how to install it.
"""
from __future__ import annotations

from xgraph.lazy import lazy_names

_LAZY = {
    "create_graph_runner": "xgraph.ray.graph_runner",
    "RayGraphRunner": "xgraph.ray.graph_runner",
    "map_batches": "xgraph.ray.batch",
    "ModelReplica": "xgraph.ray.batch",
    "read_files": "xgraph.ray.files",
    "connect": "xgraph.ray.session",
    "ActorLostError": "xgraph.ray.errors",
    "DeviceUnavailableError": "xgraph.ray.errors",
}


__getattr__ = lazy_names(__name__, _LAZY)


__all__ = list(_LAZY)
