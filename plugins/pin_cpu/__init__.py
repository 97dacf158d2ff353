"""pin_cpu: pin named ops to the host CPU, for debugging a device's numerics op by op.

List it first so it takes the ops before any other plugin or the built-in placement can,
and name the ops in its plugin options:

    xcompile model.onnx --plugin-path plugins \\
        --options '{"plugins": "pin_cpu,smfc", "plugin_options": {"pin_cpu": {"ops": "conv1,fc"}}}'

The names come from, first hit wins: the "ops" plugin option (a list, or "a,b"); the
module-level `configure()` function; the XGRAPH_PIN_CPU environment variable. A name that
is not an op of the graph, or whose op an earlier plugin already took, is an error that
says so: a pin that silently does nothing would defeat the point of debugging.
"""
from __future__ import annotations

import difflib
import os
from collections.abc import Iterable

from xgraph import Graph, Subgraph
from xgraph.errors import PluginError
from xgraph.partition import filter_by_name, merge_subgraph
from xgraph.plugins import Plugin

ENV = "XGRAPH_PIN_CPU"
_configured: list[str] | None = None


def configure(op_names: "Iterable[str] | str | None") -> None:
    """Set the op names to pin (a list, or "a,b"); None falls back to $XGRAPH_PIN_CPU."""
    global _configured
    if op_names is None:
        _configured = None
        return
    names = op_names.split(",") if isinstance(op_names, str) else list(op_names)
    bad = [n for n in names if not isinstance(n, str)]
    if bad:
        raise PluginError(f"pin_cpu.configure: op names must be str, got {bad[0]!r}")
    _configured = [n.strip() for n in names if n.strip()]


def _option_names(value: object) -> list[str]:
    """The "ops" plugin option ("a,b" or a list of str) as names; PluginError naming the option otherwise."""
    if isinstance(value, str):
        return [n.strip() for n in value.split(",") if n.strip()]
    if isinstance(value, list) and all(isinstance(n, str) for n in value):
        return [n.strip() for n in value if n.strip()]
    raise PluginError(f'pin_cpu: plugin option "ops" must be "a,b" or a list of op names, got {value!r:.60}')


def pinned_names(options: "dict | None" = None) -> list[str]:
    """The op names to pin: the "ops" option, else configure(), else $XGRAPH_PIN_CPU (comma-separated)."""
    options = options or {}
    unknown = sorted(set(options) - {"ops"})
    if unknown:
        raise PluginError(f'pin_cpu: unknown plugin option(s) {unknown}; it takes only "ops" (op names to pin)')
    if "ops" in options:
        return _option_names(options["ops"])
    if _configured is not None:
        return list(_configured)
    return [n.strip() for n in os.environ.get(ENV, "").split(",") if n.strip()]


class PinCpuPlugin(Plugin):
    """Takes the named ops for device CPU with the host runner (the Plugin defaults)."""

    def __init__(self, options: "dict | None" = None):
        self.options = dict(options or {})

    def get_plugin_name(self) -> str:
        """The plugin's name in {"plugins": ...}."""
        return "pin_cpu"

    def get_device(self) -> str:
        """The built-in host device."""
        return "CPU"

    def partition(self, graph: Graph) -> set[Subgraph]:
        """The subgraphs of the named ops, merged where dependencies allow."""
        selected: set[Subgraph] = set()
        for name in pinned_names(self.options):
            sg = filter_by_name(graph, name)
            if sg is None:
                raise PluginError(_why_not_found(graph, name))
            selected.add(sg)
        return merge_subgraph(selected) if selected else set()


def _why_not_found(graph: Graph, name: str) -> str:
    """Why op `name` cannot be pinned, and what to do."""
    if graph.has_op(name):
        owner = graph.get_root_subgraph().find_child_subgraph_by_op(name)
        device = owner.get_attr("device") if owner is not None and owner.has_attr("device") else None
        return (f"op {name!r} is already assigned to device {device!r} by an earlier plugin; "
                "list pin_cpu first in \"plugins\"")
    close = difflib.get_close_matches(name, [op.name for op in graph.get_ops()], n=3)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    return (f"op {name!r} (from the \"ops\" option, configure() or ${ENV}) is not in graph {graph.name!r}{hint} "
            "(prepare may have fused or renamed it: see the compile report)")


def get_plugin(options: "dict | None" = None) -> PinCpuPlugin:
    """The plugin object the chain runs, with its plugin options ({"ops": "a,b"})."""
    return PinCpuPlugin(options)
