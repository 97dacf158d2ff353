"""Makes the generate sample's model: a tiny GPT-2-style decoder with a KV cache, random weights.

Built with onnx.helper the way torch exports GPT-2 "with past": symbolic batch/sequence dims,
head split/merge shapes computed at run time (Shape -> Gather -> Unsqueeze -> Concat -> Reshape),
a causal-mask Slice over the run-time lengths, past_l{i}_k/v inputs and present_l{i}_k/v outputs.
No download: the weights are seeded random numbers.

    python samples/generate/make_model.py            # writes samples/generate/decoder.onnx
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
HERE = Path(__file__).resolve().parent


class _Builder:
    def __init__(self, seed: int = 0, scale: float = 0.1):
        self.rng = np.random.default_rng(seed)
        self.scale = scale
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.n = 0

    def w(self, name, *shape, scale=None):
        scale = self.scale if scale is None else scale
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def c(self, name, value):
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op, inputs, name, n_out=1, **attrs):
        outs = [name] if n_out == 1 else [f"{name}_{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=name, **attrs))
        return outs[0] if n_out == 1 else outs

    def dim(self, x, i, name):
        """Unsqueezed dim i of x's run-time shape: Shape -> Gather -> Unsqueeze."""
        s = self.node("Shape", [x], f"{name}_shape")
        g = self.node("Gather", [s, self.c(f"{name}_i", np.array(i, np.int64))], f"{name}_gather", axis=0)
        return self.node("Unsqueeze", [g, self.c(f"{name}_ax", np.array([0], np.int64))], name)

    def model(self, name, inputs, outputs):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
        onnx.checker.check_model(model)
        return model


def _attention(b: _Builder, p: str, x: str, hidden: int, heads: int, past: bool, causal: bool):
    """Multi-head self-attention with run-time head split/merge shapes; returns (out, present_k, present_v)."""
    head = hidden // heads
    qkv = b.node("MatMul", [x, b.w(p + "qkv_w", hidden, 3 * hidden)], p + "qkv_mm")
    qkv = b.node("Add", [qkv, b.w(p + "qkv_b", 3 * hidden)], p + "qkv")
    q, k, v = b.node("Split", [qkv, b.c(p + "split", np.array([hidden] * 3, np.int64))], p + "qkvs", n_out=3, axis=2)
    bt, sq = b.dim(x, 0, p + "batch"), b.dim(x, 1, p + "seq")
    split_shape = b.node("Concat", [bt, sq, b.c(p + "hd", np.array([heads, head], np.int64))], p + "split_shape", axis=0)
    parts = {}
    for name, t in (("q", q), ("k", k), ("v", v)):
        r = b.node("Reshape", [t, split_shape], p + name + "_4d")
        parts[name] = b.node("Transpose", [r], p + name + "_t", perm=[0, 2, 1, 3])
    k, v = parts["k"], parts["v"]
    if past:
        k = b.node("Concat", [f"past_{p}k", k], f"present_{p}k", axis=2)
        v = b.node("Concat", [f"past_{p}v", v], f"present_{p}v", axis=2)
    kt = b.node("Transpose", [k], p + "kt", perm=[0, 1, 3, 2])
    scores = b.node("MatMul", [parts["q"], kt], p + "scores")
    scores = b.node("Div", [scores, b.c(p + "scale", np.array(np.sqrt(head), np.float32))], p + "scaled")
    if causal:
        total = b.dim(k, 2, p + "total")
        qlen = b.dim(parts["q"], 2, p + "qlen")
        start = b.node("Sub", [total, qlen], p + "mask_start")
        mask = b.node("Slice", [b.c(p + "tril", np.tril(np.ones((64, 64), bool))), start, total,
                                b.c(p + "axis0", np.array([0], np.int64))], p + "mask_rows")
        mask = b.node("Slice", [mask, b.c(p + "zero", np.array([0], np.int64)), total,
                                b.c(p + "axis1", np.array([1], np.int64))], p + "mask")
        scores = b.node("Where", [mask, scores, b.c(p + "neg", np.array(-1e4, np.float32))], p + "masked")
    probs = b.node("Softmax", [scores], p + "probs", axis=-1)
    ctx = b.node("MatMul", [probs, v], p + "ctx")
    ctx = b.node("Transpose", [ctx], p + "ctx_t", perm=[0, 2, 1, 3])
    merge = b.node("Concat", [bt, sq, b.c(p + "hid", np.array([hidden], np.int64))], p + "merge_shape", axis=0)
    ctx = b.node("Reshape", [ctx, merge], p + "ctx_m")
    out = b.node("MatMul", [ctx, b.w(p + "o_w", hidden, hidden)], p + "o_mm")
    return b.node("Add", [out, b.w(p + "o_b", hidden)], p + "o"), k, v


