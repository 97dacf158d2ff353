"""Models with dynamic dims as exporters write them, built with onnx.helper (seeded weights, no download).

- `llama_past`: a Llama-style decoder step with a KV cache and grouped-query attention. Batch and
  sequence are symbolic (fixed with `input_shape`), the past length stays dynamic. Every shape is
  computed at run time: the head split/merge from `Shape -> Gather -> Concat -> Reshape` of the
  hidden states, the k/v head repeat (`Unsqueeze -> Expand -> Reshape`) from the shape of the
  cache concatenated with the new keys, and the scores are reshaped to `[b * heads, s, total]`
  and back by `Shape -> Gather -> Concat -> Reshape` on a tensor whose last dim is the past
  plus the new tokens.
- `mobilenet_like`: a MobileNetV3-style CNN (Conv/BN folded, HardSwish, depthwise Conv, squeeze-
  excite, GlobalAveragePool, `Shape -> Gather -> Concat -> Reshape` flatten, Gemm) with a dynamic
  batch.
- `bert_mask`: BERT's attention-mask arithmetic (int64 mask -> Unsqueeze -> Cast to bool, And with
  a causal bool matrix, Expand, Reshape/Flatten, Gather of bool rows, Where, Cast to int64 and
  to float) feeding a MatMul/Softmax attention.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from testing.runtime import load_script

ROOT = Path(__file__).resolve().parents[2]
_sample = load_script(ROOT / "samples" / "generate" / "make_model.py", "generate_make_model_dyn")
Builder = _sample._Builder
gpt2_like = _sample.gpt2_like


def _i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


def _gather_dims(b: Builder, x: str, indices, name: str) -> str:
    """Dims `indices` of x's run-time shape as a 1-D int64 tensor (Shape -> Gather)."""
    return b.node("Gather", [b.node("Shape", [x], name + "_shape"), b.c(name + "_i", _i64(*indices))], name, axis=0)


def _rms(b: Builder, name: str, x: str, hidden: int) -> str:
    sq = b.node("Mul", [x, x], name + "_sq")
    mean = b.node("ReduceMean", [sq], name + "_mean", axes=[-1], keepdims=1)
    root = b.node("Sqrt", [b.node("Add", [mean, b.c(name + "_eps", np.array(1e-6, np.float32))], name + "_var")],
                  name + "_rms")
    return b.node("Mul", [b.node("Div", [x, root], name + "_normed"), b.w(name + "_w", hidden)], name)


def _mlp(b: Builder, p: str, h: str, hidden: int) -> str:
    """The SiLU-gated MLP: down(silu(gate(h)) * up(h))."""
    gate = b.node("MatMul", [h, b.w(p + "gate_w", hidden, 2 * hidden)], p + "gate_proj")
    silu = b.node("Mul", [gate, b.node("Sigmoid", [gate], p + "gate_sig")], p + "silu")
    up = b.node("MatMul", [h, b.w(p + "up_w", hidden, 2 * hidden)], p + "up_proj")
    return b.node("MatMul", [b.node("Mul", [silu, up], p + "gated"), b.w(p + "down_w", 2 * hidden, hidden)],
                  p + "down_proj")


def _qkv(b: Builder, p: str, h: str, bs: str, hidden: int, heads: int, kv_heads: int) -> dict[str, str]:
    """q, k, v projections split into heads [b, n, s, head], the shapes from the run-time [batch, seq] `bs`."""
    head, split = hidden // heads, {}
    for name, n in (("q", heads), ("k", kv_heads), ("v", kv_heads)):
        proj = b.node("MatMul", [h, b.w(p + name + "_w", hidden, n * head)], p + name + "_proj")
        shape = b.node("Concat", [bs, b.c(p + name + "_hd", _i64(n, head))], p + name + "_shape", axis=0)
        split[name] = b.node("Transpose", [b.node("Reshape", [proj, shape], p + name + "_4d")], p + name + "_t",
                             perm=[0, 2, 1, 3])
    return split


