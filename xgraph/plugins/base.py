"""Plugin: the base class of partition plugins, with defaults for everything but `partition`.

A partition plugin is a module exposing ``get_plugin()``; the object it returns selects ops
for one device (`partition`), attaches what that device's runner needs (`compile`), and
names the device and runners. Subclassing `Plugin` is optional (duck typing is accepted),
but the defaults mean a useful plugin only has to write `partition`::

    from xgraph.partition import filter_by_type, merge_subgraph
    from xgraph.plugins import Plugin

    class SoftmaxPlugin(Plugin):
        def partition(self, graph):
            return merge_subgraph(filter_by_type(graph, "Softmax"))

    def get_plugin():
        return SoftmaxPlugin()

The chain (`xgraph.plugins.chain.run_plugin_chain`) calls, in order: `get_plugin_name`,
`get_device`, `get_runner`, `partition`, then `compile` once per returned subgraph, and
finally sets the "device" and "runner" attrs on each of those subgraphs.

`compile` may refuse a subgraph by raising `Decline("reason")`: its ops go back to the
built-in placement, which records "plugin 'name' declined: reason" as their reason, and the
plugin's other subgraphs stand (with the compile option ``"strict_plugins": true`` a decline
is an error instead). Any other exception fails the whole plugin, as before.

Settings reach a plugin through its factory: with ``{"plugin_options": {"name": {...}}}`` in
the compile options, the chain calls ``get_plugin(options)`` (define the parameter, e.g.
``def get_plugin(options=None): return MyPlugin(**(options or {}))``). A plugin module that
also defines ``get_options()`` returning `PluginOption`s gets its settings checked first (an
undeclared key or a value of the wrong type is an error naming the option, missing keys get
their defaults); without it the settings are handed over unchecked. A plugin's runner that only accelerates some ops subclasses
`xgraph.runners.kernel_runner.KernelRunner`.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from xgraph.modes import MODES

if TYPE_CHECKING:
    from xgraph.ir import Graph, Subgraph

#: Runner used for every mode unless a plugin names its own: the host CPU runner.
DEFAULT_RUNNER = "cpu"

#: The runner modes a "runner" attr may name (VART's runner map).
RUNNER_MODES = MODES  # defined once, in xgraph.modes

#: Module attribute the loader sets to the name a plugin was requested by.
PLUGIN_NAME_ATTR = "__xgraph_plugin_name__"


class Decline(Exception):
    """Raised by a plugin's `compile(subgraph)` to hand the subgraph back: its ops return to placement.

    `reason` is shown to the user ("plugin 'ov' declined: <reason>"): say what the vendor
    compiler refused, e.g. ``raise Decline(f"OpenVINO cannot compile {op.type} {op.name!r}")``.
    Decline before changing anything: the subgraph's own attrs are dropped with it, but attrs
    set on its ops or tensors make the decline a plugin error.
    """

    def __init__(self, reason: str = ""):
        super().__init__(reason)
        self.reason = str(reason) or "no reason given"


@dataclass(frozen=True)
class PluginOption:
    """One setting a plugin takes through ``{"plugin_options": {"name": {...}}}``: its key, type, default, help.

    `type` is a Python type the JSON value must have (``str``, ``int``, ``float``, ``bool``,
    ``list``, ``dict``; an int is accepted for float). The default is used when the user gives
    none; ``required=True`` makes the key mandatory instead.
    """

    name: str
    type: type = str
    default: Any = None
    help: str = ""
    required: bool = False


#: What a plugin's subgraphs are to placement (`Plugin.claims`): taken as they are, or offered to the cost model.
CLAIMS = ("claim", "prefer")


class Plugin:
    """Base class of partition plugins; override `partition` (and usually `compile`)."""

    #: "claim": its subgraphs run on its device. "prefer": they are offers that a cost placement
    #: ("placement": "latency" | "throughput") may decline for a built-in device; first fit takes them.
    claims: str = "claim"

    def get_plugin_name(self) -> str:
        """The name the plugin was loaded by, else its module's name, else its class name."""
        module_name = type(self).__module__ or ""
        parts = module_name.split(".")
        for end in range(len(parts), 0, -1):  # the class may live in a submodule of a plugin package
            loaded_as = getattr(sys.modules.get(".".join(parts[:end])), PLUGIN_NAME_ATTR, None)
            if isinstance(loaded_as, str) and loaded_as:
                return loaded_as
        if module_name and module_name != "__main__":
            return module_name
        return type(self).__name__

    def get_device(self) -> str:
        """The device its subgraphs run on: by default the plugin name upper-cased."""
        return self.get_plugin_name().upper()

    def get_runner(self) -> dict[str, str]:
        """Mode -> registered runner name for its subgraphs: by default the CPU runner for every mode."""
        return {mode: DEFAULT_RUNNER for mode in RUNNER_MODES}

    def get_memory(self) -> "str | None":
        """Where its buffers live: "device" (shared with AI Core/AI CPU/DVPP, no copies) or "host".

        By default (None) the memory of the registered device of the same name (a plugin placing
        ops on "CPU" works in host memory, so the runtime copies what crosses), else "device"."""
        return None

    def partition(self, graph: "Graph") -> "set[Subgraph]":
        """The unassigned depth-1 subgraphs this plugin takes; by default none."""
        return set()

    def compile(self, subgraph: "Subgraph") -> None:
        """Attach what the runner needs to one returned subgraph (attrs); by default nothing."""
        return None

    def estimate(self, subgraph: "Subgraph") -> "float | None":
        """Seconds one run of a compiled subgraph takes on the plugin's device (stored as its attr
        "estimated_seconds", which the cost model reads); None (the default): no estimate."""
        return None

    def get_device_spec(self) -> "Any":
        """The plugin device's `xgraph.devices.DeviceSpec` (or a dict in the device TOML schema: instances,
        memory_capacity, link, cost profile), registered for the compile; None (the default): a bare one."""
        return None

    def check_blob(self, compat: str) -> str:
        """Whether a blob this plugin's compile stored with `compat` (`Subgraph.set_blob`) can be loaded:
        "ok", "recompile" (compile the subgraph again from the graph) or "unsupported". Asked when a runner
        is created for the subgraph (`xgraph.plugins.blobs`); by default "ok"."""
        return "ok"

    def blob_compat(self) -> "str | None":
        """The compatibility string this plugin's compile writes now (named when a blob is refused); None if
        it stores no blobs."""
        return None
