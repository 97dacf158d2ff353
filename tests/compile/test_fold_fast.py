"""Shape-arithmetic folds without the reference evaluator: the same arrays the ONNX reference evaluator gives."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import helper
from onnx.reference import ReferenceEvaluator

from xgraph import Graph
from xgraph.compiler.fold_fast import fast_fold


def _op(op_type: str, values: list, attrs: dict, opset: int = 17):
    g = Graph("g")
    g.opset_imports[""] = opset
    names = [g.create_const(f"v{i}", v).name for i, v in enumerate(values)]
    return g.create_op("op", op_type, attrs=attrs, inputs=names)


def _reference(op_type: str, values: list, attrs: dict, opset: int = 17):
    """The ONNX reference evaluator on a one-node model (None when it refuses)."""
    names = [f"v{i}" for i in range(len(values))]
    node = helper.make_node(op_type, names, ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                                           v.shape) for n, v in zip(names, values)],
                              [helper.make_tensor_value_info("y", 0, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    try:
        return [np.asarray(r) for r in ReferenceEvaluator(model).run(None, dict(zip(names, values)))]
    except Exception:  # the evaluator raises many types; all mean it cannot run the node
        return None


def _same(fast, reference) -> None:
    assert fast is not None and reference is not None
    assert [(a.dtype, a.shape, a.tobytes()) for a in fast] == [(a.dtype, a.shape, a.tobytes()) for a in reference]


def _check(op_type: str, values: list, attrs: dict, opset: int = 17) -> None:
    fast = fast_fold(_op(op_type, values, attrs, opset), values)
    reference = _reference(op_type, values, attrs, opset)
    if fast is not None:  # an answer is the evaluator's answer; no answer means "ask the evaluator"
        _same(fast, reference)
    return fast


CASES = [
    ("Gather", [np.array([2, 3, 4], np.int64), np.array(1, np.int64)], {}),  # a 0-d index: a 0-d result
    ("Gather", [np.array([2, 3, 4], np.int64), np.array(-1, np.int64)], {"axis": 0}),
    ("Gather", [np.arange(12, dtype=np.int64).reshape(3, 4), np.array([[0, 2], [1, -1]], np.int32)], {"axis": 1}),
    ("Gather", [np.arange(12, dtype=np.int64).reshape(3, 4)[:, ::2], np.array([1], np.int64)], {"axis": 0}),
    ("Unsqueeze", [np.array(7, np.int64), np.array([0], np.int64)], {}),
    ("Unsqueeze", [np.array([1, 2], np.int64), np.array([-1, 0], np.int64)], {}),
    ("Concat", [np.array([1], np.int64), np.array([2], np.int64), np.array([3, 4], np.int64)], {"axis": 0}),
    ("Concat", [np.ones((2, 1), np.int32), np.zeros((2, 3), np.int32)], {"axis": -1}),
]


@pytest.mark.parametrize("op_type,values,attrs", CASES)
def test_fast_folds_equal_the_reference_evaluator(op_type, values, attrs):
    assert _check(op_type, values, attrs) is not None  # these are the cases it is for: it answers


@pytest.mark.parametrize("op_type,values,attrs,opset", [
    ("Gather", [np.array([2, 3, 4], np.int64), np.array(5, np.int64)], {}, 17),  # out of range: the evaluator fails
    ("Gather", [np.array([2.0, 3.0], np.float32), np.array(0, np.int64)], {}, 17),  # not integers
    ("Unsqueeze", [np.array([1, 2], np.int64), np.array([0, 0], np.int64)], {}, 17),  # repeated axis
    ("Unsqueeze", [np.array([1, 2], np.int64), np.array([0], np.int64)], {}, 11),  # axes were an attribute then
    ("Concat", [np.array(1, np.int64), np.array(2, np.int64)], {"axis": 0}, 17),  # rank 0
    ("Concat", [np.array([1], np.int64), np.array([2], np.int32)], {"axis": 0}, 17),  # mixed dtypes
    ("Concat", [np.array([1], np.int64), np.array([[2]], np.int64)], {"axis": 0}, 17),  # mixed ranks
])
def test_what_it_does_not_answer_goes_to_the_evaluator(op_type, values, attrs, opset):
    assert fast_fold(_op(op_type, values, attrs, opset), values) is None


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.integers(1, 4), st.integers(-3, 2), st.lists(st.integers(-4, 3), min_size=0, max_size=3))
def test_gather_on_random_shapes_equals_the_reference_evaluator(rank, size, axis, indices):
    data = np.arange(size ** rank, dtype=np.int64).reshape((size,) * rank)
    index = np.array(indices, np.int64) if indices else np.array(0, np.int64)
    _check("Gather", [data, index], {"axis": axis})
