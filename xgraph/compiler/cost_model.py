"""What a split costs: the placement problem of a graph's units, in the solver's plain terms.

`build_problem` turns the units placement works on (one per unassigned child, plus one per
plugin subgraph, which stays where its plugin put it) into an `xgraph.partition.PlacementProblem`:

- **nodes**: a unit's cost on each device that may run it is the roofline time of its ops
  (`xgraph.devices.cost`: max(FLOPs / peak, bytes / bandwidth) + launch, from the graph's
  shapes, a dynamic dim at the size `xgraph.ir.dim_ranges` assumes for it: the top of its
  input_shape range, else 1), or its measured time where a cost table (the
  "costs" option) has one; on a plugin's device, the plugin's estimate or measured time. AICORE, AICPU and DVPP of one card share its
  memory, so the solver sees the card as one device, ``card``, costing what the cheapest of
  its devices that accept the unit costs; that device takes the unit when the card does. A
  unit's memory is the bytes of the weights its ops read.
- **edges**: one per pair of units a tensor flows between; its transfer is the time those
  tensors take over the card's link (latency per tensor + bytes / bandwidth).
- **devices**: the card (its instances and memory capacity), the host (CPU, its instances,
  shared memory), and one device per plugin device (memory per its spec, one instance).
- **the graph's inputs and outputs** live in host memory: two more nodes, fixed on the host at
  no cost, feed the units that read a graph input and take the graph outputs, so the copies
  in and out count as the runtime performs them.

The adapter is thin on purpose: the decisions are the solver's (`solve_placement`), which
knows nothing of the IR.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from xgraph.ir.dim_ranges import DimRanges
from xgraph.devices import DeviceSpec, LinkProfile
from xgraph.devices.cost import Roofline, op_flops

if TYPE_CHECKING:
    from xgraph.compiler.cost_table import CostTable
    from xgraph.ir import Op, Subgraph, Tensor

#: The solver's name for one card (the devices of memory kind "device", sharing its memory).
CARD = "card"
#: No ranges known: every dynamic dim at `dim_ranges.DEFAULT_SIZE`.
NO_RANGES = DimRanges()


def _shape(tensor: "Tensor | None", dims: DimRanges) -> "tuple[int, ...] | None":
    if tensor is None or tensor.shape is None:
        return None
    return dims.shape(tensor.shape)


def tensor_bytes(tensor: "Tensor | None", dims: DimRanges = NO_RANGES) -> int:
    """Bytes of a tensor from its shape (dynamic dims at the sizes `dims` assumes) and dtype (unknown: 4 bytes)."""
    shape = _shape(tensor, dims)
    if shape is None:
        return 0
    itemsize = tensor.dtype.itemsize if tensor.dtype is not None else 4
    return int(np.prod(shape, dtype=np.int64)) * itemsize


def op_seconds(op: "Op", spec: DeviceSpec, dims: DimRanges = NO_RANGES) -> float:
    """The roofline time of `op` on one instance of `spec`, from the graph's shapes (dynamic dims at the sizes
    `dims` assumes)."""
    inputs = op.get_input_tensors()
    outputs = op.get_output_tensors()
    dtype = next((t.dtype.name for t in inputs if t is not None and t.dtype is not None), "float32")
    flops = op_flops(op.type, op.get_onnx_attrs(), [_shape(t, dims) for t in inputs],
                     [_shape(t, dims) for t in outputs])
    nbytes = sum(tensor_bytes(t, dims) for t in inputs) + sum(tensor_bytes(t, dims) for t in outputs)
    return Roofline(spec.name, spec.cost, dtype).op_time(flops, nbytes, dtype)


@dataclass
class Unit:
    """One placement unit: its ops, the devices that may run it, and where a plugin fixed it (if it did)."""

    key: Any  # the child subgraph
    ops: "list[Op]"
    allowed: "list[DeviceSpec]"  # cheapest first; for a plugin unit, its one device
    fixed: bool = False
    estimate: float | None = None  # the plugin's own estimate (seconds) on its device, for a plugin unit
    plugin: str | None = None  # the plugin that took or offered the unit (its device is `allowed[0]`)


@dataclass
class CostModel:
    """The problem the solver gets, and how to read its answer back."""

    problem: Any  # xgraph.partition.PlacementProblem
    units: list[Unit]
    #: per unit: {solver device: (seconds, the real device that runs it there)}
    choices: list[dict[str, tuple[float, str]]] = field(default_factory=list)
    link: LinkProfile = field(default_factory=LinkProfile)
    solver_devices: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: node ids of the graph's inputs and outputs (host memory, no compute)
    io_nodes: tuple[int, ...] = ()
    nodes: list[dict[str, Any]] = field(default_factory=list)  # the problem's nodes and edges as plain data
    edges: list[dict[str, Any]] = field(default_factory=list)
    #: per unit: {solver device: where its seconds come from} (see `unit_seconds`)
    sources: list[dict[str, str]] = field(default_factory=list)

    def neighbours(self, index: int) -> list[tuple[float, int]]:
        """(transfer, other node) for each edge of node `index` (the table is built once, O(V + E))."""
        table = self.__dict__.get("_neighbours")
        if table is None:
            table = self.__dict__["_neighbours"] = [[] for _ in self.nodes]
            for edge in self.edges:
                table[edge["src"]].append((edge["transfer"], edge["dst"]))
                table[edge["dst"]].append((edge["transfer"], edge["src"]))
        return table[index]

    def device_of(self, index: int, solver_device: str) -> str:
        """The real device that runs unit `index` when the solver puts it on `solver_device`."""
        return self.choices[index][solver_device][1]


def solver_device(spec: DeviceSpec) -> str:
    """The solver's name for the memory `spec` computes in: the card for device memory, else its own name."""
    return CARD if spec.memory == "device" and spec.ops.rules else spec.name


