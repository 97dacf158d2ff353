"""The DVPP runner: image decode and vision preprocessing, run by the DVPP numpy kernels."""
from __future__ import annotations

from xgraph.runners.device_runners.base import DeviceRunner


class DVPPRunner(DeviceRunner):
    """Runs DVPP subgraphs (their ops are custom-domain, so "run" mode always uses numpy kernels)."""

    device = "DVPP"
