"""xgraph's corrections to the reference evaluator, against few-line numpy oracles of the ONNX spec."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from xgraph.kernels.reference_fixes import evaluator_fixes


def softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


ORACLES = {
    "Softmax": softmax,
    "LogSoftmax": lambda x, axis: np.log(softmax(x, axis)),
    "Hardmax": lambda x, axis: (np.arange(x.shape[axis]).reshape([-1 if i == axis % x.ndim else 1 for i in range(x.ndim)])
                                == np.expand_dims(x.argmax(axis=axis), axis)).astype(x.dtype),
}


def coerced(fn, x, axis):
    """Opsets 1-11: the op on x flattened to 2-D at `axis`, along the second axis."""
    axis = axis % x.ndim
    return fn(x.reshape(int(np.prod(x.shape[:axis])), -1), 1).reshape(x.shape)


def run(op, x, opset, axis):
    attrs = {} if axis is None else {"axis": axis}
    graph = helper.make_graph([helper.make_node(op, ["x"], ["y"], **attrs)], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model, new_ops=evaluator_fixes()).run(None, {"x": x})[0]


@pytest.mark.parametrize("op", sorted(ORACLES))
@pytest.mark.parametrize("opset", [11, 13, 18])
@pytest.mark.parametrize("axis", [None, 0, 1, 2, -1])
def test_softmax_family_every_opset_and_axis(op, opset, axis):
    x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    if opset < 13:
        expected = coerced(ORACLES[op], x, 1 if axis is None else axis)
    else:
        expected = ORACLES[op](x, -1 if axis is None else axis)
    np.testing.assert_allclose(run(op, x, opset, axis), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [7, 9, 14, 15])
def test_batch_normalization_is_inference_mode(opset):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    s, b, m = (rng.standard_normal(4).astype(np.float32) for _ in range(3))
    v = rng.uniform(0.5, 2, 4).astype(np.float32)
    inits = [helper.make_tensor(n, TensorProto.FLOAT, [4], a) for n, a in zip("sbmv", (s, b, m, v))]
    graph = helper.make_graph([helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    got = ReferenceEvaluator(model, new_ops=evaluator_fixes()).run(None, {"x": x})[0]
    shape = (1, 4, 1, 1)
    expected = s.reshape(shape) * (x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + 1e-5) + b.reshape(shape)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("size", [3, 4, 5])
def test_lrn_as_specified(size):
    import math
    x = (np.random.default_rng(0).standard_normal((1, 7, 2, 2)) * 3).astype(np.float32)
    alpha, beta, bias = 0.01, 0.75, 1.0
    graph = helper.make_graph([helper.make_node("LRN", ["x"], ["y"], size=size, alpha=alpha, beta=beta, bias=bias)],
                              "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    got = ReferenceEvaluator(model, new_ops=evaluator_fixes()).run(None, {"x": x})[0]
    xd = x.astype(np.float64)
    square_sum = np.zeros_like(xd)
    for c in range(7):
        lo, hi = max(0, c - math.floor((size - 1) / 2)), min(6, c + math.ceil((size - 1) / 2))
        square_sum[:, c] = (xd[:, lo:hi + 1] ** 2).sum(1)
    np.testing.assert_allclose(got, xd / (bias + alpha / size * square_sum) ** beta, rtol=1e-5)
