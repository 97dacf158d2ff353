"""The built-in kernels' implementation of the `xgraph_kernels` hook (listed in `xgraph.registries`).

It adds nothing of its own to the session's table: the table reads through `KERNELS` (bare
``@kernel`` declarations) to `BUILTIN_KERNELS` (the op-family modules), live.
"""
from __future__ import annotations

from xgraph.hookspecs import hookimpl
from xgraph.kernels import KernelRegistry, load_builtin_kernels


@hookimpl
def xgraph_kernels(registry: KernelRegistry) -> None:
    """The numpy kernel library (imported here, once) and every ``@kernel`` declared in this process."""
    registry.include(load_builtin_kernels())
