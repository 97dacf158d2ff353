"""QDQ units in placement: DQ -> op -> Q stays on one device; no Q or DQ alone; constant DQs stay with their op."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

pytest.importorskip("onnxruntime.quantization")

import xgraph  # noqa: E402
from xgraph.compiler.qdq_units import QDQ_TYPES, qdq_units  # noqa: E402
from tests.quant.models import quantize, small_cnn  # noqa: E402


@pytest.fixture(scope="module")
def qdq_model() -> onnx.ModelProto:
    return quantize(small_cnn())


def _device_of(report: dict) -> dict[str, str]:
    return {o["name"]: o["device"] for o in report["ops"]}


def test_every_q_and_dq_is_in_a_unit_with_an_op(qdq_model):
    g = xgraph.compile(qdq_model)
    units = qdq_units(g)
    covered = {op for u in units for op in u}
    qdq = [op for op in g.get_ops() if op.type in QDQ_TYPES]
    assert qdq and all(op in covered for op in qdq)
    assert all(any(op.type not in QDQ_TYPES for op in u) for u in units)
    conv_units = [u for u in units if any(op.name == "conv1" for op in u)]
    assert len(conv_units) == 1
    types = sorted(op.type for op in conv_units[0])
    # input DQ, weight DQ, bias DQ, the Conv and its output Q (the model-input Q joins too)
    assert types.count("DequantizeLinear") == 3 and types.count("Conv") == 1 and "QuantizeLinear" in types


def test_quantized_cnn_is_all_on_aicore_with_biases_kept_int8(qdq_model):
    compiled = xgraph.compile(qdq_model)
    rep = xgraph.report(compiled)
    assert set(rep["devices"]) == {"AICORE"}, rep["devices"]
    # the int32 bias DequantizeLinear is kept (not folded into a float constant) and sits with its Conv
    bias_dq = [o for o in rep["ops"] if o["type"] == "DequantizeLinear" and o["name"].startswith("b1")]
    assert len(bias_dq) == 1
    conv = next(o for o in rep["ops"] if o["name"] == "conv1")
    assert bias_dq[0]["subgraph"] == conv["subgraph"]
    labels = {u["op"]: u["label"] for u in rep["int8_units"]}
    assert labels["conv1"] == "Conv (int8, per-channel)"
    assert labels["fc"] == "Gemm (int8, per-channel)"


def test_no_subgraph_is_only_q_or_dq_when_devices_split(qdq_model):
    # MaxPool refused on AI Core (devices without it): its unit moves whole, Q/DQ with it
    compiled = xgraph.compile(qdq_model, {"devices": "aicpu,cpu"})
    rep = xgraph.report(compiled)
    types = {o["name"]: o["type"] for o in rep["ops"]}
    for sg in rep["subgraphs"]:
        assert any(types[n] not in QDQ_TYPES for n in sg["ops"]), sg
    dev = _device_of(rep)
    for unit in rep["int8_units"]:
        assert len({dev[n] for n in unit["ops"]}) == 1, unit


def test_asymmetric_weights_send_the_whole_unit_to_the_host_with_a_reason(qdq_model):
    model = onnx.ModelProto()
    model.CopyFrom(qdq_model)
    for init in model.graph.initializer:
        if init.name == "w1_zero_point":
            arr = onnx.numpy_helper.to_array(init).copy()
            arr[...] = 1
            init.CopyFrom(onnx.numpy_helper.from_array(arr, init.name))
    rep = xgraph.report(xgraph.compile(model))
    dev = _device_of(rep)
    unit = next(u for u in rep["int8_units"] if u["op"] == "conv1")
    assert {dev[n] for n in unit["ops"]} == {"AICPU"}
    w_dq = next(o for o in rep["ops"] if o["name"] == "w1_DequantizeLinear")
    assert "asymmetric" in w_dq["reason"]
    conv = next(o for o in rep["ops"] if o["name"] == "conv1")
    assert "shares its subgraph" in conv["reason"]
    assert dev["conv2"] == "AICORE"


def test_int16_activations_stay_off_aicore():
    model = quantize(small_cnn(seed=2), activation="int8")
    # rewrite the logits quantizer to int16: QuantizeLinear -> int16 zero point
    for init in model.graph.initializer:
        if init.name == "logits_zero_point":
            init.CopyFrom(onnx.numpy_helper.from_array(np.zeros((), np.int16), init.name))
    rep = xgraph.report(xgraph.compile(model))
    dev = _device_of(rep)
    q = next(o for o in rep["ops"] if o["name"] == "logits_QuantizeLinear")
    assert q["device"] != "AICORE" and "int8 or uint8 only" in q["reason"]
    assert dev["fc"] == q["device"]


def test_a_plugin_filter_that_matches_the_op_takes_the_whole_unit(qdq_model, tmp_path):
    (tmp_path / "convs_on_cpu.py").write_text(
        "from xgraph.partition import filter_by_type, merge_subgraph\n"
        "from xgraph.plugins import Plugin\n"
        "class P(Plugin):\n"
        "    def get_plugin_name(self):\n"
        "        return 'convs_on_cpu'\n"
        "    def get_device(self):\n"
        "        return 'CPU'\n"
        "    def get_runner(self):\n"
        "        return {'run': 'cpu', 'sim': 'cpu', 'ref': 'cpu'}\n"
        "    def partition(self, graph):\n"
        "        return merge_subgraph(filter_by_type(graph, 'Conv'))\n"
        "    def compile(self, subgraph):\n"
        "        pass\n"
        "def get_plugin():\n"
        "    return P()\n")
    try:
        compiled = xgraph.compile(qdq_model, {"plugins": "convs_on_cpu"}, plugin_path=[str(tmp_path)])
    except xgraph.errors.XGraphError as e:  # the plugin protocol may need more; say why
        pytest.fail(str(e))
    rep = xgraph.report(compiled)
    sub = {o["name"]: o["subgraph"] for o in rep["ops"]}
    unit = next(u for u in rep["int8_units"] if u["op"] == "conv1")
    assert len({sub[n] for n in unit["ops"]}) == 1
    assert rep["plugins"][0]["ops"] == len(unit["ops"]) + len(
        next(u for u in rep["int8_units"] if u["op"] == "conv2")["ops"])
