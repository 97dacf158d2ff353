"""Plan-time integer units: DequantizeLinear -> Conv/MatMul/Gemm -> QuantizeLinear as one integer call.

A QDQ unit means "the integer op": its DQs and Q only say which integers and scales the op
works on. Computing it in float (dequantize, float Conv, quantize) is ONNX's reference
semantics (the `ref` mode keeps it); an int8 device, and onnxruntime, compute

    acc = sum((x - x_zp) * (w - w_zp)) + b          exact, in integers (int32 on the device)
    y   = saturate(round_half_even(acc * x_scale * w_scale / y_scale) + y_zp)

which may differ from the float path by one quantization step where a value lies near a
rounding boundary. `fuse_qdq(plan)` replaces each such pattern in a numpy plan by one step
computing exactly that, reading the quantized input and writing the quantized output; the
graph is not changed. The multiplier and its product are formed in float32 as onnxruntime's
kernels do (`xgraph.kernels.requantization`: ONNX leaves the precision open, and float64 rounds
near-ties to the other integer). `requantize` is the same step read in float64 (ONNX's formula
in exact arithmetic, kept for comparisons); `fixed_point_multiplier` and
`requantize_fixed_point` are what an int8 device does instead of a float multiply (a 31-bit
mantissa and a right shift, rounding half away from zero as gemmlowp and Ascend's
requantizer do), used when `device_numerics` is asked for.

A pattern is fused only when nothing else can tell: the weight and bias DQs read constants
(symmetric or not), the bias scale equals x_scale * w_scale (to float32 precision) with zero
point 0, the scales are per tensor except the weight's (per output channel), the float result
is read only by the Q, and every kernel involved is xgraph's own.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from xgraph.kernels.integer_products import input_bound, integer_conv, integer_matmul
from xgraph.kernels.requantization import float32_multiplier, requantize_float32
from xgraph.runners.fusion import _Readers, builtin_kernel
from xgraph.runners.plan import ExecutionPlan, Step

_QTYPES = (np.dtype(np.int8), np.dtype(np.uint8))
_CORES = ("Conv", "MatMul", "Gemm")


def requantize(acc: np.ndarray, multiplier: np.ndarray, zero_point: int, dtype: np.dtype) -> np.ndarray:
    """saturate(round_half_even(acc * multiplier) + zero_point) in `dtype`, the product in float64.

    ONNX's QLinearConv formula in (nearly) exact arithmetic; the run mode uses
    `xgraph.kernels.requantization.requantize_float32` instead, as onnxruntime."""
    info = np.iinfo(dtype)
    y = np.multiply(acc, multiplier, dtype=np.float64)  # an exact integer acc, widened before the product
    np.rint(y, out=y)
    y += zero_point
    np.clip(y, info.min, info.max, out=y)
    return y.astype(dtype)


def fixed_point_multiplier(multiplier: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mantissa, shift) with multiplier ~= mantissa * 2**-shift, mantissa in [2**30, 2**31) (int64 arrays)."""
    m = np.asarray(multiplier, dtype=np.float64)
    frac, exp = np.frexp(m)  # m = frac * 2**exp, frac in [0.5, 1)
    mantissa = np.rint(frac * (1 << 31)).astype(np.int64)
    carry = mantissa == (1 << 31)
    mantissa = np.where(carry, 1 << 30, mantissa)
    exp = np.where(carry, exp + 1, exp)
    return mantissa, (31 - exp).astype(np.int64)


def requantize_fixed_point(acc: np.ndarray, multiplier: np.ndarray, zero_point: int, dtype: np.dtype) -> np.ndarray:
    """What an int8 device computes: (acc * mantissa + 2**(shift-1)) >> shift, half away from zero, saturated."""
    mantissa, shift = fixed_point_multiplier(multiplier)
    a = acc.astype(np.int64)
    prod = np.abs(a) * mantissa  # |acc| < 2**31 and mantissa < 2**31: fits int64
    rounded = (prod + (np.int64(1) << (shift - 1))) >> shift
    y = np.sign(a) * rounded + zero_point
    info = np.iinfo(dtype)
    return np.clip(y, info.min, info.max).astype(dtype)


class _PlanView:
    def __init__(self, plan: ExecutionPlan) -> None:
        self.view = _Readers(plan)
        self.steps = plan.steps
        self.producer = {s: i for i, step in enumerate(plan.steps) for s in step.outputs}

    def const(self, slot: int) -> np.ndarray | None:
        return self.view.constant(slot)

    def dq(self, slot: int) -> tuple[int, Step] | None:
        """The builtin DequantizeLinear step writing `slot`, if any."""
        i = self.producer.get(slot)
        if i is None:
            return None
        step = self.steps[i]
        if step.op.type != "DequantizeLinear" or step.op.domain != "" or not builtin_kernel(step):
            return None
        if step.attrs.get("block_size", 0) or step.attrs.get("output_dtype", 0):
            return None
        return i, step


def _scalar(a: np.ndarray | None) -> bool:
    return a is not None and a.size == 1


