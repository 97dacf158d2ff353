"""Shapes to a fixpoint: with fixed input shapes the shape arithmetic of transformer and UNet exports
folds away, every dense op reaches AI Core, and the compiled model still equals onnxruntime."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.compiler import prepare as prep
from xgraph.compiler.options import parse_options
from xgraph.compiler.shape_fixpoint import fold_shape_queries, resolve_shapes

KEY = {"MatMul", "Gemm", "Softmax", "LayerNormalization"}
SHAPE_ARITH = {"Shape", "Size", "Range", "Unsqueeze", "Squeeze", "Concat", "Slice", "Sub", "Expand"}


def _cases(tmodels):
    rng = np.random.default_rng(0)
    return {
        "gpt2": (tmodels.gpt2_like(), {"input_shape": "input_ids:1,16"},
                 {"input_ids": rng.integers(0, 64, (1, 16)).astype(np.int64)}),
        "vit": (tmodels.vit_like(), {"input_shape": "pixel_values:1,3,32,32"},
                {"pixel_values": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}),
        "unet": (tmodels.unet_like(), {}, {"image": rng.standard_normal((1, 3, 64, 64)).astype(np.float32)}),
    }


@pytest.mark.parametrize("name", ["gpt2", "vit", "unet"])
def test_fixed_shapes_fold_all_shape_arithmetic_and_put_dense_math_on_ai_core(tmodels, name):
    model, options, feeds = _cases(tmodels)[name]
    g = xgraph.compile(model, options)
    ops = g.get_ops()
    assert not [op.name for op in ops if op.type in ("Shape", "Size")]
    devices = {op.name: op.get_attr("device") for op in ops}
    assert all(devices[op.name] == "AICORE" for op in ops if op.type in KEY)
    assert sum(d == "AICORE" for d in devices.values()) >= 0.95 * len(ops)
    with xgraph.create_graph_runner(g, kernels="numpy") as runner:
        got = runner.run(feeds)
    for a, b in zip(got, tmodels.onnxruntime_outputs(model, feeds)):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_two_layer_bert_with_fixed_shapes_is_all_ai_core(tmodels):
    g = xgraph.compile(tmodels.bert_like_encoder(layers=2), {"input_shape": "input_ids:1,16;attention_mask:1,16"})
    off = {op.name for op in g.get_ops() if op.get_attr("device") != "AICORE"}
    assert off == set()  # the int64 mask Cast included: Ascend's Cast takes int64
    assert len(g.get_ops()) == 74 and not any(op.type == "Shape" for op in g.get_ops())


@pytest.mark.parametrize("name", ["gpt2", "vit"])
def test_without_fixed_shapes_the_dense_ops_run_on_ai_core_and_the_summary_names_input_shape(tmodels, name):
    model, _, _ = _cases(tmodels)[name]
    r = xgraph.report(xgraph.compile(model))
    key = [o for o in r["ops"] if o["type"] in KEY]
    assert key and all(o["device"] == "AICORE" for o in key)  # dynamic-shape ops (aicore.toml: dynamic_dims)
    assert "input_shape" in r["dynamic"]["line"]


def test_the_loop_reaches_a_fixpoint_that_one_fold_pass_does_not(tmodels):
    g = xgraph.load(tmodels.gpt2_like())
    prep.apply_input_shape(g, {"input_ids": (1, 16)})
    one_pass = g.copy()
    prep.fold_constants(one_pass)
    assert any(op.type == "Shape" for op in one_pass.get_ops())  # Shape reads a run-time tensor
    summary = resolve_shapes(g, prep.fold_constants, prep.remove_dead_ops, prep.replace_by_weights)
    assert summary["shape_ops"] >= 9 and summary["folded_ops"] > 0
    assert not any(op.type in SHAPE_ARITH and all(t.dtype == np.int64 for t in op.get_output_tensors())
                   for op in g.get_ops())
    again = resolve_shapes(g, prep.fold_constants, prep.remove_dead_ops, prep.replace_by_weights)
    assert again == {"rounds": 1, "shape_ops": 0, "folded_ops": 0, "dead_ops": 0}
    assert all(t.is_static() for op in g.get_ops() for t in op.get_output_tensors())


def _shape_into(op_type: str, dims, extra_inputs=(), inits=()):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    nodes = [helper.make_node("Shape", ["x"], ["s"], name="shape"),
             helper.make_node(op_type, ["s", *extra_inputs], ["y"], name="consumer")]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], initializer=list(inits)),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_folding_keeps_its_memory_bound_for_results_of_shape_values():
    # Shape of a static 4096 x 4096 input folds (32 bytes), but ConstantOfShape of it would be 64 MB + 1
    model = _shape_into("ConstantOfShape", [4097, 4096])
    model.graph.node[1].attribute.extend([helper.make_attribute("value", numpy_helper.from_array(
        np.array([1.0], np.float32)))])
    g = xgraph.compile(model)
    assert [op.type for op in g.get_ops()] == ["ConstantOfShape"]
    assert g.get_tensor("s").is_const and g.get_tensor("s").data.tolist() == [4097, 4096]


def test_shape_of_a_symbolic_tensor_stays_and_slices_of_shape_fold():
    model = _shape_into("Identity", ["n", 3])
    g = xgraph.load(model)
    assert fold_shape_queries(g, prep.replace_by_weights) == 0
    sliced = helper.make_model(helper.make_graph(
        [helper.make_node("Shape", ["x"], ["y"], name="shape", start=-2, end=10)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 5])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, None)]), opset_imports=[helper.make_opsetid("", 17)])
    g = xgraph.load(sliced)
    g.set_outputs([])  # a graph output stays an op output: test the value on a consumer-free copy
    op = g.get_op("shape")
    from xgraph.compiler.shape_fixpoint import _query_value
    assert _query_value(op).tolist() == [3, 5]


def test_prepare_summary_counts_folded_shape_ops(tmodels):
    g = xgraph.load(tmodels.unet_like())
    summary = prep.prepare(g, parse_options({}))
    assert summary["folded_ops"] >= 4 and not any(op.type == "Shape" for op in g.get_ops())
