"""A roofline estimate of device time: per op, max(FLOPs / peak, bytes / bandwidth) + launch overhead.

FLOPs are counted exactly for the dense ops from the shapes actually seen (a multiply-add is
2 FLOPs); every other op counts one FLOP per output element. Bytes are everything the op
reads and writes. The device's cost profile (peak GFLOP/s per dtype, bandwidth, launch
overhead) comes from its DeviceSpec, so the numbers are as good as that table.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np


def _numel(a: Any) -> int:
    return int(a.size) if isinstance(a, np.ndarray) else 0


def _nbytes(arrays: Sequence[Any]) -> int:
    return sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))


def op_flops(op_type: str, attrs: dict[str, Any], args: Sequence[Any], results: Sequence[Any]) -> int:
    """FLOPs of one op, from its argument and result arrays (2 per multiply-add)."""
    out = results[0] if results else None
    if out is None or not isinstance(out, np.ndarray):
        return 0
    if op_type in ("Conv", "ConvInteger", "QLinearConv") and len(args) > 1:
        w = args[3] if op_type == "QLinearConv" else args[1]
        macs = out.size * int(np.prod(w.shape[1:]))
        return 2 * macs + (out.size if len(args) > 2 and op_type == "Conv" else 0)
    if op_type == "ConvTranspose" and len(args) > 1:
        x, w = args[0], args[1]
        return 2 * x.size * int(np.prod(w.shape[1:]))
    if op_type in ("MatMul", "MatMulInteger") and len(args) > 1:
        k = args[0].shape[-1] if args[0].ndim else 1
        return 2 * out.size * int(k)
    if op_type == "Gemm" and len(args) > 1:
        a = args[0]
        k = a.shape[0] if attrs.get("transA", 0) else a.shape[1]
        return 2 * out.size * int(k) + (out.size if len(args) > 2 and args[2] is not None else 0)
    return out.size


@dataclass
class OpCost:
    """The estimate for one op."""

    op: str
    op_type: str
    flops: int
    bytes: int
    seconds: float


@dataclass
class DeviceTimeEstimate:
    """A subgraph's estimated device time and its per-op breakdown."""

    device: str
    dtype: str
    seconds: float = 0.0
    ops: list[OpCost] = field(default_factory=list)


class Roofline:
    """Turns (FLOPs, bytes) into seconds with one device's cost profile and compute dtype."""

    def __init__(self, device: str, cost: Any, dtype: str) -> None:
        peaks = dict(getattr(cost, "peak_gflops", {}) or {})
        self.device, self.dtype = device, dtype
        self.peak = float(peaks.get(dtype) or peaks.get("float32") or max(peaks.values(), default=0.0)) * 1e9
        self.peaks = {name: float(v) * 1e9 for name, v in peaks.items() if v}
        self.bandwidth = float(getattr(cost, "bandwidth_gbps", 0.0) or 0.0) * 1e9
        self.launch = float(getattr(cost, "launch_overhead_us", 0.0) or 0.0) * 1e-6

    def op_time(self, flops: int, nbytes: int, dtype: str | None = None) -> float:
        """max(flops / peak, bytes / bandwidth) + launch overhead, in seconds (`dtype`'s peak when given and listed)."""
        peak = self.peaks.get(dtype, self.peak) if dtype is not None else self.peak
        compute = flops / peak if peak else 0.0
        memory = nbytes / self.bandwidth if self.bandwidth else 0.0
        return max(compute, memory) + self.launch

    def estimator(self) -> "StepRecorder":
        """A fresh per-run recorder to pass as the executor's `on_step`."""
        return StepRecorder(self)


class StepRecorder:
    """Collects one run's per-op costs (the executor calls it after each step)."""

    def __init__(self, roofline: Roofline) -> None:
        self.roofline = roofline
        self.estimate = DeviceTimeEstimate(roofline.device, roofline.dtype)

    def __call__(self, step: Any, args: Sequence[Any], results: Sequence[Any]) -> None:
        op = step.op
        counted = getattr(step.fn, "flops", None)  # a fused integer unit counts its own (and runs in int8)
        flops = counted(args, results) if counted is not None else \
            op_flops(op.type, step.attrs or op.get_onnx_attrs(), args, results)
        nbytes = _nbytes(args) + _nbytes(results)
        seconds = self.roofline.op_time(flops, nbytes, getattr(step.fn, "compute_dtype", None))
        self.estimate.ops.append(OpCost(op.name, op.type, flops, nbytes, seconds))
        self.estimate.seconds += seconds
