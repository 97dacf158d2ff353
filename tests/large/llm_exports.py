"""Llama-, T5- and Whisper-style exports built by hand with onnx.helper, the way torch exports them.

Symbolic batch/sequence dims; every shape, position and mask is computed at run time from the
inputs' shapes: `Shape -> Gather -> Unsqueeze -> Concat` for the head split/merge Reshapes, `Range`
over the sequence length for positions and masks, `ConstantOfShape -> Trilu` causal masks, T5's
relative position buckets (`Range/Sub/Abs/Log/Div/Mul/Cast/Min/Where/Gather`). Seeded random
weights, no download. Loaded by path from conftest.py (import mode "importlib").

- `llama_like`: RMSNorm as Pow/ReduceMean/Add/Sqrt/Reciprocal/Mul, rotary embeddings (Range ->
  Cast -> MatMul with inv_freq -> Concat -> Cos/Sin, rotate_half as Slice/Neg/Concat),
  grouped-query attention (k/v heads repeated by Unsqueeze -> Expand -> Reshape), additive causal
  mask, SiLU-gated MLP, untied LM head.
- `t5_like`: encoder-decoder with RMSNorm (Div by Sqrt), relative position bias (bidirectional in
  the encoder, causal in the decoder), cross-attention, ReLU feed-forward, tied LM head scaled by
  d_model ** -0.5, the encoder attention mask as an int64 input.
- `whisper_like`: two Conv1d + Erf-GELU over log-mel input (the second with stride 2), sinusoidal
  encoder positions sliced to the run-time length, pre-LN encoder, decoder with learned positions
  (Range over the run-time length), causal self-attention and cross-attention, tied LM head.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from testing.runtime import load_script

ROOT = Path(__file__).resolve().parents[2]
_sample = load_script(ROOT / "samples" / "generate" / "make_model.py", "generate_make_model_llm")
Builder = _sample._Builder
NEG = -1e9  # the additive mask value (torch uses finfo.min; -1e9 keeps float32 sums finite)


def _i64(*values) -> np.ndarray:
    return np.array(values, np.int64)


def _scalar_dim(b: Builder, x: str, i: int, name: str) -> str:
    """Dim i of x's run-time shape as an int64 scalar (Shape -> Gather)."""
    return b.node("Gather", [b.node("Shape", [x], name + "_shape"), b.c(name + "_i", np.array(i, np.int64))], name,
                  axis=0)


def _rms_norm(b: Builder, name: str, x: str, hidden: int, *, divide: bool = False) -> str:
    """RMSNorm as torch exports it: x * 1/sqrt(mean(x^2) + eps) * weight (T5 divides by the sqrt)."""
    sq = b.node("Pow", [x, b.c(name + "_two", np.array(2.0, np.float32))], name + "_sq")
    mean = b.node("ReduceMean", [sq], name + "_mean", axes=[-1], keepdims=1)
    root = b.node("Sqrt", [b.node("Add", [mean, b.c(name + "_eps", np.array(1e-6, np.float32))], name + "_var")],
                  name + "_rms")
    if divide:
        normed = b.node("Div", [x, root], name + "_normed")
    else:
        normed = b.node("Mul", [x, b.node("Reciprocal", [root], name + "_inv")], name + "_normed")
    weight = b.c(name + "_w", (1.0 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32))
    return b.node("Mul", [weight, normed], name)


def _split_heads(b: Builder, name: str, x: str, batch: str, seq: str, heads: int, head: int) -> str:
    """[b, s, heads * head] -> [b, heads, s, head] with the shape from the run-time dims."""
    shape = b.node("Concat", [batch, seq, b.c(name + "_hd", _i64(heads, head))], name + "_shape4", axis=0)
    return b.node("Transpose", [b.node("Reshape", [x, shape], name + "_4d")], name, perm=[0, 2, 1, 3])


