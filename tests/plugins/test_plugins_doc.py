"""docs/plugins.md's ext_npu example works as written: the hand-off to an external compiler through
Subgraph.to_onnx() (the runner's names, order, dtypes and shapes), template roles, a decline, declared options,
and results equal to onnxruntime on the whole model."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import OptionError, PluginError

DOC = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"
ort = pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def plugin_dir(doc_plugin) -> Path:
    return doc_plugin(DOC, "# my_plugins/ext_npu.py", "ext_npu")


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((4, 4)).astype(np.float32), n) for n in ("w1", "w2")]
    biases = [numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), n) for n in ("b1", "b2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"], name="mm1"),
             helper.make_node("Add", ["m1", "b1"], ["a1"], name="add1"),
             helper.make_node("Softmax", ["a1"], ["s"], name="softmax"),
             helper.make_node("Sigmoid", ["s"], ["g"], name="sig"),
             helper.make_node("MatMul", ["g", "w2"], ["m2"], name="mm2"),
             helper.make_node("Add", ["m2", "b2"], ["a2"], name="add2"),
             helper.make_node("Erf", ["a2"], ["y"], name="erf")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, ["batch", 4])],
                              weights + biases)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def compiled(plugin_dir, model):
    return xgraph.compile(model, {"plugins": "ext_npu"}, plugin_path=[str(plugin_dir)])


def test_the_example_takes_one_block_and_declines_the_other(compiled):
    children = {sg.name: sg for sg in compiled.get_root_subgraph().get_children()}
    taken = children["subgraph_add1"]
    assert taken.get_attr("device") == "EXTNPU"
    assert {op.name for op in taken.get_ops()} == {"mm1", "add1", "softmax"}
    assert taken.get_attr("template_matches") == [
        {"template": "scores", "roles": {"matmul": "mm1", "bias": "add1", "act": "softmax"}}]
    assert taken.get_attr("ext_npu_fused") == ["softmax"]
    [run] = compiled.get_attr("plugin_runs")
    assert run["options"] == {"max_ops": 16}
    assert run["declined"] == [{"subgraph": "subgraph_add2", "ops": ["mm2", "add2", "erf"],
                                "reason": "the ext_npu compiler has no Erf"}]
    for name in ("mm2", "add2", "erf"):
        assert compiled.get_op(name).get_attr("placement_reason").startswith(
            "plugin 'ext_npu' declined: the ext_npu compiler has no Erf")


def test_to_onnx_has_the_runners_inputs_and_outputs(compiled):
    for sg in compiled.get_root_subgraph().get_children():
        proto = sg.to_onnx()
        onnx.checker.check_model(proto)
        for values, tensors in ((proto.graph.input, sg.get_input_tensors()),
                                (proto.graph.output, sg.get_output_tensors())):
            assert [v.name for v in values] == [t.name for t in tensors]
            for v, t in zip(values, tensors):
                assert helper.tensor_dtype_to_np_dtype(v.type.tensor_type.elem_type) == t.dtype
                dims = tuple(d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim)
                assert dims == tuple(t.shape)
        initializers = {i.name for i in proto.graph.initializer}
        assert initializers == {t.name for t in sg.get_const_tensors()}
        assert not initializers & {v.name for v in proto.graph.input}


def test_external_weights_leave_the_arrays_out(compiled):
    sg = compiled.get_root_subgraph().find_child_subgraph_by_op("mm1")
    small = sg.to_onnx(external_weights=True)  # 4x4 float32 weights are under 4 KiB: still inline
    assert all(not i.external_data for i in small.graph.initializer)


def test_results_equal_onnxruntime_on_the_whole_model(compiled, model):
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    with xgraph.create_graph_runner(compiled) as runner:
        got = runner.run({"x": x})
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for g, w in zip(got if isinstance(got, list) else list(got.values()), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_option_typo_and_strict_mode(plugin_dir, model):
    with pytest.raises(OptionError, match=r"'max_op' \(did you mean 'max_ops'\?\)"):
        xgraph.compile(model, {"plugins": "ext_npu", "plugin_options": {"ext_npu": {"max_op": 2}}},
                       plugin_path=[str(plugin_dir)])
    compiled = xgraph.compile(model, {"plugins": "ext_npu", "plugin_options": {"ext_npu": {"max_ops": 2}}},
                              plugin_path=[str(plugin_dir)])
    assert [d["reason"] for d in compiled.get_attr("plugin_runs")[0]["declined"]] == [
        "3 ops, more than max_ops=2", "the ext_npu compiler has no Erf"]
    with pytest.raises(PluginError, match="declined subgraph 'subgraph_add2'.*has no Erf.*strict_plugins"):
        xgraph.compile(model, {"plugins": "ext_npu", "strict_plugins": True}, plugin_path=[str(plugin_dir)])
