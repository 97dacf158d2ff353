"""Text views: the subgraph tree (`xgraph inspect`, also as JSON) and every op (`xgraph dump`).

Both are stable across runs (topological order, sorted attributes, no ids), so two dumps
of the same model are identical and two compiles can be compared with `diff`.

A graph compiled with a gear option has gears: for it `inspect` adds a "gears" key (JSON) and a
"gears:" block (text) ahead of gear 0's subgraph tree, per gear its input shapes and subgraphs
per device (`gear_facts`, `gear_lines`; `xcompile` prints the same block after its summary).
"""
from __future__ import annotations

from typing import Any

from xgraph.ir import Graph, Subgraph
from xgraph.view.describe import (annotation, attribute_texts, crossing_copies, estimated_time_us, placement, safe,
                                  subgraph_device, subgraph_runner, tensor_facts, tensor_text)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def subgraph_facts(subgraph: Subgraph) -> dict[str, Any]:
    """One subgraph and its children (topological order) as JSON-ready data."""
    return {
        "name": safe(subgraph.name),
        "depth": subgraph.depth,
        "device": subgraph_device(subgraph),
        "ops": subgraph.get_op_num(),
        "runner": subgraph_runner(subgraph),
        "estimated_time_us": estimated_time_us(subgraph),
        "inputs": [tensor_facts(t) for t in subgraph.get_input_tensors()],
        "outputs": [tensor_facts(t) for t in subgraph.get_output_tensors()],
        "children": [subgraph_facts(c) for c in subgraph.toposort_child_subgraph()],
    }


def inspect_data(graph: Graph) -> dict[str, Any]:
    """The subgraph tree of `graph`: model facts, per-device totals, depth-1 subgraphs with their children.

    Keys: "model", "ops", "compiled", "inputs", "outputs", "crossings", "devices"
    ({device: {"subgraphs", "ops", "estimated_time_us"}}, in order of first appearance) and
    "subgraphs" (each: "name", "depth", "device", "ops", "runner", "estimated_time_us",
    "inputs", "outputs", "children"). Tensors are {"name", "dtype", "shape"}. A graph compiled
    with gears also has "gears" (`gear_facts`), and the rest is gear 0's.
    """
    root = graph.get_root_subgraph()
    subgraphs = [subgraph_facts(c) for c in root.toposort_child_subgraph()]
    devices: dict[str, dict[str, Any]] = {}
    for sg in subgraphs:
        entry = devices.setdefault(sg["device"], {"subgraphs": 0, "ops": 0, "estimated_time_us": None})
        entry["subgraphs"] += 1
        entry["ops"] += sg["ops"]
        if sg["estimated_time_us"] is not None:
            entry["estimated_time_us"] = (entry["estimated_time_us"] or 0.0) + sg["estimated_time_us"]
    data = {
        "model": safe(graph.name),
        "ops": graph.get_op_num(),
        "compiled": bool(subgraphs),
        "inputs": [tensor_facts(t) for t in graph.get_input_tensors()],
        "outputs": [tensor_facts(t) for t in graph.get_output_tensors()],
        "crossings": len(crossing_copies(graph)),
        "devices": devices,
        "subgraphs": subgraphs,
    }
    if graph.get_gears():  # only compiled with a gear option: the rest of the data is gear 0's
        data["gears"] = gear_facts(graph)
    return data


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
        per_device = ", ".join(f"{device or '(no device)'} {_plural(e['subgraphs'], 'subgraph')} "
                               f"{_plural(e['ops'], 'op')}" for device, e in f["devices"].items())
        lines.append(f"  {f['name']:<{width}}  {shapes}")
        lines.append(f"  {'':<{width}}  {f['ops']} ops, {f['subgraphs']} subgraphs: {per_device}")
    lines.append(f"  (the inputs, outputs and subgraphs below are {facts[0]['name']}'s)")
    return lines