def _merge_heads(b: Builder, name: str, ctx: str, batch: str, seq: str, hidden: int) -> str:
    shape = b.node("Concat", [batch, seq, b.c(name + "_h", _i64(hidden))], name + "_shape3", axis=0)
    return b.node("Reshape", [b.node("Transpose", [ctx], name + "_t", perm=[0, 2, 1, 3]), shape], name)


def _attend(b: Builder, p: str, q: str, k: str, v: str, bias: str | None, scale: float | None) -> str:
    """softmax(q k^T [* scale] [+ bias]) v over [b, heads, s, head] tensors."""
    scores = b.node("MatMul", [q, b.node("Transpose", [k], p + "kt", perm=[0, 1, 3, 2])], p + "scores")
    if scale is not None:
        scores = b.node("Mul", [scores, b.c(p + "scale", np.array(scale, np.float32))], p + "scaled")
    if bias is not None:
        scores = b.node("Add", [scores, bias], p + "biased")
    return b.node("MatMul", [b.node("Softmax", [scores], p + "probs", axis=-1), v], p + "ctx")


def _causal_mask(b: Builder, p: str, seq: str) -> str:
    """[1, 1, s, s] additive mask: ConstantOfShape([s, s], NEG) -> Trilu(upper, k=1), as HF builds it."""
    square = b.node("Concat", [b.node("Unsqueeze", [seq, b.c(p + "ax", _i64(0))], p + "seq1")] * 2, p + "square",
                    axis=0)
    full = b.node("ConstantOfShape", [square], p + "full",
                  value=helper.make_tensor("v", TensorProto.FLOAT, [1], [NEG]))
    upper = b.node("Trilu", [full, b.c(p + "k1", np.array(1, np.int64))], p + "upper", upper=1)
    return b.node("Unsqueeze", [upper, b.c(p + "ax01", _i64(0, 1))], p + "causal")


# ------------------------------------------------------------------------------------ Llama

def _rotate_half(b: Builder, name: str, x: str, head: int) -> str:
    half = head // 2
    lo = b.node("Slice", [x, b.c(name + "_s0", _i64(0)), b.c(name + "_e0", _i64(half)), b.c(name + "_a0", _i64(-1))],
                name + "_lo")
    hi = b.node("Slice", [x, b.c(name + "_s1", _i64(half)), b.c(name + "_e1", _i64(np.iinfo(np.int64).max)),
                          b.c(name + "_a1", _i64(-1))], name + "_hi")
    return b.node("Concat", [b.node("Neg", [hi], name + "_neg"), lo], name, axis=-1)


def _rotary_tables(b: Builder, seq: str, head: int) -> tuple[str, str]:
    """cos/sin [1, 1, s, head] from positions Range(0, s) (LlamaRotaryEmbedding's forward)."""
    positions = b.node("Range", [b.c("rope_start", np.array(0, np.int64)), seq, b.c("rope_step", np.array(1, np.int64))],
                       "position_ids")
    pos = b.node("Cast", [b.node("Unsqueeze", [positions, b.c("rope_ax", _i64(0, 1))], "pos_2d")], "pos_f",
                 to=TensorProto.FLOAT)  # [1, 1, s]
    inv_freq = 1.0 / (10000.0 ** (np.arange(0, head, 2, dtype=np.float32) / head))
    freqs = b.node("MatMul", [b.c("inv_freq", inv_freq.reshape(1, -1, 1).astype(np.float32)), pos], "freqs")
    freqs = b.node("Transpose", [freqs], "freqs_t", perm=[0, 2, 1])  # [1, s, head / 2]
    emb = b.node("Concat", [freqs, freqs], "rope_emb", axis=-1)
    cos = b.node("Unsqueeze", [b.node("Cos", [emb], "rope_cos3"), b.c("rope_ax1", _i64(1))], "rope_cos")
    sin = b.node("Unsqueeze", [b.node("Sin", [emb], "rope_sin3"), b.c("rope_ax1b", _i64(1))], "rope_sin")
    return cos, sin


