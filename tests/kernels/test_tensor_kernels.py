"""Tensor, shape, index and misc kernels, and the reference-evaluator fallback.

Conformance: every ONNX node test case (one-node models) of the ops these kernel files own
runs through `run_node` and must match the expected outputs exactly in dtype and shape and
within the case's tolerances in value. The fallback runs a sample of cases of ops no kernel
file owns. Property tests compare kernels with small independent oracles written from the
ONNX spec text.
"""
from __future__ import annotations

import inspect
import math
import threading

import numpy as np
import onnx
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

from xgraph.errors import KernelError
from xgraph.kernels import load_builtin_kernels, op_cast, op_constant, op_index, op_misc, op_shape, op_tensor
from xgraph.kernels.reference import make_reference_kernel
from testing.kernels import conformance_params, one_node_cases, opset_of, run_node

TENSOR_OPS = {
    "Identity", "Reshape", "Transpose", "Concat", "Split", "Squeeze", "Unsqueeze", "Flatten", "Expand", "Tile",
    "Slice", "Pad", "Cast", "CastLike", "Constant", "ConstantOfShape", "EyeLike", "Range", "ReverseSequence",
    "Compress", "Shape", "Size", "Gather", "GatherElements", "GatherND", "Scatter", "ScatterElements", "ScatterND",
    "OneHot", "NonZero", "Unique", "NonMaxSuppression", "TensorScatter", "Bernoulli", "RandomNormal",
    "RandomUniform", "RandomNormalLike", "RandomUniformLike", "StringNormalizer", "RegexFullMatch",
    "StringConcat", "StringSplit",
}
#: Ops without a conformance case in onnx (their kernels are tested below instead).
UNTESTED_BY_ONNX = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"}
#: Values are implementation-defined: conformance checks their dtype and shape (and Bernoulli's 0/1 support).
RANDOM_OPS = {"Bernoulli", "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike"}

_NO_OUTPUT_COUNT = "run_node does not pass the node's output count, which Split < 18 needs without 'split' (see test_split_with_output_count)"
XFAIL: dict[str, str] = {}

#: Ops that no kernel file implements: the reference fallback is what runs them.
REFERENCE_SAMPLE_OPS = {
    "If", "Loop", "Scan", "SequenceMap", "SequenceInsert", "SplitToSequence",
    "OptionalHasElement", "OptionalGetElement", "Col2Im", "STFT", "DFT", "BitShift", "BlackmanWindow",
    "HannWindow", "HammingWindow", "MelWeightMatrix", "TfIdfVectorizer", "LabelEncoder", "Adam", "Adagrad",
    "Momentum",
}
REFERENCE_XFAIL = {
    "test_scan_sum": "the ONNX reference evaluator implements Scan from opset 9 only",
}


#: onnx.backend.test.case.node modules whose exports are the cases of TENSOR_OPS and
#: REFERENCE_SAMPLE_OPS. Importing only these, instead of collect_testcases() which generates
#: every op's cases (pooling alone takes seconds), keeps collection fast;
#: test_every_owned_op_has_conformance_cases fails if the list misses one.
CASE_MODULES = (
    "bernoulli", "cast", "castlike", "clip", "compress", "concat", "constant", "constantofshape", "expand",
    "eyelike", "flatten", "gather", "gatherelements", "gathernd", "identity", "nonmaxsuppression", "nonzero",
    "onehot", "pad", "rangeop", "regex_full_match", "reshape", "reversesequence", "scatter", "scatterelements",
    "scatternd", "shape", "size", "slice", "split", "squeeze", "string_concat", "string_split", "stringnormalizer",
    "tensorscatter", "tile", "transpose", "unique", "unsqueeze",
    # ops for the reference fallback sample
    "adagrad", "adam", "bitshift", "blackmanwindow", "col2im", "dft", "hammingwindow", "hannwindow", "if_", "loop",
    "melweightmatrix", "momentum", "optionalgetelement", "optionalhaselement", "scan", "sequence_map",
    "sequenceinsert", "splittosequence", "stft", "tfidfvectorizer", "ai_onnx_ml.label_encoder",
)


def _one_node_cases() -> tuple:
    return one_node_cases(CASE_MODULES)


def _cases(op_types: set[str], xfail: dict[str, str]) -> list:
    return conformance_params([c for c in _one_node_cases() if c.model.graph.node[0].op_type in op_types], xfail)


def _value(v):
    return numpy_helper.to_array(v) if isinstance(v, onnx.TensorProto) else v


