"""xgraph.compile end to end on small models: attrs, kernels, progress, plugins, report, recompiling."""
from __future__ import annotations

import json
import textwrap

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.errors import PartitionError, PluginError
from xgraph.compiler.options import parse_options

RELU_PLUGIN = '''
from xgraph.partition import filter_by_type, merge_subgraph
from xgraph.plugins import Plugin


class ReluPlugin(Plugin):
    def get_device(self):
        return "SMFC"

    def partition(self, graph):
        return merge_subgraph(filter_by_type(graph, "Relu"))


def get_plugin():
    return ReluPlugin()
'''


def test_graph_attrs_and_op_annotations(models):
    options = {"min_subgraph_ops": 2, "precision_mode": "force_fp16"}
    g = xgraph.compile(models.cnn_with_lstm(), json.dumps(options))
    assert json.loads(g.get_attr("compile_options")) == parse_options(options).to_dict()
    assert g.get_attr("precision_mode") == "force_fp16"
    assert g.get_attr("prepare_summary")["folded_ops"] == 0 and g.get_attr("plugin_runs") == []
    kernels = {op.name: op.get_attr("kernel") for op in g.get_ops()}
    assert kernels["lstm"] == "reference" and kernels["conv"] == "numpy" and kernels["softmax"] == "numpy"
    for op in g.get_ops():
        assert all(op.is_annotation(k) for k in ("device", "placement_reason", "kernel"))
    assert "device" not in {a.name for n in g.to_onnx().graph.node for a in n.attribute}


def test_progress_reports_every_stage_in_order(models):
    seen = []
    xgraph.compile(models.cnn_with_lstm(), progress=lambda stage, i, n: seen.append((stage, i, n)))
    assert seen == [("load", 0, 5), ("prepare", 1, 5), ("plugins", 2, 5), ("placement", 3, 5), ("kernels", 4, 5),
                    ("done", 5, 5)]


def test_report_is_consistent_with_the_graph(models):
    g = xgraph.compile(models.cnn_with_lstm())
    r = xgraph.report(g)
    assert set(r) >= {"ops", "subgraphs", "devices", "crossings", "fallbacks", "reference_ops"}
    assert [o["name"] for o in r["ops"]] == [op.name for op in g.toposort()]
    assert sorted(n for s in r["subgraphs"] for n in s["ops"]) == sorted(op.name for op in g.get_ops())
    by_name = {s["name"]: s for s in r["subgraphs"]}
    for o in r["ops"]:
        assert o["name"] in by_name[o["subgraph"]]["ops"] and by_name[o["subgraph"]]["device"] == o["device"]
    assert r["devices"] == {"AICORE": {"subgraphs": 2, "ops": 6}, "CPU": {"subgraphs": 1, "ops": 1}}
    lstm = by_name["subgraph_lstm"]
    assert lstm == {"name": "subgraph_lstm", "device": "CPU", "runner": {"run": "cpu", "sim": "cpu", "ref": "cpu"},
                    "ops": ["lstm"], "inputs": ["seq"], "outputs": ["h"]}
    assert r["fallbacks"] == [{"device": "CPU", "reason": "AICORE, AICPU, DVPP: LSTM is not in its op-info library",
                               "count": 1, "ops": ["lstm"]}]
    assert r["reference_ops"] == [{"name": "lstm", "type": "LSTM", "device": "CPU"}]
    assert r["crossings"] == 2 and json.loads(json.dumps(r)) == r


def test_report_needs_a_compiled_graph(models):
    with pytest.raises(PartitionError, match="not compiled.*run xgraph.compile first"):
        xgraph.report(xgraph.Graph.from_onnx(models.cnn_with_lstm()))


def test_plugins_run_first_and_their_ops_are_left_alone(models, tmp_path):
    (tmp_path / "relu_plugin.py").write_text(textwrap.dedent(RELU_PLUGIN))
    g = xgraph.compile(models.cnn_with_lstm(), {"plugins": "relu_plugin"}, plugin_path=[str(tmp_path)])
    models.check_compiled(g)
    relu = g.get_op("relu")
    assert (relu.get_attr("device"), relu.get_attr("kernel")) == ("SMFC", "plugin")
    assert relu.get_attr("placement_reason") == "chosen by plugin 'relu_plugin'"
    sg = g.get_root_subgraph().find_child_subgraph_by_op("relu")
    assert sg.get_attr("device") == "SMFC" and sg.get_ops() == {relu}
    assert g.get_op("conv").get_attr("device") == "AICORE"
    assert g.get_attr("plugin_runs")[0]["subgraphs"] == [sg.name]
    assert sg.get_attr("memory") == "device"  # a plugin's buffers are device memory unless it says otherwise
    assert xgraph.report(g)["crossings"] == 2  # only the LSTM's copies remain
    sg.set_attr("memory", "host")
    assert xgraph.report(g)["crossings"] == 4  # a host-memory IP: copies in and out of it too


