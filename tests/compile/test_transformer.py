"""A BERT-like encoder: dynamic shapes, input_shape, and shape computations kept on the device side."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import xgraph

DENSE = {"MatMul", "Add", "Div", "Mul", "Erf", "Softmax", "LayerNormalization", "Reshape", "Transpose", "Sub",
         "Unsqueeze"}


def devices_of(graph: xgraph.Graph) -> dict[str, str]:
    return {op.name: op.get_attr("device") for op in graph.get_ops()}


def test_dynamic_model_runs_on_ai_cpu_in_one_subgraph(models):
    g = xgraph.compile(models.bert_like_encoder())
    r = xgraph.report(g)
    assert r["devices"] == {"AICPU": {"subgraphs": 1, "ops": 47}} and r["crossings"] == 0
    assert any("needs static shapes; fix them with the input_shape option" in f["reason"] for f in r["fallbacks"])


def test_static_model_folds_the_shape_chain_and_puts_all_dense_math_on_ai_core(models):
    g = xgraph.compile(models.bert_like_encoder(), models.BERT_STATIC)
    models.check_compiled(g)
    r = xgraph.report(g)
    device = devices_of(g)
    # with fixed input shapes Shape -> Gather -> Unsqueeze -> Concat is constant: it folds into weights
    assert not set(device) & models.BERT_SHAPE_CHAIN
    assert r["prepare"]["folded_ops"] == len(models.BERT_SHAPE_CHAIN)
    assert {n for n, d in device.items() if d == "AICPU"} == {"mask_f"}
    assert all(device[op.name] == "AICORE" for op in g.get_ops() if op.type in DENSE)
    assert r["crossings"] == 0  # AI CPU shares device memory with AI Core
    assert r["devices"] == {"AICORE": {"subgraphs": 1, "ops": 39}, "AICPU": {"subgraphs": 1, "ops": 1}}
    reasons = {o["name"]: o["reason"] for o in r["ops"]}
    assert reasons["emb"] == ""  # the embedding lookup: float rows addressed by int64 ids
    assert reasons["mask_f"].startswith("AICORE: Cast with dtype int64 unsupported")
    assert reasons["l0_probs"] == ""


def test_small_islands_stay_on_the_device_despite_min_subgraph_ops(models):
    g = xgraph.compile(models.bert_like_encoder(), {**models.BERT_STATIC, "min_subgraph_ops": 8})
    r = xgraph.report(g)
    assert r["crossings"] == 0
    assert r["devices"] == {"AICORE": {"subgraphs": 1, "ops": 39}, "AICPU": {"subgraphs": 1, "ops": 1}}
    assert {o["name"]: o["reason"] for o in r["ops"]}["mask_f"].endswith(
        "kept on AICPU: sending this 1-op island to the host (min_subgraph_ops=8) would save no host/device copy")


def test_without_ai_cpu_only_the_int64_mask_cast_costs_a_copy(models):
    g = xgraph.compile(models.bert_like_encoder(), {**models.BERT_STATIC, "devices": "aicore,cpu"})
    r = xgraph.report(g)
    assert {n for n, d in devices_of(g).items() if d == "CPU"} == {"mask_f"}
    # the shape chain folded away, so no shape tensor goes up and ln0 no longer comes down; the
    # embedding Gather runs on AI Core, so its rows need no copy either
    assert [(e["tensor"], e["direction"]) for e in r["crossing_tensors"]] == [("mask_f", "H2D")]
    assert r["crossings"] == 1


@pytest.mark.parametrize("options", [{}, {"devices": "aicore,cpu"}, {"min_subgraph_ops": 100}])
def test_compiled_encoder_matches_onnxruntime(models, options):
    model = models.bert_like_encoder()
    g = xgraph.compile(model, {**models.BERT_STATIC, **options})
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 50, (1, 16)).astype(np.int64),
             "attention_mask": (np.arange(16) < 12).astype(np.int64)[None]}
    session_options = ort.SessionOptions()
    session_options.log_severity_level = 3
    expected = ort.InferenceSession(model.SerializeToString(), session_options).run(None, feeds)[0]
    with xgraph.create_graph_runner(g, kernels="numpy") as runner:
        got = runner.run(feeds)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)