def _cache_io(ids: list[str], logits: str, vocab: int, layers: int, kv_heads: int, head: int) -> tuple[list, list]:
    """The decoder step's inputs (int64 `ids`, then the past k/v per layer) and outputs (logits, present k/v)."""
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]) for name in ids]
    outputs = [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", "sequence", vocab])]
    for i in range(layers):
        for kv in "kv":
            inputs.append(helper.make_tensor_value_info(f"past_l{i}_{kv}", TensorProto.FLOAT,
                                                        ["batch", kv_heads, "past", head]))
            outputs.append(helper.make_tensor_value_info(f"present_l{i}_{kv}", TensorProto.FLOAT,
                                                         ["batch", kv_heads, "total", head]))
    return inputs, outputs


def llama_past(layers: int = 2, hidden: int = 32, heads: int = 4, kv_heads: int = 2, vocab: int = 64,
               seed: int = 0) -> onnx.ModelProto:
    """input_ids [batch, seq], past_l{i}_k/v [batch, kv_heads, past, head] -> logits, present_l{i}_k/v."""
    b = Builder(seed, scale=0.3)
    head, groups = hidden // heads, heads // kv_heads
    x = b.node("Gather", [b.w("embed", vocab, hidden, scale=0.5), "input_ids"], "embed_tokens")
    bs = _gather_dims(b, x, [0, 1], "bs")  # [batch, seq]
    for i in range(layers):
        p = f"l{i}_"
        h = _rms(b, p + "in_norm", x, hidden)
        split = _qkv(b, p, h, bs, hidden, heads, kv_heads)
        k = b.node("Concat", [f"past_{p}k", split["k"]], f"present_{p}k", axis=2)
        v = b.node("Concat", [f"past_{p}v", split["v"]], f"present_{p}v", axis=2)
        reps = {}
        for name, t in (("k", k), ("v", v)):
            dims = _gather_dims(b, t, [0, 1, 2, 3], p + name + "_dims")  # [b, kv, total, d]
            b_kv = b.node("Slice", [dims, b.c(p + name + "_s0", _i64(0)), b.c(p + name + "_e2", _i64(2))],
                          p + name + "_bkv")
            rest = b.node("Slice", [dims, b.c(p + name + "_s2", _i64(2)), b.c(p + name + "_e4", _i64(4))],
                          p + name + "_rest")
            wide = b.node("Unsqueeze", [t, b.c(p + name + "_ax", _i64(2))], p + name + "_5d")
            shape5 = b.node("Concat", [b_kv, b.c(p + name + "_g", _i64(groups)), rest], p + name + "_shape5", axis=0)
            wide = b.node("Expand", [wide, shape5], p + name + "_expanded")
            batch = b.node("Slice", [dims, b.c(p + name + "_s00", _i64(0)), b.c(p + name + "_e1", _i64(1))],
                           p + name + "_batch")
            shape4 = b.node("Concat", [batch, b.c(p + name + "_h", _i64(heads)), rest], p + name + "_shape4", axis=0)
            reps[name] = b.node("Reshape", [wide, shape4], p + name + "_rep")
        kt = b.node("Transpose", [reps["k"]], p + "kt", perm=[0, 1, 3, 2])
        scores = b.node("MatMul", [split["q"], kt], p + "scores")
        scores = b.node("Mul", [scores, b.c(p + "scale", np.array(head ** -0.5, np.float32))], p + "scaled")
        # [b, h, s, total] -> [b * h, s, total] -> softmax -> back, shapes from Shape -> Gather -> Concat
        sdims = _gather_dims(b, scores, [0, 1, 2, 3], p + "sdims")
        bh = b.node("Mul", [b.node("Slice", [sdims, b.c(p + "z0", _i64(0)), b.c(p + "z1", _i64(1))], p + "sd_b"),
                            b.node("Slice", [sdims, b.c(p + "o1", _i64(1)), b.c(p + "o2", _i64(2))], p + "sd_h")],
                    p + "sd_bh")
        flat_shape = b.node("Concat", [bh, b.node("Slice", [sdims, b.c(p + "t2", _i64(2)), b.c(p + "t4", _i64(4))],
                                                  p + "sd_st")], p + "flat_shape", axis=0)
        probs = b.node("Softmax", [b.node("Reshape", [scores, flat_shape], p + "scores3")], p + "probs3", axis=-1)
        probs = b.node("Reshape", [probs, sdims], p + "probs")
        ctx = b.node("Transpose", [b.node("MatMul", [probs, reps["v"]], p + "ctx")], p + "ctx_t", perm=[0, 2, 1, 3])
        merge = b.node("Concat", [bs, b.c(p + "hid", _i64(hidden))], p + "merge_shape", axis=0)
        ctx = b.node("Reshape", [ctx, merge], p + "ctx_m")
        x = b.node("Add", [x, b.node("MatMul", [ctx, b.w(p + "o_w", hidden, hidden)], p + "o_proj")], p + "res1")
        x = b.node("Add", [x, _mlp(b, p, _rms(b, p + "post_norm", x, hidden), hidden)], p + "res2")
    logits = b.node("MatMul", [_rms(b, "norm", x, hidden), b.w("lm_head", hidden, vocab)], "logits")
    inputs, outputs = _cache_io(["input_ids"], logits, vocab, layers, kv_heads, head)
    return b.model("llama_past", inputs, outputs)


def llama_feeds(past: int, layers: int = 2, kv_heads: int = 2, head: int = 8, seq: int = 1, seed: int = 0) -> dict:
    """Inputs for one `llama_past` step with `past` cached tokens."""
    rng = np.random.default_rng(seed)
    feeds = {"input_ids": rng.integers(0, 64, (1, seq)).astype(np.int64)}
    for i in range(layers):
        for kv in "kv":
            feeds[f"past_l{i}_{kv}"] = rng.standard_normal((1, kv_heads, past, head)).astype(np.float32)
    return feeds


def mobilenet_like(channels: int = 8, size: int = 32, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """A MobileNetV3-style CNN over images [batch, 3, size, size] -> [batch, classes], batch dynamic."""
    b = Builder(seed, scale=0.3)
    x = b.node("Conv", ["image", b.w("stem_w", channels, 3, 3, 3), b.w("stem_b", channels)], "stem",
               strides=[2, 2], pads=[1, 1, 1, 1])
    x = b.node("HardSwish", [x], "stem_act")
    for i in range(2):
        p = f"b{i}_"
        dw = b.node("Conv", [x, b.w(p + "dw_w", channels, 1, 3, 3), b.w(p + "dw_b", channels)], p + "dw",
                    group=channels, pads=[1, 1, 1, 1])
        dw = b.node("Relu", [dw], p + "dw_act")
        se = b.node("GlobalAveragePool", [dw], p + "se_pool")
        se = b.node("Relu", [b.node("Conv", [se, b.w(p + "se1_w", channels // 2, channels, 1, 1)], p + "se1")],
                    p + "se1_act")
        se = b.node("HardSigmoid", [b.node("Conv", [se, b.w(p + "se2_w", channels, channels // 2, 1, 1)], p + "se2")],
                    p + "se_gate")
        pw = b.node("Conv", [b.node("Mul", [dw, se], p + "se_mul"), b.w(p + "pw_w", channels, channels, 1, 1)],
                    p + "pw")
        x = b.node("Add", [x, b.node("HardSwish", [pw], p + "pw_act")], p + "res")
    pooled = b.node("GlobalAveragePool", [x], "pool")
    batch = _gather_dims(b, pooled, [0], "batch")
    flat = b.node("Reshape", [pooled, b.node("Concat", [batch, b.c("minus1", _i64(-1))], "flat_shape", axis=0)],
                  "flatten")
    logits = b.node("Gemm", [flat, b.w("fc_w", classes, channels), b.w("fc_b", classes)], "fc", transB=1)
    return b.model("mobilenet_like",
                   [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 3, size, size])],
                   [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["N", classes])])


def bert_mask(hidden: int = 16, seq: int = 8, seed: int = 0) -> onnx.ModelProto:
    """x [1, seq, hidden] float, attention_mask [1, seq] int64 -> attended [1, seq, hidden]."""
    b = Builder(seed, scale=0.3)
    m = b.node("Unsqueeze", ["attention_mask", b.c("ax12", _i64(1, 2))], "mask4")  # [1, 1, 1, s]
    mb = b.node("Cast", [m], "mask_bool", to=TensorProto.BOOL)
    causal = b.c("causal", np.tril(np.ones((seq, seq), bool)))
    both = b.node("And", [mb, causal], "mask_and")  # [1, 1, s, s]
    rows = b.node("Gather", [both, b.c("row_ids", np.arange(seq, dtype=np.int64))], "mask_rows", axis=2)
    full = b.node("Expand", [rows, b.c("expand_to", _i64(1, 2, seq, seq))], "mask_heads")
    flat = b.node("Flatten", [full], "mask_flat", axis=2)
    back = b.node("Reshape", [flat, b.c("mask_shape", _i64(1, 2, seq, seq))], "mask_back")
    keep = b.node("Cast", [back], "mask_i64", to=TensorProto.INT64)
    keepf = b.node("Cast", [keep], "mask_f", to=TensorProto.FLOAT)
    bias = b.node("Mul", [b.node("Sub", [b.c("one", np.array(1.0, np.float32)), keepf], "inv_mask"),
                          b.c("neg", np.array(-1e4, np.float32))], "mask_bias")
    q = b.node("Transpose", [b.node("Reshape", [b.node("MatMul", ["x", b.w("wq", hidden, hidden)], "q_proj"),
                                                b.c("qshape", _i64(1, seq, 2, hidden // 2))], "q4")], "q", perm=[0, 2, 1, 3])
    scores = b.node("MatMul", [q, b.node("Transpose", [q], "kt", perm=[0, 1, 3, 2])], "scores")
    scores = b.node("Where", [back, b.node("Add", [scores, bias], "biased"), b.c("neg2", np.array(-1e4, np.float32))],
                    "masked")
    ctx = b.node("MatMul", [b.node("Softmax", [scores], "probs", axis=-1), q], "ctx")
    out = b.node("Reshape", [b.node("Transpose", [ctx], "ctx_t", perm=[0, 2, 1, 3]), b.c("oshape", _i64(1, seq, hidden))],
                 "attended")
    return b.model("bert_mask", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, seq, hidden]),
                                 helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, seq])],
                   [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, seq, hidden])])


LLAMA_SHAPE = "input_ids:1,1;" + ";".join(f"past_l{i}_{kv}:1,2,-1,8" for i in range(2) for kv in "kv")
GPT2_SHAPE = "input_ids:1,1;position_ids:1,1;" + ";".join(f"past_l{i}_{kv}:1,4,-1,8" for i in range(2) for kv in "kv")


def llama_opset23(layers: int = 2, hidden: int = 32, heads: int = 4, kv_heads: int = 2, vocab: int = 64,
                  seed: int = 0) -> onnx.ModelProto:
    """`llama_past` as torch exports it at opset 23: RMSNormalization, RotaryEmbedding and Attention
    (grouped-query heads, KV cache, causal) instead of their decompositions. Inputs: input_ids
    [batch, seq], position_ids [batch, seq], past_l{i}_k/v [batch, kv_heads, past, head]."""
    b = Builder(seed, scale=0.3)
    head = hidden // heads
    x = b.node("Gather", [b.w("embed", vocab, hidden, scale=0.5), "input_ids"], "embed_tokens")
    inv = 1.0 / (10000.0 ** (np.arange(0, head, 2, dtype=np.float32) / head))
    angles = np.arange(64, dtype=np.float32)[:, None] * inv[None]
    cos, sin = b.c("cos_cache", np.cos(angles)), b.c("sin_cache", np.sin(angles))
    bs = _gather_dims(b, x, [0, 1], "bs")
    for i in range(layers):
        p = f"l{i}_"
        h = b.node("RMSNormalization", [x, b.w(p + "in_norm_w", hidden)], p + "in_norm", axis=-1, epsilon=1e-6)
        split = _qkv(b, p, h, bs, hidden, heads, kv_heads)
        q = b.node("RotaryEmbedding", [split["q"], cos, sin, "position_ids"], p + "q_rope")
        k = b.node("RotaryEmbedding", [split["k"], cos, sin, "position_ids"], p + "k_rope")
        ctx, present_k, present_v = b.node("Attention", [q, k, split["v"], "", f"past_{p}k", f"past_{p}v"],
                                           p + "attn", n_out=3, is_causal=1)
        b.nodes.append(helper.make_node("Identity", [present_k], [f"present_{p}k"], name=f"present_{p}k"))
        b.nodes.append(helper.make_node("Identity", [present_v], [f"present_{p}v"], name=f"present_{p}v"))
        ctx = b.node("Transpose", [ctx], p + "ctx_t", perm=[0, 2, 1, 3])
        merge = b.node("Concat", [bs, b.c(p + "hid", _i64(hidden))], p + "merge_shape", axis=0)
        ctx = b.node("Reshape", [ctx, merge], p + "ctx_m")
        x = b.node("Add", [x, b.node("MatMul", [ctx, b.w(p + "o_w", hidden, hidden)], p + "o_proj")], p + "res1")
        h = b.node("RMSNormalization", [x, b.w(p + "post_norm_w", hidden)], p + "post_norm", axis=-1, epsilon=1e-6)
        x = b.node("Add", [x, _mlp(b, p, h, hidden)], p + "res2")
    norm = b.node("RMSNormalization", [x, b.w("norm_w", hidden)], "norm", axis=-1, epsilon=1e-6)
    logits = b.node("MatMul", [norm, b.w("lm_head", hidden, vocab)], "logits")
    inputs, outputs = _cache_io(["input_ids", "position_ids"], logits, vocab, layers, kv_heads, head)
    graph = helper.make_graph(b.nodes, "llama_opset23", inputs, outputs, initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)])
    onnx.checker.check_model(model)
    return model
