"""Hook specifications: how installed packages extend xgraph (project name "xgraph").

Packages register a module of `@hookimpl` functions under the entry point group ``xgraph``
(or call `Registries.register_extension` / `xgraph.plugins.manager.register_extension` at run
time). The built-in devices, runners and kernels are registered through these same hooks
(the modules `xgraph.registries.BUILTIN_EXTENSIONS` names), so they are the examples to copy.
Hooks are always called by keyword, and new parameters are only ever added at the end.

A `xgraph.registries.Registries` object calls them when one of its tables (devices, runners,
kernels) is first read, and again after an extension was registered, so an extension added
after a compile takes effect on the next compile or run.

Partition plugins (the `get_plugin()` modules named in ``{"plugins": "a,b"}``) are a
separate, simpler mechanism: see `xgraph.plugins.loader`.
"""
from __future__ import annotations

import pluggy

hookspec = pluggy.HookspecMarker("xgraph")
hookimpl = pluggy.HookimplMarker("xgraph")


@hookspec
def xgraph_devices() -> list:
    """Called when a registries object builds its device table (placement, reports, runners).

    Return a list of devices to add, each a `xgraph.devices.DeviceSpec`, a dict in
    the op-info TOML schema, or a path to such a TOML file. A device name registered twice
    is an error naming both sources. Not firstresult: every implementation contributes.
    """


@hookspec
def xgraph_runners() -> dict:
    """Called when a registries object builds its runner table (`create_runner`).

    Return {runner name: Runner subclass}. Names are what subgraphs' "runner" attrs refer
    to; a name is only ever resolved through this registry, never imported from a file.
    Not firstresult: every implementation contributes.
    """


@hookspec
def xgraph_kernels(registry: "xgraph.kernels.KernelRegistry") -> None:  # noqa: F821 - named, not imported
    """Called when a registries object builds its kernel table (compile's kernel annotation, runners).

    `registry` is the `xgraph.kernels.KernelRegistry` to fill, e.g. with
    ``@kernel("MyOp", domain="my.domain", registry=registry)`` or ``registry.add(...)``. Every
    mode uses it: "run" and "sim" call the kernel, "ref" runs it inside the ONNX reference
    evaluator for domains the evaluator does not know. Kernels it adds report their source as
    "plugin". Returns nothing. Not firstresult: every implementation contributes.
    """