def _node_inputs(case, inputs) -> tuple[list, dict]:
    """The data-set inputs (in graph-input order) in the node's input slots, and by name."""
    by_name = {i.name: _value(v) for i, v in zip(case.model.graph.input, inputs)}
    return [by_name[n] if n else None for n in case.model.graph.node[0].input], by_name


def _assert_same(got, expected, rtol: float, atol: float, name: str = "output") -> None:
    if isinstance(expected, list):
        assert isinstance(got, list) and len(got) == len(expected), f"{name}: {got!r} vs {expected!r}"
        for i, (g, e) in enumerate(zip(got, expected)):
            _assert_same(g, e, rtol, atol, f"{name}[{i}]")
        return
    if expected is None:
        assert got is None, f"{name}: expected an empty optional"
        return
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.dtype == expected.dtype, f"{name}: dtype {got.dtype} != {expected.dtype}"
    assert got.shape == expected.shape, f"{name}: shape {got.shape} != {expected.shape}"
    if expected.dtype.kind in "OUSbiu":
        np.testing.assert_array_equal(got, expected, err_msg=name)
    else:  # floats, including bfloat16/float8/int4 from ml_dtypes
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=name)


# -- conformance -------------------------------------------------------------------------

def test_every_owned_op_has_conformance_cases():
    """Guards the parametrisations below: a missing case module would pass vacuously."""
    covered = {c.model.graph.node[0].op_type for c in _one_node_cases()}
    assert TENSOR_OPS - covered == UNTESTED_BY_ONNX
    assert REFERENCE_SAMPLE_OPS <= covered


@pytest.mark.parametrize("case", _cases(TENSOR_OPS, XFAIL))
def test_conformance(case):
    node = case.model.graph.node[0]
    opset = opset_of(case.model, node.domain)
    for inputs, outputs in case.data_sets:
        got = run_node(node, _node_inputs(case, inputs)[0], opset)
        expected = [_value(o) for o in outputs]
        assert len(got) == len(expected)
        for i, (g, e) in enumerate(zip(got, expected)):
            if node.op_type in RANDOM_OPS:
                assert g.dtype == e.dtype and g.shape == e.shape
                if node.op_type == "Bernoulli":
                    assert set(np.unique(g.astype(np.float64))) <= {0.0, 1.0}
            else:
                _assert_same(g, e, case.rtol, case.atol, f"{case.name} output {i}")


@pytest.mark.parametrize("case", [c for c in _one_node_cases() if c.name in XFAIL and c.name.startswith("test_split")],
                         ids=lambda c: c.name)
def test_split_with_output_count(case):
    """Split < 18 without sizes splits evenly into as many parts as the node has outputs."""
    node = case.model.graph.node[0]
    inputs, outputs = case.data_sets[0]
    kernel = op_tensor.split if opset_of(case.model) >= 13 else op_tensor.split_2
    got = kernel(*_node_inputs(case, inputs)[0], **{a.name: helper.get_attribute_value(a) for a in node.attribute},
                 num_outputs=len(node.output))
    for g, e in zip(got, outputs, strict=True):
        _assert_same(g, e, 0, 0)


def _owned_kernels() -> list:
    modules = {m.__name__ for m in (op_tensor, op_cast, op_constant, op_shape, op_index, op_misc)}
    return [k for k in load_builtin_kernels() if k.fn.__module__ in modules]


def test_kernels_accept_every_attribute_and_input_of_the_versions_they_claim():
    kernels = _owned_kernels()
    assert {k.op_type for k in kernels} == TENSOR_OPS
    latest = onnx.defs.onnx_opset_version()
    for k in kernels:
        assert onnx.defs.get_schema(k.op_type, k.since, k.domain).since_version == k.since, (k.op_type, k.since)
        newer = [o.since for o in kernels if o.op_type == k.op_type and o.since > k.since]
        params = inspect.signature(k.fn).parameters.values()
        keywords = {p.name for p in params if p.kind is p.KEYWORD_ONLY}
        positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        variadic = any(p.kind is p.VAR_POSITIONAL for p in params)
        for version in range(k.since, min(newer, default=latest + 1)):
            schema = onnx.defs.get_schema(k.op_type, version, k.domain)
            assert set(schema.attributes) <= keywords, (k.op_type, version, set(schema.attributes) - keywords)
            assert variadic or len(positional) >= len(schema.inputs), (k.op_type, version)


