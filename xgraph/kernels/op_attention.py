"""Attention family (opset 23+): Attention (with KV cache, grouped-query heads, masks, softcap) and RotaryEmbedding.

These are the fused ops torch's exporter writes at opset 23 for scaled_dot_product_attention and
rotary position embeddings. The kernels follow the ONNX specification (and its reference
evaluator's order of operations: Q and K each scaled by sqrt(scale), softcap before the mask,
a fully masked row gives zeros) with the whole batch and all heads in one batched matmul.
"""
from __future__ import annotations

import numpy as np
import onnx

from xgraph.errors import KernelError
from xgraph.kernels.registry import builtin_kernel as kernel
from xgraph.kernels.windows import FLOAT_TYPES


def _heads(op: str, x: np.ndarray, heads: int | None, what: str) -> np.ndarray:
    """[batch, seq, heads * size] -> [batch, heads, seq, size] (4-D input is returned as is)."""
    if x.ndim == 4:
        return x
    if x.ndim != 3 or not heads or x.shape[2] % int(heads):
        raise KernelError(f"{op}: {what} of shape {x.shape} needs rank 4, or rank 3 with a hidden size divisible by "
                          f"the {what.lower()} head count ({heads})")
    b, s, hidden = x.shape
    return x.reshape(b, s, int(heads), hidden // int(heads)).transpose(0, 2, 1, 3)


def _softmax_rows(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row of only -inf gives zeros (no key to attend)."""
    top = np.max(x, axis=-1, keepdims=True)
    top = np.where(np.isneginf(top), 0, top)
    e = np.exp(x - top)
    total = e.sum(axis=-1, keepdims=True)
    return e / np.where(total == 0, 1, total)


def _band(q: int, kv: int, offset, allowed_diff) -> np.ndarray:
    """Boolean [q, kv] (or [batch, 1, q, kv] for a per-batch offset) of keys j with allowed_diff(i + offset - j)."""
    i = np.arange(q).reshape(q, 1)
    j = np.arange(kv).reshape(1, kv)
    if np.ndim(offset):
        return allowed_diff(i + np.reshape(offset, (-1, 1, 1)) - j)[:, None]
    return allowed_diff(i + int(offset) - j)


def attention_bias(dtype, q_len: int, kv_len: int, mask: np.ndarray | None, is_causal: bool, offset,
                   nonpad: np.ndarray | None, window: tuple[int, int]) -> np.ndarray:
    """The additive bias (0 or -inf, plus a float mask) every query row adds to its scores."""
    neg = dtype.type(-np.inf)
    bias = np.zeros((q_len, kv_len), dtype)
    if mask is not None:
        if mask.shape[-1] < kv_len:  # a mask shorter than past + new keys: the rest is masked
            pad = [(0, 0)] * (mask.ndim - 1) + [(0, kv_len - mask.shape[-1])]
            mask = np.pad(mask, pad, constant_values=False if mask.dtype == np.bool_ else -np.inf)
        bias = bias + (np.where(mask, dtype.type(0), neg) if mask.dtype == np.bool_ else mask.astype(dtype))
    if is_causal:
        bias = bias + np.where(_band(q_len, kv_len, offset, lambda d: d >= 0), dtype.type(0), neg)
    left, right = window
    if left >= 0 or right >= 0:
        keep = lambda d: (d <= left if left >= 0 else True) & (-d <= right if right >= 0 else True)  # noqa: E731
        bias = bias + np.where(_band(q_len, kv_len, offset, keep), dtype.type(0), neg)
    if nonpad is not None:
        valid = np.arange(kv_len) < np.reshape(nonpad, (-1, 1))
        bias = bias + np.where(valid, dtype.type(0), neg).reshape(-1, 1, 1, kv_len)
    return bias


@kernel("Attention", since=23, dtypes=FLOAT_TYPES)
def attention(q, k, v, attn_mask=None, past_key=None, past_value=None, nonpad_kv_seqlen=None, *, is_causal=0,
              kv_num_heads=None, q_num_heads=None, qk_matmul_output_mode=0, scale=None, softcap=0.0,
              softmax_precision=None, left_window_size=-1, right_window_size=-1):
    """ONNX Attention-23/24/25: softmax(Q K^T * scale + bias) V with a KV cache and grouped-query heads.

    Returns (Y, present_key, present_value, qk_matmul_output)."""
    op = "Attention"
    rank = q.ndim
    if (past_key is None) != (past_value is None):
        raise KernelError(f"{op}: past_key and past_value go together; give both or neither")
    q4, k4, v4 = _heads(op, q, q_num_heads, "Q"), _heads(op, k, kv_num_heads, "K"), _heads(op, v, kv_num_heads, "V")
    present_key = k4 if past_key is None else np.concatenate([past_key, k4], axis=2)
    present_value = v4 if past_value is None else np.concatenate([past_value, v4], axis=2)
    dtype = q4.dtype
    root = dtype.type(np.sqrt(1.0 / np.sqrt(q4.shape[3]) if scale is None else float(scale)))
    heads, kv_heads = q4.shape[1], present_key.shape[1]
    keys, values = present_key, present_value
    if heads != kv_heads:
        if heads % kv_heads:
            raise KernelError(f"{op}: {heads} query heads cannot share {kv_heads} key/value heads")
        keys, values = np.repeat(keys, heads // kv_heads, axis=1), np.repeat(values, heads // kv_heads, axis=1)
    scores = np.matmul(q4 * root, np.swapaxes(keys * root, -1, -2))
    if softcap and softcap > 0:
        scores = np.tanh(scores / dtype.type(softcap)) * dtype.type(softcap)
    q_len, kv_len = q4.shape[2], keys.shape[2]
    if past_key is not None:
        offset = past_key.shape[2]
    elif nonpad_kv_seqlen is not None:
        offset = np.asarray(nonpad_kv_seqlen).reshape(-1) - q_len
    else:
        offset = 0
    bias = attention_bias(dtype, q_len, kv_len, attn_mask, bool(is_causal), offset, nonpad_kv_seqlen,
                          (int(left_window_size), int(right_window_size)))
    biased = scores + bias
    qk_out = {0: scores, 1: scores, 2: biased}.get(int(qk_matmul_output_mode))
    work = biased if softmax_precision is None else biased.astype(onnx.helper.tensor_dtype_to_np_dtype(softmax_precision))
    probs = _softmax_rows(work)
    probs = np.where(np.isneginf(np.max(bias, axis=-1, keepdims=True)), 0, probs)  # no key at all: zeros
    if qk_out is None:
        qk_out = probs
    y = np.matmul(probs.astype(dtype), values)
    if rank == 3:
        y = y.transpose(0, 2, 1, 3).reshape(y.shape[0], y.shape[2], -1)
    return y.astype(dtype, copy=False), present_key, present_value, qk_out.astype(dtype, copy=False)


@kernel("RotaryEmbedding", since=23, dtypes=FLOAT_TYPES)
def rotary_embedding(x, cos_cache, sin_cache, position_ids=None, *, interleaved=0, num_heads=0,
                     rotary_embedding_dim=0):
    """ONNX RotaryEmbedding-23: rotate (pairs of) the first rotary_embedding_dim features by the cached angles.

    x: [batch, heads, seq, head] or [batch, seq, heads * head] (with num_heads)."""
    op = "RotaryEmbedding"
    if x.ndim == 4:
        work = x.transpose(0, 2, 1, 3)  # [batch, seq, heads, head]
    elif x.ndim == 3 and num_heads and x.shape[2] % int(num_heads) == 0:
        work = x.reshape(x.shape[0], x.shape[1], int(num_heads), -1)
    else:
        raise KernelError(f"{op}: input of shape {x.shape} needs rank 4, or rank 3 with num_heads dividing its "
                          f"hidden size (num_heads={num_heads})")
    dim = int(rotary_embedding_dim) or work.shape[3]
    half = dim // 2
    if position_ids is not None:
        cos_cache, sin_cache = cos_cache[position_ids], sin_cache[position_ids]
    if cos_cache.shape[-1] != half or sin_cache.shape[-1] != half:
        raise KernelError(f"{op}: cos/sin caches have {cos_cache.shape[-1]}/{sin_cache.shape[-1]} angles per "
                          f"position, rotary_embedding_dim/2 = {half} expected")
    cos, sin = cos_cache[:, :, None, :], sin_cache[:, :, None, :]
    rotate = work[..., :dim]
    x1, x2 = (rotate[..., 0::2], rotate[..., 1::2]) if interleaved else (rotate[..., :half], rotate[..., half:])
    real, imag = cos * x1 - sin * x2, sin * x1 + cos * x2
    if interleaved:
        rotated = np.stack([real, imag], axis=-1).reshape(rotate.shape)
    else:
        rotated = np.concatenate([real, imag], axis=-1)
    out = np.concatenate([rotated, work[..., dim:]], axis=-1).astype(x.dtype, copy=False)
    return out.transpose(0, 2, 1, 3) if x.ndim == 4 else out.reshape(x.shape)
