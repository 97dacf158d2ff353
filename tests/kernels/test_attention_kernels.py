"""Opset-23 attention kernels against the ONNX reference evaluator and onnxruntime (independent oracles)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from xgraph.kernels.op_attention import attention, rotary_embedding
from xgraph.kernels import BUILTIN_KERNELS, load_builtin_kernels

RNG = np.random.default_rng(0)


def _f(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def _model(op: str, inputs: dict, n_out: int, attrs: dict) -> onnx.ModelProto:
    names = [name if value is not None else "" for name, value in inputs.items()]
    node = helper.make_node(op, names, [f"out{i}" for i in range(n_out)], **attrs)
    graph_inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape)
                    for name, value in inputs.items() if value is not None]
    outputs = [helper.make_tensor_value_info(f"out{i}", TensorProto.FLOAT, None) for i in range(n_out)]
    return helper.make_model(helper.make_graph([node], op, graph_inputs, outputs),
                             opset_imports=[helper.make_opsetid("", 23)])


def _oracles(op, inputs, n_out, attrs):
    model = _model(op, inputs, n_out, attrs)
    feeds = {k: v for k, v in inputs.items() if v is not None}
    results = [("reference", ReferenceEvaluator(model).run(None, feeds))]
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    results.append(("onnxruntime", session.run(None, feeds)))
    return results


ATTENTION_CASES = {
    "4d causal": (dict(q=_f(2, 4, 3, 8), k=_f(2, 4, 3, 8), v=_f(2, 4, 3, 8)), dict(is_causal=1)),
    "gqa with past": (dict(q=_f(1, 4, 1, 8), k=_f(1, 2, 1, 8), v=_f(1, 2, 1, 8), attn_mask=None,
                           past_key=_f(1, 2, 5, 8), past_value=_f(1, 2, 5, 8)), dict(is_causal=1)),
    "3d heads, bool mask": (dict(q=_f(2, 3, 16), k=_f(2, 5, 8), v=_f(2, 5, 8),
                                 attn_mask=RNG.random((3, 5)) > 0.3),
                            dict(q_num_heads=4, kv_num_heads=2)),
    "float mask shorter than kv, scale, softcap": (dict(q=_f(1, 2, 4, 8), k=_f(1, 2, 2, 8), v=_f(1, 2, 2, 8),
                                                        attn_mask=_f(4, 6), past_key=_f(1, 2, 4, 8),
                                                        past_value=_f(1, 2, 4, 8)),
                                                   dict(scale=0.2, softcap=2.0, qk_matmul_output_mode=2)),
    "probabilities out": (dict(q=_f(1, 2, 3, 4), k=_f(1, 2, 3, 4), v=_f(1, 2, 3, 6)),
                          dict(qk_matmul_output_mode=3, is_causal=1)),
}


@pytest.mark.parametrize("case", sorted(ATTENTION_CASES))
def test_attention_matches_both_oracles(case):
    inputs, attrs = ATTENTION_CASES[case]
    got = attention(*inputs.values(), **attrs)
    for oracle, expected in _oracles("Attention", inputs, 4, attrs):
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg=f"{case} vs {oracle}")


ROTARY_CASES = {
    "4d full": (dict(x=_f(2, 2, 3, 8), cos=_f(2, 3, 4), sin=_f(2, 3, 4)), {}),
    "3d interleaved positions": (dict(x=_f(1, 3, 16), cos=_f(10, 4), sin=_f(10, 4),
                                      position_ids=np.array([[4, 5, 6]], np.int64)),
                                 dict(interleaved=1, num_heads=2)),
    "partial rotation": (dict(x=_f(1, 2, 3, 8), cos=_f(16, 2), sin=_f(16, 2),
                              position_ids=np.array([[0, 1, 2]], np.int64)), dict(rotary_embedding_dim=4)),
}


@pytest.mark.parametrize("case", sorted(ROTARY_CASES))
def test_rotary_embedding_matches_both_oracles(case):
    inputs, attrs = ROTARY_CASES[case]
    got = rotary_embedding(*inputs.values(), **attrs)
    for oracle, expected in _oracles("RotaryEmbedding", inputs, 1, attrs):
        np.testing.assert_allclose(got, expected[0], rtol=1e-5, atol=1e-6, err_msg=f"{case} vs {oracle}")


def test_the_new_ops_have_numpy_kernels_on_ai_core():
    load_builtin_kernels()
    for op in ("Attention", "RotaryEmbedding", "RMSNormalization"):
        k = BUILTIN_KERNELS.lookup(op, "", 23, "AICORE", np.dtype(np.float32))
        assert k is not None and k.since == 23, op


def test_a_mask_shorter_than_the_keys_masks_the_rest_as_the_reference_does():
    inputs = dict(q=_f(1, 2, 3, 8), k=_f(1, 2, 3, 8), v=_f(1, 2, 3, 8), attn_mask=RNG.random((3, 2)) > 0.2,
                  past_key=_f(1, 2, 2, 8), past_value=_f(1, 2, 2, 8))  # onnxruntime refuses a short mask
    expected = ReferenceEvaluator(_model("Attention", inputs, 4, {})).run(None, inputs)
    for g, e in zip(attention(*inputs.values()), expected):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5)


def test_a_fully_masked_row_gives_zeros_not_nan():
    q = _f(1, 1, 2, 4)
    mask = np.array([[False, False], [True, False]])
    y, *_ = attention(q, q, q, mask)
    assert np.array_equal(y[0, 0, 0], np.zeros(4, np.float32)) and np.isfinite(y).all()
