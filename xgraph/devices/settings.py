"""Compile-time overrides of the device table: `{"devices": {"AICORE": {"instances": 2, "memory": "8GiB"}}}`.

The object form of the "devices" option keeps every device allowed and changes what the
device specs say about capacity. The keys of one device's settings:

- ``instances``: how many of it the host has (cards: AICORE:0, AICORE:1, ...);
- ``memory``: bytes of one instance's memory (an int or "8GiB");
- ``max_concurrency``: queues per instance (jobs one instance runs at once);
- ``link_bandwidth_gbps``, ``link_latency_us``: the copy path to the host.

AICORE, AICPU and DVPP (memory kind "device") sit on one card and share its memory, so
``instances``, ``memory`` and the link of one of them are the card's and apply to all three;
``max_concurrency`` stays per device.

A compile records its options in the graph's "compile_options" attr; `compiled_devices` gives
the table that compile used, so the report and the runtime (its streams per instance and its
queues) read the same instance counts and queues as placement did.
"""
from __future__ import annotations

import dataclasses
import difflib
import json
from typing import Any, Mapping

from xgraph.devices import DeviceSpec, LinkProfile, device_from_dict, parse_bytes
from xgraph.errors import GraphError, OptionError

#: The settings a device may be given, with what each expects.
SETTING_KEYS = {
    "instances": "an int from 1 to 4096",
    "memory": 'a number of bytes > 0 such as 8589934592 or "8GiB"',
    "max_concurrency": "an int from 1 to 4096",
    "link_bandwidth_gbps": "a number >= 0 (GB/s)",
    "link_latency_us": "a number >= 0 (microseconds)",
}
#: Settings that belong to the card (every device of memory kind "device" shares them).
CARD_KEYS = ("instances", "memory", "link_bandwidth_gbps", "link_latency_us")


def _value(device: str, key: str, value: Any) -> Any:
    bad = OptionError(f"option 'devices' entry {device!r}: {key} = {value!r} is not {SETTING_KEYS[key]}")
    if key in ("instances", "max_concurrency"):
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
            raise bad
        return value
    if key == "memory":
        n = parse_bytes(value)
        if not n:
            raise bad
        return n
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or value == float("inf"):
        raise bad
    return float(value)


def parse_device_settings(value: Mapping[str, Any], known: "list[str]") -> dict[str, dict[str, Any]]:
    """{device name (as registered): {setting: value}} from the object form; OptionError naming the bad entry."""
    by_upper = {k.upper(): k for k in known}
    settings: dict[str, dict[str, Any]] = {}
    for name, entry in value.items():
        device = by_upper.get(str(name).upper()) if isinstance(name, str) else None
        if device is None:
            hint = difflib.get_close_matches(str(name).upper(), list(by_upper), 1)
            raise OptionError(f"option 'devices' names unknown device {name!r}"
                              f"{f' (did you mean {by_upper[hint[0]]!r}?)' if hint else ''}; "
                              f"known devices: {', '.join(known)}")
        if not isinstance(entry, Mapping):
            raise OptionError(f"option 'devices' entry {name!r} must be an object such as "
                              f'{{"instances": 2, "memory": "8GiB"}}, got {entry!r:.60}')
        unknown = [k for k in entry if k not in SETTING_KEYS]
        if unknown:
            hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(str(k), SETTING_KEYS, 1))
                     else repr(k) for k in unknown]
            raise OptionError(f"option 'devices' entry {name!r} has unknown setting(s) {', '.join(hints)}; "
                              f"valid settings: {', '.join(SETTING_KEYS)}")
        settings[device] = {key: _value(device, key, v) for key, v in entry.items()}
    return settings


def _replace(spec: DeviceSpec, entry: Mapping[str, Any]) -> DeviceSpec:
    changes: dict[str, Any] = {}
    if "instances" in entry:
        changes["instances"] = entry["instances"]
    if "memory" in entry:
        changes["memory_capacity"] = entry["memory"]
    if "max_concurrency" in entry:
        changes["max_concurrency"] = entry["max_concurrency"]
    if "link_bandwidth_gbps" in entry or "link_latency_us" in entry:
        changes["link"] = LinkProfile(entry.get("link_bandwidth_gbps", spec.link.bandwidth_gbps),
                                      entry.get("link_latency_us", spec.link.latency_us))
    return dataclasses.replace(spec, **changes) if changes else spec


