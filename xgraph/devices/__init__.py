"""The device table: every device placement may use, with its op-info library and cost profile.

Devices are data. Each built-in device (AICORE, AICPU, DVPP, CPU) is one TOML file beside
this module, contributed through the `xgraph_devices` hook like any installed package's
device; the session's `xgraph.registries.Registries` collects the hook's contributions
(`collect_devices`), and `get_devices()` is the table of the default one. A partition plugin whose
device is free text (e.g. "SMFC") may `register_device(DeviceSpec("SMFC", ...))` so that
reports and runtimes know its memory and cost profile.

A device TOML file has these tables (`oprules` explains every rule key):

    [device]   name, description, cost_rank (lower = preferred), memory ("device" | "host"),
               runner = { run = "...", sim = "...", ref = "..." },
               instances (cards of this kind: AICORE:0, AICORE:1, ...; default 1),
               memory_capacity (bytes of one instance's memory, an int or "8GiB"; absent: unbounded),
               max_concurrency (queues: jobs one instance runs at once; default 1)
    [cost]     peak_gflops = { float16 = ..., float32 = ... }, bandwidth_gbps, launch_overhead_us
    [link]     bandwidth_gbps, latency_us: the copy path between this device's memory and the host's
    [defaults] rule keys every op entry starts from
    [ops.Conv] one op entry;  [[group]] ops = [...] plus shared rule keys
    [any_op]   any = true: a catch-all rule for unlisted ops, with exclude = { Op = "why" }
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from xgraph.errors import PluginError
from xgraph.modes import MODES
from xgraph.devices.oprules import OpTable, check_keys, Location, parse_op_table

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

#: Names of the built-in checks a table may list under `checks` (registered in xgraph.compiler.support.NAMED_CHECKS).
CHECK_NAMES = frozenset({"host_runnable", "dvpp_image_rules", "int8_weights"})
#: Memory kinds: "device" memory is shared by the accelerators; "host" is the CPU's.
MEMORY_KINDS = ("device", "host")
#: Runner modes a device's runner map may name.
RUNNER_MODES = MODES
_BUILTIN_FILES = ("aicore.toml", "aicpu.toml", "dvpp.toml", "cpu.toml")


@dataclass(frozen=True)
class CostProfile:
    """What the runtime's roofline model needs: peak GFLOP/s per dtype, memory bandwidth, launch overhead."""

    peak_gflops: Mapping[str, float] = field(default_factory=dict)
    bandwidth_gbps: float = 0.0
    launch_overhead_us: float = 0.0


@dataclass(frozen=True)
class LinkProfile:
    """The copy path between a device's memory and the host's: a copy of n bytes takes latency + n / bandwidth."""

    bandwidth_gbps: float = 0.0  # 0: copies cost only their latency
    latency_us: float = 0.0

    def seconds(self, nbytes: int) -> float:
        """Seconds one copy of `nbytes` takes over this link."""
        rate = self.bandwidth_gbps * 1e9
        return self.latency_us * 1e-6 + (nbytes / rate if rate else 0.0)


