"""The built-in devices, runners and kernels, registered through the public hooks."""
from __future__ import annotations

from xgraph.hookspecs import hookimpl


@hookimpl
def xgraph_devices() -> list:
    """AICORE, AICPU, DVPP and CPU, from their op-info TOML files."""
    from xgraph.devices import builtin_device_files
    return builtin_device_files()


@hookimpl
def xgraph_runners() -> dict:
    """The device runners (and the null runner used for scheduling tests)."""
    from xgraph.runners.device_runners import builtin_runners
    return builtin_runners()


@hookimpl
def xgraph_kernels(registry) -> None:
    """The numpy kernel library (it registers itself on import)."""
    from xgraph.kernels import KERNELS, load_builtin_kernels
    load_builtin_kernels()
    if registry is not KERNELS:
        for k in KERNELS:
            registry.add(k)