def test_identity_passes_sequences_and_optionals_through():
    seq = [np.arange(3), np.ones((2, 2))]
    (out,) = op_tensor.identity(seq)  # one output holding the sequence, not one output per element
    assert out == seq and out is not seq
    assert op_tensor.identity(None) is None


# -- the reference fallback --------------------------------------------------------------

@pytest.mark.parametrize("case", _cases(REFERENCE_SAMPLE_OPS, REFERENCE_XFAIL))
def test_reference_fallback_conformance(case):
    node = case.model.graph.node[0]
    kernel = make_reference_kernel(
        node.op_type, node.domain, list(node.attribute), {o.domain: o.version for o in case.model.opset_import},
        len(node.input), len(node.output), list(case.model.functions),
        omitted_inputs=[i for i, n in enumerate(node.input) if not n],
        omitted_outputs=[i for i, n in enumerate(node.output) if not n])
    for inputs, outputs in case.data_sets:
        args, by_name = _node_inputs(case, inputs)
        got = kernel(*args, outer_scope={n: by_name[n] for n in kernel.outer_names})
        got = [g for g, name in zip(got, node.output) if name]
        assert len(got) == len(outputs)
        for g, e in zip(got, outputs):
            _assert_same(g, _value(e), case.rtol, case.atol, case.name)


def _if_reading_outer(name: str) -> list[onnx.AttributeProto]:
    """If attributes whose branches return outer tensor `name` plus or minus 1."""
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    branches = []
    for op in ("Add", "Sub"):
        g = helper.make_graph([helper.make_node(op, [name, "one"], ["r"])], op, [],
                              [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)], initializer=[one])
        branches.append(g)
    return [helper.make_attribute("then_branch", branches[0]), helper.make_attribute("else_branch", branches[1])]


def test_reference_outer_scope_values_reach_nested_graphs():
    kernel = make_reference_kernel("If", "", _if_reading_outer("x"), {"": 18}, 1, 1)
    assert kernel.outer_names == ("x",)
    x = np.array([1.0, 2.0], np.float32)
    assert kernel(np.array(True), outer_scope={"x": x})[0].tolist() == [2.0, 3.0]
    assert kernel(np.array(False), outer_scope={"x": x})[0].tolist() == [0.0, 1.0]
    with pytest.raises(KernelError, match=r"If: .*outer-scope tensors \['x'\]"):
        kernel(np.array(True))


def test_reference_outer_scope_names_reach_into_nested_graphs():
    out = [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)]
    nested_if = helper.make_node("If", ["c"], ["r"])
    nested_if.attribute.extend(_if_reading_outer("y"))
    then_branch = helper.make_graph([nested_if], "then", [], out)
    else_branch = helper.make_graph([helper.make_node("Identity", ["y"], ["r"])], "else", [], out)
    attrs = [helper.make_attribute("then_branch", then_branch), helper.make_attribute("else_branch", else_branch)]
    kernel = make_reference_kernel("If", "", attrs, {"": 18}, 1, 1)
    assert kernel.outer_names == ("c", "y")
    y = np.array([5.0], np.float32)
    assert kernel(np.array(True), outer_scope={"c": np.array(False), "y": y})[0].tolist() == [4.0]
    assert kernel(np.array(False), outer_scope={"c": np.array(True), "y": y})[0].tolist() == [5.0]


def test_reference_runs_custom_domain_local_functions():
    body = [helper.make_node("Add", ["a", "b"], ["t"]), helper.make_node("Mul", ["t", "b"], ["y"])]
    fn = helper.make_function("my.ops", "AddMul", ["a", "b"], ["y"], body, [helper.make_opsetid("", 18)])
    kernel = make_reference_kernel("AddMul", "my.ops", [], {"": 18}, 2, 1, [fn])
    a, b = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    np.testing.assert_array_equal(kernel(a, b)[0], (a + b) * b)


def test_reference_function_ops_get_types_with_or_without_declared_types():
    """GroupNormalization's function body is built from input types; both paths must give the same."""
    x = np.random.default_rng(0).standard_normal((2, 4, 3)).astype(np.float32)
    scale, bias = np.full(4, 2.0, np.float32), np.full(4, 0.5, np.float32)
    attrs = [helper.make_attribute("num_groups", 2), helper.make_attribute("epsilon", 1e-5)]
    groups = x.reshape(2, 2, -1)
    oracle = ((groups - groups.mean(-1, keepdims=True)) / np.sqrt(groups.var(-1, keepdims=True) + 1e-5)).reshape(x.shape)
    oracle = oracle * 2.0 + 0.5
    types = [helper.make_tensor_type_proto(TensorProto.FLOAT, s) for s in ([2, 4, 3], [4], [4])]
    for kernel in (make_reference_kernel("GroupNormalization", "", attrs, {"": 21}, 3, 1),
                   make_reference_kernel("GroupNormalization", "", attrs, {"": 21}, 3, 1, input_types=types)):
        np.testing.assert_allclose(kernel(x, scale, bias)[0], oracle, rtol=1e-4, atol=1e-5)


