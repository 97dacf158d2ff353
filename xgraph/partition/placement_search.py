"""Heuristic placements: first fit, contiguous cuts of several orders, and local search.

Every function returns a valid placement (a list: instance index per node) or None; the
solver (`xgraph.partition.placement_solver`) keeps the best and compares it with a bound.

* `first_fit`: each colocation class, in topological order, on the first non-host
  instance that supports it and has memory left, else on the cheapest host device: what a
  support-driven placement without costs does.
* `next_fit`: the paper's latency greedy: blocks in topological order fill one non-host
  instance after another (a block that does not fit opens the next one), the rest go to
  the host. Contiguous by construction.
* `contiguous_cuts`: the segment dynamic program (`xgraph.partition.placement_segments`)
  over several topological orders.
* `improve_throughput` / `improve_latency`: move one colocation class at a time while the
  objective improves.
* `spread_host`: give host nodes host instances so that the latency schedule's host work
  overlaps as much as the instances allow.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence

from xgraph.partition import placement_objectives as objectives
from xgraph.partition import placement_segments as segments
from xgraph.partition.placement_problem import HOST_MEMORY, PlacementProblem

_DP_STATE_LIMIT = 200
_DP_BLOCK_LIMIT = 1000  # blocks beyond which the segment tables (S^2 per device, S * E to fill) are skipped


def first_fit(problem: PlacementProblem, group_order: Sequence[int] | None = None) -> list[int] | None:
    """First-fit placement by support and memory, no costs; None when memory runs out.

    O(G * K) for G classes and K instances.
    """
    placement = [0] * len(problem.ids)
    free = [problem.capacity(d) for d in problem.instance_device]
    host_free = problem.host_memory
    for g in group_order if group_order is not None else range(len(problem.groups)):
        need = problem.group_memory[g]
        chosen = None
        for k, d in enumerate(problem.instance_device):
            if problem.device_host[d] or problem.group_cost[g][d] is None:
                continue
            if free[k] is None or free[k] >= need:
                chosen = k
                break
        if chosen is None:
            hosts = [k for k, d in enumerate(problem.instance_device)
                     if problem.device_host[d] and problem.group_cost[g][d] is not None]
            if not hosts or (host_free is not None and host_free < need):
                return None
            chosen = min(hosts, key=lambda k: (problem.group_cost[g][problem.instance_device[k]], k))
            host_free = None if host_free is None else host_free - need
        elif free[chosen] is not None:
            free[chosen] -= need
        for v in problem.groups[g]:
            placement[v] = chosen
    return placement


def memory_first_fit(problem: PlacementProblem) -> list[int] | None:
    """First fit with the classes that cannot use the host first, largest first (a packing fallback)."""
    def host_ok(g: int) -> bool:
        return any(problem.device_host[d] and c is not None for d, c in enumerate(problem.group_cost[g]))
    order = sorted(range(len(problem.groups)), key=lambda g: (host_ok(g), -problem.group_memory[g], g))
    return first_fit(problem, order)


def next_fit(problem: PlacementProblem, blocks, order: Sequence[int]) -> list[int] | None:
    """The paper's latency greedy along `order`: fill non-host instances one after another."""
    placement = [0] * len(problem.ids)
    non_host = [k for k, d in enumerate(problem.instance_device) if not problem.device_host[d]]
    current, used = None, 0.0
    opened = 0
    for b in order:
        groups = blocks[b]
        need = sum(problem.group_memory[g] for g in groups)
        target = None
        if current is not None and _block_can_run(problem, groups, current, need + used):
            target, used = current, used + need
        elif opened < len(non_host) and _block_can_run(problem, groups, non_host[opened], need):
            current, used = non_host[opened], need
            opened += 1
            target = current
        if target is None:
            current = None  # a segment ends where a block cannot join it
            target = _host_instance(problem, groups)
            if target is None:
                return None
        for g in groups:
            for v in problem.groups[g]:
                placement[v] = target
    return placement


def _block_can_run(problem: PlacementProblem, groups, k: int, memory: float) -> bool:
    d = problem.instance_device[k]
    cap = problem.capacity(d)
    return all(problem.group_cost[g][d] is not None for g in groups) and (cap is None or memory <= cap)


def _host_instance(problem: PlacementProblem, groups) -> int | None:
    for k, d in enumerate(problem.instance_device):
        if problem.device_host[d] and all(problem.group_cost[g][d] is not None for g in groups):
            return k
    return None


def contiguous_cuts(problem: PlacementProblem, objective: str, deadline: float, orders: int = 64) -> list[list[int]]:
    """Placements from the segment DP over up to `orders` topological orders of the blocks, until `deadline`.

    O(orders * (S^2 * states + S * E)) for S blocks.
    """
    blocks, block_of = segments.contract_blocks(problem)
    free = [objective == "latency" and problem.device_host[d] for d in range(len(problem.device_names))]
    if len(blocks) > _DP_BLOCK_LIMIT:  # the tables are S^2 per device: only the greedy
        return [p for p in [next_fit(problem, blocks, range(len(blocks)))] if p is not None]
    counts = _capped_counts(problem, free)
    found: list[list[int]] = []
    for count, order in enumerate(segments.block_orders(problem, blocks, block_of)):
        if count >= orders or (time.monotonic() > deadline and found):
            break
        position = segments.node_positions(problem, blocks, order)
        tables = segments.segment_tables(problem, position, len(order), objective)
        value, cuts = segments.segment_dp(tables, counts, objective, free)
        if math.isfinite(value) and cuts:
            found.append(_cuts_to_placement(problem, position, cuts))
        greedy = next_fit(problem, blocks, order)
        if greedy is not None:
            found.append(greedy)
    return found


