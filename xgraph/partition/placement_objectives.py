"""The two placement objectives of Tarnawski et al. (NeurIPS 2020), and the validity check.

A *placement* here is a list: ``placement[v]`` is the index (into
`PlacementProblem.instances`) of the instance node v runs on. Transfers follow the paper's
model: data moves between memories through the host, and the non-host side pays. When a
node u's output leaves its memory (some successor sits in another memory), a non-host
sender pays, once, the largest transfer among those edges; every other non-host memory that
receives it pays, once, the largest transfer among u's edges into it. Host instances share
one memory and never pay for copies. (With one transfer per source node, as in the paper's
inputs, "largest" is that transfer.)

* **throughput**: jobs stream through; an instance's load is the compute of its nodes plus
  the copies it pays; the objective is the largest load (time per sample):
  ``max_k  sum_{v on k} c(v, k) + sum_u in(u, k) + out(u, k)``.
* **latency**: one job's finishing time. A non-host instance runs its nodes as one call:
  it starts when every input is ready, pays its incoming copies, computes, pays its outgoing
  copies, and all its nodes finish together. A host node starts when its predecessors have
  finished and its host instance is free. If an instance's nodes are not contiguous (a path
  leaves them and comes back), they are split into contiguous calls as the paper's
  ``reworkSplitIntoContiguous`` does; unlike the paper's evaluation, which treats those
  pieces as separate devices, they run one after another on their instance and pay no
  copies among themselves (they share its memory). Calls whose inputs feed each other cannot
  run and the latency is infinite. The solver itself only returns contiguous placements.
"""
from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from xgraph.errors import PartitionError
from xgraph.partition.placement_problem import HOST_MEMORY, PlacementProblem


def example_problem() -> PlacementProblem:
    """The problem the examples here use: node 0 (host 1 s, accelerator 0.5 s) feeds node 1 (host only)."""
    return PlacementProblem([{"id": 0, "cost": {"H": 1.0, "A": 0.5}}, {"id": 1, "cost": {"H": 2.0}}],
                            [{"src": 0, "dst": 1, "transfer": 0.25}],
                            [{"name": "H", "host": True}, {"name": "A"}])


def node_charges(problem: PlacementProblem, placement: Sequence[int], u: int) -> list[tuple[int, float]]:
    """(instance, seconds) node u adds to instance loads: its compute and the copies of its output.

    >>> p = example_problem()
    >>> node_charges(p, [1, 0], 0)   # 0 on A sends to the host: A pays compute and the copy out
    [(1, 0.5), (1, 0.25)]

    O(out-degree of u).
    """
    memory_of = problem.memory_of
    k = placement[u]
    home = memory_of[k]
    charges = [(k, problem.cost[u][problem.instance_device[k]])]
    out, leaves = 0.0, False
    received: dict[int, float] = {}
    for v, transfer in problem.successors[u]:
        there = memory_of[placement[v]]
        if there == home:
            continue
        out, leaves = max(out, transfer), True
        if there != HOST_MEMORY:
            received[there] = max(received.get(there, 0.0), transfer)
    if leaves and home != HOST_MEMORY:
        charges.append((k, out))
    charges.extend(received.items())  # a non-host memory is its instance's own index
    return charges


def instance_loads(problem: PlacementProblem, placement: Sequence[int]) -> list[float]:
    """The throughput load of every instance (compute plus the copies it pays). O(V + E)."""
    loads = [0.0] * len(problem.instances)
    for u in range(len(problem.ids)):
        for k, seconds in node_charges(problem, placement, u):
            loads[k] += seconds
    return loads


def throughput(problem: PlacementProblem, placement: Sequence[int]) -> float:
    """Time per sample when jobs stream through: the largest instance load.

    >>> p = example_problem()
    >>> throughput(p, [1, 0]), throughput(p, [0, 0])
    (2.0, 3.0)

    O(V + E).
    """
    return max(instance_loads(problem, placement))


def call_levels(problem: PlacementProblem, placement: Sequence[int]) -> list[int]:
    """For a node on a non-host instance, which of that instance's calls runs it (1, 2, ...).

    Level of v for instance k: 1 + the number of times a path into v leaves k's nodes and
    comes back (the paper's split of a non-contiguous set into contiguous pieces). Host
    nodes get 0. O(V + E) per used non-host instance.
    """
    levels = [0] * len(problem.ids)
    used = {k for k in placement if problem.memory_of[k] != HOST_MEMORY}
    for k in used:
        reach = [0] * len(problem.ids)
        for v in problem.order:
            inside = placement[v] == k
            best = 1 if inside else 0
            for u, _ in problem.predecessors[v]:
                step = reach[u] + (1 if inside and placement[u] != k and reach[u] else 0)
                best = max(best, step)
            reach[v] = best
            if inside:
                levels[v] = best
    return levels


def latency(problem: PlacementProblem, placement: Sequence[int]) -> float:
    """One job's finishing time under the paper's call model (math.inf if calls deadlock).

    >>> p = example_problem()
    >>> latency(p, [1, 0]), latency(p, [0, 0])
    (2.75, 3.0)

    A list schedule in order of ready time: O((V + E) log V) plus `call_levels`.
    """
    return _schedule(problem, placement, contended_host=True)[0]