def test_reference_is_thread_safe():
    kernel = make_reference_kernel("CumSum", "", [], {"": 18}, 2, 1)
    inputs = [np.arange(50, dtype=np.float64) * i for i in range(16)]
    results: dict[int, np.ndarray] = {}

    def work(i):
        for _ in range(20):
            results[i] = kernel(inputs[i], np.array(0))[0]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, x in enumerate(inputs):
        np.testing.assert_array_equal(results[i], np.cumsum(x))


def test_reference_rejects_ops_it_cannot_run_when_made():
    with pytest.raises(KernelError, match="NoSuchOp"):
        make_reference_kernel("NoSuchOp", "", [], {"": 18}, 1, 1)
    with pytest.raises(KernelError, match="no opset version for domain 'other'"):
        make_reference_kernel("Foo", "other", [], {"": 18}, 1, 1)


def test_reference_string_outputs_are_object_arrays():
    kernel = make_reference_kernel("StringConcat", "", [], {"": 20}, 2, 1)
    out = kernel(np.array(["a", "b"], dtype=object), np.array(["c"], dtype=object))[0]
    assert out.dtype == object and out.tolist() == ["ac", "bc"]


# -- aliasing and the shape hot path -----------------------------------------------------

@pytest.mark.parametrize("op, call", [
    ("Identity", lambda x: op_tensor.identity(x)),
    ("Reshape", lambda x: op_tensor.reshape(x, np.array([4, -1]))),
    ("Flatten", lambda x: op_tensor.flatten(x, axis=1)),
    ("Squeeze", lambda x: op_tensor.squeeze(x[None])),
    ("Unsqueeze", lambda x: op_tensor.unsqueeze(x, np.array([0]))),
    ("Transpose", lambda x: op_tensor.transpose(x)),
    ("Slice", lambda x: op_tensor.slice_(x, np.array([1]), np.array([3]))),
    ("Split", lambda x: op_tensor.split(x, np.array([1, 3]))[1]),
    ("Expand", lambda x: op_tensor.expand(x, np.array([2, 4, 6]))),
    ("Cast to same type", lambda x: op_cast.cast(x, to=TensorProto.FLOAT)),
])
def test_metadata_ops_return_read_only_views(op, call):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = call(x)
    assert np.shares_memory(out, x), op
    assert not out.flags.writeable, op
    with pytest.raises(ValueError):
        out[...] = 0
    assert x.flags.writeable  # the input keeps its own flags


@pytest.mark.parametrize("call", [
    lambda x: op_tensor.concat(x, x, axis=0),
    lambda x: op_index.gather(x, np.array([0, 1])),
    lambda x: op_tensor.pad(x, np.array([1, 1, 1, 1])),
    lambda x: op_tensor.tile(x, np.array([1, 2])),
    lambda x: op_index.scatter_nd(x, np.array([[0]]), np.zeros((1, 6), np.float32)),
])
def test_computing_ops_return_fresh_writeable_arrays(call):
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    out = call(x)
    assert not np.shares_memory(out, x) and out.flags.writeable


def test_shape_is_a_cached_read_only_int64_vector():
    x = np.zeros((2, 3, 5))
    out = op_shape.shape(x)
    assert out.dtype == np.int64 and out.tolist() == [2, 3, 5] and not out.flags.writeable
    assert op_shape.shape(np.ones((2, 3, 5))) is out
    assert op_shape.shape(x, start=-2).tolist() == [3, 5]
    assert op_shape.shape(x, start=1, end=-1).tolist() == [3]
    assert op_shape.shape(x, start=9).tolist() == []
    assert op_shape.size(x).dtype == np.int64 and op_shape.size(x).shape == () and int(op_shape.size(x)) == 30


# -- errors ------------------------------------------------------------------------------

