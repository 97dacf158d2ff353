"""Host/device memory around placement: small islands, no ping-pong, and the copies a run performs.

Placement (`placement.py`) first fits each op to the cheapest device that accepts it; the
functions here then look at memory: `demote_small_islands` sends device islands smaller than
min_subgraph_ops to the host only when that lowers the copies, `promote_host_islands` moves
host islands back to device memory when that lowers them, and `count_crossings` /
`count_copies` say what the graph runner will copy per run (between the host and each card,
and between cards) (a property test checks that
they are exact). Graph inputs and outputs live in host memory. The functions that decide read
and replace placement's `choice`: unit -> (device, the reason of each op, in `unit.ops` order),
a tuple that units may share, so it is replaced, never changed.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

from xgraph.devices import DeviceSpec, memory_of
from xgraph.devices.instances import HOST, copy_direction, residences
from xgraph.partition.merge import group_children

if TYPE_CHECKING:
    from xgraph.compiler.verdicts import PlacementUnit
    from xgraph.ir import Graph, Op, Tensor


def _memory(device: str, devices: Mapping[str, DeviceSpec]) -> str:
    spec = devices.get(device)
    return "device" if spec is not None and not spec.is_host else "host"


def demote_small_islands(graph: "Graph", units: list["PlacementUnit"], choice: dict, devices: Mapping[str, DeviceSpec],
                          host: DeviceSpec | None, min_ops: int) -> None:
    """Send device islands smaller than `min_ops` to the host, unless that adds host/device copies.

    Small islands that touch each other are decided together (a cluster), in topological order,
    each against the placement so far, counting every tensor that would cross between host and
    device memory, graph inputs and outputs included (they live in host memory). A cluster goes
    to the host only when that strictly lowers the copies: one between device-memory neighbours
    would trade a launch for copies, so it stays, and its ops' reasons say what the move would
    have cost. The copy count never rises, and never trades graph-input copies for crossings.
    """
    if min_ops <= 1 or host is None or not units:
        return
    by_child = {u.child: u for u in units}
    memory_of_op = _memory_lookup(graph, units, choice, devices)
    groups = group_children(graph.get_root_subgraph(), {u.child: choice[u][0] for u in units})
    small = [[by_child[c] for c in g] for g in groups
             if _memory(choice[by_child[g[0]]][0], devices) == "device" and sum(len(by_child[c].ops) for c in g) < min_ops]
    for cluster in _touching(small):
        island = [u for group in cluster for u in group]
        ops = [op for u in island for op in u.ops]
        now = _crossings_around(island, memory_of_op, dict.fromkeys(ops, "device"), graph_io=True)
        demoted = _crossings_around(island, memory_of_op, dict.fromkeys(ops, "host"), graph_io=True)
        for group in cluster:
            device, size = choice[group[0]][0], sum(len(u.ops) for u in group)
            if demoted >= now:
                added = demoted - now
                effect = (f"would add {added} host/device cop{'y' if added == 1 else 'ies'}" if added
                          else "would save no host/device copy")
                note = f"kept on {device}: sending this {size}-op island to the host (min_subgraph_ops={min_ops}) {effect}"
                for unit in group:
                    choice[unit] = (device, tuple("; ".join(filter(None, [r, note])) for r in choice[unit][1]))
            else:
                why = f"{device} island of {size} op(s) is smaller than min_subgraph_ops={min_ops}"
                for unit in group:
                    choice[unit] = (host.name, (why,) * len(unit.ops))


def _touching(groups: list[list["PlacementUnit"]]) -> list[list[list["PlacementUnit"]]]:
    """Groups joined when an op of one reads a tensor of another (connected components), each
    cluster in the order of its first group. O(ops + edges)."""
    owner = {op: i for i, g in enumerate(groups) for u in g for op in u.ops}
    parent = list(range(len(groups)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, g in enumerate(groups):
        for u in g:
            for op in u.ops:
                for producer in op.get_input_ops():
                    j = owner.get(producer)
                    if j is not None:
                        parent[find(j)] = find(i)
    clusters: dict[int, list[list["PlacementUnit"]]] = {}
    for i, g in enumerate(groups):
        clusters.setdefault(find(i), []).append(g)
    return list(clusters.values())


def _memory_lookup(graph: "Graph", units: list["PlacementUnit"], choice: dict, devices: Mapping[str, DeviceSpec]):
    """op -> "host" | "device" under the current `choice` (read at each call); ops a plugin took
    have their subgraph's memory (a plugin's subgraphs on CPU live in host memory)."""
    unit_of = {op: u for u in units for op in u.ops}
    root = graph.get_root_subgraph()

    def memory_of_op(op: "Op") -> str:
        unit = unit_of.get(op)
        if unit is not None:
            return _memory(choice[unit][0], devices)
        sg = root.find_child_subgraph_by_op(op)
        return memory_of(sg, devices) if sg is not None else "host"

    return memory_of_op


def _islands(units: list["PlacementUnit"], choice: dict, host: DeviceSpec) -> list[list["PlacementUnit"]]:
    """Connected groups of host-placed units, in topological order of their first unit."""
    on_host = [u for u in units if choice[u][0] == host.name]
    unit_of = {op: u for u in on_host for op in u.ops}
    seen: set = set()
    islands = []
    for start in on_host:
        if start in seen:
            continue
        seen.add(start)
        island, stack = [], [start]
        while stack:
            u = stack.pop()
            island.append(u)
            for op in u.ops:
                for n in op.get_input_ops() + op.get_fanout_ops():
                    v = unit_of.get(n)
                    if v is not None and v not in seen:
                        seen.add(v)
                        stack.append(v)
        islands.append(island)
    return islands


def _crossings_around(island: list["PlacementUnit"], memory_of_op, memory_inside: dict["Op", str],
                      graph_io: bool = False) -> int:
    """Distinct tensors that cross between the island and the rest, for the given memory of its ops;
    with `graph_io`, graph inputs and outputs count as host-memory neighbours (the runtime copies them)."""
    inside = set(memory_inside)
    outputs = set()
    if graph_io and island:
        outputs = set(island[0].ops[0].graph.get_output_tensors())
    count = 0
    seen: set["Tensor"] = set()
    for unit in island:
        for op in unit.ops:
            for t in op.get_input_tensors():
                if t is None or t in seen or t.is_const or (t.producer is not None and t.producer in inside):
                    continue
                seen.add(t)
                if t.producer is None:
                    count += graph_io and memory_inside[op] != "host"
                else:
                    count += memory_of_op(t.producer) != memory_inside[op]
            for t in op.get_output_tensors():
                outside = {memory_of_op(c) for c in t.consumers if c not in inside}
                if t in outputs:
                    outside.add("host")
                count += any(m != memory_inside[op] for m in outside)
    return count


def promote_host_islands(graph: "Graph", units: list["PlacementUnit"], choice: dict, candidates: list[DeviceSpec],
                         devices: Mapping[str, DeviceSpec], host: DeviceSpec | None, reason) -> None:
    """Move each host island back to device memory when every unit of it has a device-memory
    device and that strictly lowers the copies; `reason(unit, op, cheaper)` gives each op's reason."""
    if host is None:
        return
    device_side = [s for s in candidates if _memory(s.name, devices) == "device"]
    islands = _islands(units, choice, host)
    if not islands:
        return  # nothing on the host: no op-to-memory table to build
    memory_of_op = _memory_lookup(graph, units, choice, devices)

    for island in islands:
        alternatives = {}
        for unit in island:
            spec = next((s for s in device_side if unit.accepts(s.name)), None)
            if spec is None:
                break
            alternatives[unit] = spec
        else:
            now = _crossings_around(island, memory_of_op, {op: "host" for u in island for op in u.ops}, graph_io=True)
            moved = _crossings_around(island, memory_of_op, {op: "device" for u in island for op in u.ops}, graph_io=True)
            if moved < now:
                for unit, spec in alternatives.items():
                    cheaper = candidates[:candidates.index(spec)]
                    choice[unit] = (spec.name, tuple(reason(unit, op, cheaper) for op in unit.ops))


