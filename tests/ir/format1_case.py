"""The graph saved in data/format1_mixed_chain.xmodel (a compiled mixed chain plus attrs of every kind), and
the attr state of a graph as plain JSON, which data/format1_mixed_chain.json holds for that file as the
format-1 writer's xgraph read it back."""
from __future__ import annotations

import numpy as np


def build_case(xgraph):
    """Compile the report test's mixed chain and add annotations and subgraph attrs of assorted types."""
    from test_report_golden import mixed_chain  # tests/compile
    g = xgraph.compile(mixed_chain(), {"min_subgraph_ops": 5})
    ops = g.get_ops()
    ops[0].set_attr("note", {"k": [1, 2], "s": "x"}, onnx_type=None)
    ops[1].set_attr("note", -1, onnx_type=None)
    ops[2].set_attr("weights_seen", np.arange(3, dtype=np.int64), onnx_type=None)
    ops[3].set_attr("flag", True, onnx_type=None)
    child = g.get_root_subgraph().toposort_child_subgraph()[0]
    child.set_attr("shape_hint", [1, (2, 3), 0.5])
    return g


def canonical(value):
    """An attr value as JSON that keeps its Python type: arrays as (dtype, list), tuples apart from lists."""
    if isinstance(value, np.ndarray):
        return ["array", str(value.dtype), value.tolist()]
    if isinstance(value, dict):
        return ["dict", {k: canonical(v) for k, v in value.items()}]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [canonical(v) for v in value]]
    return [type(value).__name__, value]


def attr_state(g) -> dict:
    """Every attr the .xmodel stores: per op, per subgraph (by name, with its op names), the graph's."""
    subgraphs, stack = {}, [g.get_root_subgraph()]
    while stack:
        sg = stack.pop()
        subgraphs[sg.name] = [canonical(sg.get_attrs()), sorted(op.name for op in sg.get_ops())]
        stack.extend(sg.get_children())
    graph_attrs = {k: v for k, v in g.get_attrs().items() if k != "plugin_runs"}  # runs carry their seconds
    return {"ops": {op.name: canonical(op.get_attrs()) for op in g.get_ops()}, "subgraphs": subgraphs,
            "graph": canonical(graph_attrs)}