def _capped_counts(problem: PlacementProblem, free: Sequence[bool]) -> list[int]:
    counts = list(problem.device_instances)
    while math.prod(c + 1 for d, c in enumerate(counts) if not free[d]) > _DP_STATE_LIMIT:
        d = max((d for d in range(len(counts)) if not free[d]), key=lambda d: counts[d])
        counts[d] -= 1
    return counts


def _cuts_to_placement(problem: PlacementProblem, position: Sequence[int], cuts) -> list[int]:
    """Segment (a, b, device) -> the device's next instance (host segments share instance 0)."""
    first = {}
    for k, d in enumerate(problem.instance_device):
        first.setdefault(d, k)
    used = {d: 0 for d in first}
    where = [0] * (cuts[-1][1] if cuts else 0)
    for a, b, d in cuts:
        k = first[d] + used[d]
        if not problem.device_host[d] or used[d] + 1 < problem.device_instances[d]:
            used[d] += 1
        for p in range(a, b):
            where[p] = min(k, first[d] + problem.device_instances[d] - 1)
    return [where[position[v]] for v in range(len(problem.ids))]


def improve_throughput(problem: PlacementProblem, placement: list[int], deadline: float) -> list[int]:
    """Move one colocation class at a time off the busiest instances while that helps.

    A move is taken when every instance it touches ends below the load the busiest of them
    had, so the sorted load vector falls and the search ends. O(passes * G * K * degree).
    """
    placement = list(placement)
    loads = objectives.instance_loads(problem, placement)
    memory = _memory_use(problem, placement)
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for source in sorted(range(len(loads)), key=lambda k: -loads[k]):
            for g in sorted({problem.group_of[v] for v, k in enumerate(placement) if k == source}):
                if time.monotonic() > deadline:
                    break
                if _best_move(problem, placement, loads, memory, g):
                    improved = True
            if improved or time.monotonic() > deadline:
                break
    return placement


def _best_move(problem, placement, loads, memory, g) -> bool:
    members = problem.groups[g]
    source = placement[members[0]]
    touched_nodes = set(members)
    for v in members:
        touched_nodes.update(u for u, _ in problem.predecessors[v])
    before = _charges(problem, placement, touched_nodes)
    best = None
    for target in problem.allowed_instances(g):
        if target == source or not _has_room(problem, memory, g, target):
            continue
        for v in members:
            placement[v] = target
        after = _charges(problem, placement, touched_nodes)
        touched = set(before) | set(after)
        worst_before = max(loads[k] for k in touched)
        new = {k: loads[k] - before.get(k, 0.0) + after.get(k, 0.0) for k in touched}
        worst_after = max(new.values())
        if worst_after < worst_before - 1e-12 and (best is None or worst_after < best[0]):
            best = (worst_after, target, new)
    for v in members:
        placement[v] = source
    if best is None:
        return False
    _, target, new = best
    for v in members:
        placement[v] = target
    for k, value in new.items():
        loads[k] = value
    need = problem.group_memory[g]
    memory[problem.memory_of[source]] -= need
    memory[problem.memory_of[target]] = memory.get(problem.memory_of[target], 0.0) + need
    return True


def _charges(problem, placement, nodes) -> dict[int, float]:
    total: dict[int, float] = {}
    for u in nodes:
        for k, seconds in objectives.node_charges(problem, placement, u):
            total[k] = total.get(k, 0.0) + seconds
    return total


def _memory_use(problem: PlacementProblem, placement: Sequence[int]) -> dict[int, float]:
    use: dict[int, float] = {}
    for v, k in enumerate(placement):
        use[problem.memory_of[k]] = use.get(problem.memory_of[k], 0.0) + problem.memory[v]
    return use


def _has_room(problem: PlacementProblem, memory: dict[int, float], g: int, target: int) -> bool:
    where = problem.memory_of[target]
    cap = problem.host_memory if where == HOST_MEMORY else problem.capacity(problem.instance_device[target])
    return cap is None or memory.get(where, 0.0) + problem.group_memory[g] <= cap * (1 + 1e-12)


def is_contiguous(problem: PlacementProblem, placement: Sequence[int]) -> bool:
    """Whether every non-host instance runs its nodes as one call (the latency search space)."""
    return max(objectives.call_levels(problem, placement), default=0) <= 1