def count_crossings(graph: "Graph", devices: Mapping[str, DeviceSpec]) -> list[dict[str, Any]]:
    """Every copy between root children: one per tensor and memory domain it is read in, as the runtime copies.

    Each entry: {"tensor", "from" (subgraph), "to" (subgraphs in that other domain), "direction"
    ("H2D" | "D2H" | "D2D": host to card, card to host, card to card; `xgraph.devices.instances`)}.
    Graph inputs and outputs are not counted. Devices the table does not know count as host
    memory, as in the runtime.
    """
    return [edge for edge, _ in _crossings(graph, devices)]


def _crossings(graph: "Graph", devices: Mapping[str, DeviceSpec]) -> list[tuple[dict[str, Any], str]]:
    """count_crossings' entries, each with the memory domain its tensor is copied into."""
    root = graph.get_root_subgraph()
    memory = _domains(root, devices)
    edges = []
    for child in root.toposort_child_subgraph():
        for t in child.get_output_tensors():
            targets = {root.find_child_subgraph_by_op(c) for c in t.consumers} - {child, None}
            by_domain: dict[str, list[str]] = {}
            for s in targets:
                if memory[s] != memory[child]:
                    by_domain.setdefault(memory[s], []).append(s.name)
            for domain, names in sorted(by_domain.items()):
                edges.append(({"tensor": t.name, "from": child.name, "to": sorted(names),
                               "direction": copy_direction(memory[child], domain)}, domain))
    return edges


def _domains(root, devices: Mapping[str, DeviceSpec]) -> dict:
    return {c: r.memory for c, r in residences(root.get_children(), devices).items()}


def count_copies(graph: "Graph", devices: Mapping[str, DeviceSpec]) -> dict[str, int]:
    """The copies the graph runner performs per run, by cause.

    Graph inputs arrive in host memory and outputs leave from it, so besides the crossings
    between subgraphs, every graph input is copied in once per card memory that reads it, and
    every graph output produced in a card's memory is copied out (once, shared with a crossing
    of the same tensor): ``total = crossings + graph_inputs + graph_outputs``.
    """
    root = graph.get_root_subgraph()
    memory = _domains(root, devices)
    copies = {(e["tensor"], domain) for e, domain in _crossings(graph, devices)}
    crossings = len(copies)
    inputs = sum(len({memory.get(root.find_child_subgraph_by_op(c), HOST) for c in t.consumers} - {HOST})
                 for t in graph.get_input_tensors())
    outputs = 0
    for t in dict.fromkeys(graph.get_output_tensors()):
        producer = root.find_child_subgraph_by_op(t.producer) if t.producer is not None else None
        if producer is not None and memory[producer] != HOST and (t.name, HOST) not in copies:
            copies.add((t.name, HOST))
            outputs += 1
    return {"total": crossings + inputs + outputs, "crossings": crossings, "graph_inputs": inputs,
            "graph_outputs": outputs}


__all__ = ["count_copies", "count_crossings", "demote_small_islands", "promote_host_islands"]