def host_start_times(problem: PlacementProblem, placement: Sequence[int]) -> dict[int, tuple[float, float]]:
    """(start, end) of every host node when each host node had an instance of its own.

    The schedule the paper's latency assumes (as many host cores as the graph is wide);
    `xgraph.partition.placement_search.spread_host` packs it onto the real instances.
    """
    _, spans, units = _schedule(problem, placement, contended_host=False)
    return {members[0]: spans[w] for w, (k, members) in enumerate(units)
            if problem.memory_of[k] == HOST_MEMORY}


def _schedule(problem: PlacementProblem, placement: Sequence[int], *, contended_host: bool):
    """(finishing time, (start, end) per unit, units) of the list schedule by ready time."""
    units, unit_of = _units(problem, placement)
    duration = [_unit_duration(problem, placement, unit_of, members) for _, members in units]
    preds: list[set[int]] = [set() for _ in units]
    for v in range(len(problem.ids)):
        for u, _ in problem.predecessors[v]:
            if unit_of[u] != unit_of[v]:
                preds[unit_of[v]].add(unit_of[u])
    waiting = [len(p) for p in preds]
    succs: list[list[int]] = [[] for _ in units]
    for w, p in enumerate(preds):
        for x in p:
            succs[x].append(w)
    ready_at = [0.0] * len(units)
    spans = [(0.0, 0.0)] * len(units)
    heap = [(0.0, w) for w, n in enumerate(waiting) if n == 0]
    heapq.heapify(heap)
    free_at = [0.0] * len(problem.instances)
    finished, done = 0.0, 0
    while heap:
        ready, w = heapq.heappop(heap)
        k = units[w][0]
        shared = contended_host or problem.memory_of[k] != HOST_MEMORY
        start = max(ready, free_at[k]) if shared else ready
        end = start + duration[w]
        if shared:
            free_at[k] = end
        spans[w] = (start, end)
        finished = max(finished, end)
        done += 1
        for x in succs[w]:
            ready_at[x] = max(ready_at[x], end)
            waiting[x] -= 1
            if waiting[x] == 0:
                heapq.heappush(heap, (ready_at[x], x))
    return (finished if done == len(units) else math.inf), spans, units


def _units(problem: PlacementProblem, placement: Sequence[int]) -> tuple[list[tuple[int, list[int]]], list[int]]:
    """Schedulable units: each host node alone, each (non-host instance, call level) together."""
    levels = call_levels(problem, placement)
    units: list[tuple[int, list[int]]] = []
    unit_of = [0] * len(problem.ids)
    calls: dict[tuple[int, int], int] = {}
    for v in problem.order:
        k = placement[v]
        if problem.memory_of[k] == HOST_MEMORY:
            unit_of[v] = len(units)
            units.append((k, [v]))
            continue
        key = (k, levels[v])
        if key not in calls:
            calls[key] = len(units)
            units.append((k, []))
        unit_of[v] = calls[key]
        units[calls[key]][1].append(v)
    return units, unit_of


def _unit_duration(problem: PlacementProblem, placement: Sequence[int], unit_of: list[int], members: list[int]) -> float:
    """Compute plus, for a non-host call, the copies into and out of its memory."""
    k = placement[members[0]]
    device = problem.instance_device[k]
    total = sum(problem.cost[v][device] for v in members)
    home = problem.memory_of[k]
    if home == HOST_MEMORY:
        return total
    incoming: dict[int, float] = {}
    for v in members:
        for u, transfer in problem.predecessors[v]:
            if problem.memory_of[placement[u]] != home:
                incoming[u] = max(incoming.get(u, 0.0), transfer)
        outgoing = [t for w, t in problem.successors[v] if problem.memory_of[placement[w]] != home]
        if outgoing:
            total += max(outgoing)
    return total + sum(incoming.values())


def evaluate(problem: PlacementProblem, placement: Sequence[int], objective: str) -> float:
    """The named objective ("throughput" or "latency") of a placement."""
    if objective == "throughput":
        return throughput(problem, placement)
    if objective == "latency":
        return latency(problem, placement)
    raise PartitionError(f"unknown placement objective {objective!r}; use 'latency' or 'throughput'")


def placement_violations(problem: PlacementProblem, placement: Sequence[int]) -> list[str]:
    """Every rule a placement breaks (unsupported device, split colocation class, memory), in words.

    O(V). An empty list means the placement is valid.
    """
    problems: list[str] = []
    used: dict[int, float] = {}
    for v, k in enumerate(placement):
        device = problem.instance_device[k]
        if problem.cost[v][device] is None:
            problems.append(f"node {problem.ids[v]!r} cannot run on {problem.device_names[device]}")
        memory = problem.memory_of[k]
        used[memory] = used.get(memory, 0.0) + problem.memory[v]
    for members in problem.groups:
        if len({placement[v] for v in members}) > 1:
            problems.append(f"{problem.describe_group(problem.group_of[members[0]])} is split over instances")
    for memory, amount in used.items():
        if memory == HOST_MEMORY:
            cap, name = problem.host_memory, "host memory"
        else:
            cap, name = problem.capacity(problem.instance_device[memory]), "%s:%d" % problem.instances[memory]
        if cap is not None and amount > cap * (1 + 1e-9):
            problems.append(f"{name} holds {amount:.6g} bytes, more than its {cap:.6g}")
    return problems
