"""Model builders for the compile tests (exposed as the `models` fixture: import mode "importlib"
has no sibling imports). Every builder returns a checked onnx.ModelProto with fixed seeds."""
from __future__ import annotations

import importlib
import types
from typing import Any, Sequence

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph

OPSET = 17
LIGHT = sorted((__import__("pathlib").Path(onnx.__file__).parent / "backend" / "test" / "data" / "light").glob("*.onnx"))


def _const(name: str, array: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def one_op(op_type: str, inputs: Sequence[Any], attrs: dict | None = None, *, domain: str = "",
           opset: int = OPSET, num_outputs: int = 1) -> xgraph.Graph:
    """A graph with one op. `inputs`: (dtype, shape) for a graph input, an array for a weight, None to omit."""
    graph_inputs, inits, names = [], [], []
    for i, spec in enumerate(inputs):
        name = f"in{i}"
        if spec is None:
            names.append("")
        elif isinstance(spec, np.ndarray):
            inits.append(_const(name, spec))
            names.append(name)
        else:
            dtype, shape = spec
            graph_inputs.append(helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)),
                                                              shape))
            names.append(name)
    outputs = [f"out{i}" for i in range(num_outputs)]
    node = helper.make_node(op_type, names, outputs, name="op", domain=domain, **(attrs or {}))
    opsets = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    g = helper.make_graph([node], "one_op", graph_inputs, [onnx.ValueInfoProto(name=o) for o in outputs],
                          initializer=inits)
    if domain == "xgraph.dvpp":
        importlib.import_module("xgraph.ops")  # registers the DVPP schemas for shape inference
    return xgraph.Graph.from_onnx(helper.make_model(g, opset_imports=opsets))


def chain(ops: Sequence[tuple[str, dict]], shape=(1, 4, 8, 8), dtype=TensorProto.FLOAT,
          weights: dict | None = None) -> onnx.ModelProto:
    """x -> op0 -> op1 -> ... -> y; each entry (op_type, attrs); op i is named f"n{i}"."""
    nodes = []
    for i, (op_type, attrs) in enumerate(ops):
        extra = list((weights or {}).get(i, []))
        nodes.append(helper.make_node(op_type, ["x" if i == 0 else f"n{i - 1}"] + extra,
                                      [f"n{i}"], name=f"n{i}", **attrs))
    inits = [_const(k, v) for i, ws in (weights or {}).items() for k, v in ws.items()]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", dtype, list(shape))],
                          [helper.make_tensor_value_info(f"n{len(ops) - 1}", TensorProto.UNDEFINED, None)],
                          initializer=inits)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])


def sandwich(middle: Sequence[str], outer: int = 3) -> onnx.ModelProto:
    """x(1,16) float -> `outer` Relus -> Cast to int64 -> middle int64 ops (Neg/Abs...) -> Cast float -> `outer` Relus.

    The int64 arithmetic is refused by AI Core and taken by AI CPU (the Casts stay on AI Core, as
    Ascend's Cast): a device island between AI Core islands."""
    names = []
    nodes = []
    prev = "x"

    def add(op, **attrs):
        nonlocal prev
        name = f"{op.lower()}{len(nodes)}"
        nodes.append(helper.make_node(op, [prev], [name], name=name, **attrs))
        names.append(name)
        prev = name

    for _ in range(outer):
        add("Relu")
    add("Cast", to=TensorProto.INT64)
    for op in middle:
        add(op)
    add("Cast", to=TensorProto.FLOAT)
    for _ in range(outer):
        add("Relu")
    g = helper.make_graph(nodes, "sandwich", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 16])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])


