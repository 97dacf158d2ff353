"""Exact integer convolutions and matrix products on float32 BLAS.

numpy has no int8 GEMM: `np.matmul` on integer arrays runs a plain loop, hundreds of times
slower than BLAS. An int8 unit (`xgraph.runners.int8_fusion`) therefore computes its integer
accumulation ``acc[m] = sum_k a[k] * w[k, m]`` (a = x - x_zp, w = w_q - w_zp, both small
integers) with float BLAS, and it must come out exact.

Why float32 is exact here: every product ``a[k] * w[k, m]`` is an integer of magnitude at most
255 * 255 < 2**24, so it is a float32 without rounding. However BLAS orders and blocks the
sum (and whether it uses FMA), every intermediate value is the sum of some subset of one
output's products, so its magnitude is at most ``|a|_max * sum_k |w[k, m]|``. When that bound
is at most 2**24, every intermediate is an integer float32 represents exactly, so no addition
ever rounds and the result is the exact integer, in any summation order. The same holds for the
convolution lowerings of `xgraph.kernels.conv_lowering` (im2col, 1x1, shifted taps, depthwise):
they too only add subsets of one output's products.

When the bound is larger (wide reductions with large weights: K * 128 * 127 passes 2**24 from
K = 1040 up), the reduction axis is split into consecutive chunks whose own bound fits
(`exact_chunks`); each chunk's product is exact in float32 and the chunks are summed in float64
(exact below 2**53). `|a|_max` comes from the input's integer type and zero point, the
per-output sums of |w| from the constant weight, so the split is planned once, and needs no
check at run time. Worst case, full-range int8 weights of K = 4608 (ResNet50's 3x3x512) need
5 chunks; seeded random or calibrated weights usually need one.

    >>> w = np.full((4096, 1), 127)            # K x M, worst case
    >>> exact_chunks(np.abs(w), 128)           # 2**24 / (128 * 127) = 1032 rows per chunk
    [(0, 1032), (1032, 2064), (2064, 3096), (3096, 4096)]
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from xgraph.kernels.conv_lowering import conv_core

#: Integers up to this magnitude are exact in float32 (its 24-bit significand).
FLOAT32_EXACT = 1 << 24


def input_bound(dtype: np.dtype, zero_point: int) -> int:
    """The largest |x - zero_point| an integer input of `dtype` can give."""
    info = np.iinfo(dtype)
    return int(max(abs(int(info.min) - zero_point), abs(int(info.max) - zero_point)))


def exact_chunks(weight_abs: np.ndarray, a_max: int, limit: int = FLOAT32_EXACT) -> list[tuple[int, int]]:
    """Consecutive [start, end) ranges of axis 0 of `weight_abs` (reduction groups x outputs) that
    keep ``a_max * sum(weight_abs[start:end], axis=0)`` at most `limit` for every output.

    Greedy, largest chunks first; O(G * M) per chunk for G groups and M outputs. A group whose
    own bound passes the limit (impossible for int8/uint8 with K per group < 258) is its own chunk.
    """
    groups = weight_abs.shape[0]
    if groups == 0:
        return []
    budget = limit // max(int(a_max), 1)
    sums = np.cumsum(weight_abs.reshape(groups, -1).astype(np.int64), axis=0)
    chunks, start = [], 0
    base = np.zeros(sums.shape[1], dtype=np.int64)
    while start < groups:
        reach = (sums[start:] - base).max(axis=1)  # non-decreasing in the chunk's end
        end = start + max(1, int(np.searchsorted(reach, budget, side="right")))
        chunks.append((start, end))
        base = sums[end - 1]
        start = end
    return chunks


def integer_conv(w: np.ndarray, a_max: int, conv_attrs: dict) -> Callable[[np.ndarray], np.ndarray]:
    """acc = Conv(a, w) exactly, for integer-valued float32 input `a` with |a| <= a_max.

    `w` (M, C/group, *K) holds integer values (weight minus its zero point). Returns a function
    of `a` giving the float32 (one chunk) or float64 (several) accumulation.
    """
    group = int(conv_attrs.get("group", 1))
    w = np.asarray(w)
    m = w.shape[0]
    if group == 1:
        per_channel = np.abs(w).reshape(m, w.shape[1], -1).sum(axis=2).T  # (C, M)
        chunks = exact_chunks(per_channel, a_max)
    else:  # the reduction of each output runs over its group's channels only
        per_output = np.abs(w).reshape(m, -1).sum(axis=1)
        chunks = [(0, w.shape[1])] if int(per_output.max(initial=0)) * a_max <= FLOAT32_EXACT else []
    if not chunks or (group > 1 and len(chunks) > 1):
        w64 = w.astype(np.float64)
        return lambda a: conv_core("QLinearConv", a.astype(np.float64), w64, **conv_attrs)
    if len(chunks) == 1:
        w32 = np.ascontiguousarray(w, dtype=np.float32)
        return lambda a: conv_core("QLinearConv", a, w32, **conv_attrs)
    pieces = [(c0, c1, np.ascontiguousarray(w[:, c0:c1], dtype=np.float32)) for c0, c1 in chunks]

    def chunked(a: np.ndarray) -> np.ndarray:
        acc = None
        for c0, c1, wc in pieces:
            part = conv_core("QLinearConv", np.ascontiguousarray(a[:, c0:c1]), wc, **conv_attrs)
            acc = part.astype(np.float64) if acc is None else np.add(acc, part, out=acc)
        return acc
    return chunked


def integer_matmul(w: np.ndarray, a_max: int) -> Callable[[np.ndarray], np.ndarray]:
    """acc = a @ w exactly, for integer-valued float32 `a` (..., K) with |a| <= a_max and integer `w` (K, N)."""
    w = np.asarray(w)
    chunks = exact_chunks(np.abs(w), a_max)
    if len(chunks) <= 1:
        w32 = np.ascontiguousarray(w, dtype=np.float32)
        return lambda a: a @ w32
    pieces = [(k0, k1, np.ascontiguousarray(w[k0:k1], dtype=np.float32)) for k0, k1 in chunks]

    def chunked(a: np.ndarray) -> np.ndarray:
        acc = None
        for k0, k1, wc in pieces:
            part = a[..., k0:k1] @ wc
            acc = part.astype(np.float64) if acc is None else np.add(acc, part, out=acc)
        return acc
    return chunked


__all__ = ["FLOAT32_EXACT", "exact_chunks", "input_bound", "integer_conv", "integer_matmul"]
