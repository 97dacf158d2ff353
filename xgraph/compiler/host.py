"""Host runnability: can the host run an op, with a kernel of the table or the ONNX reference evaluator.

Device tables name `host_runnable` under `checks` (see `xgraph.compiler.support.NAMED_CHECKS`)
so that the CPU refuses, with a reason, what it could not run. The answer comes from the one
kernel resolution the runners use (`xgraph.kernels.resolution.resolve_kernel`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from xgraph.compiler.checks import ACCEPT, Check, Verdict, refuse
from xgraph.kernels.resolution import HOST, NONE, find_kernel, reference_can_run, resolve_kernel
from xgraph.registries import resolve

if TYPE_CHECKING:
    from xgraph.ir import Op
    from xgraph.kernels import KernelRegistry
    from xgraph.registries import Registries


def numpy_kernel(op: "Op", device: str, kernels: "KernelRegistry | None" = None) -> bool:
    """True when the kernel table (default: the default registries') has a kernel for `op` on `device` or the host."""
    return find_kernel(op, device, kernels if kernels is not None else resolve(None).kernels) is not None


def host_runnable(registries: "Registries | None" = None) -> Check:
    """Accept ops the host can run: a kernel of the table, else the ONNX reference evaluator."""
    def check(op: "Op") -> Verdict:
        kernels = resolve(registries).kernels  # read when asked: extensions registered later count
        if resolve_kernel(op, HOST, kernels).source != NONE:
            return ACCEPT
        domain = f" (domain {op.domain!r})" if op.domain else ""
        return refuse(f"{op.type}{domain} has no numpy kernel and the ONNX reference evaluator cannot run it; "
                      "register a kernel with @kernel or place it with a plugin")
    return check


__all__ = ["host_runnable", "numpy_kernel", "reference_can_run"]
