"""SMFC: a softmax IP as a partition plugin, in the spirit of Vitis AI's plugin-smfc.

`partition` takes every Softmax op the IP supports (filter_by_type), merges them into as
few subgraphs as the data dependencies allow (merge_subgraph), and the chain gives them
to device "SMFC". `compile` writes the program the "smfc" runner executes: one step per
op, in order, with the tensors it reads and writes and the softmax axis. The runner lives
in `runner.py` and is registered when this package is imported.

Use it:  xcompile model.onnx --plugin-path plugins --options '{"plugins": "smfc"}'
"""
from __future__ import annotations

import numpy as np

from xgraph import Graph, Op, Subgraph
from xgraph.partition import filter_by_type, merge_subgraph
from xgraph.plugins import Plugin

DEVICE = "SMFC"
RUNNER = "smfc"
#: The subgraph attr `compile` writes and the runner reads.
PROGRAM_ATTR = "smfc_program"
#: Input dtypes the IP accepts.
DTYPES = (np.dtype(np.float32), np.dtype(np.float16))

# Register the "smfc" runner if the runtime (xgraph.runners) is present. Partitioning and
# compiling need no runtime, so without it the plugin still loads; only running an SMFC
# subgraph would then fail (with "no runner is registered as 'smfc'").
try:
    from .runner import SmfcRunner
except ModuleNotFoundError as e:
    if not (e.name or "").startswith("xgraph.runners"):
        raise
    SmfcRunner = None


def softmax_axis(op: Op) -> tuple[int, bool]:
    """(axis, coerce_2d) of an ONNX Softmax: opset >= 13 reduces one axis (default -1); older
    opsets flatten to 2-D at `axis` (default 1) and reduce the whole trailing block."""
    opset = op.opset() or 13
    default = -1 if opset >= 13 else 1
    axis = int(op.get_attr("axis")) if op.has_attr("axis") else default
    return axis, opset < 13


class SmfcPlugin(Plugin):
    """Softmax on the SMFC IP."""

    def get_plugin_name(self) -> str:
        """The plugin's name in {"plugins": ...}."""
        return "smfc"

    def get_device(self) -> str:
        """The device name set on its subgraphs."""
        return DEVICE

    def get_runner(self) -> dict[str, str]:
        """Its runner for every mode (the runner switches precision by mode)."""
        return {"run": RUNNER, "sim": RUNNER, "ref": RUNNER}

    def supported(self, op: Op) -> bool:
        """True when the IP can run `op`: a float32/float16 input (unknown dtypes are taken on trust)."""
        x = op.get_input_tensors()[0] if op.get_input_tensors() else None
        return x is not None and (x.dtype is None or x.dtype in DTYPES)

    def partition(self, graph: Graph) -> set[Subgraph]:
        """Every supported Softmax, merged into as few subgraphs as dependencies allow."""
        candidates = {sg for sg in filter_by_type(graph, "Softmax")
                      if all(self.supported(op) for op in sg.get_ops())}
        return merge_subgraph(candidates) if candidates else set()

    def compile(self, subgraph: Subgraph) -> None:
        """Attach the program: per op, in order, its input/output tensor names and axis."""
        program = []
        for op in subgraph.toposort():
            axis, coerce_2d = softmax_axis(op)
            program.append({"op": op.name, "input": op.get_input_tensors()[0].name,
                            "output": op.get_output_tensor().name, "axis": axis, "coerce_2d": coerce_2d})
        subgraph.set_attr(PROGRAM_ATTR, program)


def get_plugin() -> SmfcPlugin:
    """The plugin object the chain runs."""
    return SmfcPlugin()
