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


def test_dynamic_model_puts_dense_math_on_ai_core_and_shape_arithmetic_on_ai_cpu(models):
    g = xgraph.compile(models.bert_like_encoder())
    r = xgraph.report(g)
    device = devices_of(g)
    assert r["crossings"] == 0  # AI CPU shares device memory with AI Core
    assert all(device[op.name] == "AICORE" for op in g.get_ops() if op.type in {"MatMul", "Softmax",
                                                                                "LayerNormalization"})
    off = {op.type for op in g.get_ops() if device[op.name] != "AICORE"}
    assert off <= {"Shape", "Gather", "Concat", "Unsqueeze"}, off  # the int64 shape arithmetic
    assert r["dynamic"]["static_fallbacks"] == 0


def test_static_model_folds_the_shape_chain_and_puts_all_dense_math_on_ai_core(models):
    g = xgraph.compile(models.bert_like_encoder(), models.BERT_STATIC)
    models.check_compiled(g)
    r = xgraph.report(g)
    device = devices_of(g)
    # with fixed input shapes Shape -> Gather -> Unsqueeze -> Concat is constant: it folds into weights
    assert not set(device) & models.BERT_SHAPE_CHAIN
    assert r["prepare"]["folded_ops"] == len(models.BERT_SHAPE_CHAIN)
    assert all(device[op.name] == "AICORE" for op in g.get_ops() if op.type in DENSE)
    assert r["crossings"] == 0
    # the int64 mask's Cast runs on AI Core too (Ascend's Cast takes int64), so there is no mask island
    assert r["devices"] == {"AICORE": {"subgraphs": 1, "ops": 40}}
    reasons = {o["name"]: o["reason"] for o in r["ops"]}
    assert reasons["emb"] == ""  # the embedding lookup: float rows addressed by int64 ids
    assert reasons["mask_f"] == "" and reasons["l0_probs"] == ""
    assert "dynamic" not in r


def test_min_subgraph_ops_keeps_the_encoder_in_one_ai_core_subgraph(models):
    g = xgraph.compile(models.bert_like_encoder(), {**models.BERT_STATIC, "min_subgraph_ops": 8})
    r = xgraph.report(g)
    assert r["crossings"] == 0
    assert r["devices"] == {"AICORE": {"subgraphs": 1, "ops": 40}}


def test_without_ai_cpu_nothing_crosses_to_the_host(models):
    g = xgraph.compile(models.bert_like_encoder(), {**models.BERT_STATIC, "devices": "aicore,cpu"})
    r = xgraph.report(g)
    assert {n for n, d in devices_of(g).items() if d == "CPU"} == set()
    # the shape chain folded away and the mask's Cast is on AI Core: no tensor goes up or down
    assert r["crossing_tensors"] == [] and r["crossings"] == 0


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
