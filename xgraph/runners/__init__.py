"""The runtime: a Runner per device subgraph (VART-like) and the GraphRunner that pipelines them.

The names are resolved on first use (as `xgraph`'s are), so that importing a module of this
package (the runners' registry hook, which every compile's plugin manager loads) does not load
the whole runtime.
"""
from __future__ import annotations

from xgraph.lazy import lazy_names

_LAZY = {
    "GraphRunner": "xgraph.runners.graph_runner",
    "create_graph_runner": "xgraph.runners.graph_runner",
    "DeviceValue": "xgraph.runners.device_values",
    "Runner": "xgraph.runners.runner",
    "register_runner": "xgraph.runners.runner",
}


__getattr__ = lazy_names(__name__, _LAZY)


__all__ = ["DeviceValue", "GraphRunner", "Runner", "create_graph_runner", "register_runner"]
