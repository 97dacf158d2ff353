"""Elementwise, math and reduction kernels against the ONNX node conformance cases and numpy oracles."""
from __future__ import annotations

import functools
import inspect
import itertools
import math

import ml_dtypes
import numpy as np
import onnx
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp
from onnx import helper

from xgraph.errors import KernelError
from xgraph.kernels import load_builtin_kernels
from testing.kernels import (
    assert_matches, check_node_case, conformance_params, one_node_cases, run_node, single_node_cases)

ELEMENTWISE_OPS = {
    "Add", "Sub", "Mul", "Div", "Pow", "Mod", "BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot",
    "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "And", "Or", "Xor", "Not",
    "Abs", "Neg", "Exp", "Log", "Sqrt", "Reciprocal", "Floor", "Ceil", "Round", "Sign", "Sin", "Cos", "Tan",
    "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Erf", "IsNaN", "IsInf",
    "Max", "Min", "Sum", "Mean", "Where",
}
MATH_OPS = {
    "MatMul", "Gemm", "MatMulInteger", "QLinearMatMul", "Einsum", "CumSum", "Det", "Trilu", "TopK",
    "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear",
}
REDUCE_OPS = {
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2", "ReduceLogSum",
    "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin",
}
OPS = ELEMENTWISE_OPS | MATH_OPS | REDUCE_OPS

#: Conformance cases that cannot pass, with the reason.
XFAIL: dict[str, str] = {}


CASES = single_node_cases(one_node_cases(), OPS)


@pytest.mark.parametrize("case", conformance_params(CASES, XFAIL))
def test_conformance(case):
    check_node_case(case)


def test_every_op_has_conformance_cases():
    covered = {c.model.graph.node[0].op_type for c in CASES}
    assert covered == OPS


# --- property tests: each kernel against a separate few-line oracle --------------------------------

OPSET = 21
PROPERTY = settings(max_examples=30, deadline=None)


def run(op: str, *inputs, opset: int = OPSET, outputs: int = 1, **attrs) -> list[np.ndarray]:
    """Run `op` through the registry as the runners do: a NodeProto, inputs by position."""
    names = [f"x{i}" if x is not None else "" for i, x in enumerate(inputs)]
    node = helper.make_node(op, names, [f"y{i}" for i in range(outputs)], **attrs)
    return run_node(node, list(inputs), opset)


def ints(shape, dtype=np.int32, low=-20, high=20):
    return hnp.arrays(dtype, shape, elements=st.integers(low, high))


def floats(shape, dtype=np.float64, bound=10.0):
    return hnp.arrays(dtype, shape, elements=st.floats(-bound, bound, width=np.dtype(dtype).itemsize * 8))


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


_INT_ORACLES = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": _trunc_div,
}


@PROPERTY
@given(data=st.data(), op=st.sampled_from(sorted(_INT_ORACLES)),
       dtype=st.sampled_from([np.int8, np.int16, np.int32, np.int64]))
def test_integer_arithmetic_broadcasts_and_keeps_dtype(data, op, dtype):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, max_side=3))
    a = data.draw(ints(shapes.input_shapes[0], dtype, -10, 10))
    b = data.draw(hnp.arrays(dtype, shapes.input_shapes[1], elements=st.integers(-10, 10).filter(bool)))
    (y,) = run(op, a, b)
    wa, wb = np.broadcast_arrays(a, b)
    expected = np.array([_INT_ORACLES[op](int(p), int(q)) for p, q in zip(wa.ravel(), wb.ravel())], dtype=dtype)
    assert_matches(y, expected.reshape(shapes.result_shape))


@PROPERTY
@given(data=st.data(), fmod=st.sampled_from([0, 1]))
def test_mod_matches_python_remainders(data, fmod):
    a = data.draw(ints((6,), np.int64, -50, 50))
    b = data.draw(hnp.arrays(np.int64, 6, elements=st.integers(-9, 9).filter(bool)))
    (y,) = run("Mod", a, b, fmod=fmod)
    oracle = (lambda p, q: int(math.fmod(p, q))) if fmod else (lambda p, q: p % q)
    assert y.tolist() == [oracle(int(p), int(q)) for p, q in zip(a, b)]