class _Operand(NamedTuple):
    """An input of the unit as its builtin DequantizeLinear step reads it (constants where they are ones)."""
    step: int  # the DequantizeLinear step's index
    slot: int  # the quantized input
    values: np.ndarray | None
    scale: np.ndarray | None
    zero_point: np.ndarray | None
    names_zero_point: bool  # a zero point input is named, constant or not
    axis: int


def _operand(p: _PlanView, slot: int) -> _Operand | None:
    """What the builtin DequantizeLinear writing `slot` dequantizes; None when no such step writes it."""
    found = p.dq(slot)
    if found is None:
        return None
    index, step = found
    ins = step.inputs
    names_zp = len(ins) > 2 and bool(ins[2])
    return _Operand(index, ins[0], p.const(ins[0]), p.const(ins[1]) if len(ins) > 1 else None,
                    p.const(ins[2]) if names_zp else None, names_zp, int(step.attrs.get("axis", 1)))


def _fusable_core(core: Step) -> bool:
    """A builtin standard-domain Conv/MatMul/Gemm with one output and at least two inputs; a Gemm plain
    (A not transposed, alpha = beta = 1)."""
    op = core.op
    if op.type not in _CORES or op.domain != "" or not builtin_kernel(core) or len(core.outputs) != 1:
        return False
    if op.type == "Gemm" and (core.attrs.get("alpha", 1.0) != 1.0 or core.attrs.get("beta", 1.0) != 1.0
                              or core.attrs.get("transA", 0)):
        return False
    return len(core.inputs) >= 2


def _activation_fits(p: _PlanView, x: _Operand) -> bool:
    """Integer activations with a per-tensor constant scale and zero point (if one is named)."""
    xt = p.view.tensor(x.slot)
    if xt is None or xt.dtype not in _QTYPES or not _scalar(x.scale):
        return False
    return not x.names_zero_point or _scalar(x.zero_point)


def _weight_channels(core: Step, w: _Operand) -> int | None:
    """The output channels of a constant integer weight whose scale and zero point are per tensor or per
    output channel (on that axis); None when the weight does not fit."""
    wq, ws, wzp = w.values, w.scale, w.zero_point
    if wq is None or wq.dtype not in _QTYPES or ws is None:
        return None
    channels_first = core.op.type == "Conv" or bool(core.attrs.get("transB", 0))
    m = wq.shape[0] if channels_first else wq.shape[-1]
    if core.op.type != "Conv" and wq.ndim != 2:
        return None
    if ws.size not in (1, m) or (ws.size > 1 and w.axis % wq.ndim != (0 if channels_first else 1)):
        return None
    if wzp is not None and wzp.size not in (1, m):
        return None
    return m


def _bias(p: _PlanView, index: int, x: _Operand, w: _Operand, m: int) -> tuple[np.ndarray | None, list[int]] | None:
    """(the int64 bias, [its DequantizeLinear step when only the unit reads it]); (None, []) without a bias;
    None when the bias does not fit: a constant int32 per channel, scale x_scale * w_scale, zero point 0."""
    core = p.steps[index]
    if len(core.inputs) <= 2 or not core.inputs[2]:
        return None, []
    b = _operand(p, core.inputs[2])
    if b is None:
        return None
    bq, bs, bzp = b.values, b.scale, b.zero_point
    want = (np.float32(x.scale.reshape(())) * w.scale.astype(np.float32)).reshape(-1)
    if bq is None or bq.dtype != np.int32 or bs is None or bq.size != m or (bzp is not None and np.any(bzp)):
        return None
    if not np.allclose(np.broadcast_to(bs.reshape(-1), (m,)), np.broadcast_to(want, (m,)), rtol=1e-6, atol=0):
        return None
    return bq.reshape(-1).astype(np.int64), [b.step] if p.view.sole_reader(core.inputs[2]) == index else []


def _requantizer(p: _PlanView, core: Step) -> tuple[int, np.ndarray, np.ndarray] | None:
    """(index, scale, zero point) of the builtin saturating QuantizeLinear that alone reads `core`'s output,
    with a per-tensor constant scale and integer zero point; None when there is none."""
    reader = p.view.sole_reader(core.outputs[0])
    if reader is None:
        return None
    q = p.steps[reader]
    if q.op.type != "QuantizeLinear" or q.op.domain != "" or not builtin_kernel(q) or len(q.inputs) < 3:
        return None
    if q.attrs.get("block_size", 0) or q.attrs.get("output_dtype", 0) or not q.attrs.get("saturate", 1):
        return None
    ys, yzp = p.const(q.inputs[1]), p.const(q.inputs[2])
    if not _scalar(ys) or not _scalar(yzp) or yzp.dtype not in _QTYPES:
        return None
    return reader, ys, yzp


