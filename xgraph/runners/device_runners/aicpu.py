"""The AI CPU runner: the device-side CPU for irregular and control ops, fp32 numerics in every mode."""
from __future__ import annotations

from xgraph.runners.device_runners.base import DeviceRunner


class AICPURunner(DeviceRunner):
    """Runs AICPU subgraphs."""

    device = "AICPU"
