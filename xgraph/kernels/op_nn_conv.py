"""Convolution family: Conv, ConvTranspose, ConvInteger, QLinearConv, DeformConv, and com.microsoft
FusedConv (Conv + residual + activation), all on (N, C, *spatial) tensors.

Conv and FusedConv are lowered to matrix products by `conv_lowering`; ConvTranspose is a
matmul to columns followed by a col2im scatter-add, one slice per kernel tap.
"""
from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from xgraph.errors import KernelError
from xgraph.kernels.conv_lowering import activation_in_place, check_conv_shapes, conv_core
from xgraph.kernels.registry import builtin_kernel as kernel
from xgraph.kernels.requantization import float32_multiplier, requantize_float32
from xgraph.kernels.windows import FLOAT_TYPES, INT8_TYPES, compute_dtype, per_axis_ints, window_geometry


# --------------------------------------------------------------------------- Conv, FusedConv


def _add_bias(op: str, y: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    if b is None:
        return y
    b = np.asarray(b)
    if b.size != y.shape[1]:
        raise KernelError(f"{op}: bias B has {b.size} values but the output has {y.shape[1]} channels")
    y += b.reshape((1, -1) + (1,) * (y.ndim - 2)).astype(y.dtype, copy=False)
    return y


@kernel("Conv", since=1, dtypes=FLOAT_TYPES)
def conv(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
         strides=None):
    """ONNX Conv-1/11/22 (same semantics, wider type lists): cross-correlation, optional bias, groups."""
    work = compute_dtype(x.dtype)
    y = conv_core("Conv", x.astype(work, copy=False), w.astype(work, copy=False), group=group,
                  kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad,
                  bias=b)
    return y.astype(x.dtype, copy=False)


@kernel("FusedConv", domain="com.microsoft", since=1, dtypes=FLOAT_TYPES)
def fused_conv(x, w, b=None, z=None, *, activation="", activation_params=None, auto_pad="NOTSET", dilations=None,
               group=1, kernel_shape=None, pads=None, strides=None):
    """com.microsoft FusedConv (onnxruntime's fusion of Conv, an optional residual Z and an activation).

    activation(Conv(X, W, B) + Z), updated in place on the convolution's own output: the target a
    graph pass can fuse Conv/Add/Relu chains into (with BatchNormalization folded into W and B).
    """
    work = compute_dtype(x.dtype)
    act = activation_in_place(activation, activation_params) if activation else None
    y = conv_core("FusedConv", x.astype(work, copy=False), w.astype(work, copy=False), group=group,
                  kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads, auto_pad=auto_pad,
                  bias=b, residual=z, activation=act)
    return y.astype(x.dtype, copy=False)


# --------------------------------------------------------------------------- ConvTranspose


def col2im_add(cols: np.ndarray, canvas: np.ndarray, kernel_shape: Sequence[int], strides: Sequence[int],
               dilations: Sequence[int], positions: Sequence[int]) -> np.ndarray:
    """Scatter-add cols (N, C, *K, *P) into canvas (N, C, *F) at f = p*stride + k*dilation; one slice per tap."""
    for tap in itertools.product(*(range(k) for k in kernel_shape)):
        region = tuple(slice(t * d, t * d + (p - 1) * s + 1, s)
                       for t, d, p, s in zip(tap, dilations, positions, strides))
        canvas[(slice(None), slice(None)) + region] += cols[(slice(None), slice(None)) + tap]
    return canvas


def _crop_or_extend(full: np.ndarray, begin: Sequence[int], out: Sequence[int]) -> np.ndarray:
    """full[..., b:b+o] per spatial axis, zero-extended where the window runs past the end."""
    rank = len(out)
    if all(b == 0 and o == f for b, o, f in zip(begin, out, full.shape[-rank:])):
        return full
    res = np.zeros(full.shape[:-rank] + tuple(out), dtype=full.dtype)
    src, dst = [], []
    for b, o, f in zip(begin, out, full.shape[-rank:]):
        lo, hi = max(b, 0), min(b + o, f)
        src.append(slice(lo, max(hi, lo)))
        dst.append(slice(lo - b, lo - b + max(hi - lo, 0)))
    lead = (slice(None),) * (full.ndim - rank)
    res[lead + tuple(dst)] = full[lead + tuple(src)]
    return res


@kernel("ConvTranspose", since=1, dtypes=FLOAT_TYPES)
def conv_transpose(x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    """ONNX ConvTranspose-1/11/22: the gradient of Conv; output_shape, when given, decides the pads."""
    op = "ConvTranspose"
    if x.ndim < 3 or w.ndim != x.ndim:
        raise KernelError(f"{op}: X {x.shape} and W {w.shape} must both be (N|C, C|M/group, spatial...)")
    group = int(group)
    n, c = x.shape[:2]
    if group < 1 or c % group or w.shape[0] != c:
        raise KernelError(f"{op}: channel mismatch: X has {c} channels, W is {w.shape}, group={group} "
                          f"(need W.shape[0] == C and C divisible by group)")
    ks = tuple(w.shape[2:])
    if kernel_shape is not None and len(kernel_shape) and tuple(int(k) for k in kernel_shape) != ks:
        raise KernelError(f"{op}: kernel_shape={list(kernel_shape)} does not match weight spatial shape {list(ks)}")
    rank = len(ks)
    spatial = x.shape[2:]
    strides = per_axis_ints(op, "strides", strides, rank, 1)
    dilations = per_axis_ints(op, "dilations", dilations, rank, 1)
    output_padding = per_axis_ints(op, "output_padding", output_padding, rank, 0)
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
    full = [s * (i - 1) + op_ + (k - 1) * d + 1
            for s, i, op_, k, d in zip(strides, spatial, output_padding, ks, dilations)]
    if output_shape is not None and len(output_shape):
        target = [int(v) for v in output_shape][-rank:]
    elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = [i * s for i, s in zip(spatial, strides)]
    else:
        target = None
    if target is not None:  # "If output_shape is specified pads values are ignored"
        total = [max(f - t, 0) for f, t in zip(full, target)]
        if auto_pad == "SAME_UPPER":
            begin = [t // 2 for t in total]
        else:  # SAME_LOWER and NOTSET put the odd pad first
            begin = [t - t // 2 for t in total]
        out = target
    else:
        if auto_pad not in ("NOTSET", "VALID", "", "SAME_UPPER", "SAME_LOWER"):
            raise KernelError(f"{op}: auto_pad={auto_pad!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
        p = per_axis_ints(op, "pads", None if auto_pad == "VALID" else pads, 2 * rank, 0)
        begin = p[:rank]
        out = target or [f - pb - pe for f, pb, pe in zip(full, p[:rank], p[rank:])]
    if any(o < 1 for o in out):
        raise KernelError(f"{op}: computed output shape {out} is not positive (pads {pads}, output_shape {output_shape})")

    work = compute_dtype(x.dtype)
    xw, ww = x.astype(work, copy=False), w.astype(work, copy=False)
    m_g = w.shape[1]
    taps = int(np.prod(ks))
    length = int(np.prod(spatial))
    wg = ww.reshape(group, c // group, m_g * taps).transpose(0, 2, 1)  # (g, M/g*K, C/g)
    cols = np.matmul(wg, xw.reshape(n, group, c // group, length))      # (N, g, M/g*K, L)
    cols = cols.reshape((n, group * m_g) + ks + tuple(spatial))
    canvas = np.zeros((n, group * m_g) + tuple(max(f, bb + o) for f, bb, o in zip(full, begin, out)), dtype=work)
    col2im_add(cols, canvas, ks, strides, dilations, spatial)
    y = _crop_or_extend(canvas, begin, out)
    return _add_bias(op, y, b).astype(x.dtype, copy=False)


# --------------------------------------------------------------------------- integer / quantized


def _zero_point_shift(op: str, name: str, a: np.ndarray, zero_point, per_channel_axis_len: int | None) -> np.ndarray:
    """`a` as float64 minus its zero point (scalar, or one per output channel for weights)."""
    out = a.astype(np.float64)
    if zero_point is None:
        return out
    zp = np.asarray(zero_point).astype(np.float64)
    if zp.size == 1:
        return out - zp.reshape(())
    if per_channel_axis_len is not None and zp.ndim == 1 and zp.size == per_channel_axis_len:
        return out - zp.reshape((-1,) + (1,) * (a.ndim - 1))
    raise KernelError(f"{op}: {name} has shape {zp.shape}; expected a scalar"
                      + (f" or one value per output channel ({per_channel_axis_len})" if per_channel_axis_len else ""))


def _integer_conv(op, x, w, x_zero_point, w_zero_point, attrs) -> np.ndarray:
    """Exact integer convolution of zero-point-shifted operands, accumulated in float64 (BLAS) then int64."""
    xs = _zero_point_shift(op, "x_zero_point", x, x_zero_point, None)
    ws = _zero_point_shift(op, "w_zero_point", w, w_zero_point, w.shape[0])
    y = conv_core(op, xs, ws, **attrs)
    return np.rint(y).astype(np.int64)


@kernel("ConvInteger", since=10, dtypes=INT8_TYPES)
def conv_integer(x, w, x_zero_point=None, w_zero_point=None, *, auto_pad="NOTSET", dilations=None, group=1,
                 kernel_shape=None, pads=None, strides=None):
    """ONNX ConvInteger-10: int32 convolution of (x - x_zero_point) and (w - w_zero_point); pads are 0 after the shift."""
    attrs = dict(group=group, kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads,
                 auto_pad=auto_pad)
    return _integer_conv("ConvInteger", x, w, x_zero_point, w_zero_point, attrs).astype(np.int32)


@kernel("QLinearConv", since=10, dtypes=INT8_TYPES)
def qlinear_conv(x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point=None, b=None, *,
                 auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None, strides=None):
    """ONNX QLinearConv-10: integer conv + int32 bias, requantized with round-half-even and saturation
    in float32 as onnxruntime does (`xgraph.kernels.requantization`)."""
    op = "QLinearConv"
    attrs = dict(group=group, kernel_shape=kernel_shape, strides=strides, dilations=dilations, pads=pads,
                 auto_pad=auto_pad)
    acc = _integer_conv(op, x, w, x_zero_point, w_zero_point, attrs)
    if b is not None:
        acc = acc + np.asarray(b).astype(np.int64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    ws = np.asarray(w_scale, dtype=np.float32)
    if ws.size > 1 and (ws.ndim != 1 or ws.size != w.shape[0]):
        raise KernelError(f"{op}: w_scale has shape {ws.shape}; expected a scalar or {w.shape[0]} values")
    multiplier = float32_multiplier(x_scale, ws, y_scale)  # onnxruntime's float32 requantization
    multiplier = multiplier.reshape((1, -1) + (1,) * (acc.ndim - 2)) if ws.size > 1 else multiplier.reshape(())
    out_dtype = np.asarray(y_zero_point).dtype if y_zero_point is not None else x.dtype
    zp = 0 if y_zero_point is None else int(np.asarray(y_zero_point).reshape(()))
    return requantize_float32(acc, multiplier, zp, np.dtype(out_dtype))


# --------------------------------------------------------------------------- DeformConv


@kernel("DeformConv", since=19, dtypes=FLOAT_TYPES)
def deform_conv(x, w, offset, b=None, mask=None, *, dilations=None, group=1, kernel_shape=None, offset_group=1,
                pads=None, strides=None):
    """ONNX DeformConv-19/22 (2-D): each tap samples the input bilinearly at its learned offset, zero outside."""
    op = "DeformConv"
    ks = check_conv_shapes(op, x, w, group, kernel_shape)
    if len(ks) != 2:
        raise KernelError(f"{op}: only 2-D inputs are supported, got X of shape {x.shape}")
    group, offset_group = int(group), int(offset_group)
    n, c, h, wd = x.shape
    m = w.shape[0]
    kh, kw = ks
    strides, dilations, begin, _end, out = window_geometry(op, (h, wd), ks, strides=strides, dilations=dilations,
                                                           pads=pads)
    oh, ow = out
    if offset_group < 1 or c % offset_group:
        raise KernelError(f"{op}: offset_group={offset_group} does not divide the {c} input channels")
    if offset.shape != (n, offset_group * kh * kw * 2, oh, ow):
        raise KernelError(f"{op}: offset has shape {offset.shape}; expected {(n, offset_group * kh * kw * 2, oh, ow)}")
    work = compute_dtype(x.dtype)
    off = offset.astype(work, copy=False).reshape(n, offset_group, kh, kw, 2, oh, ow)
    base_y = (np.arange(oh) * strides[0] - begin[0])[None, :] + (np.arange(kh) * dilations[0])[:, None]
    base_x = (np.arange(ow) * strides[1] - begin[1])[None, :] + (np.arange(kw) * dilations[1])[:, None]
    sy = base_y[None, None, :, None, :, None] + off[:, :, :, :, 0]  # (N, G, kh, kw, OH, OW)
    sx = base_x[None, None, None, :, None, :] + off[:, :, :, :, 1]
    y0, x0 = np.floor(sy), np.floor(sx)
    ly, lx = sy - y0, sx - x0
    y0, x0 = y0.astype(np.int64), x0.astype(np.int64)
    xr = x.astype(work, copy=False).reshape(n, offset_group, c // offset_group, h * wd)
    sampled = 0
    for dy, dx, weight in ((0, 0, (1 - ly) * (1 - lx)), (0, 1, (1 - ly) * lx), (1, 0, ly * (1 - lx)), (1, 1, ly * lx)):
        yy, xx = y0 + dy, x0 + dx
        inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < wd)
        flat = (np.clip(yy, 0, h - 1) * wd + np.clip(xx, 0, wd - 1)).reshape(n, offset_group, 1, -1)
        vals = np.take_along_axis(xr, flat, axis=3)  # (N, G, C/G, kh*kw*OH*OW)
        sampled = sampled + vals * np.where(inside, weight, 0).astype(work).reshape(n, offset_group, 1, -1)
    if mask is not None:
        if mask.shape != (n, offset_group * kh * kw, oh, ow):
            raise KernelError(f"{op}: mask has shape {mask.shape}; expected {(n, offset_group * kh * kw, oh, ow)}")
        sampled = sampled * mask.astype(work, copy=False).reshape(n, offset_group, 1, -1)
    cols = sampled.reshape(n, group, (c // group) * kh * kw, oh * ow)
    y = np.matmul(w.astype(work, copy=False).reshape(group, m // group, -1), cols).reshape(n, m, oh, ow)
    return _add_bias(op, y, b).astype(x.dtype, copy=False)
