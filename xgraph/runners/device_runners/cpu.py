"""The CPU runner: the host; every op the kernel library or the reference fallback can run."""
from __future__ import annotations

from xgraph.runners.device_runners.base import DeviceRunner


class CPURunner(DeviceRunner):
    """Runs CPU (host) subgraphs; also the runner plugin devices can name to run on the host."""

    device = "CPU"