@pytest.mark.parametrize("call, message", [
    (lambda: op_tensor.reshape(np.zeros(6), np.array([-1, -1])), r"Reshape: shape \[-1, -1\] has more than one -1"),
    (lambda: op_tensor.reshape(np.zeros(6), np.array([4, -1])), r"Reshape: cannot infer -1 in shape \[4, -1\]"),
    (lambda: op_tensor.reshape(np.zeros((0, 3)), np.array([0, -1]), allowzero=1), "mixes 0 and -1"),
    (lambda: op_tensor.concat(np.zeros((2, 2)), np.zeros((3, 3)), axis=0), r"Concat: input float64\[3, 3\]"),
    (lambda: op_tensor.concat(np.zeros(2)), "Concat: attribute 'axis' is required"),
    (lambda: op_tensor.squeeze(np.zeros((2, 1)), np.array([0])), "Squeeze: cannot squeeze axis 0 of size 2"),
    (lambda: op_tensor.unsqueeze(np.zeros(2), np.array([0, 0])), "Unsqueeze: axes .* repeats an axis"),
    (lambda: op_tensor.transpose(np.zeros((2, 2)), perm=[0, 0]), r"Transpose: perm \[0, 0\]"),
    (lambda: op_tensor.slice_(np.zeros(4), np.array([0]), np.array([2]), None, np.array([0])), "Slice: steps"),
    (lambda: op_tensor.slice_(np.zeros(4), np.array([0]), np.array([2]), np.array([3])), "Slice: axes 3 is out of range"),
    (lambda: op_tensor.split(np.zeros(6), np.array([2, 2])), r"Split: split \[2, 2\] does not partition"),
    (lambda: op_tensor.split(np.zeros(6)), "Split: needs 'split' or the node's output count"),
    (lambda: op_tensor.expand(np.zeros(3), np.array([4])), r"Expand: input shape \(3,\) does not broadcast"),
    (lambda: op_tensor.tile(np.zeros((2, 2)), np.array([2])), r"Tile: repeats \[2\]"),
    (lambda: op_tensor.pad(np.zeros(3), np.array([1, 1]), mode="mirror"), "Pad: mode 'mirror'"),
    (lambda: op_tensor.pad(np.zeros(3), np.array([-2, -2])), "Pad: pads .* crop more"),
    (lambda: op_cast.cast(np.array(["1.5", "pear"], dtype=object), to=TensorProto.FLOAT), "Cast: string 'pear'"),
    (lambda: op_cast.cast_1(np.zeros(2), to="FLOAT17"), "Cast: 'to' 'FLOAT17'"),
    (lambda: op_constant.constant(value_int=1, value_float=2.0), "Constant: needs exactly one value attribute"),
    (lambda: op_constant.range_(np.array(1), np.array(5), np.array(0)), "Range: delta is 0"),
    (lambda: op_constant.eye_like(np.zeros(3)), r"EyeLike: input must be 2-D, got shape \(3,\)"),
    (lambda: op_index.gather(np.zeros((3, 2)), np.array([0, 3])), "Gather: indices in .* out of range for axis 0 of size 3"),
    (lambda: op_index.gather(np.zeros(3), np.array([0.5])), "Gather: indices must be integers"),
    (lambda: op_index.gather_elements(np.zeros((2, 2)), np.array([[0, -3]])), "GatherElements: index -3"),
    (lambda: op_index.gather_nd(np.zeros((2, 2)), np.array([[0, 0, 0]])), "GatherND: indices shape"),
    (lambda: op_index.scatter_elements(np.zeros(3), np.array([1]), np.array([1.0]), reduction="avg"),
     "ScatterElements: reduction 'avg'"),
    (lambda: op_index.scatter_nd(np.zeros(3), np.array([[5]]), np.array([1.0])), "ScatterND: index 5"),
    (lambda: op_index.one_hot(np.array([1]), np.array([0]), np.array([0, 1])), "OneHot: depth"),
    (lambda: op_index.non_max_suppression(np.zeros((1, 2, 3)), np.zeros((1, 1, 2))), "NonMaxSuppression: boxes"),
    (lambda: op_index.tensor_scatter(np.zeros((1, 2, 3)), np.zeros((1, 3, 3)), axis=1), "TensorScatter: update shape"),
    (lambda: op_misc.string_normalizer(np.array([["a"], ["b"]], dtype=object)), "StringNormalizer: input must be"),
    (lambda: op_misc.regex_full_match(np.array(["a"], dtype=object), pattern="("), "RegexFullMatch: pattern '\\('"),
    (lambda: op_misc.string_concat(np.array([1]), np.array(["a"], dtype=object)), "StringConcat: input must be a string"),
    (lambda: op_misc.random_uniform(shape=[2], dtype=TensorProto.STRING), "RandomUniform: dtype 8"),
])
def test_invalid_input_raises_kernel_error_naming_op_and_value(call, message):
    with pytest.raises(KernelError, match=message):
        call()