def _devices(units: Sequence[Unit]) -> dict[str, dict[str, Any]]:
    specs = {spec.name: spec for unit in units for spec in unit.allowed}
    devices: dict[str, dict[str, Any]] = {}
    card = [s for s in specs.values() if solver_device(s) == CARD]
    if card:
        capacities = [s.memory_capacity for s in card if s.memory_capacity is not None]
        devices[CARD] = {"name": CARD, "instances": min(s.instances for s in card),
                         **({"memory": min(capacities)} if capacities else {})}
    for spec in specs.values():
        if solver_device(spec) != CARD:
            entry = devices.setdefault(spec.name, {"name": spec.name, "instances": spec.instances,
                                                   "host": spec.memory == "host"})
            if spec.memory_capacity is not None and spec.memory != "host":
                entry["memory"] = spec.memory_capacity
    return devices


def _weights(ops: "list[Op]") -> int:
    seen: dict[str, int] = {}
    for op in ops:
        for t in op.get_input_tensors():
            if t is not None and t.is_const and t.name not in seen:
                seen[t.name] = tensor_bytes(t)
    return sum(seen.values())


def _edges(units: Sequence[Unit], link: LinkProfile, inputs: "Sequence[Tensor]", outputs: "Sequence[Tensor]",
           dims: DimRanges) -> list[dict[str, Any]]:
    """Edges between units, from the graph inputs' node (id len(units)) and to the outputs' (len(units) + 1)."""
    unit_of: dict[Any, int] = {}
    for i, unit in enumerate(units):
        for op in unit.ops:
            unit_of[op] = i
    source, sink = len(units), len(units) + 1
    flows: dict[tuple[int, int], float] = {}

    def flow(i: int, j: int, tensor: "Tensor") -> None:
        flows[i, j] = flows.get((i, j), 0.0) + link.seconds(tensor_bytes(tensor, dims))

    for t in inputs:
        for j in sorted({unit_of[c] for c in t.consumers if c in unit_of}):
            flow(source, j, t)
    for t in dict.fromkeys(outputs):
        if t.producer in unit_of:
            flow(unit_of[t.producer], sink, t)
    for i, unit in enumerate(units):
        for op in unit.ops:
            for t in op.get_output_tensors():
                for j in sorted({unit_of[c] for c in t.consumers if c in unit_of} - {i}):
                    flow(i, j, t)
    return [{"src": i, "dst": j, "transfer": seconds} for (i, j), seconds in sorted(flows.items())]


