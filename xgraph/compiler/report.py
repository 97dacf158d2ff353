"""`xgraph.report`: what a compile decided, as plain JSON-ready data (`xcompile --report out.json`).

Keys: "ops" (name, type, device, subgraph, reason, kernel), "subgraphs" (name, device, runner,
ops, inputs, outputs), "devices" ({device: {"subgraphs", "ops"}}, cheapest device first),
"crossings" (number of host/device copies) with "crossing_tensors", "fallbacks" (ops that
did not get the cheapest device, grouped by device and reason, largest group first),
"reference_ops" (ops run by the ONNX reference evaluator), "unrunnable_ops", "options",
"prepare" and "plugins": one entry per plugin of the chain, in chain order, including those
that took nothing: "name", "device", "runner", "memory", "ops" (how many it took),
"subgraphs" (their names), "seconds" (time in the plugin), "templates" (each template it
matched with: "name", "calls", "matches"), "options" (its plugin options), "source" and
"declined" (each subgraph its compile declined: "subgraph", "ops", "reason"; the ops went
back to placement, and their reason starts with "plugin 'name' declined: <reason>").
A model with dynamic inputs left also has "dynamic" (`dynamic_summary`: the inputs, the ranges
of their dims, the share on AI Core and the one-line summary `xcompile` prints).
A model compiled with gears also has "gears" (per gear: "name", "input_shapes", "devices");
everything else describes gear 0.
"""
from __future__ import annotations

import json
from typing import Any, Iterable

from xgraph.errors import PartitionError
from xgraph.ir.arguments import require_graph
from xgraph.ir import Graph, Op
from xgraph.ir.files import check_target, write_text
from xgraph.compiler.dynamic_summary import dynamic_summary
from xgraph.compiler.qdq_units import QDQ_TYPES, qdq_units, unit_label
from xgraph.compiler.placement import count_copies, count_crossings
from xgraph.compiler.cost_placement import placement_cost
from xgraph.devices import get_devices
from xgraph.devices.settings import compiled_devices
from xgraph.registries import resolve


def _annotation(op: Op, key: str) -> Any:
    return op.get_attr(key) if op.has_attr(key) and op.is_annotation(key) else None


def _attr(graph: Graph, key: str, default: Any) -> Any:
    return graph.get_attr(key) if graph.has_attr(key) else default


def _runner_attr(subgraph) -> dict[str, str]:
    runner = subgraph.get_attr("runner") if subgraph.has_attr("runner") else {}
    if not isinstance(runner, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in runner.items()):
        raise PartitionError(f"subgraph {subgraph.name!r}: its 'runner' attr {runner!r:.80} is not a dict of mode -> "
                             "runner name; the compiled graph is damaged, compile the model again")
    return dict(runner)


def _options_attr(graph_name: str, options: Any) -> Any:
    if not isinstance(options, str):
        return options
    try:
        return json.loads(options)
    except json.JSONDecodeError as e:
        raise PartitionError(f"graph {graph_name!r}: its 'compile_options' attr is not JSON ({e}); the compiled "
                             "graph is damaged, compile the model again") from None


def _placement(graph_name: str, options: Any) -> str:
    value = _options_attr(graph_name, options)
    placement = value.get("placement", "first_fit") if isinstance(value, dict) else "first_fit"
    return placement if isinstance(placement, str) else "first_fit"


def report(compiled: Graph) -> dict[str, Any]:
    """The placement report of a compiled graph (see the module docstring for the keys)."""
    require_graph(compiled, "xgraph.report", "compiled", compiled=True)
    root = compiled.get_root_subgraph()
    if root.is_leaf and compiled.get_op_num():
        raise PartitionError(f"graph {compiled.name!r} is not compiled (its root has no device subgraphs); "
                             "run xgraph.compile first")
    options = _attr(compiled, "compile_options", "{}")
    devices = compiled_devices(compiled, get_devices())  # the instances and queues the compile used
    children = root.toposort_child_subgraph()
    child_of = {op: child for child in children for op in child.get_ops()}
    ops = []
    for op in compiled.toposort():
        child = child_of[op]
        ops.append({"name": op.name, "type": op.type,
                    "device": str(child.get_attr("device")) if child.has_attr("device") else "",
                    "subgraph": child.name, "reason": _annotation(op, "placement_reason") or "",
                    "kernel": _annotation(op, "kernel") or ""})
    plugin_runs = _attr(compiled, "plugin_runs", [])
    subgraphs = [{"name": c.name, "device": str(c.get_attr("device")) if c.has_attr("device") else "",
                  "runner": _runner_attr(c),
                  "ops": [op.name for op in c.toposort()],
                  "inputs": [t.name for t in c.get_input_tensors()],
                  "outputs": [t.name for t in c.get_output_tensors()]} for c in children]
    rank = {name: i for i, name in enumerate(devices)}
    per_device: dict[str, dict[str, int]] = {}
    for sg in sorted(subgraphs, key=lambda s: (rank.get(s["device"], len(rank)), s["device"])):
        entry = per_device.setdefault(sg["device"], {"subgraphs": 0, "ops": 0})
        entry["subgraphs"] += 1
        entry["ops"] += len(sg["ops"])
    crossings = count_crossings(compiled, devices)
    result = {
        "ops": ops,
        "subgraphs": subgraphs,
        "devices": per_device,
        "crossings": len(crossings),
        "crossing_tensors": crossings,
        "copies_per_run": count_copies(compiled, devices),
        "fallbacks": _fallbacks(ops),
        "reference_ops": [{"name": o["name"], "type": o["type"], "device": o["device"]}
                          for o in ops if o["kernel"] == "reference"],
        "unrunnable_ops": [{"name": o["name"], "type": o["type"], "device": o["device"]}
                           for o in ops if o["kernel"] == "none"],
        "options": _options_attr(compiled.name, options),
        "prepare": _attr(compiled, "prepare_summary", {}),
        "plugins": _plugins(plugin_runs, subgraphs),
        "warnings": runner_warnings(children) + [w for run in (plugin_runs if isinstance(plugin_runs, list) else [])
                                                 if isinstance(run, dict) for w in run.get("warnings", [])],
        "cost": placement_cost(compiled, devices, _placement(compiled.name, options)),
    }
    dynamic = dynamic_summary(compiled, ops, result["prepare"])
    if dynamic is not None:  # only models with dynamic inputs left carry the key
        result["dynamic"] = dynamic
    units = int8_units(compiled, child_of)
    if units:  # only quantized models carry the key
        result["int8_units"] = units
    if compiled.get_gears():  # only models compiled with gears: the rest of the report is gear 0's
        result["gears"] = [{"name": g.name, "input_shapes": {k: list(v) for k, v in g.input_shapes.items()},
                            "devices": per_device if g.graph is compiled else report(g.graph)["devices"]}
                           for g in compiled.get_gears()]
    return result