def cnn_with_lstm(seed: int = 0) -> onnx.ModelProto:
    """Conv -> Relu -> Reshape -> LSTM (host only, reference kernel) -> Squeeze -> Gemm -> Softmax."""
    rng = np.random.default_rng(seed)
    f = lambda *s: (rng.standard_normal(s) * 0.1).astype(np.float32)  # noqa: E731
    nodes = [
        helper.make_node("Conv", ["x", "cw", "cb"], ["conv"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv"], ["relu"], name="relu"),
        helper.make_node("Reshape", ["relu", "seq_shape"], ["seq"], name="to_seq"),
        helper.make_node("LSTM", ["seq", "W", "R"], ["", "h"], name="lstm", hidden_size=8),
        helper.make_node("Squeeze", ["h", "axis0"], ["h2"], name="squeeze"),
        helper.make_node("Gemm", ["h2", "fw", "fb"], ["logits"], name="fc", transB=1),
        helper.make_node("Softmax", ["logits"], ["prob"], name="softmax", axis=-1),
    ]
    inits = [_const("cw", f(4, 3, 3, 3)), _const("cb", f(4)), _const("seq_shape", np.array([16, 1, 16], np.int64)),
             _const("W", f(1, 32, 16)), _const("R", f(1, 32, 8)), _const("axis0", np.array([0], np.int64)),
             _const("fw", f(10, 8)), _const("fb", f(10))]
    g = helper.make_graph(nodes, "cnn_lstm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 16])],
                          [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 10])], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model


def bert_like_encoder(hidden: int = 32, heads: int = 4, vocab: int = 50, layers: int = 1) -> onnx.ModelProto:
    """A BERT-style encoder with dynamic (batch, seq): embeddings, attention mask, multi-head attention
    whose head split/merge Reshapes take shapes computed at run time (Shape -> Gather -> Unsqueeze ->
    Concat), LayerNormalization, Softmax and an Erf GELU feed-forward block."""
    rng = np.random.default_rng(0)
    head = hidden // heads
    nodes, inits = [], []

    def w(name, *shape):
        inits.append(_const(name, rng.standard_normal(shape).astype(np.float32) * 0.1))
        return name

    def c(name, value):
        inits.append(_const(name, value))
        return name

    def node(op, inputs, name, **attrs):
        nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    node("Gather", [w("word_emb", vocab, hidden), "input_ids"], "emb")
    x = node("LayerNormalization", ["emb", w("ln0_g", hidden), w("ln0_b", hidden)], "ln0", axis=-1)
    node("Cast", ["attention_mask"], "mask_f", to=TensorProto.FLOAT)
    node("Sub", [c("one", np.array(1.0, np.float32)), "mask_f"], "mask_inv")
    node("Mul", ["mask_inv", c("neg_big", np.array(-10000.0, np.float32))], "mask_add")
    node("Unsqueeze", ["mask_add", c("mask_axes", np.array([1, 2], np.int64))], "mask4")
    node("Shape", [x], "x_shape")
    node("Gather", ["x_shape", c("i0", np.array(0, np.int64))], "batch", axis=0)
    node("Gather", ["x_shape", c("i1", np.array(1, np.int64))], "seq", axis=0)
    node("Unsqueeze", ["batch", c("ax0", np.array([0], np.int64))], "batch1")
    node("Unsqueeze", ["seq", c("ax0b", np.array([0], np.int64))], "seq1")
    node("Concat", ["batch1", "seq1", c("heads_dims", np.array([heads, head], np.int64))], "split_shape", axis=0)
    node("Concat", ["batch1", "seq1", c("hidden_dim", np.array([hidden], np.int64))], "merge_shape", axis=0)
    for layer in range(layers):
        p = f"l{layer}_"
        split = {}
        for part in ("q", "k", "v"):
            node("MatMul", [x, w(p + part + "_w", hidden, hidden)], p + part + "_mm")
            node("Add", [p + part + "_mm", w(p + part + "_b", hidden)], p + part)
            node("Reshape", [p + part, "split_shape"], p + part + "_4d")
            perm = [0, 2, 3, 1] if part == "k" else [0, 2, 1, 3]
            split[part] = node("Transpose", [p + part + "_4d"], p + part + "_t", perm=perm)
        node("MatMul", [split["q"], split["k"]], p + "scores")
        node("Div", [p + "scores", c(p + "scale", np.array(np.sqrt(head), np.float32))], p + "scaled")
        node("Add", [p + "scaled", "mask4"], p + "masked")
        node("Softmax", [p + "masked"], p + "probs", axis=-1)
        node("MatMul", [p + "probs", split["v"]], p + "ctx")
        node("Transpose", [p + "ctx"], p + "ctx_t", perm=[0, 2, 1, 3])
        node("Reshape", [p + "ctx_t", "merge_shape"], p + "ctx_m")
        node("MatMul", [p + "ctx_m", w(p + "o_w", hidden, hidden)], p + "o_mm")
        node("Add", [p + "o_mm", w(p + "o_b", hidden)], p + "o")
        node("Add", [p + "o", x], p + "res1")
        h = node("LayerNormalization", [p + "res1", w(p + "ln1_g", hidden), w(p + "ln1_b", hidden)], p + "ln1",
                 axis=-1)
        node("MatMul", [h, w(p + "f1_w", hidden, 4 * hidden)], p + "f1_mm")
        node("Add", [p + "f1_mm", w(p + "f1_b", 4 * hidden)], p + "f1")
        node("Div", [p + "f1", c(p + "sqrt2", np.array(np.sqrt(2.0), np.float32))], p + "g_div")
        node("Erf", [p + "g_div"], p + "g_erf")
        node("Add", [p + "g_erf", c(p + "g_one", np.array(1.0, np.float32))], p + "g_add")
        node("Mul", [p + "f1", p + "g_add"], p + "g_mul")
        node("Mul", [p + "g_mul", c(p + "g_half", np.array(0.5, np.float32))], p + "gelu")
        node("MatMul", [p + "gelu", w(p + "f2_w", 4 * hidden, hidden)], p + "f2_mm")
        node("Add", [p + "f2_mm", w(p + "f2_b", hidden)], p + "f2")
        node("Add", [p + "f2", h], p + "res2")
        x = node("LayerNormalization", [p + "res2", w(p + "ln2_g", hidden), w(p + "ln2_b", hidden)], p + "ln2",
                 axis=-1)
    graph = helper.make_graph(
        nodes, "bert_like",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", "seq", hidden])],
        initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model


#: The shape-computation ops of `bert_like_encoder` (Shape -> Gather -> Unsqueeze -> Concat).
BERT_SHAPE_CHAIN = {"x_shape", "batch", "seq", "batch1", "seq1", "split_shape", "merge_shape"}
BERT_STATIC = {"input_shape": "input_ids:1,16;attention_mask:1,16"}


def check_compiled(graph: xgraph.Graph) -> None:
    """The invariants every compiled graph keeps (raises AssertionError naming the broken one)."""
    from xgraph.ir.links import check_links, check_tree
    check_links(graph)
    check_tree(graph)
    root = graph.get_root_subgraph()
    children = root.toposort_child_subgraph()  # raises on a cycle among the children
    seen = {}
    for child in children:
        assert child.depth == 1 and child.has_attr("device") and child.has_attr("runner"), child
        for op in child.get_ops():
            assert op not in seen, f"{op.name} in {seen.get(op)} and {child.name}"
            seen[op] = child.name
    assert set(seen) == set(graph.get_ops())


def matmul_chain(n: int = 6, size: int = 256, rows: int = 64) -> onnx.ModelProto:
    """n MatMuls mm0..mm{n-1} with their own weights, one after another (heavy enough for AI Core)."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], [], "x"
    for i in range(n):
        inits.append(_const(f"w{i}", rng.standard_normal((size, size)).astype(np.float32) / size))
        nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"mm{i}"))
        prev = f"m{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, size])],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [rows, size])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


@pytest.fixture
def models():
    """The builders above, as a namespace."""
    return types.SimpleNamespace(one_op=one_op, chain=chain, sandwich=sandwich, cnn_with_lstm=cnn_with_lstm,
                                 bert_like_encoder=bert_like_encoder, BERT_SHAPE_CHAIN=BERT_SHAPE_CHAIN,
                                 BERT_STATIC=BERT_STATIC, check_compiled=check_compiled, LIGHT=LIGHT,
                                 matmul_chain=matmul_chain)
