"""Shape inference on ONNX models, bounded so that a small hostile file cannot ask for unbounded memory.

Used on import (before the graph is built), on export (to type boundary tensors the graph
leaves untyped, without changing the graph) and by `Graph.infer_shapes`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
import onnx

from xgraph.ir.onnx.tensor_inventory import Inventory, inventory
from xgraph.ir.onnx.value_types import type_to_shape_dtype, value_types
from xgraph.ir.onnx.inference_budget import data_propagation_is_bounded, expanded_node_count

if TYPE_CHECKING:
    from xgraph.ir.onnx.nodes import Nodes


#: onnx's data propagation (which resolves Shape -> Gather -> Reshape chains) spends time and
#: memory linear in the length of the 1-D tensors it meets: about 150 bytes per element in
#: onnx 1.23, so a 200-byte model declaring a [2**32] input asks for hundreds of GiB. Models
#: declaring a dimension longer than this get shape inference without data propagation.
DATA_PROP_MAX_DIM = 1 << 20


def largest_declared_dim(model: onnx.ModelProto, label: str, inv: Inventory | None) -> int:
    """The largest dimension written in the model: value infos, initializers and attribute tensors, all graphs."""
    inv = inv or inventory(model, label)
    largest = max((max(t.dims, default=0) for t in inv.tensors), default=0)
    for g in inv.graphs:
        for vi in (*g.input, *g.output, *g.value_info):
            if vi.type.WhichOneof("value") == "tensor_type":
                largest = max(largest, max((d.dim_value for d in vi.type.tensor_type.shape.dim), default=0))
    return largest


def infer_model(model: onnx.ModelProto, label: str, inv: Inventory | None = None,
                nodes: "Nodes | None" = None, largest_dim: int | None = None) -> onnx.ModelProto:
    """`model` with inferred value types (data propagation off for models declaring huge dims); best-effort.

    `nodes`: the main graph's nodes already read into columns (the importer's), so the budget checks
    do not read the NodeProtos again; `largest_dim`: `largest_declared_dim` of the model, when the
    reader's walk found it already."""
    expanded_node_count(model, label, top=nodes)  # refuses function-call bombs before onnx expands them
    largest = largest_declared_dim(model, label, inv) if largest_dim is None else largest_dim
    data_prop = largest <= DATA_PROP_MAX_DIM and data_propagation_is_bounded(model, largest, DATA_PROP_MAX_DIM,
                                                                              top=nodes)
    try:
        return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False, data_prop=data_prop)
    except Exception:  # inference is best-effort: custom ops or >2GB models keep declared shapes only
        try:
            return onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
        except Exception:  # noqa: BLE001 - same reason as above
            return model


#: What a graph says about one tensor: (shape, dtype, is_weight), or None when it has no such tensor.
TensorFacts = Callable[[str], "tuple[tuple | None, np.dtype | None, bool] | None"]


def type_updates(facts: TensorFacts, inferred: onnx.ModelProto) -> dict[str, tuple[tuple | None, np.dtype | None]]:
    """The (shape, dtype) each graph tensor gets from an inferred model: name -> new (shape, dtype).

    A tensor takes the inferred dtype when it has none, and the inferred shape when it has no
    shape or the inferred one (of the same rank) fixes more dims. Weights keep theirs.
    """
    updates = {}
    for name, tp in value_types(inferred.graph).items():
        known = facts(name)
        if known is None or known[2]:
            continue
        shape, dtype, is_tensor = type_to_shape_dtype(tp)
        if not is_tensor:
            continue
        old_shape, old_dtype, _ = known
        new_dtype = dtype if old_dtype is None else old_dtype
        new_shape = old_shape
        if old_shape is None or (shape is not None and len(shape) == len(old_shape)
                                 and sum(isinstance(d, int) for d in shape) > sum(isinstance(d, int) for d in old_shape)):
            new_shape = shape
        if (new_shape, new_dtype) != (old_shape, old_dtype):
            updates[name] = (new_shape, new_dtype)
    return updates
