"""`Where` with a weight condition that is all true (all false) becomes the input it selects, and
only when nothing a reader sees changes (shape, dtype, graph outputs)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.compiler.prepare import fold_constants

ort = pytest.importorskip("onnxruntime")


def _model(cond: np.ndarray, x_shape=(2, 3), y=np.float32(-1e4), where_is_output=False) -> onnx.ModelProto:
    """y = Relu(Where(cond, Sin(x), y)) (or the Where's result itself as the graph output)."""
    init = [numpy_helper.from_array(cond, "cond"), numpy_helper.from_array(np.asarray(y, np.float32), "other")]
    nodes = [helper.make_node("Sin", ["x"], ["s"], name="sin"),
             helper.make_node("Where", ["cond", "s", "other"], ["w"], name="where")]
    out = "w"
    if not where_is_output:
        nodes.append(helper.make_node("Relu", ["w"], ["y"], name="relu"))
        out = "y"
    g = helper.make_graph(nodes, "select", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x_shape))],
                          [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], initializer=init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _same_as_onnxruntime(model: onnx.ModelProto, compiled: xgraph.Graph, shape=(2, 3)) -> None:
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    with xgraph.create_graph_runner(compiled) as runner:
        got = runner.run({"x": x})
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("value", [True, False])
def test_a_constant_condition_selects_its_branch_and_the_where_goes(value):
    model = _model(np.full((2, 3), value, bool), y=np.full((2, 3), 0.25, np.float32) if not value else -1e4)
    g = xgraph.Graph.from_onnx(model)
    assert fold_constants(g) == 1
    assert not g.has_op("where")
    reads = g.get_op("relu").get_input_tensors()[0]
    assert reads.name == ("s" if value else "other")
    assert not g.has_tensor("w")
    _same_as_onnxruntime(model, xgraph.compile(model))


def test_a_broadcast_condition_selects_too_when_the_branch_has_the_result_shape():
    model = _model(np.ones((1, 3), bool))  # the decoder's mask row: (1, P+1) against scores (.., 1, P+1)
    g = xgraph.Graph.from_onnx(model)
    assert fold_constants(g) == 1 and not g.has_op("where")
    _same_as_onnxruntime(model, xgraph.compile(model))


@pytest.mark.parametrize("why, model", [
    ("mixed condition", _model(np.array([[True, False, True], [True, True, True]]))),
    ("the condition broadcasts the result", _model(np.ones((4, 2, 3), bool))),
    ("the other branch broadcasts the result", _model(np.ones((2, 3), bool), y=np.zeros((5, 2, 3), np.float32))),
    ("the result is a graph output", _model(np.ones((2, 3), bool), where_is_output=True)),
    ("shapes unknown", _model(np.ones((2, 3), bool), x_shape=("n", 3))),
])
def test_a_where_that_still_has_work_stays(why, model):
    g = xgraph.Graph.from_onnx(model)
    fold_constants(g)
    assert g.has_op("where"), why
    shape = (2, 3)
    _same_as_onnxruntime(model, xgraph.compile(model), shape)


def test_a_decoders_causal_mask_for_one_token_is_gone_on_every_gear():
    from pathlib import Path

    from testing.runtime import load_script
    sample = Path(__file__).resolve().parents[2] / "samples" / "generate"
    gen = load_script(sample / "generate.py", "generate_for_select_fold")
    model = onnx.load(sample / "decoder.onnx")
    assert sum(n.op_type == "Where" for n in model.graph.node) == 2  # one causal mask per layer
    g = xgraph.compile(model, gen.gear_options([0, 1, 7]))
    for gear in g.get_gears():
        assert not [op.name for op in gear.graph.get_ops() if op.type == "Where"], gear.name
    dynamic = xgraph.compile(model, gen.cache_shape_option())  # the mask depends on the run-time past length
    assert sum(op.type == "Where" for op in dynamic.get_ops()) == 2
