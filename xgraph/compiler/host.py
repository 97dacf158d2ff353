"""Host runnability: can the host run an op, with a numpy kernel or the ONNX reference evaluator.

The compile pipeline asks this when it picks each op's kernel, and device tables name
`host_runnable` under `checks` (see `xgraph.compiler.support.NAMED_CHECKS`) so that the CPU
refuses, with a reason, what it could not run.
"""
from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import onnx

from xgraph.compiler.checks import ACCEPT, Check, Verdict, compute_dtype, refuse

if TYPE_CHECKING:
    from xgraph.ir import Op


@functools.lru_cache(maxsize=4096)
def _reference_implements(op_type: str, domain: str, opset: int | None) -> bool:
    if domain == "ai.onnx.ml":
        from onnx.reference.ops.aionnxml import load_op as load_ml_op
        try:
            load_ml_op(domain, op_type, opset)
            return True
        except Exception:  # the evaluator raises assorted errors for "not implemented"
            return False
    if domain != "":
        return False
    from onnx.reference.ops import load_op
    try:
        load_op(domain, op_type, opset)
        return True
    except Exception:  # same: any failure means "no implementation"
        pass
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


def numpy_kernel(op: "Op", device: str) -> bool:
    """True when the kernel registry has a numpy kernel for `op` on `device` (or on the host, as runners fall back)."""
    from xgraph.runners.executor import kernel_registry
    registry = kernel_registry()
    dtype = compute_dtype(op)
    return any(registry.find(op.type, op.domain, op.opset(), d, dtype) is not None for d in dict.fromkeys((device, "CPU")))


def host_runnable() -> Check:
    """Accept ops the host can run: a numpy kernel, else the ONNX reference evaluator."""
    def check(op: "Op") -> Verdict:
        if numpy_kernel(op, "CPU") or reference_can_run(op):
            return ACCEPT
        domain = f" (domain {op.domain!r})" if op.domain else ""
        return refuse(f"{op.type}{domain} has no numpy kernel and the ONNX reference evaluator cannot run it; "
                      "register a kernel with @kernel or place it with a plugin")
    return check


__all__ = ["host_runnable", "numpy_kernel", "reference_can_run"]