# -- behaviour the conformance suite leaves out ------------------------------------------

def test_cast_between_strings_and_numbers():
    x = np.array([1.5, -np.inf, np.inf, np.nan, 0.1], dtype=np.float32)
    strings = op_cast.cast(x, to=TensorProto.STRING)
    assert strings.dtype == object and strings.tolist() == ["1.5", "-INF", "INF", "NaN", "0.1"]
    back = op_cast.cast(strings, to=TensorProto.FLOAT)
    np.testing.assert_array_equal(back, x)
    parsed = op_cast.cast(np.array(["+INF", "-inf", "nan", "1e-5", " 2.5"], dtype=object), to=TensorProto.DOUBLE)
    np.testing.assert_array_equal(parsed, [np.inf, -np.inf, np.nan, 1e-5, 2.5])
    assert op_cast.cast(np.array(["100.5", "7", "-3"], dtype=object), to=TensorProto.INT32).tolist() == [100, 7, -3]
    assert op_cast.cast(np.array(["0", "2", "true"], dtype=object), to=TensorProto.BOOL).tolist() == [False, True, True]
    assert op_cast.cast_1(np.array([1.7, -1.7]), to="INT64").tolist() == [1, -1]


def test_cast_float8_saturation():
    x = np.array([1e6, -1e6, np.inf], dtype=np.float32)
    e4m3 = op_cast.cast(x, to=TensorProto.FLOAT8E4M3FN)
    assert e4m3.astype(np.float32).tolist() == [448.0, -448.0, 448.0]
    assert np.isnan(op_cast.cast(x, to=TensorProto.FLOAT8E4M3FN, saturate=0).astype(np.float32)).all()


def test_constant_value_attributes():
    assert op_constant.constant(value_float=2.5).dtype == np.float32
    assert op_constant.constant(value_ints=[1, 2]).tolist() == [1, 2]
    assert op_constant.constant(value_ints=[1, 2]).dtype == np.int64
    s = op_constant.constant(value_strings=["a", "bc"])
    assert s.dtype == object and s.tolist() == ["a", "bc"]
    assert op_constant.constant(value_string="x").shape == ()
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([5.0, 6.0], np.float32)),
                                       numpy_helper.from_array(np.array([1, 5], np.int64)), [2, 3])
    np.testing.assert_array_equal(op_constant.constant(sparse_value=sparse), [[0, 5, 0], [0, 0, 6]])


def test_pad_negative_pads_crop_and_modes():
    x = np.arange(5)
    assert op_tensor.pad(x, np.array([-1, 2]), mode="edge").tolist() == [1, 2, 3, 4, 4, 4]
    assert op_tensor.pad(x, np.array([2, -3])).tolist() == [0, 0, 0, 1]
    assert op_tensor.pad(x, np.array([2, 2]), mode="reflect").tolist() == [2, 1, 0, 1, 2, 3, 4, 3, 2]
    assert op_tensor.pad(x, np.array([2, 2]), mode="wrap").tolist() == [3, 4, 0, 1, 2, 3, 4, 0, 1]
    assert op_tensor.pad_2(np.ones((1, 1)), pads=[0, 1, 0, 0], value=7.0).tolist() == [[7.0, 1.0]]
    assert op_tensor.pad(np.array(["a"], dtype=object), np.array([1, 0])).tolist() == ["", "a"]


def test_range_low_precision_uses_stash_type():
    start, limit, delta = (np.array(v, np.float16) for v in (2048.0, 2058.0, 1.0))
    out = op_constant.range_27(start, limit, delta)  # float16 steps are 2 here; float32 stashing keeps 10 values
    assert out.dtype == np.float16
    np.testing.assert_array_equal(out, (np.float32(2048) + np.arange(10, dtype=np.float32)).astype(np.float16))
    assert op_constant.range_(np.array(10), np.array(4), np.array(-2)).tolist() == [10, 8, 6]
    assert op_constant.range_(np.array(1.0, np.float32), np.array(2.0, np.float32), np.array(0.3, np.float32)).size == 4


