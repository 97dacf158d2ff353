"""The runtime: a Runner per device subgraph (VART-like) and the GraphRunner that pipelines them.

The names are resolved on first use (as `xgraph`'s are), so that importing a module of this
package (the runners' registry hook, which every compile's plugin manager loads) does not load
the whole runtime.
"""
from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "GraphRunner": "xgraph.runners.graph_runner",
    "create_graph_runner": "xgraph.runners.graph_runner",
    "Runner": "xgraph.runners.runner",
    "register_runner": "xgraph.runners.runner",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'xgraph.runners' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = ["GraphRunner", "Runner", "create_graph_runner", "register_runner"]