@PROPERTY
@given(x=ints((8,), np.int8, -128, 127), y=ints((8,), np.int8, -3, 10), direction=st.sampled_from(["LEFT", "RIGHT"]))
def test_bitshift_matches_python_shifts(x, y, direction):
    (z,) = run("BitShift", x, y, direction=direction)

    def shift(v: int, s: int) -> int:
        if not 0 <= s < 8:
            return -1 if direction == "RIGHT" and v < 0 else 0
        r = v << s if direction == "LEFT" else v >> s
        return (r + 128) % 256 - 128  # wrap to int8
    assert z.dtype == np.int8 and z.tolist() == [shift(int(v), int(s)) for v, s in zip(x, y)]


@pytest.mark.parametrize("op, fn", [
    ("Exp", math.exp), ("Log", math.log), ("Sqrt", math.sqrt), ("Sin", math.sin), ("Atan", math.atan),
    ("Sinh", math.sinh), ("Asinh", math.asinh), ("Erf", math.erf), ("Floor", math.floor), ("Ceil", math.ceil),
    ("Round", round), ("Reciprocal", lambda v: 1 / v), ("Abs", abs), ("Neg", lambda v: -v),
])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, ml_dtypes.bfloat16])
def test_unary_float_ops_keep_dtype_and_match_math(op, fn, dtype):
    x = np.array([0.5, 1.0, 2.5, 3.5, 7.25, 0.001], dtype=dtype)
    (y,) = run(op, x)
    expected = np.array([fn(float(v)) for v in x.astype(np.float64)]).astype(dtype)
    tolerance = {np.float64: 1e-13, np.float32: 1e-6}.get(dtype, 1e-2)
    assert_matches(y, expected, rtol=tolerance)


@PROPERTY
@given(x=st.floats(-30, 30))
def test_erf_float64_is_accurate(x):
    (y,) = run("Erf", np.array([x]))
    assert y[0] == pytest.approx(math.erf(x), rel=4e-15, abs=1e-300)


def test_erf_edge_values():
    (y,) = run("Erf", np.array([0.0, -0.0, np.inf, -np.inf, np.nan]))
    assert y[:4].tolist() == [0.0, 0.0, 1.0, -1.0] and np.signbit(y[1]) and np.isnan(y[4])


@PROPERTY
@given(data=st.data(), op=st.sampled_from(["Max", "Min", "Sum", "Mean"]), count=st.integers(1, 4))
def test_variadic_ops_broadcast_all_inputs(data, op, count):
    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=count, max_dims=3, max_side=3))
    arrays = [data.draw(floats(s, np.float32)) for s in shapes.input_shapes]
    (y,) = run(op, *arrays)
    stacked = np.stack([np.broadcast_to(a, shapes.result_shape).astype(np.float64) for a in arrays])
    expected = {"Max": stacked.max(0), "Min": stacked.min(0), "Sum": stacked.sum(0), "Mean": stacked.mean(0)}[op]
    assert_matches(y, expected.astype(np.float32), rtol=1e-5, atol=1e-4)


def test_where_and_comparisons_broadcast():
    x = np.array([[1, 5], [3, 2]], dtype=np.int64)
    bound = np.array([2], dtype=np.int64)
    (mask,) = run("Greater", x, bound)
    (y,) = run("Where", mask, x, np.array(0, dtype=np.int64))
    assert mask.tolist() == [[False, True], [True, False]] and y.tolist() == [[0, 5], [3, 0]]


def kernel_function(op: str, opset: int = OPSET):
    """The registered function itself, to call it the way a direct caller would."""
    return load_builtin_kernels().lookup(op, opset=opset).fn


def test_python_scalars_take_the_array_dtype():
    fn = kernel_function("Add")
    assert fn(np.array([1, 2], dtype=np.int32), 3).dtype == np.int32
    assert fn(np.array([1, 2], dtype=np.float16), 0.5).dtype == np.float16
    with pytest.raises(KernelError, match="300"):
        fn(np.array([1], dtype=np.uint8), 300)


