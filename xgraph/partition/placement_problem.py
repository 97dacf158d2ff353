"""The input and output of the placement solver: a cost-annotated integer DAG and devices.

`PlacementProblem` checks and indexes plain data (nodes, edges, devices as dicts) once, so
that the objectives (`xgraph.partition.placement_objectives`), the searches and the integer
programs work on small integer-indexed tuples:

* nodes are numbered ``0..n-1`` in input order; ``ids[i]`` is the user's id of node i;
* ``cost[i][d]`` is node i's seconds on one instance of device d (``None``: cannot run);
* ``successors[i]`` / ``predecessors[i]`` are ``(node, transfer)`` pairs;
* ``groups`` are the colocation classes (a node without ``colocate`` is alone), numbered
  in topological order of their first node; ``group_of[i]`` is node i's class;
* ``instances`` lists every ``(device, index)``, and ``memory_of[k]`` is instance k's
  memory: ``-1`` for the one host memory all host instances share, else ``k`` itself.

Validation refuses what no placement could honour before any search starts, naming the
node, edge, device or colocation class and what to change.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from xgraph.errors import PartitionError

HOST_MEMORY = -1
_NODE_KEYS = frozenset({"id", "cost", "memory", "colocate", "name"})
_EDGE_KEYS = frozenset({"src", "dst", "transfer"})
_DEVICE_KEYS = frozenset({"name", "instances", "host", "memory"})


@dataclass(frozen=True)
class PlacementSolution:
    """What `solve_placement` returns: an assignment and how good it provably is."""

    assignment: dict[Any, tuple[str, int]]  # node id -> (device name, instance index)
    objective: float  # the objective's value for this assignment
    bound: float | None  # a proven lower bound on the optimum (== objective when optimal)
    optimal: bool
    seconds: float
    method: str = ""  # which search produced the assignment (for reports)
    stats: dict[str, Any] = field(default_factory=dict)


def _number(value: Any, what: str, *, allow_none: bool = False) -> float | None:
    """A finite non-negative float, or a PartitionError naming `what`."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise PartitionError(f"{what} must be a finite number, got {value!r}")
    if value < 0:
        raise PartitionError(f"{what} is negative ({value!r}): costs, sizes and transfers must be >= 0")
    return float(value)


def _unknown_keys(item: Mapping, allowed: frozenset, what: str) -> None:
    if not isinstance(item, Mapping):
        raise PartitionError(f"{what} must be a dict, got {type(item).__name__}")
    extra = sorted(set(item) - allowed, key=str)
    if extra:
        raise PartitionError(f"{what} has unknown keys {extra}; valid keys: {sorted(allowed)}")


