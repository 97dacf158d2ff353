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


def _size(shape: "tuple[int, ...] | None") -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape is not None else 0


def _nbytes(arrays: Sequence[Any]) -> int:
    return sum(a.nbytes for a in arrays if isinstance(a, np.ndarray))


def shapes_of(arrays: Sequence[Any]) -> "list[tuple[int, ...] | None]":
    """Each array's shape (None for anything that is not an array: an omitted input, a sequence)."""
    return [a.shape if isinstance(a, np.ndarray) else None for a in arrays]


def op_flops(op_type: str, attrs: dict[str, Any], args: "Sequence[tuple[int, ...] | None]",
             results: "Sequence[tuple[int, ...] | None]") -> int:
    """FLOPs of one op from its argument and result shapes (None: absent), 2 per multiply-add.

    The one count both the sim runners (shapes of the arrays seen) and cost placement (the
    graph's static shapes) use.
    """
    out = results[0] if results else None
    if out is None:
        return 0
    size = _size(out)
    if op_type in ("Conv", "ConvInteger", "QLinearConv") and len(args) > 1:
        w = args[3] if op_type == "QLinearConv" else args[1]
        if w is None:
            return size
        macs = size * _size(w[1:])
        return 2 * macs + (size if len(args) > 2 and op_type == "Conv" else 0)
    if op_type == "ConvTranspose" and len(args) > 1 and args[0] is not None and args[1] is not None:
        return 2 * _size(args[0]) * _size(args[1][1:])
    if op_type in ("MatMul", "MatMulInteger") and len(args) > 1 and args[0] is not None:
        k = args[0][-1] if len(args[0]) else 1
        return 2 * size * int(k)
    if op_type == "Gemm" and len(args) > 1 and args[0] is not None and len(args[0]) == 2:
        a = args[0]
        k = a[0] if attrs.get("transA", 0) else a[1]
        return 2 * size * int(k) + (size if len(args) > 2 and args[2] is not None else 0)
    return size


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
            op_flops(op.type, step.attrs or op.get_onnx_attrs(), shapes_of(args), shapes_of(results))
        nbytes = _nbytes(args) + _nbytes(results)
        seconds = self.roofline.op_time(flops, nbytes, getattr(step.fn, "compute_dtype", None))
        self.estimate.ops.append(OpCost(op.name, op.type, flops, nbytes, seconds))
        self.estimate.seconds += seconds
