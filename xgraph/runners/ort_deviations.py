"""The op/attribute/dtype combinations where onnxruntime deviates from the ONNX spec, as data.

`ort_deviations.toml` beside this module lists them (how they were measured, and the schema,
are in its header). With ``kernels="auto"`` a subgraph holding a matching op is planned for
xgraph's kernels instead of onnxruntime (`xgraph.runners.plan.plan_subgraph`), with the entry's
reason as the plan's `backend_reason`.

    >>> deviation(op)                      # doctest: +SKIP
    Deviation(op='DFT', ..., reason="onnxruntime's DFT is off by up to 2e-4 ...")
"""
from __future__ import annotations

import functools
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from xgraph.errors import XGraphError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on Python 3.10 only
    import tomli as tomllib

if TYPE_CHECKING:
    from xgraph.ir import Op

DATA_FILE = Path(__file__).with_name("ort_deviations.toml")
_KEYS = frozenset({"op", "domain", "attrs", "has_attrs", "inputs", "dtypes", "reason", "cases"})


@dataclass(frozen=True)
class Deviation:
    """One entry: which ops it matches, why onnxruntime may not run them, the conformance cases showing it."""

    op: str
    reason: str
    domain: str = ""
    attrs: dict[str, tuple] = field(default_factory=dict)
    has_attrs: tuple[str, ...] = ()
    inputs: tuple[int, ...] = ()
    dtypes: tuple[str, ...] = ()
    cases: tuple[str, ...] = ()

    def matches(self, op: "Op") -> bool:
        """True when `op` is of this entry's type and agrees with every key it sets."""
        if op.type != self.op or (op.domain if op.domain != "ai.onnx" else "") != self.domain:
            return False
        if any(not op.has_attr(name) for name in self.has_attrs):
            return False
        inputs = op.get_input_tensors()
        if any(i >= len(inputs) or inputs[i] is None for i in self.inputs):
            return False
        if self.dtypes:
            first = inputs[0] if inputs else None
            if first is None or first.dtype is None or first.dtype.name not in self.dtypes:
                return False
        return all(_attribute(op, name) in values for name, values in self.attrs.items())


def _attribute(op: "Op", name: str) -> Any:
    """The op's attribute as a plain value, else the schema default (None when there is none)."""
    if op.has_attr(name):
        value = op.get_attr(name)
    else:
        try:
            schema = onnx.defs.get_schema(op.type, op.opset() or onnx.defs.onnx_opset_version(), op.domain)
            default = schema.attributes[name].default_value
        except Exception:  # unknown op or attribute: no default to compare
            return None
        if default is None or not default.name:
            return None
        value = onnx.helper.get_attribute_value(default)
    return value.decode() if isinstance(value, bytes) else value


def _entry(raw: dict, index: int) -> Deviation:
    where = f"{DATA_FILE.name}, entry {index + 1}"
    unknown = sorted(set(raw) - _KEYS)
    if unknown or "op" not in raw or "reason" not in raw:
        raise XGraphError(f"{where}: needs op and reason, may have {sorted(_KEYS)}; got {sorted(raw)}")
    attrs = {k: tuple(v) if isinstance(v, list) else (v,) for k, v in raw.get("attrs", {}).items()}
    return Deviation(op=raw["op"], reason=raw["reason"], domain=raw.get("domain", ""), attrs=attrs,
                     has_attrs=tuple(raw.get("has_attrs", ())), inputs=tuple(raw.get("inputs", ())),
                     dtypes=tuple(raw.get("dtypes", ())), cases=tuple(raw.get("cases", ())))


@functools.lru_cache(maxsize=1)
def deviations() -> tuple[Deviation, ...]:
    """Every entry of the data file (read once: it is package data, not a registry)."""
    with DATA_FILE.open("rb") as f:
        doc = tomllib.load(f)
    return tuple(_entry(raw, i) for i, raw in enumerate(doc.get("deviation", [])))


def deviation(op: "Op") -> Deviation | None:
    """The first entry matching `op`, or None when onnxruntime is trusted with it."""
    return next((d for d in deviations() if d.op == op.type and d.matches(op)), None)


def subgraph_deviation(ops) -> str:
    """'' when onnxruntime may run every op of `ops`, else why not (naming the op)."""
    for op in ops:
        found = deviation(op)
        if found is not None:
            return f"op {op.name!r} ({op.type}): {found.reason}"
    return ""


__all__ = ["DATA_FILE", "Deviation", "deviation", "deviations", "subgraph_deviation"]
