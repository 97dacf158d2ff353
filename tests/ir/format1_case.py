"""The graph saved in data/format1_mixed_chain.xmodel: a compiled mixed chain plus attrs of every kind."""
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
