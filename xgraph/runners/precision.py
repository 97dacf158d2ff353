"""Float16 numerics as passes over an execution plan (the `sim` mode of devices with an fp16 unit).

- `keep_in_float16(plan)` (precision_mode force_fp16): every float32 value (inputs, weights,
  intermediates) is kept in float16; each kernel runs on float32 copies and its float32
  results are rounded back to float16, as a matrix unit that reads and writes fp16 and
  accumulates in fp32 (AI Core). Outputs are returned in their declared dtypes.
- `round_to_float16(plan, ops)` (allow_fp32_to_fp16): only the named ops compute on float16
  values; their float32 inputs and results are rounded to the float16 grid, kept as float32.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import numpy as np

from xgraph.runners.plan import ExecutionPlan

_FLOAT32 = np.dtype(np.float32)


def keep_in_float16(plan: ExecutionPlan, storage: np.dtype = np.dtype(np.float16)) -> ExecutionPlan:
    """`plan` with float32 values stored as `storage` (weights converted once, here)."""
    storage = np.dtype(storage)
    template = tuple(v.astype(storage) if isinstance(v, np.ndarray) and v.dtype == _FLOAT32 else v
                     for v in plan.template)
    casts = tuple(t.dtype if t.dtype == _FLOAT32 else None for t in plan.subgraph.get_output_tensors())
    steps = [replace(s, fn=_stored_as(s.fn, storage)) for s in plan.steps]
    return plan.with_steps(steps, template=template, storage_dtype=storage, output_casts=casts)


def round_to_float16(plan: ExecutionPlan, ops: frozenset[str]) -> ExecutionPlan:
    """`plan` with the steps of `ops` computing on float16-rounded values."""
    return plan.with_steps([replace(s, fn=_fp16_rounding(s.fn)) if s.op.name in ops else s for s in plan.steps])


def _stored_as(fn: Callable, storage: np.dtype) -> Callable:
    """`fn` run on float32 copies of `storage` inputs, its float32 results rounded to `storage`."""
    def call(*args, **attrs):
        wide = [a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype == storage else a for a in args]
        result = fn(*wide, **attrs)
        if isinstance(result, np.ndarray):
            return result.astype(storage) if result.dtype == np.float32 else result
        if isinstance(result, (tuple, list)):
            return [r.astype(storage) if isinstance(r, np.ndarray) and r.dtype == np.float32 else r for r in result]
        return result
    return call


def _to_fp16_grid(a: Any) -> Any:
    """A float32 array's values rounded to the nearest float16, kept as float32."""
    if isinstance(a, np.ndarray) and a.dtype == np.float32:
        return a.astype(np.float16).astype(np.float32)
    return a


def _fp16_rounding(fn: Callable) -> Callable:
    """`fn` as a float16 unit computes it: float32 inputs and results rounded to float16 values."""
    def call(*args, **attrs):
        result = fn(*[_to_fp16_grid(a) for a in args], **attrs)
        if isinstance(result, (tuple, list)):
            return [_to_fp16_grid(r) for r in result]
        return _to_fp16_grid(result)
    return call


__all__ = ["keep_in_float16", "round_to_float16"]
