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
    dtype = next((a.dtype for a in inputs if isinstance(a, np.ndarray)), None)
    k = registry.lookup(node.op_type, node.domain, opset, device, dtype)
    result = k.invoke(inputs, node_attributes(node), len(node.output))
    return [r if r is None or isinstance(r, list) else np.asarray(r) for r in result]
