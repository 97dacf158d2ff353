"""The attrs xgraph itself writes into an .xmodel and reads back, checked by type and range at load.

A loaded file can carry any JSON-typed value under any key. Keys that xgraph's own stages
read (the runtime, the report, the views, the CLI) must hold what those stages wrote, or
the file is refused with a ModelFileError naming the graph, subgraph or op and the key;
every other key stays free-form data for plugins.

To read a new attr back from files, add it to the table of its owner here.
"""
from __future__ import annotations

import json
import math
import numbers
from typing import Any, Callable

from xgraph.errors import ModelFileError
from xgraph.ir.blob import blob_problem

#: Text attrs (device names, reasons, kernel names) longer than this are refused.
MAX_TEXT = 1 << 16

ValueRule = Callable[[Any], str | None]  # None when the value is fine, else what it should be


def _text(value: Any) -> str | None:
    if not isinstance(value, str):
        return f"a str, not {type(value).__name__}"
    return None if len(value) <= MAX_TEXT else f"at most {MAX_TEXT} characters, not {len(value)}"


def _name(value: Any) -> str | None:
    problem = _text(value)
    return problem or (None if value else "a non-empty str")


def _one_of(*choices: str) -> ValueRule:
    def rule(value: Any) -> str | None:
        return None if isinstance(value, str) and value in choices else f"one of {', '.join(map(repr, choices))}"
    return rule


def _runner_map(value: Any) -> str | None:
    # An empty map is a compile-only plugin's subgraph: it loads, and creating a runner names what is missing.
    if not isinstance(value, dict):
        return "a dict of mode -> runner name"
    bad = next((k for k, v in value.items() if not isinstance(k, str) or _name(v)), None)
    return None if bad is None else f"a dict of mode -> runner name (str); mode {bad!r} maps to {value[bad]!r:.40}"


def _seconds(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return f"a number, not {type(value).__name__}"
    try:
        x = float(value)
    except OverflowError:
        return "a finite number of microseconds"
    return None if math.isfinite(x) and x >= 0 else "a finite number >= 0"


def _dict(value: Any) -> str | None:
    return None if isinstance(value, dict) else f"a dict, not {type(value).__name__}"


def _json_object_text(value: Any) -> str | None:
    problem = _text(value)
    if problem:
        return problem
    try:
        parsed = json.loads(value)
    except (ValueError, RecursionError):
        return "a JSON object as text"
    return None if isinstance(parsed, dict) else "a JSON object as text"


def _plugin_runs(value: Any) -> str | None:
    if not isinstance(value, list):
        return f"a list of plugin records, not {type(value).__name__}"
    for i, run in enumerate(value):
        if not isinstance(run, dict):
            return f"a list of dicts (entry {i} is {type(run).__name__})"
        for key in ("name", "device"):
            if key in run and _text(run[key]):
                return f"records whose {key!r} is a str (entry {i})"
        subgraphs = run.get("subgraphs", [])
        if not isinstance(subgraphs, list) or not all(isinstance(s, str) for s in subgraphs):
            return f"records whose 'subgraphs' is a list of names (entry {i})"
    return None


GRAPH_ATTRS: dict[str, ValueRule] = {
    "precision_mode": _text, "compile_options": _json_object_text, "prepare_summary": _dict,
    "plugin_runs": _plugin_runs,
}
SUBGRAPH_ATTRS: dict[str, ValueRule] = {
    "device": _name, "runner": _runner_map, "memory": _one_of("host", "device"), "estimated_time_us": _seconds,
    "blob": blob_problem,
}
OP_ANNOTATIONS: dict[str, ValueRule] = {
    "device": _text, "placement_reason": _text, "kernel": _text, "precision": _text,
}


def _check(attrs: dict[str, Any], table: dict[str, ValueRule], where: str, label: str) -> None:
    for key, rule in table.items():
        if key in attrs:
            problem = rule(attrs[key])
            if problem:
                raise ModelFileError(f"{label}: {where} has attr {key!r} = {_preview(attrs[key])}, which must be "
                                     f"{problem}; the file is damaged or hand-edited: compile the model again")


def _preview(value: Any) -> str:
    try:
        text = repr(value)
    except ValueError:  # an int too long to print
        text = f"<{type(value).__name__}>"
    return text if len(text) <= 60 else text[:57] + "..."


def _pair(key: str, value: Any) -> "tuple | None":
    """(key, a hashable form of value that tells apart what the rules tell apart), or None: check each time."""
    if type(value) in (str, int, float):
        return key, type(value), value
    if type(value) is dict and all(type(k) is str and type(v) is str for k, v in value.items()):
        return key, dict, tuple(value.items())
    return None


_ABSENT = object()


def _op_annotations_good(graph: Any) -> bool:
    """True when every op annotation xgraph owns holds what it must: each distinct value checked once, the
    values gathered per key by the graph's index. False when one is bad, unhashable or an ONNX attribute of
    that name exists (then `check_known_attrs` looks op by op, to name the op)."""
    ops, index = graph.get_ops(), graph.index()
    for key, rule in OP_ANNOTATIONS.items():
        if not set(index.attr_kind_column(ops, key, _ABSENT)) <= {None, _ABSENT}:  # None: an annotation
            return False
        try:
            values = set(index.attr_column(ops, key, _ABSENT))
        except TypeError:  # an unhashable value: not a str, so bad
            return False
        values.discard(_ABSENT)
        if any(rule(v) for v in values):
            return False
    return True


def check_known_attrs(graph: Any, label: str) -> None:
    """Refuse a loaded graph whose xgraph-owned attrs do not hold what xgraph writes (ModelFileError)."""
    _check(graph.get_attrs(), GRAPH_ATTRS, f"graph {graph.name!r}", label)
    stack = [graph.get_root_subgraph()]
    seen: set[tuple[str, Any]] = set()  # (key, value) pairs already found good: a tree repeats a few
    while stack:
        sg = stack.pop()
        attrs = sg.get_attrs()
        for key in SUBGRAPH_ATTRS:  # one key at a time, in the table's order: the first problem is reported
            if key in attrs:
                pair = _pair(key, attrs[key])
                if pair is None or pair not in seen:
                    _check({key: attrs[key]}, SUBGRAPH_ATTRS, f"subgraph {sg.name!r}", label)
                    if pair is not None:
                        seen.add(pair)
        stack.extend(sg.get_children())
    if _op_annotations_good(graph):
        return
    # a problem somewhere: op by op, so the first op (in order) with a bad value is the one named;
    # 100k-op files repeat a handful of (key, value) pairs: each distinct pair is checked once
    checked: dict[str, set[str]] = {key: set() for key in OP_ANNOTATIONS}  # per key, the str values found good
    for op in graph.get_ops():
        attrs = op.get_attrs()
        if not attrs:
            continue
        for key, good in checked.items():
            if key in attrs and op.is_annotation(key):
                value = attrs[key]
                if isinstance(value, str) and value in good:
                    continue
                _check({key: value}, OP_ANNOTATIONS, f"op {op.name!r}", label)
                if isinstance(value, str):
                    good.add(value)


__all__ = ["GRAPH_ATTRS", "OP_ANNOTATIONS", "SUBGRAPH_ATTRS", "check_known_attrs"]