def unit_seconds(unit: Unit, spec: DeviceSpec, table: "CostTable | None" = None,
                 dims: DimRanges = NO_RANGES) -> tuple[float, str]:
    """(seconds of `unit` on one instance of `spec`, the source: "estimate", "measured", "roofline" or "mixed").

    On a plugin's device: the plugin's estimate, else the table's time for that candidate subgraph.
    Else per op: the table's time for the op on `spec` where it has one, the roofline elsewhere
    ("mixed" when both count), dynamic dims at the sizes `dims` assumes."""
    if unit.plugin is not None and spec is unit.allowed[0]:
        if unit.estimate is not None:
            return unit.estimate, "estimate"
        measured = table.candidate_seconds(unit.plugin, (op.name for op in unit.ops)) if table else None
        if measured is not None:
            return measured, "measured"
    times, kinds = [], set()
    for op in unit.ops:
        seconds = table.op_seconds(op, spec.name) if table is not None else None
        kinds.add("roofline" if seconds is None else "measured")
        times.append(op_seconds(op, spec, dims) if seconds is None else seconds)
    # fsum: the same total whatever order a subgraph's op set comes in
    return math.fsum(times), kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "roofline")


def build_problem(units: Sequence[Unit], link: LinkProfile, host: DeviceSpec,
                  inputs: "Sequence[Tensor]" = (), outputs: "Sequence[Tensor]" = (),
                  min_instances: "Mapping[str, int] | None" = None, table: "CostTable | None" = None,
                  dims: DimRanges = NO_RANGES) -> CostModel:
    """The `PlacementProblem` of `units` (in dependency order) with copies over `link`, the graph's `inputs`
    and `outputs` in `host`'s memory; see the module doc. `min_instances` raises a solver device's instance
    count (a compiled graph may name instances its device table no longer has); `table`: measured costs;
    `dims`: the compile's dim ranges, which size the dynamic dims."""
    from xgraph.partition import PlacementProblem
    nodes, choices, sources = [], [], []
    for i, unit in enumerate(units):
        by_solver: dict[str, tuple[float, str]] = {}
        source: dict[str, str] = {}
        for spec in unit.allowed:
            seconds, kind = unit_seconds(unit, spec, table, dims)
            name = solver_device(spec)
            if name not in by_solver or seconds < by_solver[name][0]:
                by_solver[name] = (seconds, spec.name)
                source[name] = kind
        choices.append(by_solver)
        sources.append(source)
        nodes.append({"id": i, "cost": {name: seconds for name, (seconds, _) in by_solver.items()},
                      "memory": _weights(unit.ops)})
    io_nodes = (len(units), len(units) + 1)
    for i in io_nodes:
        choices.append({host.name: (0.0, host.name)})
        nodes.append({"id": i, "cost": {host.name: 0.0}})
    devices = _devices([*units, Unit(None, [], [host])])
    for name, count in (min_instances or {}).items():
        if name in devices:
            devices[name]["instances"] = max(devices[name]["instances"], count)
    edges = _edges(units, link, inputs, outputs, dims)
    problem = PlacementProblem(nodes=nodes, edges=edges, devices=list(devices.values()))
    return CostModel(problem, list(units), choices, link, devices, io_nodes, nodes, edges, sources)


def card_link(devices: Mapping[str, DeviceSpec]) -> LinkProfile:
    """The link between the card and the host: the slowest link any device-memory device declares."""
    links = [s.link for s in devices.values() if s.memory == "device" and s.ops.rules]
    if not links:
        return LinkProfile()
    return min(links, key=lambda link: (link.bandwidth_gbps or float("inf"), -link.latency_us))


__all__ = ["CARD", "NO_RANGES", "CostModel", "Unit", "build_problem", "card_link", "op_seconds", "solver_device",
           "tensor_bytes", "unit_seconds"]
