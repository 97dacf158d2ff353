"""Built-in numpy kernels: one op family per module, each registered with @kernel on import.

The built-ins fill `BUILTIN_KERNELS`; a bare ``@kernel`` (a plugin module, a test) fills
`KERNELS`, which reads through to the built-ins. A session's kernel table is the
`KernelRegistry` of its `xgraph.registries.Registries`, filled by the `xgraph_kernels` hook
(`xgraph.kernels.hooks` is the built-ins' implementation). "What runs this op on this device"
is answered once, by `xgraph.kernels.resolution.resolve_kernel`.
"""
from __future__ import annotations

import importlib

from xgraph.kernels.registry import BUILTIN_KERNELS, DEFAULT_DEVICES, KERNELS, Kernel, KernelRegistry, kernel

#: The op-family modules, imported once so their @kernel decorators run (explicit, no scanning).
FAMILIES = (
    "op_elementwise",
    "op_math",
    "op_reduce",
    "op_tensor",
    "op_cast",
    "op_constant",
    "op_shape",
    "op_index",
    "op_nn_conv",
    "op_qlinear_contrib",
    "op_nn_pool",
    "op_nn_roi",
    "op_nn_norm",
    "op_attention",
    "op_nn_activation",
    "op_image",
    "op_resize",
    "op_dvpp",
    "op_misc",
)

_loaded = False


def load_builtin_kernels() -> KernelRegistry:
    """Import every built-in op-family module (idempotent); returns `KERNELS` (the built-ins beneath it)."""
    global _loaded
    if not _loaded:
        for name in FAMILIES:
            importlib.import_module(f"{__name__}.{name}")
        _loaded = True
    return KERNELS


__all__ = ["BUILTIN_KERNELS", "DEFAULT_DEVICES", "KERNELS", "Kernel", "KernelRegistry", "kernel", "load_builtin_kernels"]
