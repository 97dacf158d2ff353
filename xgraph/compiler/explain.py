"""`xgraph.explain`: for chosen ops, who took each one and why, and why every other candidate did not.

Explaining compiles the model again with template near-miss recording on (the compile is
deterministic, so it reaches the same placement as the file being explained), then answers
per op from three sources:

* the compiled graph: the op's device and subgraph, the plugin that took it (or the
  built-in placement) and the recorded placement reason;
* the built-in devices' support checks (`op_info`), asked again for this op: each
  candidate device's verdict with its reason and the cost model's estimate, cheapest first,
  under the dim ranges the graph was compiled with; for an op with dynamic dims, the size the
  estimates assume for each (`DimRanges.assumed`);
* the match log of each plugin's `partition` call: every template the plugin matched with,
  whether this op was in a full match, and the partial matches touching it with the
  template op where they broke ("conv matched n4 (Conv), bn matched n5
  (BatchNormalization), act expected one of {Clip, Relu}, found n6 (Mul)").

For an already compiled Graph or `.xmodel`, the options default to the ones it was compiled
with (its "compile_options" attr).
"""
from __future__ import annotations

import difflib
import os
from collections.abc import Iterable, Mapping
from typing import Any

import onnx

from xgraph.errors import XGraphError
from xgraph.ir.arguments import require_names
from xgraph.ir import Graph, Op
from xgraph.ir.template import MatchLog, record_matches
from xgraph.compiler.options import format_input_shape, parse_input_shape, parse_input_shape_ranges, parse_options
from xgraph.compiler.cost_model import op_seconds
from xgraph.ir.dim_ranges import DimRanges, assumed_text, tensor_dims
from xgraph.compiler.placement import candidate_devices
from xgraph.compiler.support import op_info
from xgraph.devices import get_devices
from xgraph.devices.settings import recorded_options as read_recorded_options

#: Near misses listed per op and template before the rest are counted.
SHOWN_MISSES = 3

Source = "Graph | onnx.ModelProto | bytes | str | os.PathLike"


def recorded_options(source: Any) -> Any:
    """The compile options a compiled Graph or .xmodel was made with, else None."""
    graph = source
    if isinstance(source, (str, os.PathLike)) and os.fspath(source).lower().endswith(".xmodel"):
        from xgraph.ir.graph import load
        graph = load(source)
    if isinstance(graph, Graph) and graph.has_attr("compile_options"):
        return read_recorded_options(graph)  # GraphError naming the graph when the attr is damaged
    return None


def compile_with_log(source: Any, options: Any = None, plugin_path: "list[str] | str | None" = None
                     ) -> tuple[Graph, MatchLog]:
    """Compile `source` with near-miss recording on: the compiled graph and everything the plugins matched."""
    from xgraph.compiler.pipeline import compile as compile_graph
    if options is None:
        if isinstance(source, (str, os.PathLike)) and os.fspath(source).lower().endswith(".xmodel"):
            from xgraph.ir.graph import load
            source = load(source)
        options = recorded_options(source)
        if options:  # names read from a model file resolve only to installed or plugin-path plugins
            from xgraph.plugins.loader import load_plugin
            names = parse_options(options, get_devices()).plugins
            paths = [plugin_path] if isinstance(plugin_path, (str, os.PathLike)) else plugin_path
            for name in names:
                load_plugin(name, paths, importable=False)
            options = without_applied_dims(options, source)
    with record_matches(near_misses=True) as log:
        compiled = compile_graph(source, options, plugin_path)
    return compiled, log


def without_applied_dims(options: Any, compiled: Graph) -> Any:
    """Recorded options fit to compile `compiled` again: an `input_shape` entry naming a symbolic dim
    the compile fixed (`"N:2"`) is dropped, since the compiled inputs carry its value and no longer
    the name; entries naming an input, or a dim still symbolic (a range), stay."""
    if not isinstance(options, Mapping) or not options.get("input_shape"):
        return options
    shapes, ranges = parse_input_shape(options["input_shape"]), parse_input_shape_ranges(options["input_shape"])
    present = {t.name for t in compiled.get_input_tensors()}
    present |= {d for t in compiled.get_input_tensors() if t.shape is not None for d in t.shape if isinstance(d, str)}
    kept = {name: dims for name, dims in shapes.items() if name in present}
    if len(kept) == len(shapes):
        return options
    options = dict(options)
    if kept:
        options["input_shape"] = format_input_shape(kept, {n: r for n, r in ranges.items() if n in kept})
    else:
        del options["input_shape"]
    return options