def int8_units(compiled: Graph, child_of: dict) -> list[dict[str, Any]]:
    """One entry per QDQ unit: {"op", "label" ("Conv (int8, per-channel)"), "device", "ops"}."""
    out = []
    for unit in qdq_units(compiled):
        core = [op for op in unit if op.type not in QDQ_TYPES]
        if not core:
            continue
        labels = [unit_label(op) or op.type for op in core]
        devices = sorted({str(child_of[op].get_attr("device")) for op in unit if child_of[op].has_attr("device")})
        out.append({"op": core[0].name, "label": " + ".join(labels), "device": ",".join(devices),
                    "ops": [op.name for op in unit]})
    return out


def runner_warnings(children, registered: "Iterable[str] | None" = None) -> list[str]:
    """One line per device subgraph that cannot run yet: its runner map has no "run" entry (a
    compile-only plugin), or names a runner this process has not registered, so `create_runner`
    and the graph runner will refuse it. `registered`: the runner names (the active registries')."""
    names = set(resolve(None).runners) if registered is None else set(registered)
    warnings = []
    for child in children:
        runners = _runner_attr(child)
        plugin = child.get_attr("plugin") if child.has_attr("plugin") else None
        who = f"plugin {plugin!r}" if plugin else f"device {child.get_attr('device') if child.has_attr('device') else '?'}"
        if "run" not in runners:
            warnings.append(f"subgraph {child.name!r} runs nowhere yet: {who} registered no runner for mode 'run'")
        elif runners["run"] not in names:
            warnings.append(f"subgraph {child.name!r} runs nowhere yet: {who} names runner {runners['run']!r} for "
                            f"mode 'run', which is not registered (register it with xgraph.register_runner, or "
                            f"import the plugin that does, before running)")
    return warnings


def _plugins(runs: Any, subgraphs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per plugin run, with its op count taken from the compiled subgraphs (older files lack it)."""
    ops_of = {sg["name"]: len(sg["ops"]) for sg in subgraphs}
    result = []
    for run in runs if isinstance(runs, list) else []:
        if not isinstance(run, dict):
            continue
        names = [n for n in run.get("subgraphs", []) if isinstance(n, str)]
        result.append({"name": run.get("name", ""), "device": run.get("device", ""), "runner": run.get("runner", {}),
                       "memory": run.get("memory", "device"), "ops": sum(ops_of.get(n, 0) for n in names),
                       "subgraphs": names, "seconds": run.get("seconds"), "templates": list(run.get("templates", [])),
                       "options": run.get("options", {}), "source": run.get("source", ""),
                       "declined": [d for d in run.get("declined", []) if isinstance(d, dict)]})
    return result


def _fallbacks(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Ops with a reason, grouped by (device, reason), largest group first (ties: first seen)."""
    groups: dict[tuple[str, str], list[str]] = {}
    for o in ops:
        if o["reason"]:
            groups.setdefault((o["device"], o["reason"]), []).append(o["name"])
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
    return [{"device": device, "reason": reason, "count": len(names), "ops": names}
            for (device, reason), names in ordered]


def write_report(compiled: Graph, path: str) -> None:
    """Write `report(compiled)` as JSON to `path` (atomically: a failure leaves an existing file as it was)."""
    check_target(path, "report")
    write_text(path, json.dumps(report(compiled), indent=2, default=str) + "\n", "report")


__all__ = ["report", "write_report"]
