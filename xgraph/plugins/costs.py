"""What a plugin tells the cost model: its claim mode, its device's spec, its estimate per subgraph.

Three optional parts of the plugin interface (`xgraph.plugins.Plugin` has the defaults):

- ``claims``: "claim" (default: its subgraphs run on its device) or "prefer" (offers that a
  cost placement may decline for a built-in device; first fit takes them as claims);
- ``get_device_spec()``: the plugin device's `DeviceSpec` or a dict in the device TOML schema
  (instances, memory_capacity, link, cost profile), used by the compile that ran the plugin;
- ``estimate(subgraph)``: seconds per run of one compiled subgraph on the plugin's device,
  stored as the subgraph attr "estimated_seconds".

Each is called through the chain's `_Call`, so a raise is a PluginError naming the plugin and
the method, and a value of the wrong kind is one too; the chain then restores the graph.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

from xgraph.devices import DeviceSpec, as_device_spec
from xgraph.errors import PluginError
from xgraph.plugins.base import CLAIMS

if TYPE_CHECKING:
    from xgraph.ir import Subgraph

#: The subgraph attr holding a plugin's estimate (seconds per run on its device).
ESTIMATE_ATTR = "estimated_seconds"
#: The subgraph attr marking a plugin subgraph as an offer the cost placement may decline.
PREFERENCE_ATTR = "plugin_preference"


def claim_mode(call: Any, plugin: Any) -> str:
    """The plugin's `claims` ("claim" when it has none); a PluginError for any other value."""
    mode = getattr(plugin, "claims", "claim")
    if mode not in CLAIMS:
        raise call.error(f"claims = {mode!r}; set it to 'claim' (its subgraphs run on its device) or 'prefer' "
                         "(a cost placement may decline them)")
    return mode


def device_spec(call: Any, plugin: Any, device: str, memory: str) -> "DeviceSpec | None":
    """The plugin's device spec, named `device` with its memory kind `memory`; None when it gives none."""
    method = getattr(plugin, "get_device_spec", None)
    if method is None:
        return None
    given = call("get_device_spec()", method)
    if given is None:
        return None
    if isinstance(given, dict):
        given = {**given, "device": {"name": device, "memory": memory, **dict(given.get("device") or {})}}
    try:
        spec = as_device_spec(given, f"{call.label}'s get_device_spec()")
    except PluginError as e:
        raise call.error(f"get_device_spec() returned a bad spec: {e}") from e
    if spec.name != device:
        raise call.error(f"get_device_spec() describes device {spec.name!r} but get_device() is {device!r}; "
                         "name the same device")
    if spec.ops.rules:
        raise call.error("get_device_spec() lists ops: a plugin device takes what partition() returns; "
                         "leave the op-info tables out")
    return spec


def record_estimates(call: Any, plugin: Any, subgraphs: "list[Subgraph]") -> None:
    """Set "estimated_seconds" on each subgraph the plugin estimates (a finite number >= 0)."""
    method: "Callable[[Subgraph], Any] | None" = getattr(plugin, "estimate", None)
    if method is None:
        return
    for sg in subgraphs:
        seconds = call(f"estimate({sg.name!r})", method, sg)
        if seconds is None:
            continue
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds) \
                or seconds < 0:
            raise call.error(f"estimate({sg.name!r}) returned {seconds!r}; return seconds per run as a finite "
                             "number >= 0, or None for no estimate")
        sg.set_attr(ESTIMATE_ATTR, float(seconds))


def spec_document(spec: DeviceSpec) -> dict[str, Any]:
    """`spec` in the device TOML schema (what `xgraph.devices.device_from_dict` reads back), for the graph's record."""
    device: dict[str, Any] = {"name": spec.name, "memory": spec.memory, "instances": spec.instances,
                              "max_concurrency": spec.max_concurrency, "runner": dict(spec.runner)}
    if spec.memory_capacity is not None:
        device["memory_capacity"] = spec.memory_capacity
    return {"device": device,
            "cost": {"peak_gflops": dict(spec.cost.peak_gflops), "bandwidth_gbps": spec.cost.bandwidth_gbps,
                     "launch_overhead_us": spec.cost.launch_overhead_us},
            "link": {"bandwidth_gbps": spec.link.bandwidth_gbps, "latency_us": spec.link.latency_us}}


__all__ = ["ESTIMATE_ATTR", "PREFERENCE_ATTR", "claim_mode", "device_spec", "record_estimates", "spec_document"]