def improve_latency(problem: PlacementProblem, placement: list[int], deadline: float) -> tuple[list[int], float]:
    """Move classes at the border of two instances (or to the host) while latency falls.

    Only contiguous placements are visited. Each trial is one latency evaluation, O(V + E)
    log V; a pass tries every class that has a neighbour elsewhere.
    """
    placement = spread_host(problem, list(placement))
    value = objectives.latency(problem, placement)
    memory = _memory_use(problem, placement)
    improved = True
    while improved and time.monotonic() < deadline:
        improved = False
        for g in range(len(problem.groups)):
            if time.monotonic() > deadline:
                break
            trial = _latency_move(problem, placement, memory, g, value)
            if trial is not None:
                placement, value = trial
                memory = _memory_use(problem, placement)
                improved = True
    return placement, value


def _latency_move(problem, placement, memory, g, value):
    members = problem.groups[g]
    source = placement[members[0]]
    targets = set()
    for v in members:
        for u, _ in (*problem.predecessors[v], *problem.successors[v]):
            if placement[u] != source:
                targets.add(placement[u])
    host = [k for k in problem.allowed_instances(g) if problem.memory_of[k] == HOST_MEMORY]
    targets.update(host[:1])
    allowed = set(problem.allowed_instances(g))
    best = None
    for target in sorted(targets):
        if target == source or target not in allowed or not _has_room(problem, memory, g, target):
            continue
        trial = list(placement)
        for v in members:
            trial[v] = target
        if not is_contiguous(problem, trial):
            continue
        trial = spread_host(problem, trial)
        score = objectives.latency(problem, trial)
        if score < value - 1e-12 and (best is None or score < best[1]):
            best = (trial, score)
    return best


def spread_host(problem: PlacementProblem, placement: list[int]) -> list[int]:
    """Host instances for host nodes: interval-partition their unlimited-core latency schedule.

    Host nodes of one host device are taken in order of their start time in a schedule where
    every host node has a core of its own, and each goes to the instance of its device that
    became free first. When the instances suffice, the latency equals the paper's (which
    assumes as many cores as the graph is wide). O(V log V + the schedule).
    """
    placement = list(placement)
    spans: dict[int, tuple[float, float]] = {}
    for v, (start, end) in objectives.host_start_times(problem, placement).items():
        g = problem.group_of[v]
        low, high = spans.get(g, (start, end))
        spans[g] = (min(low, start), max(high, end))
    free_at: dict[int, float] = {}
    for g in sorted(spans, key=lambda g: (spans[g][0], g)):
        start, end = spans[g]
        d = problem.instance_device[placement[problem.groups[g][0]]]
        first = problem.instances.index((problem.device_names[d], 0))
        options = range(first, first + problem.device_instances[d])
        idle = [k for k in options if free_at.get(k, 0.0) <= start + 1e-12]
        k = idle[0] if idle else min(options, key=lambda k: free_at.get(k, 0.0))
        free_at[k] = max(free_at.get(k, 0.0), start) + (end - start)
        for v in problem.groups[g]:
            placement[v] = k
    return placement


def chain_bound(problem: PlacementProblem, path: Sequence[int]) -> float | None:
    """A lower bound on the latency: the exact optimum of the subproblem on one path's nodes.

    Dropping nodes only relaxes (less memory, fewer copies, a subset of every call stays
    contiguous), and a path's nodes have one topological order, so the segment dynamic
    program on it is exact. None when the instance counts had to be capped. O(L^2 * states).
    """
    if len(path) > _DP_BLOCK_LIMIT:
        return None
    keep = set(path)
    names = problem.device_names
    nodes = [{"id": v, "memory": problem.memory[v], "colocate": problem.group_of[v],
              "cost": {names[d]: c for d, c in enumerate(problem.cost[v]) if c is not None}} for v in path]
    edges = [{"src": u, "dst": v, "transfer": t} for u in path for v, t in problem.successors[u] if v in keep]
    devices = [{"name": n, "instances": problem.device_instances[d], "host": problem.device_host[d],
                "memory": problem.device_memory[d]} for d, n in enumerate(names)]
    sub = PlacementProblem(nodes, edges, devices)
    free = [sub.device_host[d] for d in range(len(names))]
    counts = _capped_counts(sub, free)
    if counts != list(sub.device_instances):
        return None
    blocks, block_of = segments.contract_blocks(sub)
    order = list(range(len(blocks)))
    position = segments.node_positions(sub, blocks, order)
    tables = segments.segment_tables(sub, position, len(order), "latency", chain=True)
    value, _ = segments.segment_dp(tables, counts, "latency", free)
    return value if math.isfinite(value) else None


def heaviest_path(problem: PlacementProblem, weight: Sequence[float]) -> list[int]:
    """The path with the largest total weight (O(V + E))."""
    best = [0.0] * len(problem.ids)
    back = [-1] * len(problem.ids)
    for v in problem.order:
        before = max(problem.predecessors[v], key=lambda p: best[p[0]], default=None)
        if before is not None:
            back[v] = before[0]
        best[v] = weight[v] + (best[before[0]] if before is not None else 0.0)
    v = max(range(len(problem.ids)), key=lambda v: best[v])
    path = []
    while v != -1:
        path.append(v)
        v = back[v]
    return path[::-1]
