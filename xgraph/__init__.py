"""xgraph: plugin-based graph partitioning for heterogeneous AI hardware.

The names users program against (see docs and API.md) are re-exported here and resolved on
first use, so `import xgraph` stays cheap and each stage loads only when needed.
"""
from __future__ import annotations

import xgraph.ops  # noqa: F401 - registers the custom op schemas (xgraph.dvpp) with onnx
import xgraph.registries  # noqa: F401 - installs the default registries behind xgraph.devices.get_devices
from xgraph.errors import XGraphError
from xgraph.lazy import lazy_names
from xgraph.ir import Graph, GraphTemplate, Op, Subgraph, Tensor

__version__ = "0.1.0"

_LAZY: dict[str, "str | tuple[str, str]"] = {
    "load": "xgraph.ir.graph",
    "Gear": "xgraph.ir.gears",
    "compile": "xgraph.compiler.pipeline",
    "report": "xgraph.compiler.report",
    "Runner": "xgraph.runners.runner",
    "register_runner": "xgraph.runners.runner",
    "Registries": "xgraph.registries",
    "create_graph_runner": "xgraph.runners.graph_runner",
    "GraphRunner": "xgraph.runners.graph_runner",
    "DeviceValue": "xgraph.runners.device_values",
    "explain": "xgraph.compiler.explain",
    "bisect": "xgraph.runners.bisect",
    "quantize": "xgraph.compiler.quantize",
    "write_html": ("xgraph.view.report_html", "write_html_report"),
    "write_svg": "xgraph.view.picture",
}


__getattr__ = lazy_names(__name__, _LAZY)


__all__ = ["Graph", "GraphTemplate", "Op", "Subgraph", "Tensor", "XGraphError", "__version__", *_LAZY]
