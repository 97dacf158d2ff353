"""The gears of a compiled graph as `xgraph inspect` shows them: per gear, input shapes and subgraphs per device.

Only graphs compiled with a gear option have gears; for them `inspect` adds a "gears" key
(JSON) and a "gears:" block (text) ahead of gear 0's subgraph tree.
"""
from __future__ import annotations

from typing import Any

from xgraph.ir import Graph
from xgraph.view.describe import subgraph_device, tensor_facts


def gear_facts(graph: Graph) -> list[dict[str, Any]]:
    """[{"name", "inputs": [tensor facts], "ops", "subgraphs", "devices": {device: {"subgraphs", "ops"}}}] per gear."""
    facts = []
    for gear in graph.get_gears():
        devices: dict[str, dict[str, int]] = {}
        children = gear.graph.get_root_subgraph().toposort_child_subgraph()
        for sg in children:
            entry = devices.setdefault(subgraph_device(sg), {"subgraphs": 0, "ops": 0})
            entry["subgraphs"] += 1
            entry["ops"] += sg.get_op_num()
        facts.append({"name": gear.name, "inputs": [tensor_facts(t) for t in gear.graph.get_input_tensors()],
                      "ops": gear.graph.get_op_num(), "subgraphs": len(children), "devices": devices})
    return facts


def gear_lines(graph: Graph, facts: list[dict[str, Any]]) -> list[str]:
    """The "gears:" block of `xgraph inspect`: one line per gear, then its subgraphs per device."""
    sharing = graph.get_attr("gear_weights") if graph.has_attr("gear_weights") else None
    shared = f"; weights stored once, {sharing['own']} folded constant(s) differ between gears" if sharing else ""
    lines = ["", f"gears ({len(facts)}; the runtime picks the gear equal to the input shapes{shared}):"]
    width = max(len(f["name"]) for f in facts)
    for f in facts:
        shapes = "  ".join(f"{t['name']}:{','.join(str(d) for d in t['shape'] or ())}" for t in f["inputs"])
        per_device = ", ".join(f"{device or '(no device)'} {e['subgraphs']} subgraph{'s' * (e['subgraphs'] != 1)} "
                               f"{e['ops']} op{'s' * (e['ops'] != 1)}" for device, e in f["devices"].items())
        lines.append(f"  {f['name']:<{width}}  {shapes}")
        lines.append(f"  {'':<{width}}  {f['ops']} ops, {f['subgraphs']} subgraphs: {per_device}")
    lines.append(f"  (the inputs, outputs and subgraphs below are {facts[0]['name']}'s)")
    return lines


__all__ = ["gear_facts", "gear_lines"]
