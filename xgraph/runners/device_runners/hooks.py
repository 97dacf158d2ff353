"""The built-in runners' implementation of the `xgraph_runners` hook (listed in `xgraph.registries`)."""
from __future__ import annotations

from xgraph.hookspecs import hookimpl
from xgraph.runners.device_runners import builtin_runners


@hookimpl
def xgraph_runners() -> dict:
    """The device runners (and the null runner used for scheduling tests)."""
    return builtin_runners()
