"""Placement by cost (options ``"placement": "latency"`` or ``"throughput"``).

First fit asks which device *can* run an op; this asks what a split *costs*. The units are
those first fit works on, with the same op-info verdicts: a device that refuses a unit is
not offered to the solver, and its reason is kept. Plugin subgraphs stay where their plugin
put them (their copies still count), except a plugin's preferences (``claims = "prefer"``):
each is one unit, kept whole, that the solver may leave on the plugin's device or give to a
built-in device that accepts all its ops. `xgraph.compiler.cost_model` states the problem,
`xgraph.partition.solve_placement` solves it, and this module reads the answer back:

- each unit's device and instance (a card device's instance is its card: ``AICORE:1``);
- a reason for every op placed elsewhere than first fit would have put it, in costs
  ("by latency: CPU, not AICORE: AICORE would save 0.21 ms but its copies cost 0.48 ms");
- the estimate of the chosen split and of first fit's, per instance (busy time, memory of
  capacity, copies and bytes) and whole (latency, throughput), which the report shows.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from xgraph.compiler.cost_model import NO_RANGES, CostModel, Unit, build_problem, card_link, solver_device
from xgraph.ir.dim_ranges import DimRanges, tensor_dims
from xgraph.devices import DeviceSpec, memory_of
from xgraph.plugins.costs import ESTIMATE_ATTR, PREFERENCE_ATTR

if TYPE_CHECKING:
    from xgraph.compiler.cost_table import CostTable
    from xgraph.ir import Graph, Subgraph

#: Seconds the solver may take in a compile before it returns its best split with a bound.
TIME_LIMIT = 10.0


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g} ms"


def plugin_units(graph: "Graph", devices: Mapping[str, DeviceSpec],
                 offer: "Callable[[Subgraph], list[DeviceSpec] | None] | None" = None) -> list[Unit]:
    """A unit per plugin subgraph on its device (the registered spec, else one without a library): fixed, or,
    for a preference (attr "plugin_preference") when `offer` gives the built-in devices that may take it
    instead, free to go there whole."""
    units = []
    for child in graph.get_root_subgraph().get_children():
        if not child.has_attr("device"):
            continue
        name = str(child.get_attr("device"))
        spec = devices.get(name) or DeviceSpec(name, memory=memory_of(child, devices), source="<plugin device>")
        if spec.ops.rules:  # a built-in device named by the plugin: its memory, but no choice
            spec = DeviceSpec(name, memory=spec.memory, instances=1, source=spec.source, cost=spec.cost)
        estimate = child.get_attr(ESTIMATE_ATTR) if child.has_attr(ESTIMATE_ATTR) else None
        plugin = str(child.get_attr("plugin")) if child.has_attr("plugin") else None
        others = offer(child) if offer is not None and child.has_attr(PREFERENCE_ATTR) else None
        units.append(Unit(child, sorted(child.get_ops(), key=lambda op: op.name), [spec, *(others or ())],
                          fixed=others is None,
                          estimate=float(estimate) if isinstance(estimate, (int, float)) else None, plugin=plugin))
    return units


def _neighbour_memory(model: CostModel, assignment: Mapping[int, tuple[str, int]], index: int) -> list[tuple[float, Any]]:
    """(transfer, where the neighbour's tensors live) for each edge of unit `index`."""
    return [(transfer, _memory(model, assignment[other])) for transfer, other in model.neighbours(index)]


def _memory(model: CostModel, place: tuple[str, int]) -> Any:
    device, instance = place
    return "host" if model.solver_devices.get(device, {}).get("host") else (device, instance)


def _why(model: CostModel, assignment: Mapping[int, tuple[str, int]], index: int, first: str, objective: str) -> str:
    """Why unit `index` left the device first fit gave it (a declined plugin preference: the plugin's device), in
    compute and copy time."""
    unit = model.units[index]
    why = _why_not(model, assignment, index, first, objective)
    if unit.plugin is not None and not unit.fixed and why:  # "not OPENVINO" reads "not plugin 'openvino'"
        why = why.replace(f", not {first}:", f", not plugin {unit.plugin!r}:", 1)
    return why


def _why_not(model: CostModel, assignment: Mapping[int, tuple[str, int]], index: int, first: str, objective: str) -> str:
    chosen = assignment[index]
    costs = model.choices[index]
    solver_first = next((solver_device(s) for s in model.units[index].allowed if s.name == first), None)
    if solver_first is None:
        return ""
    if solver_first == chosen[0]:  # the same card, whose cheapest device for the unit may not be first fit's
        real = model.device_of(index, chosen[0])
        return "" if real == first else f"by {objective}: {real}, not {first}: the card's cheaper device for it"
    here, there = chosen, (solver_first, 0)  # first fit knows one instance of each device
    saving = costs[chosen[0]][0] - costs[solver_first][0]
    copies_here = sum(t for t, memory in _neighbour_memory(model, assignment, index) if memory != _memory(model, here))
    copies_there = sum(t for t, memory in _neighbour_memory(model, assignment, index) if memory != _memory(model, there))
    device = model.device_of(index, chosen[0])
    if objective == "throughput":
        return f"by throughput: {device}:{chosen[1]}, not {first}: spreads the load over the instances"
    if saving >= 0:
        return (f"by {objective}: {device}, not {first}: {first} would save {_ms(saving)} but its copies cost "
                f"{_ms(copies_there - copies_here)}")
    return f"by {objective}: {device}, not {first}: {device} is {_ms(-saving)} faster"


def _instance_label(model: CostModel, index: int, place: tuple[str, int]) -> tuple[str, int]:
    return model.device_of(index, place[0]), place[1]


def _indexes(problem: Any, assignment: Mapping[Any, tuple[str, int]]) -> list[int]:
    index = {instance: k for k, instance in enumerate(problem.instances)}
    return [index[tuple(assignment[i])] for i in problem.ids]


def evaluate_placement(problem: Any, assignment: Mapping[Any, tuple[str, int]], objective: str) -> float:
    """The objective's value of `assignment` ({node id: (device, instance)}) for `problem`."""
    from xgraph.partition.placement_objectives import evaluate
    return evaluate(problem, _indexes(problem, assignment), objective)


def is_feasible(problem: Any, assignment: Mapping[Any, tuple[str, int]]) -> bool:
    """True when `assignment` keeps every memory capacity, colocation and supported device of `problem`."""
    from xgraph.partition.placement_objectives import placement_violations
    return not placement_violations(problem, _indexes(problem, assignment))


def estimate(model: CostModel, assignment: Mapping[int, tuple[str, int]]) -> dict[str, Any]:
    """The split's estimate: whole latency and throughput, and per instance busy time, memory and copies."""
    problem = model.problem
    per: dict[str, dict[str, Any]] = {}
    for node in model.nodes:
        i = node["id"]
        if i in model.io_nodes:
            continue
        device, instance = _instance_label(model, i, assignment[i])
        key = f"{device}:{instance}"
        entry = per.setdefault(key, {"busy_seconds": 0.0, "memory": 0, "capacity": None, "copies": 0, "copy_seconds": 0.0})
        entry["busy_seconds"] += node["cost"][assignment[i][0]]
        entry["memory"] += node.get("memory", 0)
        entry["capacity"] = model.solver_devices.get(assignment[i][0], {}).get("memory")
    for edge in model.edges:
        src, dst = assignment[edge["src"]], assignment[edge["dst"]]
        if _memory(model, src) != _memory(model, dst):
            for place, index in ((src, edge["src"]), (dst, edge["dst"])):
                if index in model.io_nodes:
                    continue
                device, instance = _instance_label(model, index, place)
                entry = per[f"{device}:{instance}"]
                entry["copies"] += 1
                entry["copy_seconds"] += edge["transfer"]
    compute = sum(entry["busy_seconds"] for entry in per.values())
    crossing = [edge for edge in model.edges
                if _memory(model, assignment[edge["src"]]) != _memory(model, assignment[edge["dst"]])]
    copies = sum(edge["transfer"] for edge in crossing)
    between = sum(edge["transfer"] for edge in crossing
                  if edge["src"] not in model.io_nodes and edge["dst"] not in model.io_nodes)
    return {"latency_seconds": evaluate_placement(problem, assignment, "latency"),
            "throughput_seconds": evaluate_placement(problem, assignment, "throughput"),
            "copy_share": copies / (compute + copies) if compute + copies > 0 else 0.0,
            # copies between subgraphs only: what a different split could save (graph inputs and outputs
            # cross to an accelerator whatever the split)
            "crossing_share": between / (compute + copies) if compute + copies > 0 else 0.0,
            "instances": dict(sorted(per.items()))}


def place_by_cost(graph: "Graph", units: Sequence[Unit], first_fit: Sequence[str], objective: str,
                  devices: Mapping[str, DeviceSpec], time_limit: float = TIME_LIMIT, table: "CostTable | None" = None,
                  dims: DimRanges = NO_RANGES) -> tuple[list[tuple[str, int]], list[str], dict[str, Any]]:
    """(device and instance per unit, a cost reason per unit ("" where first fit agrees), the estimate).

    `units` are in dependency order, plugin units included (fixed, or free for a preference);
    `first_fit` is first fit's device per unit, for the reasons and the comparison the report
    shows; `table`: measured costs (the "costs" option), roofline where it has none; `dims`: the
    compile's dim ranges, which size the dynamic dims.
    """
    from xgraph.partition import solve_placement
    model = _model(graph, units, devices, table=table, dims=dims)
    solution = solve_placement(model.problem, objective=objective, time_limit=time_limit)
    chosen = dict(solution.assignment)
    first = {i: _first_place(model, i, device) for i, device in enumerate(first_fit)}
    first.update({i: chosen[i] for i in model.io_nodes})
    kept_first_fit = is_feasible(model.problem, first) and \
        evaluate_placement(model.problem, first, objective) < solution.objective
    if kept_first_fit:  # the solver's search space (e.g. contiguous calls for latency) missed first fit's split
        chosen = first
    places = [_instance_label(model, i, chosen[i]) for i in range(len(units))]
    reasons = [_why(model, chosen, i, first_fit[i], objective) for i in range(len(units))]
    report = {"objective": objective, "solver": {"objective": solution.objective, "bound": solution.bound,
                                                 "optimal": solution.optimal, "seconds": solution.seconds,
                                                 "kept_first_fit": kept_first_fit},
              "chosen": estimate(model, chosen), "first_fit": estimate(model, first),
              **_sources(model, chosen, table)}
    return places, reasons, report


def _sources(model: CostModel, chosen: Mapping[int, tuple[str, int]], table: "CostTable | None") -> dict[str, Any]:
    """Where each unit's cost on its chosen device came from, and how many units per source."""
    units = [{"unit": unit.ops[0].name if unit.ops else str(i), "ops": len(unit.ops),
              "device": model.device_of(i, chosen[i][0]), "source": model.sources[i][chosen[i][0]]}
             for i, unit in enumerate(model.units)]
    counts: dict[str, int] = {}
    for entry in units:
        counts[entry["source"]] = counts.get(entry["source"], 0) + 1
    return {"costs": table.path if table is not None else None, "sources": dict(sorted(counts.items())),
            "unit_sources": units}


def compiled_estimate(graph: "Graph", devices: Mapping[str, DeviceSpec]) -> dict[str, Any]:
    """The estimate of a compiled graph's split as it stands (each device subgraph one fixed unit), dynamic dims
    at the sizes its recorded ranges give (`DimRanges.of_graph`)."""
    units, assignment = [], {}
    for i, child in enumerate(graph.get_root_subgraph().toposort_child_subgraph()):
        name = str(child.get_attr("device")) if child.has_attr("device") else "CPU"
        spec = devices.get(name) or DeviceSpec(name, memory=memory_of(child, devices), source="<plugin device>")
        estimate_attr = child.get_attr(ESTIMATE_ATTR) if child.has_attr(ESTIMATE_ATTR) else None
        units.append(Unit(child, list(child.get_ops()), [spec], fixed=True,
                          estimate=float(estimate_attr) if isinstance(estimate_attr, (int, float)) else None,
                          plugin=str(child.get_attr("plugin")) if child.has_attr("plugin") else None))
        instance = child.get_attr("instance") if child.has_attr("instance") else 0
        valid = isinstance(instance, int) and not isinstance(instance, bool) and 0 <= instance < 4096
        assignment[i] = (solver_device(spec), instance if valid else 0)
    if not units:
        return {"latency_seconds": 0.0, "throughput_seconds": 0.0, "instances": {}, "copy_share": 0.0,
                "crossing_share": 0.0}
    needed: dict[str, int] = {}
    for device, instance in assignment.values():
        needed[device] = max(needed.get(device, 0), instance + 1)
    model = _model(graph, units, devices, needed, dims=DimRanges.of_graph(graph))
    assignment.update({i: (host_spec(devices).name, 0) for i in model.io_nodes})
    return estimate(model, assignment)


def host_spec(devices: Mapping[str, DeviceSpec]) -> DeviceSpec:
    """The host device (memory "host", cheapest first), or a bare one when the table has none."""
    hosts = sorted((s for s in devices.values() if s.is_host), key=lambda s: (s.cost_rank, s.name))
    return hosts[0] if hosts else DeviceSpec("CPU", memory="host", source="<host>")


def _model(graph: "Graph", units: Sequence[Unit], devices: Mapping[str, DeviceSpec],
           min_instances: "Mapping[str, int] | None" = None, table: "CostTable | None" = None,
           dims: DimRanges = NO_RANGES) -> CostModel:
    return build_problem(units, card_link(devices), host_spec(devices), graph.get_input_tensors(),
                         graph.get_output_tensors(), min_instances, table, dims)


def _first_place(model: CostModel, index: int, device: str) -> tuple[str, int]:
    """Where first fit's `device` sits for the solver (a card device: the card, which runs the unit on its cheapest
    device that accepts it, measured or not)."""
    return next((solver_device(spec), 0) for spec in model.units[index].allowed if spec.name == device)


#: First fit's share of time lost to copies above which the summary suggests a cost placement.
COPY_SHARE_WARNING = 0.2


def placement_cost(graph: "Graph", devices: Mapping[str, DeviceSpec], placement: str) -> dict[str, Any]:
    """The report's "cost" entry: the chosen split's estimate (and, for a cost placement, first fit's and the
    solver's numbers), with a note when first fit loses more than `COPY_SHARE_WARNING` of its time to copies,
    and, when the graph has dynamic dims, "assumed_dims": the size the estimates take for each
    (`DimRanges.assumed`: {symbol: {"size", "range"}})."""
    stored = graph.get_attr("placement_estimate") if graph.has_attr("placement_estimate") else None
    if isinstance(stored, dict) and "chosen" in stored:
        cost = dict(stored)
    else:
        cost = {"objective": "first_fit", "chosen": compiled_estimate(graph, devices)}
    cost["placement"] = placement
    assumed = DimRanges.of_graph(graph).assumed(tensor_dims(graph.get_tensors()))
    if assumed:
        cost["assumed_dims"] = assumed
    share = cost["chosen"].get("crossing_share", 0.0)
    if placement == "first_fit" and share > COPY_SHARE_WARNING:
        cost["note"] = (f"first fit loses {share:.0%} of its estimated time to copies between its subgraphs; "
                        '"placement": "latency" (or "throughput") lets the cost model decide')
    return cost


__all__ = ["COPY_SHARE_WARNING", "TIME_LIMIT", "compiled_estimate", "estimate", "placement_cost", "place_by_cost", "plugin_units"]