def select_ops(graph: Graph, ops: "Iterable[str] | None", types: "Iterable[str] | None") -> list[Op]:
    """The ops named in `ops` plus the ops of `types`, in topological order; every op when both are None."""
    if ops is None and types is None:
        return graph.toposort()
    names = [] if ops is None else require_names(ops, "explain", "ops")
    wanted_types = set() if types is None else set(require_names(types, "explain", "types"))
    missing = [n for n in names if not graph.has_op(n)]
    if missing:
        close = difflib.get_close_matches(missing[0], [op.name for op in graph.get_ops()], 3)
        hint = f" (did you mean {', '.join(map(repr, close))}?)" if close else ""
        raise XGraphError(f"explain: the compiled graph {graph.name!r} has no op {missing[0]!r}{hint}; prepare may "
                          "have folded it into a weight or removed it (see the compile report's op list)")
    present = {op.type for op in graph.get_ops()}
    absent = sorted(wanted_types - present)
    if absent:
        raise XGraphError(f"explain: the compiled graph {graph.name!r} has no op of type {absent[0]!r}; its types: "
                          f"{', '.join(sorted(present))}")
    chosen = set(names)
    return [op for op in graph.toposort() if op.name in chosen or op.type in wanted_types]


def _owner(graph: Graph, op: Op) -> tuple[str, str, str]:
    """(device, subgraph name, plugin name or "") of a compiled op."""
    child = graph.get_root_subgraph().find_child_subgraph_by_op(op)
    if child is None:
        return "", "", ""
    device = str(child.get_attr("device")) if child.has_attr("device") else ""
    runs = graph.get_attr("plugin_runs") if graph.has_attr("plugin_runs") else []
    plugin = next((r["name"] for r in runs if child.name in r.get("subgraphs", [])), "")
    return device, child.name, plugin


def device_verdicts(op: Op, options: Any, dims: DimRanges | None = None) -> list[dict[str, Any]]:
    """Each built-in candidate device's verdict on `op`, cheapest first: {"device", "accepts", "reason", "seconds"}
    (the cost model's estimate of the op alone on one instance of the device); `dims`: the compile's dim ranges
    (`DimRanges.of_graph`), which the verdicts check and the estimates size the dynamic dims with."""
    dims = dims if dims is not None else DimRanges()
    devices = get_devices()
    opts = parse_options(options, devices)
    candidates, host = candidate_devices(devices, opts)
    specs = candidates + ([host] if host is not None and host not in candidates else [])
    result = []
    for spec in specs:
        verdict = op_info(spec, opts.precision_mode, dims)(op)
        reason = "" if verdict.ok else verdict.reason
        if reason.startswith(f"{spec.name}: "):
            reason = reason[len(spec.name) + 2:]
        result.append({"device": spec.name, "accepts": bool(verdict.ok), "reason": reason,
                       "seconds": op_seconds(op, spec, dims)})
    return result


def template_findings(log: MatchLog, plugin: str, op: Op) -> list[dict[str, Any]]:
    """Per template the plugin matched with: was `op` in a full match, and the near misses touching it."""
    findings: dict[str, dict[str, Any]] = {}
    for label, template, match in log.matches:
        if label == plugin:
            entry = findings.setdefault(template, {"template": template, "matched": [], "near_misses": []})
            if any(m is op for m in match.values()):
                entry["matched"].append({name: m.name for name, m in match.items()})
    for miss in log.misses:
        if miss.label == plugin:
            entry = findings.setdefault(miss.template, {"template": miss.template, "matched": [], "near_misses": []})
            if op in miss.ops():
                entry["near_misses"].append(miss.text())
    return list(findings.values())