def test_unknown_plugin_is_a_plugin_error(models, tmp_path):
    with pytest.raises(PluginError, match="nosuchplugin"):
        xgraph.compile(models.cnn_with_lstm(), {"plugins": "nosuchplugin"}, plugin_path=[str(tmp_path)])


def test_precision_mode_moves_fp16_only_ops_to_ai_core(models):
    model = models.chain([("Relu", {}), ("LRN", {"size": 3}), ("Relu", {})])
    assert [o["device"] for o in xgraph.report(xgraph.compile(model))["ops"]] == ["AICORE", "AICPU", "AICORE"]
    g = xgraph.compile(model, {"precision_mode": "allow_fp32_to_fp16"})
    assert xgraph.report(g)["devices"] == {"AICORE": {"subgraphs": 1, "ops": 3}}


def test_output_ops_through_compile(models):
    g = xgraph.compile(models.cnn_with_lstm(), {"output_ops": "to_seq"})
    assert [t.name for t in g.get_output_tensors()] == ["seq"]
    assert xgraph.report(g)["devices"] == {"AICORE": {"subgraphs": 1, "ops": 3}}


def test_compiling_a_compiled_graph_or_xmodel_starts_afresh(models, tmp_path):
    first = xgraph.compile(models.cnn_with_lstm())
    again = xgraph.compile(first, {"devices": "aicpu"})
    assert xgraph.report(again)["devices"] == {"AICPU": {"subgraphs": 2, "ops": 6}, "CPU": {"subgraphs": 1, "ops": 1}}
    assert first.get_op("conv").get_attr("device") == "AICORE"
    path = tmp_path / "m.xmodel"
    first.serialize(path)
    from_file = xgraph.compile(path)
    assert xgraph.report(from_file)["devices"] == xgraph.report(first)["devices"]


def if_model():
    """y = If(sum(x) > 0, then: Relu(r), else: Neg(r)) where r = Relu(x) is read by the branches by name only."""
    then_g = helper.make_graph([helper.make_node("Relu", ["r"], ["t"])], "then", [],
                               [helper.make_tensor_value_info("t", TensorProto.FLOAT, [2])])
    else_g = helper.make_graph([helper.make_node("Neg", ["r"], ["e"])], "else", [],
                               [helper.make_tensor_value_info("e", TensorProto.FLOAT, [2])])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("ReduceSum", ["x"], ["s"], name="sum", keepdims=0),
             helper.make_node("Greater", ["s", "zero"], ["cond"], name="gt"),
             helper.make_node("If", ["cond"], ["y"], name="if", then_branch=then_g, else_branch=else_g)]
    g = helper.make_graph(nodes, "if_model", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
                          initializer=[numpy_helper.from_array(np.array(0, np.float32), "zero")])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_tensors_read_by_nested_graphs_keep_their_producer_in_the_same_subgraph():
    g = xgraph.compile(if_model())
    assert g.has_op("relu")  # read only by the If branches: not dead
    sg = g.get_root_subgraph().find_child_subgraph_by_op("if")
    assert {op.name for op in sg.get_ops()} == {"relu", "if"} and sg.get_attr("device") == "CPU"
    assert g.get_op("relu").get_attr("placement_reason") == \
        "AICORE, AICPU: refused 'if', which shares its subgraph; DVPP: Relu is not in its op-info library"
    with xgraph.create_graph_runner(g, kernels="numpy") as runner:
        np.testing.assert_array_equal(runner.run({"x": np.array([1, -3], np.float32)})[0], [-1, 0])
        np.testing.assert_array_equal(runner.run({"x": np.array([3, -1], np.float32)})[0], [3, 0])
    cut = xgraph.compile(if_model(), {"output_ops": "if"})
    assert {op.name for op in cut.get_ops()} == {"relu", "sum", "gt", "if"}
