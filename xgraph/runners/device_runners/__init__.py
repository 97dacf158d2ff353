"""The built-in runners, one module per device, plus the null runner for scheduling tests.

The classes are resolved on first use, so that the registry hook (`hooks`) can be registered
without loading the runtime: a compile never runs a runner.
"""
from __future__ import annotations

from xgraph.lazy import lazy_names

_LAZY = {
    "AICoreRunner": "xgraph.runners.device_runners.aicore",
    "AICPURunner": "xgraph.runners.device_runners.aicpu",
    "DeviceRunner": "xgraph.runners.device_runners.base",
    "CPURunner": "xgraph.runners.device_runners.cpu",
    "DVPPRunner": "xgraph.runners.device_runners.dvpp",
    "NullRunner": "xgraph.runners.device_runners.null",
}


__getattr__ = lazy_names(__name__, _LAZY)


def builtin_runners() -> dict[str, type]:
    """{runner name: class} for the built-in devices; registered through the xgraph_runners hook."""
    names = {"aicore": "AICoreRunner", "aicpu": "AICPURunner", "dvpp": "DVPPRunner", "cpu": "CPURunner",
             "null": "NullRunner"}
    return {runner: __getattr__(cls) for runner, cls in names.items()}


__all__ = ["AICPURunner", "AICoreRunner", "CPURunner", "DVPPRunner", "DeviceRunner", "NullRunner", "builtin_runners"]
