"""Plain-text facts about a graph for every view: where each op went, and short forms of values.

Everything here is deterministic (sorted keys, no ids, fixed float format) so that text
built from it can be diffed across runs.
"""
from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import onnx

from xgraph.ir import Graph, Op, Subgraph, Tensor
from xgraph.modes import MODES

#: Op annotations a compile writes; shown on their own lines, not among the attributes.
PLACEMENT_KEYS = ("device", "placement_reason", "kernel")
#: Values shown from an array or a list before "...".
SHOWN_VALUES = 4
#: Runner modes in the order VART users read them.
RUNNER_MODES = MODES  # defined once, in xgraph.modes
#: Subgraph attr the runtime's sim mode may record (estimated device time).
ESTIMATED_TIME = "estimated_time_us"


def safe(text: str) -> str:
    """`text` with lone surrogates (undecodable bytes kept by ONNX attribute import) as backslash escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def device_subgraphs(graph: Graph) -> list[Subgraph]:
    """The root's children in topological order (empty for a graph that is not compiled)."""
    return graph.get_root_subgraph().toposort_child_subgraph()


def subgraph_device(subgraph: Subgraph) -> str:
    """The subgraph's "device" attr, or "" when it has none."""
    return str(subgraph.get_attr("device")) if subgraph.has_attr("device") else ""


def subgraph_runner(subgraph: Subgraph) -> dict[str, str]:
    """The subgraph's "runner" attr (mode -> runner name): run, sim, ref first, then other modes by name."""
    runner = subgraph.get_attr("runner") if subgraph.has_attr("runner") else {}
    if not isinstance(runner, dict):
        return {}
    order = {mode: i for i, mode in enumerate(RUNNER_MODES)}
    modes = sorted(runner, key=lambda m: (order.get(str(m), len(order)), str(m)))
    return {safe(str(m)): safe(str(runner[m])) for m in modes}


def estimated_time_us(subgraph: Subgraph) -> float | None:
    """The estimated device time in microseconds when the runtime recorded one."""
    if not subgraph.has_attr(ESTIMATED_TIME):
        return None
    try:
        value = float(subgraph.get_attr(ESTIMATED_TIME))
    except (TypeError, ValueError, OverflowError):
        return None
    return value if math.isfinite(value) else None


def crossing_copies(graph: Graph) -> list[dict[str, Any]]:
    """The copies the runtime makes between device subgraphs (host/card and card/card): {"tensor", "from", "to", "direction"}."""
    if graph.get_root_subgraph().is_leaf:
        return []
    from xgraph.compiler.placement import count_crossings
    from xgraph.devices import get_devices
    from xgraph.devices.settings import compiled_devices
    return count_crossings(graph, compiled_devices(graph, get_devices()))


def annotation(op: Op, key: str) -> str:
    """An xgraph annotation of `op` as text ("" when absent or when `key` is an ONNX attribute)."""
    return str(op.get_attr(key)) if op.is_annotation(key) else ""


def placement(graph: Graph) -> dict[Op, tuple[str, str]]:
    """op -> (device, depth-1 subgraph name); the op's "device" annotation when it has no device subgraph."""
    result = {}
    for child in device_subgraphs(graph):
        device = subgraph_device(child)
        for op in child.get_ops():
            result[op] = (device or annotation(op, "device"), child.name)
    for op in graph.get_ops():
        if op not in result:
            result[op] = (annotation(op, "device"), "")
    return result


def shape_text(shape: tuple | None) -> str:
    """[1,3,224,224]; symbolic dims by name, unknown dims as ?, unknown rank as [?...]."""
    if shape is None:
        return "[?...]"
    return "[" + ",".join("?" if d is None else safe(str(d)) for d in shape) + "]"


def dtype_text(dtype: np.dtype | None) -> str:
    """The numpy dtype name, or ? when unknown."""
    return "?" if dtype is None else str(dtype)


def type_text(tensor: Tensor) -> str:
    """float32[1,3,224,224]."""
    return dtype_text(tensor.dtype) + shape_text(tensor.shape)


def tensor_text(tensor: Tensor) -> str:
    """name float32[1,3,224,224]; a weight is marked and shows its first values."""
    if tensor.is_const:
        return f"{safe(tensor.name)} (weight) {array_text(tensor.data)}"
    return f"{safe(tensor.name)} {type_text(tensor)}"


def tensor_facts(tensor: Tensor) -> dict[str, Any]:
    """{"name", "dtype", "shape"} with JSON-ready values (shape None when the rank is unknown)."""
    shape = None if tensor.shape is None else [d if isinstance(d, int) or d is None else safe(str(d))
                                               for d in tensor.shape]
    return {"name": safe(tensor.name), "dtype": None if tensor.dtype is None else str(tensor.dtype), "shape": shape}


def _number(value: Any) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6g}"
    return value_text(value)


def array_text(array: np.ndarray) -> str:
    """dtype[shape] and the first few values: float32[64,3,7,7] {0.1, -0.2, 0.3, 0.05, ...}."""
    flat = array.reshape(-1)
    shown = ", ".join(_number(v) for v in flat[:SHOWN_VALUES].tolist())
    more = ", ..." if flat.size > SHOWN_VALUES else ""
    return f"{array.dtype}{shape_text(array.shape)} {{{shown}{more}}}"


def value_text(value: Any) -> str:
    """A short, stable text for an attribute value (arrays and long lists summarised)."""
    if isinstance(value, np.ndarray):
        return array_text(value)
    if isinstance(value, (bool, int, float, np.generic)):
        return _number(value)
    if isinstance(value, str):
        return safe(json.dumps(value, ensure_ascii=False))
    if isinstance(value, bytes):
        return f"bytes[{len(value)}]"
    if isinstance(value, (list, tuple)):
        items = [value_text(v) for v in value[:2 * SHOWN_VALUES]]
        more = f", ... ({len(value)} items)" if len(value) > 2 * SHOWN_VALUES else ""
        return "[" + ", ".join(items) + more + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{safe(str(k))}: {value_text(v)}" for k, v in sorted(value.items())) + "}"
    if isinstance(value, onnx.GraphProto):
        return f"graph {safe(value.name)!r} ({len(value.node)} nodes)"
    if value is None:
        return "null"
    return f"<{type(value).__name__}>"


def attribute_texts(op: Op) -> list[tuple[str, str]]:
    """(name, value text) of the op's attributes, sorted by name, without the placement annotations."""
    attrs = op.get_attrs()
    return [(safe(k), value_text(attrs[k])) for k in sorted(attrs)
            if not (k in PLACEMENT_KEYS and op.is_annotation(k))]


def reason_text(reason: str, device: str) -> str:
    """The placement reason, or what an empty one means."""
    if reason:
        return reason
    return "its first-choice device accepted it" if device else "not placed (the graph is not compiled)"


__all__ = ["ESTIMATED_TIME", "PLACEMENT_KEYS", "RUNNER_MODES", "annotation", "array_text", "attribute_texts",
           "crossing_copies", "device_subgraphs", "dtype_text", "estimated_time_us", "placement", "reason_text", "safe",
           "shape_text", "subgraph_device", "subgraph_runner", "tensor_facts", "tensor_text", "type_text",
           "value_text"]
