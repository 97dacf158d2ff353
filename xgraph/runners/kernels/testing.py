"""Run one kernel on one ONNX node: the glue kernel tests and the conformance harness share."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import onnx

from xgraph.ir.attributes import node_attributes
from xgraph.runners.kernels import load_builtin_kernels


def opset_of(model: onnx.ModelProto, domain: str = "") -> int:
    """The opset version `model` imports for `domain`."""
    for o in model.opset_import:
        if o.domain in (domain, "ai.onnx" if domain == "" else domain):
            return o.version
    return onnx.defs.onnx_opset_version()


def run_node(node: onnx.NodeProto, inputs: Sequence[np.ndarray | None], opset: int,
             device: str | None = None) -> list[np.ndarray]:
    """Call the registered kernel for `node` on `inputs`; returns as many outputs as the node names."""
    registry = load_builtin_kernels()
    args = list(inputs)
    while args and args[-1] is None:
        args.pop()
    dtype = next((a.dtype for a in args if a is not None), None)
    k = registry.lookup(node.op_type, node.domain, opset, device, dtype)
    result = k(*args, **node_attributes(node))
    if not isinstance(result, (tuple, list)):
        result = (result,)
    return [np.asarray(r) for r in result[: len(node.output)]]
