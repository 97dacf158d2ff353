"""QDQ and QOperator models at every opset onnx knows from 10 on: imported, placed and run in every mode,
equal to onnx's reference evaluator (and onnxruntime where it loads the opset); int16/int4 on the host.

Every opset runs the symmetric int8 QDQ net (per-tensor; per-channel from 13, where
DequantizeLinear takes an axis) and the QOperator net; the other element types and asymmetric
variants run at the opsets that introduced them and at the newest.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest

ort = pytest.importorskip("onnxruntime")

import xgraph  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from xgraph.kernels.reference_fixes import evaluator_fixes  # noqa: E402
from testing.int8_models import qoperator_net  # noqa: E402
from xgraph.runners.int8_numerics import contrib_reference_ops  # noqa: E402
from tests.quant.opset_models import QTYPES, qdq_conv_add  # noqa: E402

NEWEST = onnx.defs.onnx_opset_version()
OPSETS = list(range(10, NEWEST + 1))
SOME = sorted({10, 13, 19, 21, NEWEST})
#: (activation, weight, symmetric, per_channel) and the opsets each runs at
VARIANTS = [(("int8", "int8", True, False), OPSETS), (("int8", "int8", True, True), OPSETS[3:]),
            (("uint8", "int8", False, False), SOME), (("uint8", "uint8", False, True), SOME[1:]),
            (("int16", "int8", True, True), SOME[3:]), (("uint16", "int8", False, False), SOME[3:]),
            (("int8", "int4", True, True), SOME[3:]), (("uint8", "uint4", False, False), SOME[3:])]
CASES = [pytest.param(opset, *v, id=f"{opset}-{v[0]}-{v[1]}-{'sym' if v[2] else 'asym'}-{'pc' if v[3] else 'pt'}")
         for v, opsets in VARIANTS for opset in opsets]


def _onnxruntime(model: onnx.ModelProto, feed: dict):
    """onnxruntime's outputs, or None where it does not load the model (an opset newer than it knows)."""
    try:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises several types for "cannot load"
        if "opset" in str(e).lower() or "NOT_IMPLEMENTED" in str(e) or "Could not find an implementation" in str(e):
            return None
        raise
    return session.run(None, feed)


def _check_modes(model, feed, step, oracle):
    compiled = xgraph.compile(model)
    theirs = _onnxruntime(model, feed)
    for mode, kernels in (("run", "numpy"), ("sim", "numpy"), ("ref", "auto")):
        with xgraph.create_graph_runner(compiled, mode=mode, kernels=kernels) as runner:
            got = runner.run(feed)[0]
        # Integer units may be one step from the float-simulated QDQ (and from onnxruntime's own
        # integer kernels); the nets chain two units, so the output may be two steps off.
        if mode == "ref":
            np.testing.assert_array_equal(got, oracle)
        else:
            assert np.abs(got - oracle).max() <= 2 * step * 1.0001, mode
        if theirs is not None:
            assert np.abs(got - theirs[0]).max() <= 2 * step * 1.0001, (mode, "onnxruntime")
    return xgraph.report(compiled)


@pytest.mark.parametrize("opset,activation,weight,symmetric,per_channel", CASES)
def test_qdq_net_runs_in_every_mode_equal_to_the_reference(opset, activation, weight, symmetric, per_channel):
    model = qdq_conv_add(opset, activation, weight, symmetric=symmetric, per_channel=per_channel)
    assert model.opset_import[0].version == opset
    x = np.random.default_rng(opset).uniform(-1, 1, (1, 4, 6, 6)).astype(np.float32)
    oracle = ReferenceEvaluator(model, new_ops=evaluator_fixes()).run(None, {"x": x})[0]
    step = float(onnx.numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == "y_scale")))
    report = _check_modes(model, {"x": x}, step, oracle)
    ops = {o["name"]: o for o in report["ops"]}
    unit = next(u for u in report["int8_units"] if u["op"] == "conv")
    width = {"int4": 4, "uint4": 4, "int8": 8, "uint8": 8, "int16": 16, "uint16": 16}
    types = weight if width[weight] == width[activation] else f"{weight} weights, {activation} activations"
    assert unit["label"] == f"Conv ({types}, {'per-channel' if per_channel else 'per-tensor'})"
    assert len({ops[n]["device"] for n in unit["ops"]}) == 1  # the unit stays together wherever it goes
    wide = activation in ("int16", "uint16") or weight in ("int4", "uint4")
    if wide:  # AI Core refuses 16-bit and 4-bit quantization, naming the type
        assert ops["conv"]["device"] != "AICORE"
        kind = activation if activation in ("int16", "uint16") else weight
        reasons = " ".join(o.get("reason", "") for o in ops.values())
        assert f"AICORE: DequantizeLinear with dtype {kind} unsupported" in reasons or (
            "AI Core requantizes to int8 or uint8 only" in reasons), reasons
    elif symmetric and weight == "int8":
        assert ops["conv"]["device"] == "AICORE"
    else:  # asymmetric or uint8 weights: refused with the reason
        assert ops["conv"]["device"] != "AICORE"
        assert "weight" in ops["dq_w"]["reason"]


@pytest.mark.parametrize("opset", OPSETS)
def test_qoperator_net_runs_in_every_mode_equal_to_the_reference(opset):
    model = qoperator_net(opset=opset)
    x = np.random.default_rng(opset).uniform(0, 1, (1, 3, 12, 12)).astype(np.float32)
    oracle = ReferenceEvaluator(model, new_ops=evaluator_fixes() + contrib_reference_ops()).run(None, {"x": x})[0]
    report = _check_modes(model, {"x": x}, 0.1, oracle)
    types = {o["type"] for o in report["ops"]}
    assert {"QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger", "QLinearAdd"} <= types
    assert ("DynamicQuantizeLinear" in types) == (opset >= 11)


def test_the_matrix_covers_every_element_type_onnx_quantizes_to():
    covered = {kind for (activation, weight, _, _), _ in VARIANTS for kind in (activation, weight)}
    assert covered == set(QTYPES)
    assert OPSETS[0] == 10 and OPSETS[-1] == NEWEST >= 21