def test_random_ops_seeded_runs_repeat_and_respect_dtype_and_range():
    a = op_misc.random_uniform(shape=[3, 4], low=2.0, high=3.0, seed=7.0)
    assert a.dtype == np.float32 and a.shape == (3, 4) and ((a >= 2.0) & (a < 3.0)).all()
    np.testing.assert_array_equal(a, op_misc.random_uniform(shape=[3, 4], low=2.0, high=3.0, seed=7.0))
    assert not np.array_equal(a, op_misc.random_uniform(shape=[3, 4], low=2.0, high=3.0, seed=8.0))
    n = op_misc.random_normal(shape=[2000], mean=5.0, scale=0.1, dtype=TensorProto.DOUBLE, seed=1.0)
    assert n.dtype == np.float64 and abs(n.mean() - 5.0) < 0.02
    like = op_misc.random_normal_like(np.zeros((2, 2), np.float16))
    assert like.dtype == np.float16 and like.shape == (2, 2)
    b = op_misc.bernoulli(np.array([0.0, 1.0, 0.0, 1.0]), dtype=TensorProto.INT32)
    assert b.dtype == np.int32 and b.tolist() == [0, 1, 0, 1]


def test_one_hot_opset9_does_not_wrap_negative_indices():
    args = (np.array([-1, 1]), np.array(3), np.array([0, 1]))
    assert op_index.one_hot_9(*args).tolist() == [[0, 0, 0], [0, 1, 0]]
    assert op_index.one_hot(*args).tolist() == [[0, 0, 1], [0, 1, 0]]


def test_string_ops_edge_cases():
    words = np.array(["Monday", "tuesday", "MONDAY"], dtype=object)
    out = op_misc.string_normalizer(words, case_change_action="UPPER", stopwords=["monday"])
    assert out.tolist() == ["TUESDAY"]
    assert op_misc.string_normalizer(words, is_case_sensitive=1, stopwords=["monday"]).tolist() == ["Monday", "tuesday",
                                                                                                   "MONDAY"]
    pieces, counts = op_misc.string_split(np.array(["a b  c", ""], dtype=object))
    assert pieces.tolist() == [["a", "b", "c"], ["", "", ""]] and counts.tolist() == [3, 0]
    pieces, counts = op_misc.string_split(np.array(["a,,b"], dtype=object), delimiter=",", maxsplit=1)
    assert pieces.tolist() == [["a", ",b"]] and counts.tolist() == [2]


# -- property tests with independent oracles ---------------------------------------------

def _spec_slice_indices(start: int, end: int, step: int, dim: int) -> list[int]:
    """Indices ONNX Slice visits on one axis, written from the spec's clamping rules."""
    if dim == 0:  # the clamping ranges are empty; nothing to visit
        return []
    if start < 0:
        start += dim
    if end < 0:
        end += dim
    if step > 0:
        start, end = max(0, min(start, dim)), max(0, min(end, dim))
    else:
        start, end = max(0, min(start, dim - 1)), max(-1, min(end, dim - 1))
    out, i = [], start
    while (i < end) if step > 0 else (i > end):
        out.append(i)
        i += step
    return out


_bound = st.one_of(st.integers(-12, 12), st.sampled_from([2**63 - 1, -(2**63), 2**31 - 1]))


