"""Hook specifications: how installed packages extend xgraph (project name "xgraph").

Packages register a module of `@hookimpl` functions under the entry point group ``xgraph``.
The built-in devices, runners and kernels are registered through these same hooks
(`xgraph.plugins.builtin`), so they are the examples to copy. Hooks are always called by
keyword, and new parameters are only ever added at the end.

Partition plugins (the `get_plugin()` modules named in ``{"plugins": "a,b"}``) are a
separate, simpler mechanism: see `xgraph.plugins.loader`.
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("xgraph")
hookimpl = pluggy.HookimplMarker("xgraph")


@hookspec
def xgraph_devices() -> list:
    """Called once, when the device table is first built (placement, reports, runners).

    Return a list of devices to add, each a `xgraph.devices.DeviceSpec`, a dict in
    the op-info TOML schema, or a path to such a TOML file. A device name registered twice
    is an error naming both sources. Not firstresult: every implementation contributes.
    """


@hookspec
def xgraph_runners() -> dict:
    """Called once, when the runner registry is first used.

    Return {runner name: Runner subclass}. Names are what subgraphs' "runner" attrs refer
    to; a name is only ever resolved through this registry, never imported from a file.
    Not firstresult: every implementation contributes.
    """


@hookspec
def xgraph_kernels(registry) -> None:
    """Called once, when the kernel registry is first used.

    `registry` is the `xgraph.kernels.KernelRegistry` to fill, e.g. with
    ``@kernel("MyOp", domain="my.domain", registry=registry)``. Returns nothing.
    """
