"""Measured costs: the table `xgraph profile-costs` writes and the compile option ``"costs"`` reads.

The format (JSON, docs/devices.md "Measured costs")::

    {"version": 1, "model": "net", "repeat": 20, "kernels": "auto",
     "ops": {"conv1": {"signature": "Conv||float32[1,3,224,224];float32[64,3,7,7]",
                       "seconds": {"AICORE": 0.0031, "CPU": 0.0030}}},
     "signatures": {"Conv||float32[1,3,224,224];float32[64,3,7,7]": {"AICORE": 0.0031, "CPU": 0.0030}},
     "candidates": [{"plugin": "openvino", "device": "OPENVINO", "ops": ["conv1", "relu1"],
                     "seconds": 0.0012}]}

Seconds are per run on one instance (the median of ``repeat`` timed runs). The cost model
looks an op up by name, then by signature (op type, domain, input dtypes and shapes), and a
plugin subgraph by its plugin and its set of op names; what the table lacks costs the
roofline estimate.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from xgraph.errors import OptionError

if TYPE_CHECKING:
    from xgraph.ir import Op

#: The version of the table format this xgraph writes and reads.
COST_TABLE_VERSION = 1


def op_signature(op: "Op") -> str:
    """"Type|domain|dtype[shape];..." of an op's inputs (omitted optionals empty): the key ops of one kind share."""
    parts = []
    for t in op.get_input_tensors():
        if t is None:
            parts.append("")
            continue
        dtype = t.dtype.name if t.dtype is not None else "?"
        shape = "?" if t.shape is None else ",".join("?" if d is None else str(d) for d in t.shape)
        parts.append(f"{dtype}[{shape}]")
    return f"{op.type}|{op.domain}|{';'.join(parts)}"


@dataclass(frozen=True)
class CostTable:
    """A checked cost table: seconds per device by op name and by signature, and per plugin candidate."""

    path: str
    model: str = ""
    ops: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    signatures: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    #: {(plugin, frozenset of op names): seconds on the plugin's device}
    candidates: Mapping[tuple[str, frozenset[str]], float] = field(default_factory=dict)

    def op_seconds(self, op: "Op", device: str) -> float | None:
        """Measured seconds of `op` on `device` (by name, else by signature), or None."""
        by_name = self.ops.get(op.name)
        if by_name is not None and device in by_name:
            return by_name[device]
        return self.signatures.get(op_signature(op), {}).get(device)

    def candidate_seconds(self, plugin: str, op_names: Iterable[str]) -> float | None:
        """Measured seconds of a plugin's subgraph holding exactly `op_names`, or None."""
        return self.candidates.get((plugin, frozenset(op_names)))


def _fail(path: str, key: str, problem: str) -> OptionError:
    return OptionError(f"option 'costs': {path}: {key} {problem}; write the table again with "
                       "`xgraph profile-costs MODEL -o TABLE.json`")


def _seconds(path: str, key: str, value: Any, devices: "set[str] | None") -> dict[str, float]:
    if not isinstance(value, Mapping):
        raise _fail(path, key, f"is {value!r:.60}, not an object of device -> seconds")
    out = {}
    for device, seconds in value.items():
        if devices is not None and device not in devices:
            raise _fail(path, f"{key}.{device}", f"names unknown device {device!r}; known: {', '.join(sorted(devices))}")
        out[device] = _number(path, f"{key}.{device}", seconds)
    return out


def _number(path: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise _fail(path, key, f"is {value!r:.60}, not seconds (a finite number >= 0)")
    return float(value)


def parse_cost_table(doc: Any, path: str, devices: "Iterable[str] | None" = None) -> CostTable:
    """A `CostTable` from a parsed document; OptionError naming the file and the bad key. `devices`: the
    device names per-op entries may use (plugin candidates name their plugin's device, checked at compile)."""
    known = set(devices) if devices is not None else None
    if not isinstance(doc, Mapping):
        raise _fail(path, "the document", "is not a JSON object")
    if doc.get("version") != COST_TABLE_VERSION:
        raise _fail(path, "version", f"is {doc.get('version')!r}; this xgraph reads version {COST_TABLE_VERSION}")
    unknown = sorted(set(doc) - {"version", "model", "repeat", "kernels", "ops", "signatures", "candidates"})
    if unknown:
        raise _fail(path, unknown[0], "is not a key of a cost table (version, model, repeat, kernels, ops, "
                                      "signatures, candidates)")
    ops_doc, signatures_doc = doc.get("ops", {}), doc.get("signatures", {})
    for key, value in (("ops", ops_doc), ("signatures", signatures_doc)):
        if not isinstance(value, Mapping):
            raise _fail(path, key, "is not an object")
    ops = {}
    for name, entry in ops_doc.items():
        if not isinstance(entry, Mapping) or "seconds" not in entry:
            raise _fail(path, f"ops.{name}", 'is not {"signature": ..., "seconds": {device: seconds}}')
        ops[name] = _seconds(path, f"ops.{name}.seconds", entry["seconds"], known)
    signatures = {sig: _seconds(path, f"signatures.{sig}", entry, known) for sig, entry in signatures_doc.items()}
    candidates = {}
    entries = doc.get("candidates", [])
    if not isinstance(entries, list):
        raise _fail(path, "candidates", "is not a list")
    for i, entry in enumerate(entries):
        key = f"candidates[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("plugin"), str) \
                or not isinstance(entry.get("ops"), list) or not all(isinstance(o, str) for o in entry["ops"]):
            raise _fail(path, key, 'is not {"plugin": name, "device": name, "ops": [op names], "seconds": s}')
        candidates[entry["plugin"], frozenset(entry["ops"])] = _number(path, f"{key}.seconds", entry.get("seconds"))
    model = doc.get("model", "")
    return CostTable(path, model if isinstance(model, str) else "", ops, signatures, candidates)


def load_cost_table(path: "str | Path", devices: "Iterable[str] | None" = None) -> CostTable:
    """Read and check a cost table file; OptionError naming the file (and key) when it cannot be used."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise OptionError(f"option 'costs': cannot read {name}: {e.strerror or e}; give the path of a table "
                          "written by `xgraph profile-costs`") from None
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise _fail(name, "the file", f"is not JSON ({e})") from None
    return parse_cost_table(doc, name, devices)


def parse_costs_option(value: Any, devices: "Iterable[str] | None" = None) -> tuple[str, CostTable]:
    """(path, table) of the compile option "costs"; `devices`: the registered device names (default: the table)."""
    if not isinstance(value, str) or not value:
        raise OptionError(f"option 'costs' has invalid value {value!r}: expected the path of a cost table written "
                          "by `xgraph profile-costs`")
    if devices is None:
        from xgraph.devices import get_devices
        devices = get_devices()
    return value, load_cost_table(value, list(devices))


__all__ = ["COST_TABLE_VERSION", "CostTable", "load_cost_table", "op_signature", "parse_cost_table",
           "parse_costs_option"]