@pytest.mark.parametrize("op, dtype", [
    (op, dtype) for op in ("Add", "Sub", "Mul", "Div", "Pow", "Mod", "Max", "Min", "Sum", "Mean")
    for dtype in (np.float16, ml_dtypes.bfloat16, np.int32, np.uint8)
    if op not in ("Sum", "Mean") or dtype in (np.float16, ml_dtypes.bfloat16)])  # Sum, Mean: floats only
def test_binary_ops_keep_the_input_dtype(op, dtype):
    a, b = np.array([1, 2, 3], dtype), np.array([3, 2, 1], dtype)
    (y,) = run(op, a, b)
    expected = {"Add": [4, 4, 4], "Sub": [-2, 0, 2], "Mul": [3, 4, 3], "Div": [1 / 3, 1, 3], "Pow": [1, 4, 3],
                "Mod": [1, 0, 0], "Max": [3, 2, 3], "Min": [1, 2, 1], "Sum": [4, 4, 4], "Mean": [2, 2, 2]}[op]
    assert_matches(y, np.array(expected).astype(dtype), rtol=1e-2)


_SCALAR = np.array(1.5, np.float32)


@pytest.mark.parametrize("op, inputs", [
    ("Add", (_SCALAR, _SCALAR)), ("Equal", (_SCALAR, _SCALAR)), ("Exp", (_SCALAR,)), ("Erf", (_SCALAR,)),
    ("IsInf", (_SCALAR,)), ("IsNaN", (_SCALAR,)), ("Where", (np.array(True), _SCALAR, _SCALAR)),
    ("Max", (_SCALAR, _SCALAR)), ("Pow", (_SCALAR, np.array(2, np.int64))), ("Mod", (_SCALAR, _SCALAR)),
    ("MatMul", (np.ones(3, np.float32), np.ones(3, np.float32))), ("ReduceSum", (_SCALAR,)),
    ("ReduceLogSumExp", (_SCALAR,)), ("QuantizeLinear", (_SCALAR, _SCALAR)),
    ("DequantizeLinear", (np.array(3, np.uint8), _SCALAR)), ("Einsum", (_SCALAR,)),
])
def test_zero_dimensional_results_are_arrays(op, inputs):
    fn = kernel_function(op)
    result = fn(*inputs, equation="") if op == "Einsum" else fn(*inputs)
    assert type(result) is np.ndarray and result.ndim == 0


@pytest.mark.parametrize("op, axis, b_shape", [("Add", 1, (3,)), ("Mul", None, (4,)), ("Sub", 0, (2, 3))])
def test_legacy_broadcast_aligns_b_at_axis(op, axis, b_shape):
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    b = np.arange(1, 1 + math.prod(b_shape), dtype=np.float32).reshape(b_shape)
    attrs = {"broadcast": 1} | ({} if axis is None else {"axis": axis})
    (y,) = run(op, a, b, opset=6, **attrs)
    start = a.ndim - b.ndim if axis is None else axis
    aligned = b.reshape(b_shape + (1,) * (a.ndim - start - b.ndim))
    assert_matches(y, {"Add": a + aligned, "Mul": a * aligned, "Sub": a - aligned}[op])


def test_legacy_broadcast_needs_the_flag():
    with pytest.raises(KernelError, match="broadcast=0"):
        run("Add", np.ones((2, 3), np.float32), np.ones(3, np.float32), opset=6)