def explain_op(graph: Graph, log: MatchLog, op: Op, options: Any) -> dict[str, Any]:
    """The explanation of one compiled op (see the module docstring)."""
    device, subgraph, plugin = _owner(graph, op)
    dims = DimRanges.of_graph(graph)
    reason = op.get_attr("placement_reason") if op.is_annotation("placement_reason") else ""
    runs = graph.get_attr("plugin_runs") if graph.has_attr("plugin_runs") else []
    plugins = []
    for run in runs:
        declined = next((d["reason"] for d in run.get("declined", []) if op.name in d["ops"]), None)
        plugins.append({"plugin": run["name"], "device": run["device"], "took": run["name"] == plugin,
                        "declined": declined, "templates": template_findings(log, run["name"], op)})
    return {"name": op.name, "type": op.type, "device": device, "subgraph": subgraph,
            "taken_by": f"plugin {plugin}" if plugin else "placement", "reason": str(reason),
            "devices": device_verdicts(op, options, dims), "plugins": plugins,
            "assumed_dims": dims.assumed(tensor_dims(op.get_input_tensors() + op.get_output_tensors()))}


def explain(compiled_or_path: Source, ops: "Iterable[str] | str | None" = None,
            options: "Mapping[str, Any] | str | None" = None, plugin_path: "list[str] | str | None" = None, *,
            types: "Iterable[str] | str | None" = None) -> list[dict[str, Any]]:
    """Per op: who took it and why, each built-in device's verdict, each plugin template's match or near misses.

    `ops` names ops, `types` adds every op of those types; neither means every op.
    """
    compiled, log = compile_with_log(compiled_or_path, options, plugin_path)
    used = options if options is not None else recorded_options(compiled_or_path)
    return [explain_op(compiled, log, op, used) for op in select_ops(compiled, ops, types)]


def explain_text(entries: list[dict[str, Any]]) -> str:
    """The explanations as indented text, one block per op."""
    blocks = []
    for e in entries:
        lines = [f"{e['name']} ({e['type']}): {e['device'] or 'not placed'}, subgraph {e['subgraph']}, "
                 f"taken by {'the built-in placement' if e['taken_by'] == 'placement' else e['taken_by']}"]
        if e["taken_by"] == "placement":
            lines.append(f"  why: {e['reason'] or 'the cheapest device that accepts it'}")
        if e.get("assumed_dims"):
            lines.append(f"  estimated at: {assumed_text(e['assumed_dims'])}")
        lines.append("  devices, cheapest first:")
        for v in e["devices"]:
            mark = " (chosen)" if v["device"] == e["device"] and e["taken_by"] == "placement" else ""
            cost = f", {v['seconds'] * 1e3:.3g} ms" if v["accepts"] and "seconds" in v else ""
            lines.append(f"    {v['device']}: {'accepts' + cost if v['accepts'] else v['reason']}{mark}")
        for p in e["plugins"]:
            verdict = "took it" if p["took"] else (f"declined it: {p['declined']}" if p.get("declined")
                                                    else "did not take it")
            lines.append(f"  plugin {p['plugin']} (device {p['device']}): {verdict}")
            if not p["templates"]:
                lines.append("    matched with no template")
            for t in p["templates"]:
                if t["matched"]:
                    roles = ", ".join(f"{k}={v}" for k, v in t["matched"][0].items())
                    lines.append(f"    template {t['template']}: in a full match ({roles})")
                elif t["near_misses"]:
                    for text in t["near_misses"][:SHOWN_MISSES]:
                        lines.append(f"    template {t['template']}: partial match: {text}")
                    if len(t["near_misses"]) > SHOWN_MISSES:
                        lines.append(f"    template {t['template']}: {len(t['near_misses']) - SHOWN_MISSES} more "
                                     "partial matches")
                else:
                    lines.append(f"    template {t['template']}: no match touches this op")
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


__all__ = ["compile_with_log", "device_verdicts", "explain", "explain_op", "explain_text", "recorded_options",
           "select_ops", "template_findings"]