def _apply_rotary(b: Builder, name: str, x: str, cos: str, sin: str, head: int) -> str:
    return b.node("Add", [b.node("Mul", [x, cos], name + "_xc"),
                          b.node("Mul", [_rotate_half(b, name + "_rot", x, head), sin], name + "_rs")], name)


def _repeat_kv(b: Builder, name: str, x: str, batch: str, seq: str, kv_heads: int, groups: int, head: int) -> str:
    """[b, kv, s, d] -> [b, kv * groups, s, d]: Unsqueeze -> Expand -> Reshape (transformers' repeat_kv)."""
    wide = b.node("Unsqueeze", [x, b.c(name + "_ax", _i64(2))], name + "_5d")
    shape5 = b.node("Concat", [batch, b.c(name + "_kvg", _i64(kv_heads, groups)), seq, b.c(name + "_d", _i64(head))],
                    name + "_shape5", axis=0)
    wide = b.node("Expand", [wide, shape5], name + "_expanded")
    shape4 = b.node("Concat", [batch, b.c(name + "_h", _i64(kv_heads * groups)), seq, b.c(name + "_d4", _i64(head))],
                    name + "_shape4", axis=0)
    return b.node("Reshape", [wide, shape4], name)


def llama_like(layers: int = 2, hidden: int = 32, heads: int = 4, kv_heads: int = 2, vocab: int = 64,
               seed: int = 0) -> onnx.ModelProto:
    """A Llama-style causal LM: input_ids [batch, sequence] -> logits [batch, sequence, vocab]."""
    b = Builder(seed, scale=0.3)
    head, groups = hidden // heads, heads // kv_heads
    x = b.node("Gather", [b.w("embed", vocab, hidden, scale=0.5), "input_ids"], "embed_tokens")
    batch = b.dim("input_ids", 0, "batch")
    seq_scalar = _scalar_dim(b, "input_ids", 1, "seq_len")
    seq = b.node("Unsqueeze", [seq_scalar, b.c("seq_ax", _i64(0))], "seq")
    cos, sin = _rotary_tables(b, seq_scalar, head)
    causal = _causal_mask(b, "mask_", seq_scalar)
    for i in range(layers):
        p = f"l{i}_"
        h = _rms_norm(b, p + "in_norm", x, hidden)
        q = _split_heads(b, p + "q", b.node("MatMul", [h, b.w(p + "q_w", hidden, hidden)], p + "q_mm"), batch, seq,
                         heads, head)
        k = _split_heads(b, p + "k", b.node("MatMul", [h, b.w(p + "k_w", hidden, kv_heads * head)], p + "k_mm"),
                         batch, seq, kv_heads, head)
        v = _split_heads(b, p + "v", b.node("MatMul", [h, b.w(p + "v_w", hidden, kv_heads * head)], p + "v_mm"),
                         batch, seq, kv_heads, head)
        q, k = _apply_rotary(b, p + "q_rope", q, cos, sin, head), _apply_rotary(b, p + "k_rope", k, cos, sin, head)
        k = _repeat_kv(b, p + "k_rep", k, batch, seq, kv_heads, groups, head)
        v = _repeat_kv(b, p + "v_rep", v, batch, seq, kv_heads, groups, head)
        ctx = _merge_heads(b, p + "ctx_m", _attend(b, p, q, k, v, causal, head ** -0.5), batch, seq, hidden)
        x = b.node("Add", [x, b.node("MatMul", [ctx, b.w(p + "o_w", hidden, hidden)], p + "o_mm")], p + "res1")
        h = _rms_norm(b, p + "post_norm", x, hidden)
        gate = b.node("MatMul", [h, b.w(p + "gate_w", hidden, 3 * hidden)], p + "gate_mm")
        silu = b.node("Mul", [gate, b.node("Sigmoid", [gate], p + "gate_sig")], p + "silu")
        up = b.node("MatMul", [h, b.w(p + "up_w", hidden, 3 * hidden)], p + "up_mm")
        down = b.node("MatMul", [b.node("Mul", [silu, up], p + "gated"), b.w(p + "down_w", 3 * hidden, hidden)],
                      p + "down_mm")
        x = b.node("Add", [x, down], p + "res2")
    logits = b.node("MatMul", [_rms_norm(b, "norm", x, hidden), b.w("lm_head", hidden, vocab)], "logits")
    return b.model("llama_like", [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])],
                   [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", "sequence", vocab])])


# --------------------------------------------------------------------------------------- T5

def _relative_bias(b: Builder, p: str, qlen: str, klen: str, heads: int, *, bidirectional: bool, buckets: int = 8,
                   max_distance: int = 32) -> str:
    """T5Attention.compute_bias over run-time lengths: [1, heads, q, k]."""
    context = b.node("Unsqueeze", [b.node("Range", [b.c(p + "r0", np.array(0, np.int64)), qlen,
                                                    b.c(p + "r1", np.array(1, np.int64))], p + "qpos"),
                                   b.c(p + "ax1", _i64(1))], p + "context")
    memory = b.node("Unsqueeze", [b.node("Range", [b.c(p + "m0", np.array(0, np.int64)), klen,
                                                   b.c(p + "m1", np.array(1, np.int64))], p + "kpos"),
                                  b.c(p + "ax0", _i64(0))], p + "memory")
    relative = b.node("Sub", [memory, context], p + "relative")
    zero = b.c(p + "zero", np.array(0, np.int64))
    if bidirectional:
        buckets //= 2
        positive = b.node("Cast", [b.node("Greater", [relative, zero], p + "is_pos")], p + "pos_i", to=TensorProto.INT64)
        offset = b.node("Mul", [positive, b.c(p + "nb", np.array(buckets, np.int64))], p + "offset")
        distance = b.node("Abs", [relative], p + "distance")
    else:
        offset = None
        distance = b.node("Neg", [b.node("Min", [relative, zero], p + "min0")], p + "distance")
    exact = buckets // 2
    small = b.node("Less", [distance, b.c(p + "exact", np.array(exact, np.int64))], p + "is_small")
    ratio = b.node("Div", [b.node("Cast", [distance], p + "dist_f", to=TensorProto.FLOAT),
                           b.c(p + "exact_f", np.array(exact, np.float32))], p + "ratio")
    scaled = b.node("Div", [b.node("Log", [ratio], p + "log"),
                            b.c(p + "log_max", np.array(np.log(max_distance / exact), np.float32))], p + "log_scaled")
    scaled = b.node("Mul", [scaled, b.c(p + "span", np.array(buckets - exact, np.float32))], p + "log_span")
    large = b.node("Add", [b.c(p + "exact_i", np.array(exact, np.int64)),
                           b.node("Cast", [scaled], p + "log_i", to=TensorProto.INT64)], p + "large0")
    large = b.node("Min", [large, b.c(p + "last", np.array(buckets - 1, np.int64))], p + "large")
    bucket = b.node("Where", [small, distance, large], p + "bucket0")
    if offset is not None:
        bucket = b.node("Add", [offset, bucket], p + "bucket")
    values = b.node("Gather", [b.w(p + "rel_bias", 2 * buckets if bidirectional else buckets, heads), bucket],
                    p + "bias_qkh")
    return b.node("Unsqueeze", [b.node("Transpose", [values], p + "bias_hqk", perm=[2, 0, 1]), b.c(p + "bax", _i64(0))],
                  p + "position_bias")


def _t5_attention(b: Builder, p: str, x: str, memory: str, batch: str, qseq: str, kseq: str, bias: str | None,
                  hidden: int, heads: int) -> str:
    head = hidden // heads
    q = _split_heads(b, p + "q", b.node("MatMul", [x, b.w(p + "q_w", hidden, hidden)], p + "q_mm"), batch, qseq,
                     heads, head)
    k = _split_heads(b, p + "k", b.node("MatMul", [memory, b.w(p + "k_w", hidden, hidden)], p + "k_mm"), batch, kseq,
                     heads, head)
    v = _split_heads(b, p + "v", b.node("MatMul", [memory, b.w(p + "v_w", hidden, hidden)], p + "v_mm"), batch, kseq,
                     heads, head)
    ctx = _merge_heads(b, p + "ctx_m", _attend(b, p, q, k, v, bias, None), batch, qseq, hidden)
    return b.node("MatMul", [ctx, b.w(p + "o_w", hidden, hidden)], p + "o_mm")


def _t5_ff(b: Builder, p: str, x: str, hidden: int) -> str:
    h = b.node("Relu", [b.node("MatMul", [x, b.w(p + "wi", hidden, 2 * hidden)], p + "wi_mm")], p + "relu")
    return b.node("MatMul", [h, b.w(p + "wo", 2 * hidden, hidden)], p + "wo_mm")


def t5_like(layers: int = 2, hidden: int = 32, heads: int = 4, vocab: int = 64, seed: int = 0) -> onnx.ModelProto:
    """A T5-style encoder-decoder: input_ids, attention_mask [batch, enc], decoder_input_ids [batch, dec] -> logits."""
    b = Builder(seed, scale=0.3)
    shared = b.w("shared", vocab, hidden, scale=0.5)
    batch = b.dim("input_ids", 0, "batch")
    enc_len = _scalar_dim(b, "input_ids", 1, "enc_len")
    dec_len = _scalar_dim(b, "decoder_input_ids", 1, "dec_len")
    enc_seq = b.node("Unsqueeze", [enc_len, b.c("enc_ax", _i64(0))], "enc_seq")
    dec_seq = b.node("Unsqueeze", [dec_len, b.c("dec_ax", _i64(0))], "dec_seq")
    # the encoder mask: (1 - mask) * NEG as [batch, 1, 1, enc]
    mask = b.node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    mask = b.node("Mul", [b.node("Sub", [b.c("one", np.array(1.0, np.float32)), mask], "mask_inv"),
                          b.c("neg", np.array(NEG, np.float32))], "mask_add")
    mask = b.node("Unsqueeze", [mask, b.c("mask_ax", _i64(1, 2))], "mask4")
    enc_bias = b.node("Add", [_relative_bias(b, "enc_rb_", enc_len, enc_len, heads, bidirectional=True), mask],
                      "enc_bias")
    dec_bias = b.node("Add", [_relative_bias(b, "dec_rb_", dec_len, dec_len, heads, bidirectional=False),
                              _causal_mask(b, "dec_mask_", dec_len)], "dec_bias")
    x = b.node("Gather", [shared, "input_ids"], "enc_emb")
    for i in range(layers):
        p = f"enc{i}_"
        h = _rms_norm(b, p + "ln1", x, hidden, divide=True)
        x = b.node("Add", [x, _t5_attention(b, p + "sa_", h, h, batch, enc_seq, enc_seq, enc_bias, hidden, heads)],
                   p + "res1")
        x = b.node("Add", [x, _t5_ff(b, p + "ff_", _rms_norm(b, p + "ln2", x, hidden, divide=True), hidden)], p + "res2")
    encoded = _rms_norm(b, "enc_final", x, hidden, divide=True)
    y = b.node("Gather", [shared, "decoder_input_ids"], "dec_emb")
    for i in range(layers):
        p = f"dec{i}_"
        h = _rms_norm(b, p + "ln1", y, hidden, divide=True)
        y = b.node("Add", [y, _t5_attention(b, p + "sa_", h, h, batch, dec_seq, dec_seq, dec_bias, hidden, heads)],
                   p + "res1")
        h = _rms_norm(b, p + "ln2", y, hidden, divide=True)
        y = b.node("Add", [y, _t5_attention(b, p + "ca_", h, encoded, batch, dec_seq, enc_seq, mask, hidden, heads)],
                   p + "res2")
        y = b.node("Add", [y, _t5_ff(b, p + "ff_", _rms_norm(b, p + "ln3", y, hidden, divide=True), hidden)], p + "res3")
    y = b.node("Mul", [_rms_norm(b, "dec_final", y, hidden, divide=True),
                       b.c("lm_scale", np.array(hidden ** -0.5, np.float32))], "lm_in")
    logits = b.node("MatMul", [y, b.node("Transpose", [shared], "shared_t", perm=[1, 0])], "logits")
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", s]) for n, s in
              (("input_ids", "encoder_sequence"), ("attention_mask", "encoder_sequence"),
               ("decoder_input_ids", "decoder_sequence"))]
    return b.model("t5_like", inputs,
                   [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", "decoder_sequence", vocab])])


# ---------------------------------------------------------------------------------- Whisper

def _gelu(b: Builder, name: str, x: str) -> str:
    erf = b.node("Erf", [b.node("Div", [x, b.c(name + "_sqrt2", np.array(np.sqrt(2.0), np.float32))], name + "_div")],
                 name + "_erf")
    one = b.node("Add", [erf, b.c(name + "_one", np.array(1.0, np.float32))], name + "_add")
    return b.node("Mul", [b.node("Mul", [x, one], name + "_mul"), b.c(name + "_half", np.array(0.5, np.float32))], name)


def _ln(b: Builder, name: str, x: str, hidden: int) -> str:
    return b.node("LayerNormalization", [x, b.c(name + "_g", (1 + 0.1 * b.rng.standard_normal(hidden)).astype(np.float32)),
                                         b.w(name + "_b", hidden)], name, axis=-1, epsilon=1e-5)


def _whisper_attention(b: Builder, p: str, x: str, memory: str, batch: str, qseq: str, kseq: str, bias: str | None,
                       hidden: int, heads: int) -> str:
    head = hidden // heads
    qp = b.node("Add", [b.node("MatMul", [x, b.w(p + "q_w", hidden, hidden)], p + "q_mm"), b.w(p + "q_b", hidden)],
                p + "q_proj")
    qp = b.node("Mul", [qp, b.c(p + "q_scale", np.array(head ** -0.5, np.float32))], p + "q_scaled")
    q = _split_heads(b, p + "q", qp, batch, qseq, heads, head)
    k = _split_heads(b, p + "k", b.node("MatMul", [memory, b.w(p + "k_w", hidden, hidden)], p + "k_mm"), batch, kseq,
                     heads, head)  # Whisper's k projection has no bias
    vp = b.node("Add", [b.node("MatMul", [memory, b.w(p + "v_w", hidden, hidden)], p + "v_mm"), b.w(p + "v_b", hidden)],
                p + "v_proj")
    v = _split_heads(b, p + "v", vp, batch, kseq, heads, head)
    ctx = _merge_heads(b, p + "ctx_m", _attend(b, p, q, k, v, bias, None), batch, qseq, hidden)
    return b.node("Add", [b.node("MatMul", [ctx, b.w(p + "o_w", hidden, hidden)], p + "o_mm"), b.w(p + "o_b", hidden)],
                  p + "o")


def _whisper_mlp(b: Builder, p: str, x: str, hidden: int) -> str:
    h = b.node("Add", [b.node("MatMul", [x, b.w(p + "fc1_w", hidden, 4 * hidden)], p + "fc1_mm"),
                       b.w(p + "fc1_b", 4 * hidden)], p + "fc1")
    return b.node("Add", [b.node("MatMul", [_gelu(b, p + "gelu", h), b.w(p + "fc2_w", 4 * hidden, hidden)],
                                 p + "fc2_mm"), b.w(p + "fc2_b", hidden)], p + "fc2")


def _sinusoids(length: int, channels: int) -> np.ndarray:
    """Whisper's encoder positions."""
    increment = np.log(10000) / (channels // 2 - 1)
    inv = np.exp(-increment * np.arange(channels // 2))
    t = np.arange(length)[:, None] * inv[None, :]
    return np.concatenate([np.sin(t), np.cos(t)], axis=1).astype(np.float32)


def whisper_like(layers: int = 2, hidden: int = 32, heads: int = 4, mels: int = 16, frames: int = 64,
                 vocab: int = 64, seed: int = 0) -> onnx.ModelProto:
    """A Whisper-style speech model: input_features [batch, mels, frames], decoder_input_ids [batch, dec] -> logits."""
    b = Builder(seed, scale=0.2)
    x = b.node("Conv", ["input_features", b.w("conv1_w", hidden, mels, 3), b.w("conv1_b", hidden)], "conv1",
               pads=[1, 1])
    x = _gelu(b, "conv1_gelu", x)
    x = b.node("Conv", [x, b.w("conv2_w", hidden, hidden, 3), b.w("conv2_b", hidden)], "conv2", pads=[1, 1],
               strides=[2])
    x = b.node("Transpose", [_gelu(b, "conv2_gelu", x)], "frames_t", perm=[0, 2, 1])  # [batch, frames / 2, hidden]
    batch = b.dim(x, 0, "batch")
    enc_len = _scalar_dim(b, x, 1, "enc_len")
    enc_seq = b.node("Unsqueeze", [enc_len, b.c("enc_ax", _i64(0))], "enc_seq")
    positions = b.node("Slice", [b.c("enc_pos", _sinusoids(frames // 2, hidden)), b.c("pos_start", _i64(0)), enc_seq,
                                 b.c("pos_axis", _i64(0))], "enc_positions")
    x = b.node("Add", [x, positions], "enc_in")
    for i in range(layers):
        p = f"enc{i}_"
        h = _ln(b, p + "ln1", x, hidden)
        x = b.node("Add", [x, _whisper_attention(b, p + "sa_", h, h, batch, enc_seq, enc_seq, None, hidden, heads)],
                   p + "res1")
        x = b.node("Add", [x, _whisper_mlp(b, p, _ln(b, p + "ln2", x, hidden), hidden)], p + "res2")
    encoded = _ln(b, "enc_final", x, hidden)
    embed = b.w("dec_embed", vocab, hidden, scale=0.5)
    dec_len = _scalar_dim(b, "decoder_input_ids", 1, "dec_len")
    dec_seq = b.node("Unsqueeze", [dec_len, b.c("dec_ax", _i64(0))], "dec_seq")
    pos = b.node("Range", [b.c("dec_r0", np.array(0, np.int64)), dec_len, b.c("dec_r1", np.array(1, np.int64))],
                 "dec_pos")
    y = b.node("Add", [b.node("Gather", [embed, "decoder_input_ids"], "dec_tok"),
                       b.node("Gather", [b.w("dec_pos_table", 32, hidden, scale=0.5), pos], "dec_pos_emb")], "dec_in")
    causal = _causal_mask(b, "dec_mask_", dec_len)
    for i in range(layers):
        p = f"dec{i}_"
        h = _ln(b, p + "ln1", y, hidden)
        y = b.node("Add", [y, _whisper_attention(b, p + "sa_", h, h, batch, dec_seq, dec_seq, causal, hidden, heads)],
                   p + "res1")
        h = _ln(b, p + "ln2", y, hidden)
        y = b.node("Add", [y, _whisper_attention(b, p + "ca_", h, encoded, batch, dec_seq, enc_seq, None, hidden,
                                                 heads)], p + "res2")
        y = b.node("Add", [y, _whisper_mlp(b, p, _ln(b, p + "ln3", y, hidden), hidden)], p + "res3")
    y = _ln(b, "dec_final", y, hidden)
    logits = b.node("MatMul", [y, b.node("Transpose", [embed], "embed_t", perm=[1, 0])], "logits")
    inputs = [helper.make_tensor_value_info("input_features", TensorProto.FLOAT, ["batch", mels, "frames"]),
              helper.make_tensor_value_info("decoder_input_ids", TensorProto.INT64, ["batch", "decoder_sequence"])]
    return b.model("whisper_like", inputs,
                   [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", "decoder_sequence", vocab])])


__all__ = ["llama_like", "t5_like", "whisper_like"]
