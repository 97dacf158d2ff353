"""How plugins and readers see a QDQ unit: as the quantized op it is.

The report and the xcompile summary name units as int8 ops ("Conv (int8, per-channel)"); a
plugin's template or type filter that matches the op receives the whole unit (docs/plugins.md).
"""
from __future__ import annotations

import onnx
import pytest

pytest.importorskip("onnxruntime.quantization")

import xgraph  # noqa: E402
from xgraph.cli.xcompile import main as xcompile  # noqa: E402
from xgraph.compiler.qdq_units import QDQ_TYPES  # noqa: E402
from testing.int8_models import mobilenet_float, qdq_mobilenet, quantize_qdq, random_inputs  # noqa: E402
from tests.quant.opset_models import qdq_conv_add  # noqa: E402


@pytest.fixture(scope="module")
def mobilenet() -> onnx.ModelProto:
    return qdq_mobilenet()


def test_the_report_names_each_unit_as_its_int8_op(mobilenet):
    report = xgraph.report(xgraph.compile(mobilenet))
    labels = {u["op"]: u["label"] for u in report["int8_units"]}
    assert labels["stem"] == labels["dw1"] == "Conv (int8, per-channel)"  # Relu6 folded into the stem's range
    assert labels["fc"] == "Gemm (int8, per-channel)"
    assert labels["gap"] == "GlobalAveragePool (int8)"
    per_tensor = quantize_qdq(mobilenet_float(), random_inputs((1, 3, 32, 32), 4, 1), per_channel=False)
    labels = {u["op"]: u["label"] for u in xgraph.report(xgraph.compile(per_tensor))["int8_units"]}
    assert labels["stem"] == "Conv (int8, per-tensor)"


def test_labels_name_both_types_when_weights_and_activations_differ():
    for activation, weight, want in (("uint8", "int8", "Conv (int8, per-tensor)"),
                                     ("int16", "int8", "Conv (int8 weights, int16 activations, per-channel)"),
                                     ("int8", "int4", "Conv (int4 weights, int8 activations, per-channel)")):
        model = qdq_conv_add(21, activation, weight, per_channel=activation != "uint8")
        units = xgraph.report(xgraph.compile(model))["int8_units"]
        assert {u["op"]: u["label"] for u in units}["conv"] == want
        assert {u["op"]: u["label"] for u in units}["add"] == f"Add ({activation})"


def test_xcompile_prints_the_units_per_device(mobilenet, tmp_path, capsys):
    path = tmp_path / "m.onnx"
    onnx.save(mobilenet, str(path))
    assert xcompile([str(path), "-o", str(tmp_path / "m.xmodel")]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("int8 units on ")]
    assert len(lines) == 1 and lines[0].startswith("int8 units on AICORE: ")
    assert "Conv (int8, per-channel)" in lines[0] and "1 Gemm (int8, per-channel)" in lines[0]


PLUGIN = """
from xgraph import GraphTemplate
from xgraph.partition import filter_by_template, merge_subgraph
from xgraph.plugins import Plugin

class P(Plugin):
    def get_plugin_name(self):
        return "gemm_ip"
    def get_device(self):
        return "CPU"
    def get_runner(self):
        return {"run": "cpu", "sim": "cpu", "ref": "cpu"}
    def partition(self, graph):
        t = GraphTemplate("fc")
        t.add_op("fc", {"Gemm"})
        return merge_subgraph(filter_by_template(graph, t))
    def compile(self, subgraph):
        subgraph.set_attr("seen_ops", sorted(op.type for op in subgraph.get_ops()))

def get_plugin():
    return P()
"""


def test_a_template_matching_the_op_takes_its_whole_unit(mobilenet, tmp_path):
    (tmp_path / "gemm_ip.py").write_text(PLUGIN)
    compiled = xgraph.compile(mobilenet, {"plugins": "gemm_ip"}, plugin_path=[str(tmp_path)])
    report = xgraph.report(compiled)
    unit = next(u for u in report["int8_units"] if u["op"] == "fc")
    subgraph_of = {o["name"]: o["subgraph"] for o in report["ops"]}
    (taken,) = report["plugins"][0]["subgraphs"]
    assert {subgraph_of[n] for n in unit["ops"]} == {taken}  # the Gemm with its weight, bias and activation DQs, its Q
    assert report["plugins"][0]["ops"] == len(unit["ops"]) > 1
    types = [o["type"] for o in report["ops"] if o["subgraph"] == taken]
    assert types.count("Gemm") == 1 and set(types) - {"Gemm"} <= QDQ_TYPES | {"Flatten"} and "QuantizeLinear" in types


def test_an_op_reading_a_float_tensor_is_named_by_what_it_quantizes_to():
    from onnx import TensorProto, helper, numpy_helper
    import numpy as np
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("QuantizeLinear", ["r", "s", "z"], ["q"], name="q"),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], name="dq")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
                              [numpy_helper.from_array(np.array(0.1, np.float32), "s"),
                               numpy_helper.from_array(np.int8(0), "z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    (unit,) = xgraph.report(xgraph.compile(model))["int8_units"]
    assert unit["label"] == "Relu (int8 output)" and sorted(unit["ops"]) == ["dq", "q", "relu"]
