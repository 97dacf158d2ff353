"""Symbolic shapes: dims tracked as expressions through shape arithmetic, so static dims stay static."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import xgraph
from xgraph import Graph
from xgraph.compiler.prepare import apply_input_shape
from xgraph.ir.symbolic_dims import dim_add, dim_div, dim_mul, dim_product, poly, render
from xgraph.compiler.symbolic_shapes import broadcast, propagate

from testing.runtime import load_script

_models = load_script(Path(__file__).with_name("dynamic_models.py"), "compile_dynamic_models")
GPT2_SHAPE, LLAMA_SHAPE = _models.GPT2_SHAPE, _models.LLAMA_SHAPE
gpt2_like, llama_feeds, llama_past = _models.gpt2_like, _models.llama_feeds, _models.llama_past

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.mark.parametrize("a, b, sign, expected", [
    ("past", 1, 1, "past + 1"), ("past + 1", "past", -1, 1), ("past + 1", 1, -1, "past"),
    ("b*h", "b*h", 1, "2*b*h"), (3, "-past + 3", -1, "past"), ("unk__6", "unk__6", -1, 0)])
def test_sums_are_canonical(a, b, sign, expected):
    assert dim_add(a, b, sign) == expected


def test_products_and_exact_division():
    assert dim_mul("batch", "heads") == dim_mul("heads", "batch") == "batch*heads"
    assert dim_product([1, "batch", 4, "seq"]) == "4*batch*seq"
    assert dim_div("4*batch*seq", "batch") == "4*seq"
    assert dim_div("past + 1", 2) is None  # not exact: unknown, never a wrong dim
    assert dim_div(dim_product(["past + 1", 8]), 8) == "past + 1"
    assert render(poly("2*a*b + c - 3")) == "2*a*b + c - 3"
    assert poly("a name with spaces") == {("a name with spaces",): 1}  # a model's own name stays one symbol


def test_broadcast_keeps_what_is_known():
    assert broadcast((1, 4, "s", "past + 1"), ("s", "past + 1")) == (1, 4, "s", "past + 1")
    assert broadcast((1, "n"), (3, 1)) == (3, "n")
    assert broadcast(("n",), (5,)) == (5,)  # an int beats a symbol: the model says they are equal
    assert broadcast(("a",), ("b",)) == (None,)


def _compiled_llama():
    return xgraph.compile(llama_past(), {"input_shape": LLAMA_SHAPE})


def test_the_past_stays_symbolic_and_static_dims_come_back():
    graph = Graph.from_onnx(llama_past())
    apply_input_shape(graph, {name: [int(d) for d in dims.split(",")]
                                       for name, dims in (p.split(":") for p in LLAMA_SHAPE.split(";"))})
    shapes, values = propagate(graph)
    assert shapes[graph.get_tensor("present_l0_k")] == (1, 2, "past + 1", 8)
    assert shapes[graph.get_tensor("l0_probs")] == (1, 4, 1, "past + 1")  # Reshape by Shape -> Gather -> Concat
    assert shapes[graph.get_tensor("l0_scores3")] == (4, 1, "past + 1")
    ctx = graph.get_tensor("l0_ctx")
    assert shapes.get(ctx, ctx.shape) == (1, 4, 1, 8)  # static again after the attention
    assert values[graph.get_tensor("l0_k_dims")] == [1, 2, "past + 1", 8]
    assert values[graph.get_tensor("l0_sd_bh")] == [4]


def test_decoder_with_a_dynamic_past_puts_projections_mlp_and_norms_on_ai_core():
    compiled = _compiled_llama()
    report = xgraph.report(compiled)
    device = {o["name"]: o["device"] for o in report["ops"]}
    for layer in (0, 1):
        for name in PROJECTIONS:
            assert device[f"l{layer}_{name}"] == "AICORE", name
        for norm in ("in_norm", "post_norm"):
            assert device[f"l{layer}_{norm}_mean"] == "AICORE"
    assert device["logits"] == "AICORE"
    # shape arithmetic whose value is known is folded: only Shapes of tensors with the dynamic past are left
    for op in compiled.get_ops():
        if op.type == "Shape":
            assert "past + 1" in op.get_input_tensors()[0].shape, op.name
        assert not op.name.endswith(("_bkv", "_batch", "_sd_bh")), op.name  # known values became weights


def test_gpt2_with_past_places_every_norm_and_projection_on_ai_core():
    compiled = xgraph.compile(gpt2_like(past=True), {"input_shape": GPT2_SHAPE})
    report = xgraph.report(compiled)
    for o in report["ops"]:
        if o["type"] == "LayerNormalization" or o["name"].endswith(("qkv_mm", "o_mm", "fc_mm", "proj_mm")):
            assert o["device"] == "AICORE", (o["name"], o["reason"])
    shape = compiled.get_tensor("l0_probs").shape
    assert shape == (1, 4, 1, "past_sequence + 1")  # the mask Slice over run-time lengths keeps the new tokens' 1


@pytest.mark.parametrize("past", [0, 3, 7])
def test_decoder_runs_equal_to_onnxruntime_for_several_past_lengths(past):
    ort = pytest.importorskip("onnxruntime")
    model = llama_past()
    feeds = llama_feeds(past)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    with xgraph.create_graph_runner(_compiled_llama(), kernels="numpy") as runner:
        got = runner.run(feeds)
    for e, g in zip(expected, got):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5)