@settings(max_examples=80, deadline=None)
@given(dims=st.lists(st.integers(0, 6), min_size=1, max_size=3), data=st.data())
def test_slice_matches_spec_loop(dims, data):
    x = np.arange(math.prod(dims)).reshape(dims)
    axes = data.draw(st.lists(st.integers(-len(dims), len(dims) - 1), min_size=1, max_size=len(dims),
                              unique_by=lambda a: a % len(dims)))
    starts = [data.draw(_bound) for _ in axes]
    ends = [data.draw(_bound) for _ in axes]
    steps = [data.draw(st.integers(-4, 4).filter(bool)) for _ in axes]
    got = op_tensor.slice_(x, *(np.array(v, np.int64) for v in (starts, ends, axes, steps)))
    expected = x
    for a, s, e, step in zip(axes, starts, ends, steps):
        expected = np.take(expected, _spec_slice_indices(s, e, step, dims[a]), axis=a % len(dims))
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=80, deadline=None)
@given(dims=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data())
def test_gather_matches_python_loop(dims, data):
    x = np.arange(math.prod(dims), dtype=np.float32).reshape(dims)
    axis = data.draw(st.integers(-len(dims), len(dims) - 1))
    dim = dims[axis]
    index_shape = data.draw(st.lists(st.integers(0, 3), max_size=2))
    indices = np.array(data.draw(st.lists(st.integers(-dim, dim - 1), min_size=math.prod(index_shape),
                                          max_size=math.prod(index_shape))), dtype=np.int64).reshape(index_shape)
    got = op_index.gather(x, indices, axis=axis)
    a, q = axis % len(dims), len(index_shape)
    expected = np.zeros(tuple(dims[:a]) + tuple(index_shape) + tuple(dims[a + 1:]), np.float32)
    for pos in np.ndindex(*expected.shape):  # out[pre, j, post] = x[pre, indices[j], post]
        i = int(indices[pos[a:a + q]]) % dim
        expected[pos] = x[pos[:a] + (i,) + pos[a + q:]]
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=80, deadline=None)
@given(dims=st.lists(st.integers(0, 4), min_size=1, max_size=4), data=st.data())
def test_reshape_rules(dims, data):
    """Target shapes built from the rules: a 0 copies the input dim at its position, one -1 is inferred."""
    x = np.arange(math.prod(dims)).reshape(dims)
    intended = list(data.draw(st.permutations(dims))) if data.draw(st.booleans()) else [math.prod(dims)]
    assert list(op_tensor.reshape(x, np.array(intended, np.int64), allowzero=1).shape) == intended
    copyable = [i < len(dims) and d == dims[i] for i, d in enumerate(intended)]
    assume(all(c for c, d in zip(copyable, intended) if d == 0))  # a literal 0 needs allowzero=1
    target = [0 if c and data.draw(st.booleans()) else d for c, d in zip(copyable, intended)]
    if math.prod(intended) and data.draw(st.booleans()):
        target[data.draw(st.integers(0, len(target) - 1))] = -1
    got = op_tensor.reshape(x, np.array(target, np.int64))
    assert list(got.shape) == intended
    np.testing.assert_array_equal(got.reshape(-1), x.reshape(-1))


@settings(max_examples=80, deadline=None)
@given(values=st.lists(st.integers(0, 5), min_size=1, max_size=12), is_sorted=st.booleans())
def test_unique_matches_first_occurrence_oracle(values, is_sorted):
    x = np.array(values, np.int64)
    y, first, inverse, counts = op_index.unique(x, sorted=int(is_sorted))
    order = sorted(set(values)) if is_sorted else list(dict.fromkeys(values))
    assert y.tolist() == order
    assert first.tolist() == [values.index(v) for v in order]
    assert inverse.tolist() == [order.index(v) for v in values]
    assert counts.tolist() == [values.count(v) for v in order]
    assert {a.dtype for a in (first, inverse, counts)} == {np.dtype(np.int64)}


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_scatter_nd_add_accumulates_duplicates(data):
    x = np.zeros((4, 3), np.float64)
    rows = data.draw(st.lists(st.integers(-4, 3), min_size=1, max_size=6))
    updates = np.arange(len(rows) * 3, dtype=np.float64).reshape(len(rows), 3)
    got = op_index.scatter_nd(x, np.array(rows)[:, None], updates, reduction="add")
    expected = x.copy()
    for r, u in zip(rows, updates):
        expected[r % 4] += u
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("seed", range(6))
def test_nms_matches_onnx_reference_on_random_boxes(seed):
    rng = np.random.default_rng(seed)
    corners = rng.uniform(0, 10, (2, 30, 2, 2)).astype(np.float32)
    boxes = np.concatenate([corners[..., 0, :], corners[..., 0, :] + rng.uniform(0, 4, (2, 30, 2))], -1).astype(np.float32)
    scores = rng.choice(np.linspace(0, 1, 7, dtype=np.float32), (2, 3, 30))  # ties on purpose
    limits = (np.array([5], np.int64), np.array([0.3], np.float32), np.array([0.2], np.float32))
    node = helper.make_node("NonMaxSuppression", ["b", "s", "m", "i", "t"], ["y"], center_point_box=seed % 2)
    model = helper.make_model(helper.make_graph(
        [node], "nms", [onnx.ValueInfoProto(name=n) for n in "bsmit"], [onnx.ValueInfoProto(name="y")]),
        opset_imports=[helper.make_opsetid("", 11)])
    from onnx.reference import ReferenceEvaluator

    expected = ReferenceEvaluator(model).run(None, dict(zip("bsmit", (boxes, scores) + limits)))[0]
    got = op_index.non_max_suppression(boxes, scores, *limits, center_point_box=seed % 2)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, expected)
