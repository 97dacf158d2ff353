"""Opset 23's fused ops and mask arithmetic on bool/int64 stay on AI Core, and run like onnxruntime."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xgraph
from testing.runtime import load_script

_models = load_script(Path(__file__).with_name("dynamic_models.py"), "compile_dynamic_models_23")
FUSED = {"Attention", "RMSNormalization", "RotaryEmbedding", "MatMul"}
SHAPE = "input_ids:1,1;position_ids:1,1;past:0..2048"


def _ort(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


def _feeds(past: int) -> dict:
    feeds = _models.llama_feeds(past)
    feeds["position_ids"] = np.array([[past]], np.int64)
    return feeds


@pytest.mark.parametrize("options", [None, {"input_shape": SHAPE}], ids=["dynamic", "past dynamic"])
def test_opset23_decoder_puts_its_fused_ops_on_ai_core(options):
    compiled = xgraph.compile(_models.llama_opset23(), options)
    r = xgraph.report(compiled)
    fused = [o for o in r["ops"] if o["type"] in FUSED]
    assert len(fused) == 2 * (2 + 2 + 1 + 7) + 2  # per layer: 2 norms, 2 rotary, attention, 7 projections
    assert all(o["device"] == "AICORE" for o in fused), [(o["name"], o["reason"]) for o in fused
                                                          if o["device"] != "AICORE"]
    assert r["crossings"] == 0
    if options:  # batch and sequence fixed: the shape arithmetic folds, the step is one AI Core subgraph
        assert r["devices"] == {"AICORE": {"subgraphs": 1, "ops": len(r["ops"])}}
        assert compiled.get_tensor("present_l0_k").shape == (1, 2, "past + 1", 8)


@pytest.mark.parametrize("past", [0, 4])
def test_opset23_decoder_runs_equal_to_onnxruntime(past):
    model = _models.llama_opset23()
    compiled = xgraph.compile(model, {"input_shape": SHAPE})
    feeds = _feeds(past)
    with xgraph.create_graph_runner(compiled, kernels="numpy") as runner:
        got = runner.run(feeds)
    kernels = {op.type: op.get_attr("kernel") for op in compiled.get_ops()}
    assert kernels["Attention"] == kernels["RotaryEmbedding"] == kernels["RMSNormalization"] == "numpy"
    for g, e in zip(got, _ort(model, feeds)):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)


def test_bert_mask_arithmetic_has_no_island_off_ai_core():
    model = _models.bert_mask()
    compiled = xgraph.compile(model)
    r = xgraph.report(compiled)
    types = {o["type"] for o in r["ops"]}
    assert {"Cast", "And", "Expand", "Flatten", "Reshape", "Gather", "Where", "Unsqueeze"} <= types
    assert r["devices"] == {"AICORE": {"subgraphs": 1, "ops": len(r["ops"])}}, r["fallbacks"]
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((1, 8, 16)).astype(np.float32),
             "attention_mask": (np.arange(8) < 6).astype(np.int64)[None]}
    for mode in ("run", "ref"):
        with xgraph.create_graph_runner(compiled, mode=mode, kernels="numpy") as runner:
            np.testing.assert_allclose(runner.run(feeds)[0], _ort(model, feeds)[0], rtol=1e-4, atol=1e-5)
