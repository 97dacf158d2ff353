"""Transformer and CNN exports built by hand with onnx.helper, the way torch exports them: symbolic
batch/sequence dims and shape arithmetic (Shape -> Gather -> Unsqueeze -> Concat -> Reshape, Range
over the sequence length, a causal-mask Slice), seeded random weights. Exposed as the `tmodels`
fixture (import mode "importlib" has no sibling imports). The GPT-2-style builder is the generate
sample's (samples/generate/make_model.py), loaded by path.
"""
from __future__ import annotations

import types
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from testing.runtime import load_script

ROOT = Path(__file__).resolve().parents[2]


_sample = load_script(ROOT / "samples" / "generate" / "make_model.py", "generate_make_model")
_Builder, _attention, _ln, _mlp, gpt2_like = (_sample._Builder, _sample._attention, _sample._ln, _sample._mlp,
                                              _sample.gpt2_like)


def vit_like(layers: int = 2, hidden: int = 32, heads: int = 4, patch: int = 8, image: int = 32,
             classes: int = 10) -> onnx.ModelProto:
    """A ViT-style classifier: Conv patch embedding, Flatten via run-time shape, class token Concat
    (Expand to the run-time batch), position embeddings, pre-LN encoder blocks, head on the class token."""
    b = _Builder(1)
    tokens = (image // patch) ** 2
    x = b.node("Conv", ["pixel_values", b.w("patch_w", hidden, 3, patch, patch), b.w("patch_b", hidden)], "patch",
               strides=[patch, patch])
    bt = b.dim(x, 0, "vb")
    flat_shape = b.node("Concat", [bt, b.c("hid_c", np.array([hidden], np.int64)), b.c("m1", np.array([-1], np.int64))],
                        "flat_shape", axis=0)
    x = b.node("Reshape", [x, flat_shape], "patch_flat")
    x = b.node("Transpose", [x], "patch_t", perm=[0, 2, 1])
    cls_shape = b.node("Concat", [bt, b.c("one_hid", np.array([1, hidden], np.int64))], "cls_shape", axis=0)
    cls = b.node("Expand", [b.w("cls", 1, 1, hidden), cls_shape], "cls_tok")
    x = b.node("Concat", [cls, x], "tokens", axis=1)
    x = b.node("Add", [x, b.w("pos", 1, tokens + 1, hidden)], "emb")
    for i in range(layers):
        p = f"l{i}_"
        a, _, _ = _attention(b, p, _ln(b, p + "ln1", x, hidden), hidden, heads, past=False, causal=False)
        x = b.node("Add", [x, a], p + "res1")
        x = b.node("Add", [x, _mlp(b, p, _ln(b, p + "ln2", x, hidden), hidden)], p + "res2")
    x = _ln(b, "ln_f", x, hidden)
    first = b.node("Gather", [x, b.c("cls_idx", np.array(0, np.int64))], "cls_out", axis=1)
    logits = b.node("Gemm", [first, b.w("head_w", hidden, classes), b.w("head_b", classes)], "logits")
    return b.model("vit_like",
                   [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, image, image])],
                   [helper.make_tensor_value_info(logits, TensorProto.FLOAT, ["batch", classes])])


def unet_like(channels: int = 8, size: int = 64) -> onnx.ModelProto:
    """A small UNet with a static 1x3xSxS input: two downsampling stages, Resize upsampling whose
    `sizes` come from the skip tensor's run-time shape (Shape -> Slice -> Concat), skip Concats."""
    b = _Builder(2)

    def conv(name, x, cin, cout):
        y = b.node("Conv", [x, b.w(name + "_w", cout, cin, 3, 3), b.w(name + "_b", cout)], name + "_c", pads=[1, 1, 1, 1])
        return b.node("Relu", [y], name)

    e1 = conv("e1", "image", 3, channels)
    d1 = b.node("MaxPool", [e1], "d1", kernel_shape=[2, 2], strides=[2, 2])
    e2 = conv("e2", d1, channels, 2 * channels)
    d2 = b.node("MaxPool", [e2], "d2", kernel_shape=[2, 2], strides=[2, 2])
    m = conv("mid", d2, 2 * channels, 2 * channels)
    x, cin = m, 2 * channels
    for name, skip, cskip in (("u2", e2, 2 * channels), ("u1", e1, channels)):
        hw = b.node("Slice", [b.node("Shape", [skip], name + "_sshape"), b.c(name + "_s", np.array([2], np.int64)),
                              b.c(name + "_e", np.array([4], np.int64))], name + "_hw")
        nc = b.node("Slice", [b.node("Shape", [x], name + "_xshape"), b.c(name + "_s0", np.array([0], np.int64)),
                              b.c(name + "_e0", np.array([2], np.int64))], name + "_nc")
        sizes = b.node("Concat", [nc, hw], name + "_sizes", axis=0)
        up = b.node("Resize", [x, "", "", sizes], name + "_up", mode="nearest")
        cat = b.node("Concat", [up, skip], name + "_cat", axis=1)
        x, cin = conv(name, cat, cin + cskip, cskip), cskip
    out = b.node("Conv", [x, b.w("out_w", 1, channels, 1, 1), b.w("out_b", 1)], "mask")
    return b.model("unet_like", [helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, size, size])],
                   [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 1, size, size])])


def _bert_like_encoder():
    """The BERT-style builder of tests/compile (loaded by path: no sibling imports)."""
    return load_script(ROOT / "tests" / "compile" / "conftest.py", "compile_models").bert_like_encoder


_llm = load_script(ROOT / "tests" / "large" / "llm_exports.py", "large_llm_exports")  # Llama, T5, Whisper


def onnxruntime_outputs(model: onnx.ModelProto, feeds) -> list:
    """onnxruntime's outputs for `model` (the oracle the compiled runs are compared with)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so).run(None, feeds)


@pytest.fixture
def tmodels():
    return types.SimpleNamespace(gpt2_like=gpt2_like, vit_like=vit_like, unet_like=unet_like,
                                 bert_like_encoder=_bert_like_encoder(), llama_like=_llm.llama_like,
                                 t5_like=_llm.t5_like, whisper_like=_llm.whisper_like,
                                 onnxruntime_outputs=onnxruntime_outputs)