@pytest.mark.parametrize("op, inputs, attrs, match", [
    ("Add", (np.ones(3, np.float32), np.ones(4, np.float32)), {}, r"\(3,\), \(4,\)"),
    ("Add", (np.ones(3, np.float32), np.ones(3, np.int32)), {}, "float32, int32"),
    ("Div", (np.ones(3, np.int32), np.array([1, 0, 2], np.int32)), {}, "division by zero"),
    ("Mod", (np.ones(2, np.int32), np.ones(2, np.int32)), {"fmod": 2}, "fmod"),
    ("BitShift", (np.ones(2, np.int32), np.ones(2, np.int32)), {"direction": "UP"}, "UP"),
    ("Where", (np.ones(2, np.int32), np.ones(2, np.int32), np.ones(2, np.int32)), {}, "bool"),
    ("MatMul", (np.ones((2, 3), np.float32), np.ones((4, 2), np.float32)), {}, r"\(2, 3\).*\(4, 2\)"),
    ("Gemm", (np.ones((2, 3), np.float32), np.ones((3, 4), np.float32), np.ones((3, 4), np.float32)), {}, "C of shape"),
    ("TopK", (np.ones((2, 3), np.float32), np.array([4], np.int64)), {}, "k=4"),
    ("ReduceSum", (np.ones((2, 3), np.float32), np.array([2], np.int64)), {}, "axis 2"),
    ("ReduceMax", (np.ones((2, 3), np.float32), np.array([1, -1], np.int64)), {}, "twice"),
    ("ArgMax", (np.ones((2, 0), np.float32),), {"axis": 1}, "empty"),
    ("Einsum", (np.ones((2, 3), np.float32),), {"equation": "ij,jk->ik"}, "ij,jk"),
    ("QuantizeLinear", (np.ones((2, 3), np.float32), np.ones(2, np.float32)), {"axis": 1}, "length 3"),
    ("Det", (np.ones((2, 3), np.float32),), {}, r"\(2, 3\)"),
])
def test_invalid_input_raises_kernel_error_naming_op(op, inputs, attrs, match):
    with pytest.raises(KernelError, match=match) as caught:
        kernel_function(op)(*inputs, **attrs)
    assert str(caught.value).startswith(op)


