"""A damaged subgraph tree in an .xmodel is refused with a message naming the op and both subgraphs."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from xgraph import Graph, XGraphError
from xgraph.ir.onnx.xmodel import META_KEY


def _graph() -> Graph:
    g = Graph("g")
    x = g.create_input("x", (2,), np.float32)
    for i in range(4):
        x = g.create_op(f"op{i}", "Relu", inputs=[x]).get_output_tensor()
        x.shape, x.dtype = (2,), np.float32
    g.set_outputs([x])
    g.get_root_subgraph().create_child_subgraph()
    return g


def _with_tree(tmp_path, edit) -> bytes:
    path = tmp_path / "ok.xmodel"
    _graph().serialize(path)
    m = onnx.load(str(path))
    entry = next(p for p in m.metadata_props if p.key == META_KEY)
    meta = json.loads(entry.value)
    edit(meta["tree"]["children"])
    entry.value = json.dumps(meta)
    return m.SerializeToString()


@pytest.mark.parametrize("leaves, message", [
    ([["op0", "op1"], ["op1"], ["op2"], ["op3"]], "op 'op1' is in both subgraph 'subgraph_op0' and 'subgraph_op1'"),
    ([["op0"], ["op1", "op1"], ["op2"], ["op3"]], "op 'op1' is in both subgraph 'subgraph_op1' and 'subgraph_op1'"),
    ([["op0"], ["op1"], ["op2", "op0"], ["op3"]], "op 'op0' is in both subgraph 'subgraph_op0' and 'subgraph_op2'"),
])
def test_an_op_in_two_leaves_is_named_with_both(tmp_path, leaves, message):
    def edit(children):
        for child, ops in zip(children, leaves):
            child["ops"] = ops

    data = _with_tree(tmp_path, edit)
    with pytest.raises(XGraphError) as e:
        Graph.deserialize(data)
    assert message in str(e.value)


def test_the_tree_read_back_places_every_op(tmp_path):
    _graph().serialize(tmp_path / "m.xmodel")
    back = Graph.deserialize(tmp_path / "m.xmodel")
    assert {c.name: sorted(op.name for op in c.get_ops()) for c in back.get_root_subgraph().get_children()} == \
        {f"subgraph_op{i}": [f"op{i}"] for i in range(4)}