def _ln(b: _Builder, name: str, x: str, hidden: int):
    return b.node("LayerNormalization", [x, b.c(name + "_g", np.ones(hidden, np.float32)), b.w(name + "_b", hidden)],
                  name, axis=-1, epsilon=1e-5)


def _mlp(b: _Builder, p: str, x: str, hidden: int):
    h = b.node("MatMul", [x, b.w(p + "fc_w", hidden, 4 * hidden)], p + "fc_mm")
    h = b.node("Add", [h, b.w(p + "fc_b", 4 * hidden)], p + "fc")
    # tanh GELU as GPT-2 exports it: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    cube = b.node("Pow", [h, b.c(p + "three", np.array(3.0, np.float32))], p + "cube")
    inner = b.node("Add", [h, b.node("Mul", [cube, b.c(p + "k", np.array(0.044715, np.float32))], p + "cube_k")],
                   p + "inner")
    t = b.node("Tanh", [b.node("Mul", [inner, b.c(p + "s", np.array(np.sqrt(2 / np.pi), np.float32))], p + "sc")],
               p + "tanh")
    t = b.node("Add", [t, b.c(p + "one", np.array(1.0, np.float32))], p + "t1")
    g = b.node("Mul", [b.node("Mul", [h, t], p + "ht"), b.c(p + "half", np.array(0.5, np.float32))], p + "gelu")
    h = b.node("MatMul", [g, b.w(p + "proj_w", 4 * hidden, hidden)], p + "proj_mm")
    return b.node("Add", [h, b.w(p + "proj_b", hidden)], p + "proj")


def gpt2_like(layers: int = 2, hidden: int = 32, heads: int = 4, vocab: int = 64, past: bool = False,
              seed: int = 0) -> onnx.ModelProto:
    """A GPT-2-style decoder: token + position embeddings (positions from Range over the run-time
    sequence length, offset by the past length with a KV cache), pre-LN blocks with causal attention
    and a tanh-GELU MLP, tied LM head. With `past`: inputs position_ids [batch, sequence] and
    past_l{i}_k/v [batch, heads, past, head], outputs present_l{i}_k/v [batch, heads, past + sequence, head]."""
    b = _Builder(seed, scale=0.3)  # large enough that greedy decoding does not settle on one token
    head = hidden // heads
    wte = b.w("wte", vocab, hidden, scale=0.5)
    x = b.node("Gather", [wte, "input_ids"], "tok_emb")
    if past:  # as exports with a KV cache do, positions come in (their count is the run-time past length)
        pos = "position_ids"
    else:
        seq = b.node("Squeeze", [b.dim("input_ids", 1, "ids_seq")], "seq_len")
        pos = b.node("Range", [b.c("offset", np.array(0, np.int64)), seq, b.c("one_i", np.array(1, np.int64))], "pos")
    pe = b.node("Gather", [b.w("wpe", 64, hidden, scale=0.5), pos], "pos_emb")
    x = b.node("Add", [x, pe], "emb")
    presents = []
    for i in range(layers):
        p = f"l{i}_"
        a, k, v = _attention(b, p, _ln(b, p + "ln1", x, hidden), hidden, heads, past, causal=True)
        x = b.node("Add", [x, a], p + "res1")
        x = b.node("Add", [x, _mlp(b, p, _ln(b, p + "ln2", x, hidden), hidden)], p + "res2")
        presents += [k, v]
    x = _ln(b, "ln_f", x, hidden)
    logits = b.node("MatMul", [x, b.node("Transpose", [wte], "wte_t", perm=[1, 0])], "logits")
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"])]
    outputs = [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", "sequence", vocab])]
    if past:
        inputs.append(helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch", "sequence"]))
        for i in range(layers):
            for kv in "kv":
                inputs.append(helper.make_tensor_value_info(f"past_l{i}_{kv}", TensorProto.FLOAT,
                                                            ["batch", heads, "past_sequence", head]))
                outputs.append(helper.make_tensor_value_info(f"present_l{i}_{kv}", TensorProto.FLOAT,
                                                             ["batch", heads, "total_sequence", head]))
    return b.model("gpt2_like", inputs, outputs)


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else HERE / "decoder.onnx"
    onnx.save(gpt2_like(past=True), out)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
