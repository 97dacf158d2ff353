"""Models for the concurrency soak: SqueezeNet split over several devices, and a small transformer.

Both are placed by hand (`testing.runtime.place`) so the graph runner has several
device subgraphs, streams and host<->device copies to juggle, independent of how the
partitioner would place them today.
"""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from xgraph import Graph, Op
from testing.runtime import place, with_logits_output, zoo_model

#: SqueezeNet's ops over three devices: convolutions on AI Core, pools and concats on AI CPU,
#: the head on the host, so every fire module crosses devices.
SQUEEZENET_DEVICES = {"Conv": "AICORE", "Relu": "AICORE", "MaxPool": "AICPU", "Concat": "AICPU",
                      "Dropout": "CPU", "GlobalAveragePool": "CPU", "AveragePool": "CPU", "Softmax": "CPU"}


def squeezenet_graph(seed: int = 0) -> Graph:
    """SqueezeNet 1.0 (light zoo architecture, random weights), input 1x3x224x224, outputs prob and logits."""
    graph = Graph.from_onnx(with_logits_output(zoo_model("squeezenet", seed)))
    return place(graph, lambda op: SQUEEZENET_DEVICES.get(op.type, "CPU"))


def squeezenet_input(job: int) -> np.ndarray:
    """A distinct input per job."""
    return np.random.default_rng(job).standard_normal((1, 3, 224, 224)).astype(np.float32)


def transformer_model(seq: int = 16, dim: int = 32, heads: int = 4, layers: int = 2, vocab: int = 100,
                      seed: int = 0) -> onnx.ModelProto:
    """A BERT-like encoder: embedding Gather, `layers` x (attention + LayerNorm + FFN), logits over the vocab.

    Inputs: input_ids int64 [1, seq], attention_mask float32 [1, seq] (1 = attend, 0 = padding).
    """
    rng = np.random.default_rng(seed)
    inits: list[onnx.TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def weight(name: str, shape: tuple, scale: float | None = None) -> str:
        s = scale if scale is not None else 1.0 / np.sqrt(shape[0])
        inits.append(numpy_helper.from_array((rng.standard_normal(shape) * s).astype(np.float32), name))
        return name

    def const(name: str, value) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(op: str, inputs: list[str], name: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    dh = dim // heads
    h = node("Gather", [weight("embedding", (vocab, dim), 1.0), "input_ids"], "embed")
    h = node("Add", [h, weight("position", (seq, dim), 0.1)], "embed_pos")
    mask = node("Sub", [const("one", np.float32(1.0)), "attention_mask"], "mask_inv")
    mask = node("Mul", [mask, const("neg", np.float32(-1e4))], "mask_bias")
    mask = node("Reshape", [mask, const("mask_shape", np.array([1, 1, 1, seq], np.int64))], "mask_4d")
    heads_shape = const("heads_shape", np.array([1, seq, heads, dh], np.int64))
    flat_shape = const("flat_shape", np.array([1, seq, dim], np.int64))
    for i in range(layers):
        p = f"l{i}_"
        ln = node("LayerNormalization", [h, weight(p + "ln1_g", (dim,), 0.1), weight(p + "ln1_b", (dim,), 0.1)],
                  p + "ln1", axis=-1)
        split = {}
        for part in "qkv":
            x = node("MatMul", [ln, weight(p + "w" + part, (dim, dim))], p + part)
            x = node("Reshape", [x, heads_shape], p + part + "_heads")
            split[part] = node("Transpose", [x], p + part + "_t", perm=[0, 2, 3, 1] if part == "k" else [0, 2, 1, 3])
        scores = node("MatMul", [split["q"], split["k"]], p + "scores")
        scores = node("Mul", [scores, const(p + "scale", np.float32(1.0 / np.sqrt(dh)))], p + "scaled")
        scores = node("Add", [scores, mask], p + "masked")
        attn = node("Softmax", [scores], p + "attn", axis=-1)
        ctx = node("MatMul", [attn, split["v"]], p + "ctx")
        ctx = node("Transpose", [ctx], p + "ctx_t", perm=[0, 2, 1, 3])
        ctx = node("Reshape", [ctx, flat_shape], p + "ctx_flat")
        out = node("MatMul", [ctx, weight(p + "wo", (dim, dim))], p + "attn_out")
        h = node("Add", [h, out], p + "res1")
        ln = node("LayerNormalization", [h, weight(p + "ln2_g", (dim,), 0.1), weight(p + "ln2_b", (dim,), 0.1)],
                  p + "ln2", axis=-1)
        ff = node("MatMul", [ln, weight(p + "w1", (dim, 4 * dim))], p + "ff1")
        ff = node("Relu", [ff], p + "ff_act")
        ff = node("MatMul", [ff, weight(p + "w2", (4 * dim, dim))], p + "ff2")
        h = node("Add", [h, ff], p + "res2")
    node("MatMul", [h, weight("unembed", (dim, vocab))], "logits")
    graph = helper.make_graph(nodes, "tiny_transformer",
                              [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq]),
                               helper.make_tensor_value_info("attention_mask", TensorProto.FLOAT, [1, seq])],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, seq, vocab])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def transformer_device(op: Op) -> str:
    """Dense math on AI Core, gathers and layout changes on AI CPU, the mask arithmetic on the host."""
    if op.type in ("Gather", "Reshape", "Transpose"):
        return "AICPU"
    if op.name.startswith("mask"):
        return "CPU"
    return "AICORE"


def transformer_graph(seq: int = 16, seed: int = 0, **kw) -> Graph:
    """The transformer placed over AICORE/AICPU/CPU."""
    return place(Graph.from_onnx(transformer_model(seq=seq, seed=seed, **kw)), transformer_device)


def transformer_input(job: int, seq: int = 16, vocab: int = 100) -> dict[str, np.ndarray]:
    """Distinct token ids and padding per job."""
    rng = np.random.default_rng(job)
    mask = np.ones((1, seq), np.float32)
    mask[0, int(rng.integers(seq // 2, seq + 1)):] = 0
    return {"input_ids": rng.integers(0, vocab, (1, seq), dtype=np.int64), "attention_mask": mask}
