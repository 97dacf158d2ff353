"""The built-in runners, one module per device, plus the null runner for scheduling tests."""
from __future__ import annotations

from xgraph.runners.device_runners.aicore import AICoreRunner
from xgraph.runners.device_runners.aicpu import AICPURunner
from xgraph.runners.device_runners.base import DeviceRunner
from xgraph.runners.device_runners.cpu import CPURunner
from xgraph.runners.device_runners.dvpp import DVPPRunner
from xgraph.runners.device_runners.null import NullRunner


def builtin_runners() -> dict[str, type]:
    """{runner name: class} for the built-in devices; registered through the xgraph_runners hook."""
    return {"aicore": AICoreRunner, "aicpu": AICPURunner, "dvpp": DVPPRunner, "cpu": CPURunner, "null": NullRunner}


__all__ = ["AICPURunner", "AICoreRunner", "CPURunner", "DVPPRunner", "DeviceRunner", "NullRunner", "builtin_runners"]
