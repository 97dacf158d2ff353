"""ACTNPU: an accelerator whose own hardware is only an activation unit, reusing xgraph's kernels for the rest.

The plugin takes every op of the listed types (by default the convolution-network ops
Conv, BatchNormalization, Relu, MaxPool and Add) and merges them into as few ACTNPU
subgraphs as the dependencies allow. Its runner (`act_npu.runner.ActNpuRunner`, a
`xgraph.runners.kernel_runner.KernelRunner`) runs the activations (Relu, Clip) itself and
hands every other op of the subgraph to xgraph's kernels: the way to bring up a new IP one
op at a time.

It also shows a plugin package as ordinary Python: it imports its own modules by package
name (`from act_npu.runner import RUNNER`), and it takes plugin options through
`get_plugin(options)`:

    xcompile model.onnx --plugin-path plugins \\
        --options '{"plugins": "act_npu", "plugin_options": {"act_npu": {"types": "Conv,Relu"}}}'
"""
from __future__ import annotations

from xgraph import Graph, Subgraph
from xgraph.errors import PluginError
from xgraph.partition import filter_by_type, merge_subgraph
from xgraph.plugins import Plugin

from act_npu.runner import ACCELERATED, RUNNER

DEVICE = "ACTNPU"
DEFAULT_TYPES = ("Conv", "BatchNormalization", "Relu", "MaxPool", "Add")


def _types(options: dict) -> tuple[str, ...]:
    unknown = sorted(set(options) - {"types"})
    if unknown:
        raise PluginError(f'act_npu: unknown plugin option(s) {unknown}; it takes "types" (op types to take)')
    value = options.get("types", DEFAULT_TYPES)
    types = value.split(",") if isinstance(value, str) else value
    if not isinstance(types, (list, tuple)) or not all(isinstance(t, str) and t.strip() for t in types):
        raise PluginError(f'act_npu: plugin option "types" must be "Conv,Relu" or a list of op types, got {value!r}')
    return tuple(t.strip() for t in types)


class ActNpuPlugin(Plugin):
    """Takes the ops of its types; its runner accelerates the activations among them."""

    def __init__(self, options: dict | None = None):
        self.types = _types(dict(options or {}))

    def get_plugin_name(self) -> str:
        """The name in {"plugins": ...}."""
        return "act_npu"

    def get_device(self) -> str:
        """Its device name."""
        return DEVICE

    def get_runner(self) -> dict[str, str]:
        """The same runner for every mode (it switches numerics by mode)."""
        return {"run": RUNNER, "sim": RUNNER, "ref": RUNNER}

    def partition(self, graph: Graph) -> set[Subgraph]:
        """Every unassigned op of its types, merged where dependencies allow."""
        picked = filter_by_type(graph, self.types)
        return merge_subgraph(picked) if picked else set()

    def compile(self, subgraph: Subgraph) -> None:
        """Record how many ops the activation unit will run (its runner reads nothing else)."""
        subgraph.set_attr("act_npu_accelerated_ops", sum(op.type in ACCELERATED for op in subgraph.get_ops()))


def get_plugin(options: dict | None = None) -> ActNpuPlugin:
    """The plugin object, configured by its plugin options."""
    return ActNpuPlugin(options)