class PlacementProblem:
    """Nodes with per-device costs, edges with transfer times, and devices with instances.

    >>> p = PlacementProblem(
    ...     nodes=[{"id": "a", "cost": {"CPU": 2.0, "ACC": 0.5}, "memory": 10},
    ...            {"id": "b", "cost": {"CPU": 1.0}}],
    ...     edges=[{"src": "a", "dst": "b", "transfer": 0.1}],
    ...     devices=[{"name": "CPU", "instances": 2, "host": True},
    ...              {"name": "ACC", "instances": 1, "memory": 100}])
    >>> p.instances, p.memory_of
    ((('CPU', 0), ('CPU', 1), ('ACC', 0)), (-1, -1, 2))
    >>> p.cost[1]
    (1.0, None)

    Building is O(V + E + V*D) for D devices.
    """

    def __init__(self, nodes: Sequence[Mapping], edges: Sequence[Mapping], devices: Sequence[Mapping]):
        self._read_devices(devices)
        self._read_nodes(nodes)
        self._read_edges(edges)
        self.order = _topological_order(self.successors, self.predecessors, self.ids)
        self._read_groups()
        self._check_groups_fit()

    # -- reading ------------------------------------------------------------------------------
    def _read_devices(self, devices: Sequence[Mapping]) -> None:
        if not devices:
            raise PartitionError("a placement problem needs at least one device")
        names: list[str] = []
        counts, hosts, capacities = [], [], []
        for item in devices:
            _unknown_keys(item, _DEVICE_KEYS, f"device {item.get('name')!r}" if isinstance(item, Mapping) else "device")
            name = item.get("name")
            if not isinstance(name, str) or not name:
                raise PartitionError(f"every device needs a non-empty string 'name', got {name!r}")
            if name in names:
                raise PartitionError(f"device {name!r} is listed twice; give each device one entry")
            count = item.get("instances", 1)
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise PartitionError(f"device {name!r}: 'instances' must be an int >= 0, got {count!r}")
            names.append(name)
            counts.append(count)
            hosts.append(bool(item.get("host", False)))
            capacities.append(_number(item.get("memory"), f"device {name!r} 'memory'", allow_none=True))
        self.device_names: tuple[str, ...] = tuple(names)
        self.device_instances: tuple[int, ...] = tuple(counts)
        self.device_host: tuple[bool, ...] = tuple(hosts)
        self.device_memory: tuple[float | None, ...] = tuple(capacities)
        self.instances = tuple((n, k) for n, c in zip(names, counts) for k in range(c))
        self.instance_device = tuple(d for d, c in enumerate(counts) for _ in range(c))
        self.memory_of = tuple(HOST_MEMORY if hosts[d] else k for k, d in enumerate(self.instance_device))
        host_caps = [capacities[d] for d in range(len(names)) if hosts[d] and capacities[d] is not None]
        self.host_memory: float | None = min(host_caps) if host_caps else None

    def _read_nodes(self, nodes: Sequence[Mapping]) -> None:
        device_index = {n: d for d, n in enumerate(self.device_names)}
        ids, costs, memories, colocate = [], [], [], []
        index: dict[Any, int] = {}
        for item in nodes:
            _unknown_keys(item, _NODE_KEYS, f"node {item.get('id')!r}" if isinstance(item, Mapping) else "node")
            if "id" not in item:
                raise PartitionError(f"a node has no 'id': {dict(item)!r}")
            node_id = item["id"]
            if node_id in index:
                raise PartitionError(f"node id {node_id!r} is used twice; ids must be unique")
            raw = item.get("cost") or {}
            if not isinstance(raw, Mapping):
                raise PartitionError(f"node {node_id!r}: 'cost' must map device names to seconds")
            row: list[float | None] = [None] * len(self.device_names)
            for name, seconds in raw.items():
                if name not in device_index:
                    raise PartitionError(f"node {node_id!r} has a cost for unknown device {name!r}; "
                                         f"devices: {list(self.device_names)}")
                row[device_index[name]] = _number(seconds, f"node {node_id!r} cost on {name!r}", allow_none=True)
            if all(row[d] is None or self.device_instances[d] == 0 for d in range(len(row))):
                raise PartitionError(f"node {node_id!r} cannot run anywhere: no device with instances has a cost "
                                     f"for it (costs given: {sorted(raw)}); give it a cost on one of "
                                     f"{[n for n, c in zip(self.device_names, self.device_instances) if c]}")
            index[node_id] = len(ids)
            ids.append(node_id)
            costs.append(tuple(row))
            memories.append(_number(item.get("memory", 0), f"node {node_id!r} 'memory'"))
            colocate.append(item.get("colocate"))
        if not ids:
            raise PartitionError("a placement problem needs at least one node")
        self.ids: tuple = tuple(ids)
        self.index: dict[Any, int] = index
        self.cost: tuple[tuple[float | None, ...], ...] = tuple(costs)
        self.memory: tuple[float, ...] = tuple(memories)
        self._colocate = tuple(colocate)

    def _read_edges(self, edges: Sequence[Mapping]) -> None:
        successors: list[list[tuple[int, float]]] = [[] for _ in self.ids]
        predecessors: list[list[tuple[int, float]]] = [[] for _ in self.ids]
        for item in edges:
            _unknown_keys(item, _EDGE_KEYS, "edge")
            src, dst = item.get("src"), item.get("dst")
            for end, label in ((src, "src"), (dst, "dst")):
                if end not in self.index:
                    raise PartitionError(f"edge {src!r} -> {dst!r}: {label} {end!r} is not a node id")
            if src == dst:
                raise PartitionError(f"edge {src!r} -> {dst!r} is a self-loop; the graph must be a DAG")
            transfer = _number(item.get("transfer", 0.0), f"edge {src!r} -> {dst!r} 'transfer'")
            u, v = self.index[src], self.index[dst]
            successors[u].append((v, transfer))
            predecessors[v].append((u, transfer))
        self.successors = tuple(tuple(s) for s in successors)
        self.predecessors = tuple(tuple(p) for p in predecessors)
        self.edge_count = sum(len(s) for s in successors)

    def _read_groups(self) -> None:
        by_key: dict[Any, int] = {}
        group_of = [-1] * len(self.ids)
        groups: list[list[int]] = []
        for v in self.order:
            key = self._colocate[v]
            if key is None:
                group_of[v] = len(groups)
                groups.append([v])
            elif key in by_key:
                group_of[v] = by_key[key]
                groups[by_key[key]].append(v)
            else:
                by_key[key] = group_of[v] = len(groups)
                groups.append([v])
        self.groups = tuple(tuple(g) for g in groups)
        self.group_of = tuple(group_of)
        self.group_memory = tuple(sum(self.memory[v] for v in g) for g in groups)
        self.group_cost = tuple(tuple(_sum_or_none(self.cost[v][d] for v in g) for d in range(len(self.device_names)))
                                for g in groups)

    def _check_groups_fit(self) -> None:
        for g, members in enumerate(self.groups):
            usable = [d for d, c in enumerate(self.group_cost[g]) if c is not None and self.device_instances[d]]
            label = self.describe_group(g)
            if not usable:
                raise PartitionError(f"{label} has no device every member can run on; split the colocation "
                                     "class or give its nodes costs on a common device")
            if not any(self.fits(g, d) for d in usable):
                raise PartitionError(f"{label} needs {self.group_memory[g]:.6g} bytes of memory, more than any "
                                     f"device it can run on holds ({self._capacity_text(usable)}); raise the "
                                     "device memory or split the class")

    # -- queries used by every search ---------------------------------------------------------
    def describe_group(self, g: int) -> str:
        """Human words for colocation class g: its node, or its key and nodes."""
        members = self.groups[g]
        if len(members) == 1:
            return f"node {self.ids[members[0]]!r}"
        shown = [self.ids[v] for v in members[:5]]
        more = ", ..." if len(members) > 5 else ""
        return f"colocate class {self._colocate[members[0]]!r} (nodes {shown}{more})"

    def capacity(self, d: int) -> float | None:
        """Memory of one instance of device d (the shared host memory for a host device)."""
        return self.host_memory if self.device_host[d] else self.device_memory[d]

    def fits(self, g: int, d: int) -> bool:
        """Whether class g alone fits in the memory of one instance of device d."""
        cap = self.capacity(d)
        return cap is None or self.group_memory[g] <= cap

    def allowed_instances(self, g: int) -> list[int]:
        """Instances (indices into `instances`) class g may be put on, ignoring other classes."""
        return [k for k, d in enumerate(self.instance_device) if self.group_cost[g][d] is not None and self.fits(g, d)]

    def _capacity_text(self, devices: Sequence[int]) -> str:
        return ", ".join(f"{self.device_names[d]}: {self.capacity(d):.6g}" for d in devices
                         if self.capacity(d) is not None) or "unlimited"

    def to_assignment(self, placement: Sequence[int]) -> dict[Any, tuple[str, int]]:
        """Node id -> (device name, instance index) for an instance index per node."""
        return {self.ids[v]: self.instances[k] for v, k in enumerate(placement)}

    def from_assignment(self, assignment: Mapping[Any, tuple[str, int]]) -> list[int]:
        """The instance index per node for a user assignment; unknown names are refused."""
        position = {inst: k for k, inst in enumerate(self.instances)}
        placement = []
        for node_id in self.ids:
            if node_id not in assignment:
                raise PartitionError(f"assignment has no entry for node {node_id!r}")
            where = tuple(assignment[node_id])
            if where not in position:
                raise PartitionError(f"node {node_id!r} is assigned to {where!r}, which is not an instance; "
                                     f"instances: {list(self.instances)}")
            placement.append(position[where])
        return placement


def _sum_or_none(values) -> float | None:
    total = 0.0
    for value in values:
        if value is None:
            return None
        total += value
    return total


def _topological_order(successors, predecessors, ids) -> tuple[int, ...]:
    """Kahn's order, smallest index first among the ready; a cycle is named by one of its nodes."""
    indegree = [len(p) for p in predecessors]
    ready = [v for v, d in enumerate(indegree) if d == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        v = heapq.heappop(ready)
        order.append(v)
        for w, _ in successors[v]:
            indegree[w] -= 1
            if indegree[w] == 0:
                heapq.heappush(ready, w)
    if len(order) < len(ids):
        stuck = next(v for v, d in enumerate(indegree) if d > 0)
        for _ in range(len(ids)):  # walking back through unfinished predecessors ends on the cycle
            stuck = next(u for u, _ in predecessors[stuck] if indegree[u] > 0)
        cycle = [stuck]
        while True:
            cycle.append(next(u for u, _ in predecessors[cycle[-1]] if indegree[u] > 0))
            if cycle[-1] == stuck:
                break
        path = " -> ".join(repr(ids[v]) for v in reversed(cycle))
        raise PartitionError(f"the edges form a cycle ({path}); the graph must be a DAG")
    return tuple(order)