def _unit(p: _PlanView, index: int, device_numerics: bool = False) -> tuple[Step, list[int]] | None:
    """The integer unit around the Conv/MatMul/Gemm at step `index`: (its one step, the sorted indices of
    the steps it replaces); None when the pattern does not fit."""
    core = p.steps[index]
    if not _fusable_core(core):
        return None
    x, w = _operand(p, core.inputs[0]), _operand(p, core.inputs[1])
    if x is None or w is None or not _activation_fits(p, x):
        return None
    m = _weight_channels(core, w)
    bias = None if m is None else _bias(p, index, x, w, m)
    q = None if bias is None else _requantizer(p, core)
    if q is None:
        return None
    reader, ys, yzp = q
    xzp = None if x.zero_point is None else int(x.zero_point.reshape(()))
    fn = _integer_fn(core.op.type, dict(core.attrs), w.values, w.scale, w.zero_point, bias[0],
                     float(x.scale.reshape(())), xzp, float(ys.reshape(())), int(yzp.reshape(())), yzp.dtype,
                     device_numerics, p.view.tensor(x.slot).dtype)
    members = [w.step] if p.view.sole_reader(core.inputs[1]) == index else []
    if p.view.sole_reader(core.inputs[0]) == index:
        members.append(x.step)
    members = sorted(members + bias[1] + [index, reader])
    step = Step(core.op, fn, (x.slot,), (p.steps[reader].outputs[0],), {}, 1, core.choice,
                fused=tuple(p.steps[i].op for i in members))
    return step, members


def _integer_fn(kind: str, attrs: dict, wq, ws, wzp, bias, xs: float, xzp, ys: float, yzp: int,
                dtype: np.dtype, device_numerics: bool = False, x_dtype: np.dtype = np.dtype(np.int8)) -> Callable:
    """The integer unit: exact accumulation (float32 BLAS in exact chunks, `xgraph.kernels.integer_products`),
    then the int32 bias (exact in float64) and the requantization in float32 as onnxruntime's (or in fixed
    point, `device_numerics`)."""
    w = wq.astype(np.int64) - (0 if wzp is None else wzp.astype(np.int64).reshape(
        (-1,) + (1,) * (wq.ndim - 1) if kind == "Conv" or attrs.get("transB", 0) else (1, -1)))
    if kind == "Gemm" and attrs.get("transB", 0):
        w = w.T
    w = np.ascontiguousarray(w)
    channels = w.shape[0] if kind == "Conv" else w.shape[-1]
    multiplier = xs * ws.astype(np.float64).reshape(-1) / ys  # the device's fixed point starts from the exact one
    multiplier32 = float32_multiplier(xs, ws, ys)  # run: onnxruntime's float32 requantization
    conv_attrs = {k: attrs[k] for k in ("group", "kernel_shape", "strides", "dilations", "pads", "auto_pad")
                  if k in attrs}
    a_max = input_bound(x_dtype, 0 if xzp is None else xzp)
    products = integer_conv(w, a_max, conv_attrs) if kind == "Conv" else integer_matmul(w, a_max)
    bias64 = None if bias is None else bias.astype(np.float64)

    def unit(xq: np.ndarray) -> np.ndarray:
        x = xq.astype(np.float32)
        if xzp:
            x -= np.float32(xzp)  # |x - x_zp| <= 255: exact
        acc = products(x)
        if kind == "Conv":
            shape = (1, -1) + (1,) * (acc.ndim - 2)
        else:
            shape = (1,) * (acc.ndim - 1) + (-1,)
        per_channel = multiplier.size == channels and channels > 1
        if bias64 is not None:
            acc = np.add(acc, bias64.reshape(shape), dtype=np.float64)  # exact: |acc + b| < 2**53
        if device_numerics:
            mult = multiplier.reshape(shape) if per_channel else multiplier.reshape(())
            return requantize_fixed_point(acc, mult, yzp, dtype)
        return requantize_float32(acc, multiplier32.reshape(shape) if per_channel else multiplier32.reshape(()),
                                  yzp, dtype)

    macs_per_output = int(np.prod(w.shape[1:])) if kind == "Conv" else int(w.shape[0])
    unit.flops = lambda args, results: 2 * int(results[0].size) * macs_per_output  # type: ignore[attr-defined]
    unit.compute_dtype = "int8"  # type: ignore[attr-defined]
    return unit


def fuse_qdq(plan: ExecutionPlan, *, device_numerics: bool = False) -> ExecutionPlan:
    """`plan` with each integer QDQ unit replaced by one integer step (other steps unchanged, in order).

    `device_numerics` requantizes in fixed point as an int8 device does (the `sim` mode)."""
    if not any(s.op.type == "QuantizeLinear" for s in plan.steps):
        return plan
    p = _PlanView(plan)
    absorbed: set[int] = set()
    replacement: dict[int, Step] = {}
    for i, step in enumerate(plan.steps):
        if step.op.type not in _CORES or i in absorbed:
            continue
        found = _unit(p, i, device_numerics)
        if found is None or absorbed.intersection(found[1]):
            continue
        new_step, members = found
        replacement[members[-1]] = new_step
        absorbed.update(members)
    if not replacement:
        return plan
    steps = [replacement.get(i, s) for i, s in enumerate(plan.steps) if i not in absorbed or i in replacement]
    fused_into = dict(getattr(plan, "fused_into", {}) or {})
    fused_into.update({op.name: s.op.name for s in replacement.values() for op in s.fused})
    return plan.with_steps(steps, fused_into=fused_into)


__all__ = ["fixed_point_multiplier", "fuse_qdq", "requantize", "requantize_fixed_point"]
