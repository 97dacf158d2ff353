"""KernelRunner: the base class of a plugin runner that accelerates some ops and lets xgraph run the rest.

An accelerator rarely runs every op of the subgraph its plugin takes: a Conv IP still needs
the Reshape before it and the Softmax after it. Subclass `KernelRunner`, say which ops the
IP runs (`accelerates`) and how (`run_op`); every other op of the subgraph runs with
xgraph's own kernels, chosen as the built-in runners choose them (the numpy kernel for the
op on `kernel_device`, else the host CPU's, else the ONNX reference evaluator; in "ref" mode
always the reference evaluator)::

    import numpy as np
    from xgraph import register_runner
    from xgraph.runners.kernel_runner import KernelRunner

    class NpuRunner(KernelRunner):
        def accelerates(self, op):
            return op.type == "Relu"

        def run_op(self, op, inputs):
            return [np.maximum(inputs[0], 0)]      # the IP's driver call goes here

    register_runner("npu", NpuRunner)

`kernel_for(op, device, mode)` is the same choice as a plain function, for runners that
keep their own loop. Ops are run in the subgraph's topological order; weights come from
the graph; intermediates are dropped after their last reader.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from xgraph.errors import KernelError, RunnerError, XGraphError
from xgraph.runners.runner import Runner

if TYPE_CHECKING:
    from xgraph.ir import Op, Subgraph

OpKernel = Callable[..., Any]


def _dtype_of(op: "Op") -> Any:
    return next((t.dtype for t in op.get_input_tensors() if t is not None and t.dtype is not None), None)


def kernel_for(op: "Op", device: str = "CPU", mode: str = "run") -> tuple[OpKernel, str]:
    """(fn, source): `fn(*inputs)` runs `op` with xgraph's kernels (attributes bound), and where it came from.

    Source is "numpy:DEVICE" (the registry's kernel for `device`, else for CPU) or "reference"
    (the ONNX reference evaluator; always in mode "ref"). KernelError when nothing can run it.
    """
    from xgraph.runners.executor import kernel_registry
    if mode != "ref":
        registry = kernel_registry()
        for candidate in dict.fromkeys((device, "CPU")):
            k = registry.find(op.type, op.domain, op.opset(), candidate, _dtype_of(op))
            if k is not None and not getattr(k.fn, "outer_names", ()):
                attrs = op.get_onnx_attrs()
                if k.wants_num_outputs and "num_outputs" not in attrs:
                    attrs = dict(attrs, num_outputs=len(op.get_output_tensors()))
                fn = k.fn
                return (lambda *inputs: fn(*inputs, **attrs)), f"numpy:{candidate}"
    from xgraph.kernels.reference import make_reference_kernel
    graph = op.graph
    inputs = op.get_input_tensors()
    try:
        fn = make_reference_kernel(op.type, op.domain, op.attribute_protos(), graph.opset_imports, len(inputs),
                                   len(op.get_output_tensors()), graph.functions,
                                   omitted_inputs=[i for i, t in enumerate(inputs) if t is None])
    except XGraphError as e:
        raise KernelError(f"op {op.name!r} ({op.type}): no xgraph kernel on {device} or CPU, and the reference "
                          f"evaluator cannot run it: {e}; accelerate it in run_op instead") from e
    if getattr(fn, "outer_names", ()):
        raise KernelError(f"op {op.name!r} ({op.type}) reads tensors of an outer graph, which a KernelRunner does "
                          "not provide; leave it out of the plugin's subgraph")
    return fn, "reference"


def _as_list(result: Any) -> list[Any]:
    if isinstance(result, np.ndarray):
        return [result]
    if isinstance(result, (tuple, list)):
        return list(result)
    return [np.asarray(result)]


class KernelRunner(Runner):
    """A runner that runs the ops `accelerates` picks with `run_op`, and the others with xgraph's kernels."""

    #: The device whose numpy kernels run the ops the runner does not accelerate (then CPU's).
    kernel_device: str = "CPU"

    def __init__(self, subgraph: "Subgraph", mode: str = "run") -> None:
        """Plan once: the op order, each tensor's last reader, and a kernel for every op not accelerated."""
        super().__init__(subgraph, mode)
        self.ops = subgraph.toposort()
        self.inputs = [t.name for t in subgraph.get_input_tensors()]
        self.outputs = [t.name for t in subgraph.get_output_tensors()]
        self.weights = {t.name: t.data for t in subgraph.get_const_tensors()}
        #: op name -> "accelerated" or where its xgraph kernel came from ("numpy:CPU", "reference")
        self.kernel_sources: dict[str, str] = {}
        self._kernels: dict[str, OpKernel] = {}
        for op in self.ops:
            if self.accelerates(op):
                self.kernel_sources[op.name] = "accelerated"
            else:
                self._kernels[op.name], self.kernel_sources[op.name] = kernel_for(op, self.kernel_device, mode)
        keep = set(self.outputs)
        last: dict[str, int] = {}
        for i, op in enumerate(self.ops):
            for t in op.get_input_tensors():
                if t is not None and t.name not in self.weights:
                    last[t.name] = i
        self._dying: dict[int, list[str]] = {}
        for name, i in last.items():
            if name not in keep:
                self._dying.setdefault(i, []).append(name)

    # -- what subclasses implement ----------------------------------------------------------------
    def accelerates(self, op: "Op") -> bool:
        """True for the ops this runner's device executes itself (`run_op`); by default none."""
        return False

    def run_op(self, op: "Op", inputs: list[np.ndarray | None]) -> Sequence[np.ndarray]:
        """Execute one accelerated op: its outputs in order (inputs in op order, None for an omitted one)."""
        raise NotImplementedError(f"{type(self).__name__} accelerates {op.name!r} ({op.type}) but does not "
                                  "implement run_op(op, inputs)")

    # -- running ---------------------------------------------------------------------------------
    def execute(self, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run every op in order: accelerated ones through `run_op`, the rest through xgraph's kernels."""
        values: dict[str, Any] = dict(self.weights)
        values.update(zip(self.inputs, inputs))
        for i, op in enumerate(self.ops):
            args = [None if t is None else values[t.name] for t in op.get_input_tensors()]
            kernel = self._kernels.get(op.name)
            if kernel is None:
                results = _as_list(self.run_op(op, args))
            else:
                while args and args[-1] is None:
                    args.pop()
                try:
                    results = _as_list(kernel(*args))
                except XGraphError:
                    raise
                except Exception as e:
                    raise KernelError(f"subgraph {self.subgraph.name!r}: xgraph's kernel for op {op.name!r} "
                                      f"({op.type}, {self.kernel_sources[op.name]}) failed: {type(e).__name__}: "
                                      f"{e}") from e
            needed = [t for t in op.get_output_tensors() if t.consumers or t.name in self.outputs]
            if len(results) < len(needed):
                raise RunnerError(f"subgraph {self.subgraph.name!r}: op {op.name!r} ({op.type}) gave "
                                  f"{len(results)} outputs, {len(needed)} are used")
            for t, value in zip(op.get_output_tensors(), results):
                values[t.name] = value
            for name in self._dying.get(i, ()):
                values.pop(name, None)
        return [values[name] for name in self.outputs]


__all__ = ["KernelRunner", "kernel_for"]
