"""The AI Core runner: dense tensor math; in "sim" mode it computes with fp16 storage when asked."""
from __future__ import annotations

from xgraph.runners.device_runners.base import DeviceRunner


class AICoreRunner(DeviceRunner):
    """Runs AICORE subgraphs; "sim" honours the graph's precision_mode (fp16 like the Cube unit)."""

    device = "AICORE"
    fp16_in_sim = True