@dataclass(frozen=True)
class DeviceSpec:
    """One device: name, preference (cost_rank), memory kind, runner map, op-info library, cost profile,
    and its capacity: instances (cards), memory per instance, queues per instance, the link to the host.

    Devices of memory kind "device" share one card's memory: AICORE:i, AICPU:i and DVPP:i sit on
    card i and exchange tensors without a copy; everything else crosses a link.
    """

    name: str
    cost_rank: int = 50
    memory: str = "device"
    runner: Mapping[str, str] = field(default_factory=dict)
    ops: OpTable = field(default_factory=OpTable)
    cost: CostProfile = field(default_factory=CostProfile)
    description: str = ""
    source: str = "<python>"
    instances: int = 1
    memory_capacity: int | None = None  # bytes per instance; None: unbounded
    max_concurrency: int = 1
    link: LinkProfile = field(default_factory=LinkProfile)

    def __post_init__(self) -> None:
        where = f"device {self.name!r} ({self.source})"
        if not isinstance(self.name, str) or not self.name.strip():
            raise PluginError(f"device from {self.source}: name must be a non-empty str, got {self.name!r}")
        if isinstance(self.cost_rank, bool) or not isinstance(self.cost_rank, int) or self.cost_rank < 0:
            raise PluginError(f"{where}: cost_rank must be an int >= 0, got {self.cost_rank!r}")
        if self.memory not in MEMORY_KINDS:
            raise PluginError(f"{where}: memory must be one of {MEMORY_KINDS}, got {self.memory!r}")
        bad = {k: v for k, v in dict(self.runner).items()
               if k not in RUNNER_MODES or not isinstance(v, str) or not v}
        if bad:
            raise PluginError(f"{where}: runner entries {bad} are not mode -> runner name; modes are {RUNNER_MODES}")
        if not isinstance(self.ops, OpTable):
            raise PluginError(f"{where}: ops must be an OpTable (load op-info libraries with device_from_dict)")
        for key in ("instances", "max_concurrency"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
                raise PluginError(f"{where}: {key} must be an int from 1 to 4096, got {value!r}")
        cap = self.memory_capacity
        if cap is not None and (isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0):
            raise PluginError(f"{where}: memory_capacity must be a number of bytes > 0 (or absent), got {cap!r}")
        if not isinstance(self.link, LinkProfile):
            raise PluginError(f"{where}: link must be a LinkProfile, got {type(self.link).__name__}")

    @property
    def is_host(self) -> bool:
        """True for host memory (the CPU): a tensor crossing to or from it is a host/device copy."""
        return self.memory == "host"


def _parse_cost(table: Any, where: Location) -> CostProfile:
    t = check_keys(table, ("peak_gflops", "bandwidth_gbps", "launch_overhead_us"), where)
    peaks = t.get("peak_gflops", {})
    if not isinstance(peaks, dict) or any(isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0
                                          for v in peaks.values()):
        raise (where / "peak_gflops").error("must be a table of dtype name -> positive number, "
                                            "e.g. { float16 = 8000.0, float32 = 1000.0 }")
    values = _non_negative(t, ("bandwidth_gbps", "launch_overhead_us"), where)
    return CostProfile(peak_gflops={k: float(v) for k, v in peaks.items()}, **values)


def _non_negative(table: Mapping[str, Any], keys: "tuple[str, ...]", where: Location) -> dict[str, float]:
    """`table`'s numbers under `keys` (0.0 when absent), each checked >= 0; an error naming the key otherwise."""
    values = {}
    for key in keys:
        v = table.get(key, 0.0)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise (where / key).error(f"must be a number >= 0, got {v!r}")
        values[key] = float(v)
    return values


_BYTE_UNITS = {"": 1, "K": 1 << 10, "KI": 1 << 10, "M": 1 << 20, "MI": 1 << 20, "G": 1 << 30, "GI": 1 << 30,
               "T": 1 << 40, "TI": 1 << 40}


def parse_bytes(value: Any) -> int | None:
    """A byte count from an int >= 0 or a string such as "1024", "512M", "8GiB", "2 GB" (powers of 1024);
    None when `value` is neither."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if not isinstance(value, str):
        return None
    text = value.strip().upper().replace(" ", "").removesuffix("B")
    digits = text.rstrip("KMGTI")
    scale = _BYTE_UNITS.get(text[len(digits):])
    if scale is None or not digits.isdigit() or len(digits) > 18:
        return None
    return int(digits) * scale


def _parse_link(table: Any, where: Location) -> LinkProfile:
    t = check_keys(table, ("bandwidth_gbps", "latency_us"), where)
    return LinkProfile(**_non_negative(t, ("bandwidth_gbps", "latency_us"), where))


def _capacity(d: Mapping[str, Any], where: Location) -> int | None:
    if "memory_capacity" not in d:
        return None
    n = parse_bytes(d["memory_capacity"])
    if not n:
        raise (where / "memory_capacity").error(f'must be a number of bytes > 0 such as 8589934592 or "8GiB", '
                                                f'got {d["memory_capacity"]!r}')
    return n


def device_from_dict(doc: Mapping[str, Any], source: str = "<dict>") -> DeviceSpec:
    """A DeviceSpec from a parsed device document (the TOML schema above); PluginError naming file and key."""
    root = Location(source)
    doc = check_keys(dict(doc), ("device", "cost", "link", "defaults", "ops", "group", "any_op", "shape_values"), root)
    if "device" not in doc:
        raise root.error("needs a [device] table with at least name = \"...\"")
    d = check_keys(doc["device"], ("name", "description", "cost_rank", "memory", "runner", "instances",
                                   "memory_capacity", "max_concurrency"), root / "device")
    if "name" not in d:
        raise (root / "device").error("needs name = \"...\"")
    runner = d.get("runner", {})
    if not isinstance(runner, dict):
        raise (root / "device" / "runner").error("must be a table such as { run = \"cpu\", sim = \"cpu\" }")
    return DeviceSpec(
        name=d["name"], cost_rank=d.get("cost_rank", 50), memory=d.get("memory", "device"),
        runner=dict(runner), ops=parse_op_table(doc, source, CHECK_NAMES),
        cost=_parse_cost(doc.get("cost", {}), root / "cost"),
        description=d.get("description", ""), source=source,
        instances=d.get("instances", 1), memory_capacity=_capacity(d, root / "device"),
        max_concurrency=d.get("max_concurrency", 1), link=_parse_link(doc.get("link", {}), root / "link"))


def load_device_file(path: "str | Path") -> DeviceSpec:
    """Read and validate one device TOML file."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise PluginError(f"device table {path}: file not found") from None
    except tomllib.TOMLDecodeError as e:
        raise PluginError(f"device table {path}: not valid TOML: {e}") from None
    return device_from_dict(doc, str(path))


def builtin_device_files() -> list[Path]:
    """Paths of the built-in device tables (AICORE, AICPU, DVPP, CPU)."""
    here = Path(__file__).parent
    return [here / name for name in _BUILTIN_FILES]


def as_device_spec(item: Any, contributor: str) -> DeviceSpec:
    """A hook contribution (DeviceSpec, TOML-schema dict, or path to a TOML file) as a DeviceSpec."""
    if isinstance(item, DeviceSpec):
        return item
    if isinstance(item, Mapping):
        return device_from_dict(item, f"<dict from {contributor}>")
    if isinstance(item, (str, Path)):
        return load_device_file(item)
    raise PluginError(f"{contributor} contributed {type(item).__name__} {item!r:.60} as a device; "
                      "return DeviceSpecs, dicts in the device TOML schema, or paths to TOML files")


def add_device(table: dict[str, DeviceSpec], spec: DeviceSpec) -> None:
    """Put `spec` in `table`; a PluginError naming both sources when another device has its name."""
    other = table.get(spec.name)
    if other is not None and other is not spec:
        raise PluginError(f"device {spec.name!r} is registered twice: by {other.source} and by {spec.source}; "
                          "give one of them another name")
    table[spec.name] = spec


def collect_devices(contributions: Iterable[tuple[str, Any]]) -> dict[str, DeviceSpec]:
    """name -> DeviceSpec from the `xgraph_devices` hook's results, as (contributor, returned list) pairs."""
    table: dict[str, DeviceSpec] = {}
    for contributor, items in contributions:
        if items is None:
            continue
        if isinstance(items, (DeviceSpec, Mapping, str, Path)) or not isinstance(items, (list, tuple)):
            raise PluginError(f"{contributor} returned {type(items).__name__}; return a list of devices")
        for item in items:
            add_device(table, as_device_spec(item, contributor))
    return table


def by_cost(table: Mapping[str, DeviceSpec]) -> dict[str, DeviceSpec]:
    """`table` ordered cheapest (lowest cost_rank) first, then by name."""
    return {s.name: s for s in sorted(table.values(), key=lambda s: (s.cost_rank, s.name))}


# The module-level functions below serve the default registries (`xgraph.registries`), which
# installs itself here when imported (`import xgraph` does): this foundation layer never imports
# the layer that collects hooks.
_default: Callable[[], Any] | None = None


def set_default_registries(provider: Callable[[], Any]) -> None:
    """Install the function returning the default registries object (called by `xgraph.registries`)."""
    global _default
    _default = provider


def _registries() -> Any:
    if _default is None:
        raise PluginError("no device table: import xgraph (it installs the default registries) before "
                          "xgraph.devices.get_devices()")
    return _default()


def get_devices() -> dict[str, DeviceSpec]:
    """name -> DeviceSpec of the default registries, cheapest (lowest cost_rank) first."""
    return _registries().devices


def register_device(spec: DeviceSpec) -> DeviceSpec:
    """Add a device (e.g. a plugin's free-text device) to the default registries; a name clash is a PluginError."""
    return _registries().register_device(spec)


def memory_of(subgraph: Any, devices: Mapping[str, DeviceSpec] | None = None) -> str:
    """"host" or "device" for a device subgraph: its "memory" attr (a plugin device says where its
    buffers live), else its device's table entry, else "host" (an unknown device is not trusted
    to share device memory, so tensors to and from it are copied)."""
    if subgraph.has_attr("memory") and subgraph.get_attr("memory") in MEMORY_KINDS:
        return subgraph.get_attr("memory")
    if not subgraph.has_attr("device"):
        return "host"
    spec = (get_devices() if devices is None else devices).get(str(subgraph.get_attr("device")))
    return spec.memory if spec is not None else "host"


def unregister_device(name: str) -> None:
    """Remove a device added with `register_device` (tests, interactive sessions)."""
    _registries().unregister_device(name)


__all__ = ["CHECK_NAMES", "CostProfile", "DeviceSpec", "LinkProfile", "parse_bytes", "as_device_spec", "builtin_device_files", "device_from_dict",
           "get_devices", "load_device_file", "register_device", "unregister_device", "add_device", "by_cost",
           "collect_devices", "set_default_registries"]
