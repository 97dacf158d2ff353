"""What runs op X on device D: the one answer compile's `kernel` annotation and the runners share.

    >>> choice = resolve_kernel(op, "AICORE", registries.kernels)      # doctest: +SKIP
    >>> choice.source, choice.device, choice.reason                     # doctest: +SKIP
    ('numpy', 'AICORE', "xgraph's numpy kernel for Conv (since 11) on AICORE")

The rule, in order:

1. the kernel of the table registered for the op's device (`KernelRegistry.find` with the
   op's opset and its compute dtype: that of its first input of known dtype);
2. else the host's (CPU) kernel: the same numerics, computed on this machine;
3. else the ONNX reference evaluator, when it implements the op (a built-in op, a schema
   function, or a function of the model);
4. else nothing: "none".

A kernel's source is "numpy" when it is one of xgraph's own (registered in
`BUILTIN_KERNELS`, by identity, not by module name), "plugin" when a package, plugin or test
contributed it; "reference" and "none" as above. "onnxruntime" is decided per subgraph by the
runner (`xgraph.runners.plan`), which records it for every op of that subgraph.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import onnx

from xgraph.kernels.registry import BUILTIN_KERNELS, Kernel, KernelRegistry

if TYPE_CHECKING:
    from xgraph.ir import Op

#: The sources a choice may name.
NUMPY, PLUGIN, REFERENCE, ONNXRUNTIME, NONE = "numpy", "plugin", "reference", "onnxruntime", "none"
SOURCES = (NUMPY, PLUGIN, REFERENCE, ONNXRUNTIME, NONE)
#: The device whose kernels every device falls back to: the host.
HOST = "CPU"


@dataclass(frozen=True)
class KernelChoice:
    """What runs one op: its source, the device whose kernel table served it, the kernel, and why."""

    source: str
    device: str = ""
    kernel: Kernel | None = None
    reason: str = ""

    @property
    def label(self) -> str:
        """The form runners report in `kernel_sources`: "numpy:AICORE", "plugin:CPU", "reference", ..."""
        return f"{self.source}:{self.device}" if self.source in (NUMPY, PLUGIN) else self.source


def op_device(op: "Op", default: str) -> str:
    """The device an op runs on: its own "device" annotation, else its subgraph's device."""
    if op.has_attr("device") and op.is_annotation("device"):
        return str(op.get_attr("device"))
    return default


def compute_dtype(op: "Op") -> np.dtype | None:
    """The dtype a kernel is looked up for: that of the op's first input of known dtype (None: any)."""
    return next((t.dtype for t in op.get_input_tensors() if t is not None and t.dtype is not None), None)


#: Domains the ONNX reference evaluator implements, and the module whose `load_op` finds its ops.
_EVALUATOR_LOADERS = {
    "": "onnx.reference.ops",
    "ai.onnx.ml": "onnx.reference.ops.aionnxml",
    "ai.onnx.preview.training": "onnx.reference.ops.aionnx_preview_training",
    "ai.onnx.preview": "onnx.reference.ops.aionnx_preview",
}


@functools.lru_cache(maxsize=4096)
def _reference_implements(op_type: str, domain: str, opset: int | None) -> bool:
    domain = "" if domain == "ai.onnx" else domain
    loader = _EVALUATOR_LOADERS.get(domain)
    if loader is None:
        return False
    import importlib
    try:
        importlib.import_module(loader).load_op(domain, op_type, opset)
        return True
    except Exception:  # the evaluator raises assorted errors for "not implemented"
        pass
    if domain != "":
        return False
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain) if opset else onnx.defs.get_schema(op_type, domain)
    except Exception:  # unknown op
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def reference_can_run(op: "Op") -> bool:
    """True when the ONNX reference evaluator runs `op` (built in, a schema function, or a model-local function)."""
    if any(f.domain == op.domain and f.name == op.type for f in op.graph.functions):
        return True
    return _reference_implements(op.type, op.domain, op.opset())


def kernel_source(k: Kernel) -> str:
    """"numpy" for one of xgraph's own kernels, "plugin" for any other."""
    return NUMPY if BUILTIN_KERNELS.holds(k) else PLUGIN


def find_kernel(op: "Op", device: str, kernels: KernelRegistry, dtype: np.dtype | None = None
                ) -> tuple[Kernel, str] | None:
    """(kernel, the device whose table served it) by steps 1-2 of the rule, or None."""
    opset = op.opset()
    for candidate in dict.fromkeys((device, HOST)):
        k = kernels.find(op.type, op.domain, opset, candidate, dtype)
        if k is not None:
            return k, candidate
    return None


def resolve_kernel(op: "Op", device: str, kernels: KernelRegistry, *, dtype: np.dtype | None = None) -> KernelChoice:
    """What runs `op` on `device` with the kernel table `kernels` (see the module docstring).

    `dtype` overrides the compute dtype (a runner keeping float32 values in float16 storage
    still runs float32 kernels on them).
    """
    if dtype is None:
        dtype = compute_dtype(op)
    found = find_kernel(op, device, kernels, dtype)
    if found is not None:
        k, served = found
        source = kernel_source(k)
        who = "xgraph's numpy kernel" if source == NUMPY else "a contributed kernel"
        where = f"on {served}" if served == device else f"on the host ({served}): {device} has none"
        return KernelChoice(source, served, k, f"{who} for {op.type} (since {k.since}) {where}")
    if reference_can_run(op):
        return KernelChoice(REFERENCE, "", None,
                            f"no kernel for {op.type} on {device} or the host; the ONNX reference evaluator runs it")
    domain = f" (domain {op.domain!r})" if op.domain else ""
    return KernelChoice(NONE, "", None, f"{op.type}{domain} has no kernel on {device} or the host and the ONNX "
                                        "reference evaluator cannot run it")


__all__ = ["HOST", "KernelChoice", "NONE", "NUMPY", "ONNXRUNTIME", "PLUGIN", "REFERENCE", "SOURCES",
           "compute_dtype", "find_kernel", "kernel_source", "op_device", "reference_can_run", "resolve_kernel"]
