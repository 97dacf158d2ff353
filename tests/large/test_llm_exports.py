"""Llama-, T5- and Whisper-style exports (tests/large/llm_exports.py): with fixed input shapes their
shape, position and mask arithmetic (rotary tables, relative position buckets, causal masks, GQA
repeats) folds away, every dense and norm op reaches AI Core, and the compiled model equals
onnxruntime on the original; without fixed shapes the reasons name the input_shape option."""
from __future__ import annotations

import numpy as np
import onnx
import pytest

import xgraph

KEY = {"MatMul", "Gemm", "Softmax", "LayerNormalization"}
NORM_MATH = {"Pow", "ReduceMean", "Sqrt", "Reciprocal", "Div", "Erf", "Sigmoid", "Neg"}


def _cases(tmodels):
    rng = np.random.default_rng(1)
    ids = lambda *shape: rng.integers(0, 64, shape).astype(np.int64)  # noqa: E731
    return {
        # (model, input_shape, feeds, the ops that stay off AI Core and why)
        "llama": (tmodels.llama_like(), "input_ids:1,16", {"input_ids": ids(1, 16)}, set()),
        "t5": (tmodels.t5_like(), "input_ids:1,12;attention_mask:1,12;decoder_input_ids:1,8",
               {"input_ids": ids(1, 12), "attention_mask": np.array([[1] * 9 + [0] * 3], np.int64),
                "decoder_input_ids": ids(1, 8)}, set()),
        "whisper": (tmodels.whisper_like(), "input_features:1,16,64;decoder_input_ids:1,8",
                    {"input_features": rng.standard_normal((1, 16, 64)).astype(np.float32),
                     "decoder_input_ids": ids(1, 8)}, set()),
    }


@pytest.mark.parametrize("name", ["llama", "t5", "whisper"])
def test_fixed_shapes_fold_the_arithmetic_and_put_dense_and_norm_math_on_ai_core(tmodels, name):
    model, shape, feeds, off_core = _cases(tmodels)[name]
    g = xgraph.compile(model, {"input_shape": shape})
    ops = g.get_ops()
    assert not [op.name for op in ops if op.type in ("Shape", "Size", "Range", "ConstantOfShape", "Trilu")]
    devices = {op.name: op.get_attr("device") for op in ops}
    # everything (embedding Gathers take int64 ids; the int64 mask Cast is Ascend's Cast)
    assert {n for n, d in devices.items() if d != "AICORE"} == off_core
    assert all(devices[op.name] == "AICORE" for op in ops if op.type in KEY | NORM_MATH)
    assert sum(d == "AICORE" for d in devices.values()) >= 0.95 * len(ops)
    assert len(ops) < 0.85 * len(model.graph.node)  # the shape, position and mask subgraphs became weights
    with xgraph.create_graph_runner(g, kernels="numpy") as runner:
        got = runner.run(feeds)
    expected = tmodels.onnxruntime_outputs(model, feeds)
    assert len(got) == len(expected) == 1 and got[0].shape == expected[0].shape
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["llama", "t5", "whisper"])
def test_without_fixed_shapes_the_dense_ops_run_on_ai_core_as_dynamic_shape_ops(tmodels, name):
    model = _cases(tmodels)[name][0]
    r = xgraph.report(xgraph.compile(model))
    key = [o for o in r["ops"] if o["type"] in KEY]
    assert key and all(o["device"] == "AICORE" for o in key), [(o["name"], o["reason"]) for o in key
                                                              if o["device"] != "AICORE"][:3]
    assert r["crossings"] == 0
    assert "input_shape" in r["dynamic"]["line"] and r["dynamic"]["static_fallbacks"] == 0


def test_llama_rotary_mask_and_grouped_query_repeats_fold_or_run_on_ai_core(tmodels):
    model, shape, _, _ = _cases(tmodels)["llama"]
    g = xgraph.compile(model, {"input_shape": shape})
    names = {op.name: op for op in g.get_ops()}
    # cos/sin tables and the causal mask are weights now; the k/v head repeats are Expands to a constant shape
    assert not {"rope_cos", "rope_sin", "mask_causal", "position_ids"} & set(names)
    assert g.get_tensor("rope_cos").is_const and g.get_tensor("rope_cos").shape == (1, 1, 16, 8)
    mask = g.get_tensor("mask_causal").data
    assert mask.shape == (1, 1, 16, 16) and (mask[0, 0] == np.triu(np.full((16, 16), -1e9, np.float32), 1)).all()
    expands = [op for op in g.get_ops() if op.type == "Expand"]
    assert len(expands) == 4 and all(op.get_attr("device") == "AICORE" for op in expands)
    assert all(op.get_output_tensors()[0].shape == (1, 2, 2, 16, 8) for op in expands)


def test_t5_relative_position_biases_fold_to_the_bucket_oracle(tmodels):
    model, shape, _, _ = _cases(tmodels)["t5"]
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}
    g = xgraph.compile(model, {"input_shape": shape})
    # the encoder's bias is a weight (its mask part comes from an input); the decoder's already holds the causal mask
    enc = g.get_tensor("enc_rb_position_bias")
    dec = g.get_tensor("dec_bias")
    assert enc.is_const and dec.is_const
    expected_enc = weights["enc_rb_rel_bias"][_t5_buckets(12, True)].transpose(2, 0, 1)[None]
    causal = np.triu(np.full((8, 8), -1e9, np.float32), 1)
    expected_dec = weights["dec_rb_rel_bias"][_t5_buckets(8, False)].transpose(2, 0, 1)[None] + causal
    np.testing.assert_array_equal(enc.data, expected_enc)
    np.testing.assert_array_equal(dec.data, expected_dec)


def _t5_buckets(length: int, bidirectional: bool, buckets: int = 8, max_distance: int = 32) -> np.ndarray:
    """transformers' T5Attention._relative_position_bucket, in plain numpy loops."""
    out = np.zeros((length, length), np.int64)
    for q in range(length):
        for k in range(length):
            rel, nb, result = k - q, buckets, 0
            if bidirectional:
                nb //= 2
                result += nb if rel > 0 else 0
                n = abs(rel)
            else:
                n = -min(rel, 0)
            exact = nb // 2
            if n < exact:
                result += n
            else:
                large = exact + int(np.log(np.float32(n) / exact) / np.log(max_distance / exact) * (nb - exact))
                result += min(large, nb - 1)
            out[q, k] = result
    return out


def test_whisper_conv1d_frontend_runs_on_ai_core(tmodels):
    model, shape, _, _ = _cases(tmodels)["whisper"]
    g = xgraph.compile(model, {"input_shape": shape})
    convs = [op for op in g.get_ops() if op.type == "Conv"]
    assert [op.get_attr("device") for op in convs] == ["AICORE", "AICORE"]
    assert convs[1].get_output_tensors()[0].shape == (1, 32, 32)  # stride 2 over 64 frames
