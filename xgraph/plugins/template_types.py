"""Template op types nothing knows: a misspelt type (``Softmx``) matches no op, silently.

`unknown_type_warnings` names each template op type that no ONNX schema (any domain), no
registered kernel and no device op-info library knows, with a "did you mean". The chain
checks the templates a plugin holds when it is loaded (`templates_held`: GraphTemplates among
its module's globals and its plugin object's attributes) and those it matched with during
``partition``; the warnings go into the plugin's record ("warnings") and the report.
"""
from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from types import ModuleType
from typing import Any

import onnx.defs

from xgraph.ir import GraphTemplate


def known_op_types() -> set[str]:
    """Every op type ONNX defines (all domains), the active registries' kernels cover, or a device lists."""
    from xgraph.registries import resolve
    registries = resolve(None)
    known = {schema.name for schema in onnx.defs.get_all_schemas_with_history()}
    known.update(registries.kernels.op_types())
    for spec in registries.devices.values():
        known.update(spec.ops.op_types())
    return known


def templates_held(module: ModuleType | None, plugin: Any) -> list[GraphTemplate]:
    """GraphTemplates among a plugin module's globals and its plugin object's attributes (and lists of them)."""
    values: list[Any] = list(vars(module).values()) if module is not None else []
    if plugin is not None:
        values += list(getattr(plugin, "__dict__", {}).values()) + list(vars(type(plugin)).values())
    found: dict[int, GraphTemplate] = {}
    for value in values:
        items = value if isinstance(value, (list, tuple, set, frozenset)) else \
            value.values() if isinstance(value, dict) else [value]
        for item in items:
            if isinstance(item, GraphTemplate):
                found.setdefault(id(item), item)
    return list(found.values())


def op_types_of(templates: Iterable[GraphTemplate]) -> dict[str, dict[str, list[str]]]:
    """{template name: {template op: its types}} (the form the match log records)."""
    return {t.name: {op.name: sorted(op.types) for op in t.get_ops()} for t in templates}


#: the domains of ONNX's own schemas, asked first by name (`onnx.defs.has`) before every schema is listed
_ONNX_DOMAINS = (onnx.defs.ONNX_DOMAIN, onnx.defs.ONNX_ML_DOMAIN, onnx.defs.AI_ONNX_PREVIEW_TRAINING_DOMAIN)


def _an_onnx_op(op_type: str) -> bool:
    return any(onnx.defs.has(op_type, domain) for domain in _ONNX_DOMAINS)


def unknown_type_warnings(plugin: str, templates: Mapping[str, Mapping[str, Iterable[str]]],
                          known: set[str] | None = None) -> list[str]:
    """One line per (template, op, type) whose type nothing knows, with the closest known type.

    Without `known`, types ONNX defines are passed over by name first: the set of everything known (every
    schema of every version, every kernel and device op type) is built only when some type is not one."""
    if known is None:
        types = {t for ops in templates.values() for types in ops.values() for t in types}
        if all(map(_an_onnx_op, types)):
            return []
        known = known_op_types()
    warnings = []
    for template, ops in templates.items():
        for op, types in ops.items():
            for op_type in types:
                if op_type in known:
                    continue
                close = difflib.get_close_matches(op_type, known, 1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                warnings.append(f"plugin {plugin!r}: template {template!r} op {op!r} has type {op_type!r}, which no "
                                f"ONNX schema, kernel or device knows{hint}; it will match no op")
    return warnings


__all__ = ["known_op_types", "op_types_of", "templates_held", "unknown_type_warnings"]