def _matmul_oracle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Promote 1-D operands, broadcast the batch, and multiply each matrix pair with a plain loop."""
    a2 = a[None, :] if a.ndim == 1 else a
    b2 = b[:, None] if b.ndim == 1 else b
    batch = np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    a2 = np.broadcast_to(a2, batch + a2.shape[-2:])
    b2 = np.broadcast_to(b2, batch + b2.shape[-2:])
    out = np.zeros(batch + (a2.shape[-2], b2.shape[-1]))
    for index in np.ndindex(*batch):
        for i, j in np.ndindex(a2.shape[-2], b2.shape[-1]):
            out[index + (i, j)] = sum(float(p) * float(q) for p, q in zip(a2[index][i, :], b2[index][:, j]))
    if a.ndim == 1:
        out = out[..., 0, :]
    if b.ndim == 1:
        out = out[..., 0]
    return out


@PROPERTY
@given(data=st.data(), dtype=st.sampled_from([np.float32, np.float64, np.float16, np.int32]))
def test_matmul_matches_loop_oracle(data, dtype):
    m, k, n = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    batch = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=2, max_side=3))
    a_shape = (k,) if data.draw(st.booleans()) else batch.input_shapes[0] + (m, k)
    b_shape = (k,) if data.draw(st.booleans()) else batch.input_shapes[1] + (k, n)
    make = ints if dtype == np.int32 else floats
    a, b = data.draw(make(a_shape, dtype)), data.draw(make(b_shape, dtype))
    (y,) = run("MatMul", a, b)
    # float32 rounds each product and partial sum (|terms| <= 100); the oracle rounds once
    rtol, atol = {np.float16: (2e-2, 2e-2), np.float32: (1e-5, 1e-3)}.get(dtype, (1e-12, 1e-9))
    assert_matches(y, _matmul_oracle(a, b).astype(dtype), rtol=rtol, atol=atol)


@PROPERTY
@given(data=st.data(), trans_a=st.booleans(), trans_b=st.booleans(), alpha=st.sampled_from([1.0, 0.5, -2.0]),
       beta=st.sampled_from([1.0, 0.0, 3.0]), c_shape=st.sampled_from(["none", "scalar", "row", "column", "full"]))
def test_gemm_matches_formula(data, trans_a, trans_b, alpha, beta, c_shape):
    m, k, n = (data.draw(st.integers(1, 4)) for _ in range(3))
    a = data.draw(floats((k, m) if trans_a else (m, k)))
    b = data.draw(floats((n, k) if trans_b else (k, n)))
    shape = {"none": None, "scalar": (), "row": (1, n), "column": (m, 1), "full": (m, n)}[c_shape]
    c = None if shape is None else data.draw(floats(shape))
    (y,) = run("Gemm", a, b, *(() if c is None else (c,)), alpha=alpha, beta=beta, transA=int(trans_a),
               transB=int(trans_b))
    expected = alpha * _matmul_oracle(a.T if trans_a else a, b.T if trans_b else b)
    if c is not None:
        expected = expected + beta * c
    assert_matches(y, expected, rtol=1e-12, atol=1e-9)


def test_gemm_legacy_broadcast_attribute():
    a, b, c = np.eye(2, dtype=np.float32), np.ones((2, 2), np.float32), np.array([1, 2], np.float32)
    (y,) = run("Gemm", a, b, c, opset=6, broadcast=1)
    assert y.tolist() == [[2, 3], [2, 3]]
    with pytest.raises(KernelError, match="broadcast=0"):
        run("Gemm", a, b, c, opset=6)


def test_matmul_integer_per_row_and_column_zero_points():
    a = np.array([[10, 20], [30, 40]], np.uint8)
    b = np.array([[1, 2], [3, 4]], np.uint8)
    a_zero, b_zero = np.array([10, 30], np.uint8), np.array([1, 2], np.uint8)
    (y,) = run("MatMulInteger", a, b, a_zero, b_zero)
    centred_a = [[0, 10], [0, 10]]
    centred_b = [[0, 0], [2, 2]]
    assert y.dtype == np.int32 and y.tolist() == _matmul_oracle(np.array(centred_a), np.array(centred_b)).tolist()


def test_qlinear_matmul_per_row_and_column_scales():
    a = np.array([[10, 20, 30], [40, 50, 60]], np.uint8)
    b = np.array([[1, 2], [3, 4], [5, 6]], np.uint8)
    a_scale, b_scale = np.array([0.5, 0.25], np.float32), np.array([2.0, 1.0], np.float32)
    a_zero, b_zero = np.array(10, np.uint8), np.array(1, np.uint8)
    y_scale, y_zero = np.float32(4), np.array(7, np.uint8)
    (y,) = run("QLinearMatMul", a, np.array(a_scale), a_zero, b, b_scale, b_zero, np.array(y_scale), y_zero)
    real = _matmul_oracle((a - 10.0) * a_scale[:, None], (b - 1.0) * b_scale[None, :])
    assert_matches(y, np.clip(np.rint(real / y_scale) + 7, 0, 255).astype(np.uint8))


@PROPERTY
@given(data=st.data(), exclusive=st.booleans(), reverse=st.booleans(), dtype=st.sampled_from([np.int32, np.float64]))
def test_cumsum_matches_accumulate(data, exclusive, reverse, dtype):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4, min_side=0))
    x = data.draw(ints(shape, dtype))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    (y,) = run("CumSum", x, np.array(axis, np.int64), exclusive=int(exclusive), reverse=int(reverse))
    moved = np.moveaxis(x, axis, -1)
    expected = np.empty(moved.shape, dtype)
    for index in np.ndindex(*moved.shape[:-1]):
        line = [int(v) for v in moved[index]][::-1 if reverse else 1]
        sums = list(itertools.accumulate(line))
        sums = ([0] + sums[:-1]) if exclusive else sums
        expected[index] = sums[::-1 if reverse else 1]
    assert_matches(y, np.moveaxis(expected, -1, axis))


@PROPERTY
@given(data=st.data(), largest=st.booleans())
def test_topk_sorts_with_lower_index_first_on_ties(data, largest):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=5))
    x = data.draw(ints(shape, np.int64, -3, 3))  # narrow range: many ties
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    k = data.draw(st.integers(0, shape[axis]))
    values, indices = run("TopK", x, np.array([k], np.int64), outputs=2, axis=axis, largest=int(largest))
    moved = np.moveaxis(x, axis, -1)
    expected = np.empty(moved.shape[:-1] + (k,), np.int64)
    for index in np.ndindex(*moved.shape[:-1]):
        line = moved[index].tolist()
        order = sorted(range(len(line)), key=lambda i: (-line[i] if largest else line[i], i))
        expected[index] = order[:k]
    assert_matches(indices, np.moveaxis(expected, -1, axis))
    assert_matches(values, np.take_along_axis(x, indices, axis=axis))


def test_topk_legacy_k_attribute():
    values, indices = run("TopK", np.array([1.0, 3.0, 2.0], np.float32), opset=9, outputs=2, k=2)
    assert values.tolist() == [3.0, 2.0] and indices.tolist() == [1, 2]


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [-2, 0, 1, 4])
def test_trilu_matches_numpy_triangles(upper, k):
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    (y,) = run("Trilu", x, np.array(k, np.int64), upper=upper)
    assert_matches(y, np.triu(x, k) if upper else np.tril(x, k))


def test_einsum_views_are_copied():
    x = np.arange(9, dtype=np.float32).reshape(3, 3)
    (y,) = run("Einsum", x, equation="ij->ji")
    assert_matches(y, x.T.copy())
    assert not np.shares_memory(y, x)


@PROPERTY
@given(data=st.data(), dtype=st.sampled_from([np.uint8, np.int8, np.int16]))
def test_quantize_dequantize_round_trip_within_half_a_step(data, dtype):
    info = np.iinfo(dtype)
    scale = np.float32(data.draw(st.sampled_from([0.01, 0.5, 3.0])))
    zero = np.array(data.draw(st.integers(int(info.min) // 2, int(info.max) // 2)), dtype)
    low, high = (float(info.min) - float(zero)) * scale, (float(info.max) - float(zero)) * scale
    x = data.draw(hnp.arrays(np.float32, 6, elements=st.floats(low, high, width=32)))
    (q,) = run("QuantizeLinear", x, np.array(scale), zero)
    (back,) = run("DequantizeLinear", q, np.array(scale), zero)
    assert q.dtype == dtype and back.dtype == np.float32
    assert np.all(np.abs(back - x) <= scale / 2 + np.abs(x) * 1e-6)


def test_quantize_saturates_and_rounds_half_to_even():
    x = np.array([0.5, 1.5, 2.5, -1000, 1000], np.float32)
    (q,) = run("QuantizeLinear", x, np.array(1, np.float32), np.array(0, np.int8))
    assert q.tolist() == [0, 2, 2, -128, 127]


@pytest.mark.parametrize("opset", [11, 18])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceSumSquare"])
def test_reduce_axes_as_attribute_before_the_input_form(op, opset):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    if op == "ReduceSum" and opset == 11 or op != "ReduceSum" and opset < 18:
        (y,) = run(op, x, opset=opset, axes=[1], keepdims=0)
    else:
        (y,) = run(op, x, np.array([1], np.int64), opset=opset, keepdims=0)
    expected = {"ReduceSum": [3, 12], "ReduceMean": [1, 4], "ReduceMax": [2, 5], "ReduceSumSquare": [5, 50]}[op]
    assert_matches(y, np.array(expected, np.float32))


_REDUCE_ORACLES = {
    "ReduceSum": (sum, 0.0),
    "ReduceMean": (lambda v: sum(v) / len(v), math.nan),
    "ReduceMax": (max, -math.inf),
    "ReduceMin": (min, math.inf),
    "ReduceProd": (math.prod, 1.0),
    "ReduceL1": (lambda v: sum(abs(e) for e in v), 0.0),
    "ReduceL2": (lambda v: math.sqrt(sum(e * e for e in v)), 0.0),
    "ReduceSumSquare": (lambda v: sum(e * e for e in v), 0.0),
    "ReduceLogSum": (lambda v: math.log(sum(v)), -math.inf),
    "ReduceLogSumExp": (lambda v: math.log(sum(math.exp(e) for e in v)), -math.inf),
}


@PROPERTY
@given(data=st.data(), op=st.sampled_from(sorted(_REDUCE_ORACLES)), keepdims=st.booleans())
def test_reductions_match_python_loops(data, op, keepdims):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=3, min_side=0))
    positive = op == "ReduceLogSum"
    x = data.draw(hnp.arrays(np.float64, shape, elements=st.floats(0.1 if positive else -5, 5)))
    axes = sorted(data.draw(st.sets(st.integers(0, len(shape) - 1))))
    (y,) = run(op, x, np.array(axes, np.int64), keepdims=int(keepdims))
    reduced = axes or list(range(len(shape)))
    fn, identity = _REDUCE_ORACLES[op]
    out_shape = tuple(1 if i in reduced else d for i, d in enumerate(shape))
    expected = np.empty(out_shape)
    for index in np.ndindex(*out_shape):
        ranges = [range(shape[i]) if i in reduced else [index[i]] for i in range(len(shape))]
        values = [float(x[i]) for i in itertools.product(*ranges)]
        expected[index] = fn(values) if values else identity
    if not keepdims:
        expected = expected.reshape([d for i, d in enumerate(out_shape) if i not in reduced])
    assert_matches(y, expected, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("op, expected", [
    ("ReduceSum", [[1, -2], [3, -4]]), ("ReduceSumSquare", [[1, 4], [9, 16]]), ("ReduceL1", [[1, 2], [3, 4]]),
])
def test_noop_with_empty_axes_applies_only_the_elementwise_part(op, expected):
    x = np.array([[1, -2], [3, -4]], np.float32)
    (y,) = run(op, x, np.array([], np.int64), noop_with_empty_axes=1)
    assert_matches(y, np.array(expected, np.float32))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float16])
@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceProd", "ReduceL2"])
def test_reductions_keep_the_input_dtype(op, dtype):
    x = np.array([[1, 2, 3], [4, 5, 7]], dtype=dtype)
    (y,) = run(op, x, np.array([1], np.int64), keepdims=0)
    assert y.dtype == dtype
    exact = {"ReduceSum": [6, 16], "ReduceMean": [2, 16 / 3], "ReduceMax": [3, 7], "ReduceProd": [6, 140],
             "ReduceL2": [math.sqrt(14), math.sqrt(90)]}[op]
    assert_matches(y, np.array(exact).astype(dtype), rtol=1e-3)


@PROPERTY
@given(data=st.data(), op=st.sampled_from(["ArgMax", "ArgMin"]), last=st.booleans(), keepdims=st.booleans())
def test_argmax_argmin_match_python_loops(data, op, last, keepdims):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=3, max_side=4))
    x = data.draw(ints(shape, np.int32, -2, 2))
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    (y,) = run(op, x, axis=axis, keepdims=int(keepdims), select_last_index=int(last))
    moved = np.moveaxis(x, axis, -1)
    expected = np.empty(moved.shape[:-1], np.int64)
    for index in np.ndindex(*moved.shape[:-1]):
        line = moved[index].tolist()
        target = max(line) if op == "ArgMax" else min(line)
        hits = [i for i, v in enumerate(line) if v == target]
        expected[index] = hits[-1] if last else hits[0]
    if keepdims:
        expected = np.expand_dims(expected, axis)
    assert_matches(y, expected)


@functools.cache
def _schema_versions() -> dict[str, list[int]]:
    versions: dict[str, set[int]] = {}
    for schema in onnx.defs.get_all_schemas_with_history():
        if schema.domain == "":
            versions.setdefault(schema.name, set()).add(schema.since_version)
    return {op: sorted(v) for op, v in versions.items()}


@pytest.mark.parametrize("op", sorted(OPS))
def test_kernels_accept_every_input_and_attribute_of_the_opsets_they_claim(op):
    registered = sorted((k for k in load_builtin_kernels() if k.op_type == op and k.domain == ""),
                        key=lambda k: k.since)
    assert registered, f"no kernel for {op}"
    for kernel_entry, successor in zip(registered, registered[1:] + [None]):
        claimed = [v for v in _schema_versions()[op]
                   if v >= kernel_entry.since and (successor is None or v < successor.since)]
        claimed = claimed or [kernel_entry.since]
        params = inspect.signature(kernel_entry.fn).parameters.values()
        keywords = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
        for version in claimed:
            schema = onnx.defs.get_schema(op, version)
            missing = set(schema.attributes) - keywords
            assert not missing, f"{kernel_entry.fn.__name__} (since {kernel_entry.since}) lacks {missing} " \
                                f"of {op}-{version}"
            assert variadic or len(positional) >= len(schema.inputs), f"{op}-{version} has {len(schema.inputs)} inputs"


@pytest.mark.parametrize("op", sorted(OPS))
def test_latest_kernel_accepts_every_type_of_the_first_input(op):
    schema = onnx.defs.get_schema(op)
    constraint = {t.type_param_str: t.allowed_type_strs for t in schema.type_constraints}[schema.inputs[0].type_str]
    latest = load_builtin_kernels().find(op, opset=schema.since_version)
    missing = []
    for text in constraint:
        name = text[len("tensor("):-1]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(getattr(onnx.TensorProto, name.upper())))
        if not latest.accepts(None, dtype):
            missing.append(name)
    assert not missing, f"{op}-{schema.since_version} kernel does not take {missing}"


_RNG = np.random.default_rng(7)
_GOLDEN = [  # (op, inputs, opset, outputs, attributes): random data compared with onnxruntime
    ("MatMul", [_RNG.normal(size=(2, 1, 3, 4)), _RNG.normal(size=(3, 4, 5))], 13, 1, {}),
    ("Gemm", [_RNG.normal(size=(4, 3)), _RNG.normal(size=(5, 4)), _RNG.normal(size=(5,))], 13, 1,
     {"transA": 1, "transB": 1, "alpha": 0.3, "beta": 2.0}),
    ("Einsum", [_RNG.normal(size=(2, 3, 4)), _RNG.normal(size=(4, 5)), _RNG.normal(size=(5,))], 12, 1,
     {"equation": "bij,jk,k->bi"}),
    ("ReduceLogSumExp", [_RNG.normal(size=(3, 4, 5)) * 50, np.array([0, 2])], 18, 1, {"keepdims": 0}),
    ("ReduceL2", [_RNG.normal(size=(3, 4)), np.array([-1])], 18, 1, {}),
    ("CumSum", [_RNG.normal(size=(4, 5)).astype(np.float16), np.array(1, np.int32)], 14, 1,
     {"exclusive": 1, "reverse": 1}),
    ("TopK", [_RNG.integers(0, 4, size=(3, 6)).astype(np.float32), np.array([4])], 11, 2, {"largest": 0}),
    ("QuantizeLinear", [_RNG.normal(size=(2, 3, 4)) * 100, np.array([0.5, 1, 2], np.float32),
                        np.array([1, 2, 3], np.int8)], 13, 1, {"axis": 1}),
    ("DynamicQuantizeLinear", [_RNG.normal(size=(20,))], 11, 3, {}),
    ("Div", [np.array([-7, 7, -7, 7], np.int32), np.array([2, -2, -2, 2], np.int32)], 14, 1, {}),
    ("Mod", [np.array([-7.0, 7, 0, np.inf, 3]), np.array([2.0, -2, 3, 2, np.inf])], 13, 1, {"fmod": 1}),
    ("Pow", [np.array([2, -1, 1, 3], np.int32), np.array([-1, -3, -5, 2], np.int32)], 15, 1, {}),
]


@pytest.mark.parametrize("op, inputs, opset, outputs, attrs", _GOLDEN, ids=[g[0] for g in _GOLDEN])
def test_matches_onnxruntime(op, inputs, opset, outputs, attrs):
    ort = pytest.importorskip("onnxruntime")
    inputs = [x.astype(np.float32) if x.dtype == np.float64 else x for x in inputs]
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, [f"y{i}" for i in range(outputs)], **attrs)
    ours = run_node(node, inputs, opset)
    def value_info(name, array, shape):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(array.dtype), shape)

    graph = helper.make_graph([node], "golden", [value_info(n, x, x.shape) for n, x in zip(names, inputs)],
                              [value_info(f"y{i}", y, None) for i, y in enumerate(ours)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for actual, expected in zip(ours, session.run(None, dict(zip(names, inputs)))):
        assert_matches(actual, expected, rtol=1e-5, atol=1e-5)


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 12), st.integers(1, 40), st.sampled_from([2, 3]), st.booleans(),
       st.integers(0, 2 ** 16))
def test_matrix_products_cut_into_blocks_match_numpy(m, k, n, threads, trans_b, seed):
    from testing.kernels import intra_op_blocks

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((n, k) if trans_b else (k, n)).astype(np.float32)
    c = rng.standard_normal(n).astype(np.float32)
    expected = a.astype(np.float64) @ (b.T if trans_b else b).astype(np.float64)
    with intra_op_blocks(threads):
        (gemm_y,) = run("Gemm", a, b, c, transB=int(trans_b), alpha=0.5)
        (matmul_y,) = run("MatMul", a, np.ascontiguousarray(b.T) if trans_b else b)
    np.testing.assert_allclose(matmul_y, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(gemm_y, 0.5 * expected + c, rtol=1e-4, atol=1e-4)
