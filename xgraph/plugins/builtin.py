"""The built-in devices, registered through the public `xgraph_devices` hook (see `xgraph.registries`).

The built-in runners (`xgraph.runners.device_runners.hooks`) and kernels (`xgraph.kernels.hooks`)
implement their hooks beside their code; `xgraph.registries.BUILTIN_EXTENSIONS` lists all three.
"""
from __future__ import annotations

from xgraph.hookspecs import hookimpl


@hookimpl
def xgraph_devices() -> list:
    """AICORE, AICPU, DVPP and CPU, from their op-info TOML files."""
    from xgraph.devices import builtin_device_files
    return builtin_device_files()