def apply_device_settings(devices: Mapping[str, DeviceSpec],
                          settings: Mapping[str, Mapping[str, Any]]) -> dict[str, DeviceSpec]:
    """A copy of the device table with `settings` applied (card settings to every device-memory device).

    >>> from xgraph.devices import DeviceSpec
    >>> table = {"AICORE": DeviceSpec("AICORE"), "AICPU": DeviceSpec("AICPU"), "CPU": DeviceSpec("CPU", memory="host")}
    >>> new = apply_device_settings(table, {"AICORE": {"instances": 2, "max_concurrency": 2}})
    >>> [(s.name, s.instances, s.max_concurrency) for s in new.values()]
    [('AICORE', 2, 2), ('AICPU', 2, 1), ('CPU', 1, 1)]
    """
    if not settings:
        return dict(devices)
    card: dict[str, Any] = {}
    said_by: dict[str, str] = {}
    for name, entry in settings.items():
        if devices[name].memory != "device":
            continue
        for key, value in entry.items():
            if key in CARD_KEYS and key in card and card[key] != value:
                raise OptionError(f"option 'devices' gives the card two values of {key!r}: {card[key]!r} for "
                                  f"{said_by[key]} and {value!r} for {name}; AICORE, AICPU and DVPP share one "
                                  f"card, so give {key!r} once")
            if key in CARD_KEYS:
                card[key], said_by[key] = value, name
    table = {}
    for name, spec in devices.items():
        entry = dict(card) if spec.memory == "device" else {}
        entry.update(settings.get(name, {}))
        table[name] = _replace(spec, entry)
    return table


def recorded_options(graph: Any) -> dict[str, Any]:
    """The options a compiled graph records in its "compile_options" attr (JSON or a dict), {} when it has
    none; GraphError naming the graph when the attr is damaged."""
    if not graph.has_attr("compile_options"):
        return {}
    value = graph.get_attr("compile_options")
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise GraphError(f"graph {graph.name!r}: its 'compile_options' attr is not JSON ({e}); the compiled "
                             "graph is damaged, compile the model again") from None
    return value if isinstance(value, dict) else {}


def with_plugin_devices(devices: Mapping[str, DeviceSpec], runs: Any) -> dict[str, DeviceSpec]:
    """`devices` plus the device each plugin run described (`Plugin.get_device_spec`, recorded in the run's
    "device_spec" in the device TOML schema); a plugin device named like a registered one keeps the registered spec."""
    table = dict(devices)
    for run in runs if isinstance(runs, list) else []:
        document = run.get("device_spec") if isinstance(run, Mapping) else None
        if isinstance(document, Mapping) and run.get("device") not in table:
            table[str(run["device"])] = device_from_dict(document, f"plugin {run.get('name')!r}'s get_device_spec()")
    return table


def compiled_devices(graph: Any, devices: Mapping[str, DeviceSpec]) -> dict[str, DeviceSpec]:
    """The device table `graph` was compiled for: `devices` with its recorded "devices" settings applied
    (instances, memory, queues, links) and its plugins' device specs; `devices` itself when the compile changed none."""
    runs = graph.get_attr("plugin_runs") if graph.has_attr("plugin_runs") else None
    devices = with_plugin_devices(devices, runs)
    settings = recorded_options(graph).get("devices")
    if not isinstance(settings, Mapping) or not settings:
        return dict(devices)
    # a device this table lacks (a plugin's, registered when the plugin loads) runs as one
    # instance with one queue wherever the model goes, so its settings are left out here
    known = {name.upper() for name in devices}
    settings = {k: v for k, v in settings.items() if isinstance(k, str) and k.upper() in known}
    return apply_device_settings(devices, parse_device_settings(settings, list(devices)))


__all__ = ["CARD_KEYS", "SETTING_KEYS", "apply_device_settings", "compiled_devices", "parse_device_settings",
           "recorded_options", "with_plugin_devices"]
