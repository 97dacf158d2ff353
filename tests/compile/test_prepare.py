"""The prepare stage (input shapes, output cut, constant folding, dead ops) and the compile-time copy."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import OptionError
from xgraph.compiler.options import parse_options
from xgraph.compiler.prepare import (
    apply_input_shape, copy_graph, cut_at_output_ops, fold_constants, prepare, remove_dead_ops)


def weights_model() -> onnx.ModelProto:
    """Weights made at run time as the zoo models make them: w = ConstantOfShape(shape) * 2 + 1, feeding a Conv;
    plus a RandomNormal-made bias and a dead branch."""
    init = [numpy_helper.from_array(np.array([2, 3, 1, 1], np.int64), "w_shape"),
            numpy_helper.from_array(np.array(2.0, np.float32), "two"),
            numpy_helper.from_array(np.array(1.0, np.float32), "one")]
    nodes = [
        helper.make_node("ConstantOfShape", ["w_shape"], ["w0"], name="make_w",
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Mul", ["w0", "two"], ["w1"], name="scale_w"),
        helper.make_node("Add", ["w1", "one"], ["w"], name="shift_w"),
        helper.make_node("RandomNormal", [], ["b"], name="make_b", shape=[2], seed=1.0),
        helper.make_node("Conv", ["x", "w", "b"], ["y"], name="conv"),
        helper.make_node("Relu", ["x"], ["dead"], name="dead_relu"),
        helper.make_node("Sigmoid", ["dead"], ["dead2"], name="dead_sigmoid"),
    ]
    g = helper.make_graph(nodes, "weights", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 4, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], initializer=init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_folding_makes_named_weights_with_the_right_values():
    g = xgraph.Graph.from_onnx(weights_model())
    assert fold_constants(g) == 3
    w = g.get_tensor("w")
    assert w.is_const and w.producer is None
    np.testing.assert_array_equal(w.data, np.full((2, 3, 1, 1), 0.5 * 2 + 1, np.float32))
    assert g.get_op("conv").get_input_tensors()[1] is w
    assert g.has_op("make_b")  # nondeterministic: never folded
    assert not any(g.has_op(n) for n in ("make_w", "scale_w", "shift_w"))


def test_folding_respects_the_size_limit():
    g = xgraph.Graph.from_onnx(weights_model())
    assert fold_constants(g, max_bytes=16) == 0  # the 24-byte weight stays computed
    assert g.has_op("make_w")


def test_dead_ops_and_unused_weights_go():
    g = xgraph.Graph.from_onnx(weights_model())
    fold_constants(g)
    assert remove_dead_ops(g) == 2
    assert not g.has_op("dead_relu") and not g.has_op("dead_sigmoid")
    assert not g.has_tensor("w_shape") and not g.has_tensor("two")
    from xgraph.ir.links import check_links
    check_links(g)


def test_input_shape_fixes_symbols_everywhere_and_reinfers(models):
    g = xgraph.Graph.from_onnx(models.bert_like_encoder())
    assert g.get_tensor("l0_probs").shape == ("batch", 4, "seq", "seq")
    apply_input_shape(g, {"input_ids": (1, 16), "attention_mask": (1, -1)})
    assert g.get_tensor("input_ids").shape == (1, 16)
    assert g.get_tensor("attention_mask").shape == (1, 16)  # "seq" was fixed through input_ids
    assert g.get_tensor("l0_probs").shape == (1, 4, 16, 16)
    assert g.get_tensor("l0_q_4d").shape == (1, 16, 4, 8)  # through the computed Reshape shape
    assert all(t.is_static() for op in g.get_ops() for t in op.get_output_tensors())


@pytest.mark.parametrize("shape, problem", [
    ({"ids": (1, 16)}, "'ids', which is not a graph input; the inputs are: input_ids, attention_mask"),
    ({"input_ids": (1, 16, 1)}, "gives 'input_ids' 3 dims, but the model declares rank 2 (batch, seq)"),
    ({"input_ids": (1, 16), "attention_mask": (2, 16)}, "gives symbolic dim 'batch' two values (1 and 2)"),
])
def test_input_shape_errors_change_nothing(models, shape, problem):
    g = xgraph.Graph.from_onnx(models.bert_like_encoder())
    with pytest.raises(OptionError) as e:
        apply_input_shape(g, shape)
    assert problem in str(e.value)
    assert g.get_tensor("input_ids").shape == ("batch", "seq")


def test_input_shape_cannot_contradict_a_fixed_dim(models):
    g = xgraph.Graph.from_onnx(models.cnn_with_lstm())
    with pytest.raises(OptionError, match="sets dim 1 of 'x' to 4, but the model fixes it at 3; use 3 or -1"):
        apply_input_shape(g, {"x": (1, 4, 4, 16)})


def test_output_ops_cut(models):
    g = xgraph.Graph.from_onnx(models.cnn_with_lstm())
    assert cut_at_output_ops(g, ["relu"]) == 5
    assert [op.name for op in g.get_ops()] == ["conv", "relu"]
    assert [t.name for t in g.get_output_tensors()] == ["relu"]
    assert sorted(t.name for t in g.get_const_tensors()) == ["cb", "cw"]
    with pytest.raises(OptionError, match="'rleu', which is not an op of graph 'cnn_lstm'; did you mean relu"):
        cut_at_output_ops(g, ["rleu"])


def test_prepare_summary_and_atomic_option_checks(models):
    g = xgraph.Graph.from_onnx(weights_model())
    with pytest.raises(OptionError):
        prepare(g, parse_options({"output_ops": "conv", "input_shape": "nope:1"}))
    assert g.has_op("make_w")  # nothing was folded before the bad option was found
    summary = prepare(g, parse_options({"input_shape": "x:1,3,4,4"}))
    assert summary == {"input_shape": {"x": [1, 3, 4, 4]}, "cut_ops": 0, "folded_ops": 3, "dead_ops": 2}
    assert g.get_tensor("y").shape == (1, 2, 4, 4)


def test_copy_is_lossless_and_independent(models):
    g = xgraph.Graph.from_onnx(models.cnn_with_lstm())
    g.set_attr("note", {"k": [1, 2]})
    g.get_op("conv").set_attr("my_annotation", "kept")
    g.get_tensor("relu").set_attr("layout", "NCHW")
    c = copy_graph(g)
    assert c.to_onnx().SerializeToString() == g.to_onnx().SerializeToString()
    assert c.get_attr("note") == {"k": [1, 2]}
    assert c.get_op("conv").is_annotation("my_annotation") and c.get_op("conv").get_attr("my_annotation") == "kept"
    assert c.get_tensor("relu").get_attr("layout") == "NCHW"
    assert [op.name for op in c.toposort()] == [op.name for op in g.toposort()]
    c.get_op("fc").set_attr("transB", 0)
    c.set_outputs(["logits"])
    assert g.get_op("fc").get_attr("transB") == 1 and [t.name for t in g.get_output_tensors()] == ["prob"]


def test_compile_never_changes_the_callers_graph_model_or_file(models, tmp_path):
    model = models.cnn_with_lstm()
    g = xgraph.Graph.from_onnx(model)
    before = g.to_onnx().SerializeToString()
    proto_before = model.SerializeToString()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    file_before = path.read_bytes()
    for source in (g, model, path, str(path), model.SerializeToString()):
        compiled = xgraph.compile(source, {"min_subgraph_ops": 2})
        assert compiled is not g and compiled.get_root_subgraph().get_children_num() == 3
    assert g.get_root_subgraph().is_leaf and not any(op.has_attr("device") for op in g.get_ops())
    assert g.to_onnx().SerializeToString() == before
    assert model.SerializeToString() == proto_before
    assert path.read_bytes() == file_before
