"""The column and row readers of op and tensor facts agree with the public accessors, and hand out copies."""
from __future__ import annotations

import numpy as np

import xgraph
from xgraph.ir.op_rows import op_rows, tensor_facts


def small_graph() -> xgraph.Graph:
    g = xgraph.Graph("g")
    x = g.create_input("x", [2, 3], np.float32)
    w = g.create_const("w", np.ones((3,), np.float32))
    a = g.create_op("a", "Add", inputs=[x, w])
    b = g.create_op("b", "Transpose", inputs=[a.get_output_tensor()], attrs={"perm": [1, 0]})
    g.create_op("c", "Relu", inputs=[x])  # its output is read by nothing
    b.set_attr("note", "an annotation", onnx_type=None)
    g.set_outputs([b.get_output_tensor()])
    return g


def test_op_rows_are_what_the_accessors_say():
    g = small_graph()
    numbers = {t: i for i, t in enumerate(g.get_tensors())}
    numbers[None] = -1
    rows = op_rows(g.get_ops(), numbers)
    assert rows == [(op.type, op.domain, tuple(op.get_onnx_attrs().items()),
                     tuple(numbers[t] for t in op.get_input_tensors()),
                     tuple(numbers[t] for t in op.get_output_tensors())) for op in g.get_ops()]
    assert rows[1][2] == (("perm", [1, 0]),)  # the annotation is left out


def test_tensor_facts_are_what_the_accessors_say():
    g = small_graph()
    facts = tensor_facts(g)
    tensors = g.get_tensors()
    outputs = set(g.get_output_tensors())
    assert facts.tensors == tensors
    assert facts.dtypes == [t.dtype for t in tensors] and facts.shapes == [t.shape for t in tensors]
    assert facts.is_const == [t.is_const for t in tensors]
    assert facts.used == [bool(t.consumers) or t in outputs for t in tensors]
    assert facts.used[tensors.index(g.get_op("c").get_output_tensor())] is False
    facts.tensors.clear()  # the caller's own list
    assert g.get_tensors() == tensors
