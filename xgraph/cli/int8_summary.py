"""The int8 units of a compile report as lines for the `xcompile` summary.

A quantized model's DequantizeLinear / QuantizeLinear ops are counted in the placement table
like any op; what a reader wants to know is which quantized ops each device runs. One line per
device, the units named as the int8 ops they are:

    >>> int8_unit_lines({"int8_units": [
    ...     {"label": "Conv (int8, per-channel)", "device": "AICORE"},
    ...     {"label": "Conv (int8, per-channel)", "device": "AICORE"},
    ...     {"label": "Gemm (int16, per-tensor)", "device": "AICPU"}]})
    ['int8 units on AICORE: 2 Conv (int8, per-channel)', 'int8 units on AICPU: 1 Gemm (int16, per-tensor)']
"""
from __future__ import annotations

from collections import Counter
from typing import Any


def int8_unit_lines(report: dict[str, Any]) -> list[str]:
    """'int8 units on DEVICE: N Label, ...' per device (report order, most frequent label first); [] without units."""
    by_device: dict[str, Counter] = {}
    for unit in report.get("int8_units", []):
        by_device.setdefault(unit.get("device") or "unplaced", Counter())[unit["label"]] += 1
    return [f"int8 units on {device}: " + ", ".join(f"{n} {label}" for label, n in labels.most_common())
            for device, labels in by_device.items()]


__all__ = ["int8_unit_lines"]