def _tensor_line(facts: dict[str, Any]) -> str:
    shape = "[?...]" if facts["shape"] is None else \
        "[" + ",".join("?" if d is None else str(d) for d in facts["shape"]) + "]"
    return f"{facts['name']} {facts['dtype'] or '?'}{shape}"


def _time(us: float | None) -> str:
    return "" if us is None else f"  est. {us:.1f} us"


def _subgraph_lines(sg: dict[str, Any], indent: str) -> list[str]:
    runner = " ".join(f"{mode}={name}" for mode, name in sg["runner"].items()) or "-"
    lines = [f"{indent}{sg['name']}  {sg['device'] or '(no device)'}  {_plural(sg['ops'], 'op')}  "
             f"runner: {runner}{_time(sg['estimated_time_us'])}"]
    lines += [f"{indent}    in   {_tensor_line(t)}" for t in sg["inputs"]]
    lines += [f"{indent}    out  {_tensor_line(t)}" for t in sg["outputs"]]
    for child in sg["children"]:
        lines += _subgraph_lines(child, indent + "  ")
    return lines


def inspect_text(graph: Graph) -> str:
    """The subgraph tree as text: one block per subgraph (device, ops, runner, time, inputs, outputs)."""
    data = inspect_data(graph)
    head = f"{data['model']}: {_plural(data['ops'], 'op')}"
    if data["compiled"]:
        head += f", {_plural(len(data['subgraphs']), 'device subgraph')}, " \
                f"{_plural(data['crossings'], 'host/device crossing')}"
    else:
        head += ", not compiled (no device subgraphs; compile it with xcompile)"
    lines = [head] + (gear_lines(graph, data["gears"]) + [""] if "gears" in data else [])
    lines += [f"  input   {_tensor_line(t)}" for t in data["inputs"]]
    lines += [f"  output  {_tensor_line(t)}" for t in data["outputs"]]
    if data["devices"]:
        lines += ["", "devices:"]
        width = max(len(d or "(no device)") for d in data["devices"])
        for device, entry in data["devices"].items():
            lines.append(f"  {(device or '(no device)'):<{width}}  {_plural(entry['subgraphs'], 'subgraph')}  "
                         f"{_plural(entry['ops'], 'op')}{_time(entry['estimated_time_us'])}")
        lines += ["", "subgraphs (topological order):"]
        for sg in data["subgraphs"]:
            lines += _subgraph_lines(sg, "  ")
    return "\n".join(lines) + "\n"


def dump_text(graph: Graph) -> str:
    """Every op in topological order: type, device, subgraph, reason, inputs, outputs, attributes."""
    where = placement(graph)
    lines = [f"# {safe(graph.name)}: {_plural(graph.get_op_num(), 'op')}"]
    lines += [f"input  {tensor_text(t)}" for t in graph.get_input_tensors()]
    lines += [f"output {tensor_text(t)}" for t in graph.get_output_tensors()]
    for op in graph.toposort():
        device, subgraph = where[op]
        kind = f"{op.domain}.{op.type}" if op.domain else op.type
        placed = f"  device: {device or '-'}  subgraph: {safe(subgraph) or '-'}"
        kernel = annotation(op, "kernel")
        lines += ["", f"op {safe(op.name)}: {safe(kind)}", placed + (f"  kernel: {kernel}" if kernel else ""),
                  f"  reason: {annotation(op, 'placement_reason') or '-'}"]
        lines += [f"  in:   {tensor_text(t) if t is not None else '(omitted)'}" for t in op.get_input_tensors()]
        lines += [f"  out:  {tensor_text(t)}" for t in op.get_output_tensors()]
        lines += [f"  attr: {name} = {value}" for name, value in attribute_texts(op)]
    return "\n".join(lines) + "\n"


__all__ = ["dump_text", "gear_facts", "gear_lines", "inspect_data", "inspect_text", "subgraph_facts"]
