"""Contiguous placements by dynamic programming over a topological order of blocks.

Colocation classes are contracted into *blocks* (strongly connected pieces of the class
graph fused, since no contiguous placement can separate them). Any sequence of ideals of the
block DAG, the paper's contiguous splits, is a sequence of consecutive *segments* of some
topological order of the blocks; for a fixed order, the best way to cut it into segments and
give each a device is a dynamic program over (end of segment, instances used per device):

* throughput: ``best[b][s] = min_{a<b, d} max(best[a][s - e_d], load_d(a, b))``;
* latency (a surrogate: segments run one after the other, a host segment as long as its
  critical path): ``best[b][s] = min_{a<b, d} best[a][s - e_d] + time_d(a, b)``, host
  segments not counted against the host instances (the paper's host has as many cores as
  the graph is wide).

``load_d(a, b)`` for a non-host device is compute plus the copies in and out of the segment
(`segment_tables`); it is exact for the segment as one instance, whatever the other segments
hold, since every other instance has another memory. The search over orders (several
topological orders) is in `xgraph.partition.placement_search`.
"""
from __future__ import annotations

import itertools
import random
from collections.abc import Sequence

import networkx as nx
import numpy as np

from xgraph.partition.placement_problem import PlacementProblem

INF = float("inf")


def contract_blocks(problem: PlacementProblem) -> tuple[list[list[int]], list[int]]:
    """Blocks of colocation classes that every contiguous placement keeps together.

    Returns (classes per block, block per class); blocks are numbered in a topological
    order of the block DAG. O(V + E).

    >>> p = PlacementProblem([{"id": i, "cost": {"H": 1.0}, "colocate": c} for i, c in enumerate("xyx")],
    ...                      [{"src": 0, "dst": 1}, {"src": 1, "dst": 2}], [{"name": "H", "host": True}])
    >>> contract_blocks(p)   # 0 and 2 share a class around 1: one block of both classes
    ([[0, 1]], [0, 0])
    """
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(problem.groups)))
    for u, succs in enumerate(problem.successors):
        for v, _ in succs:
            if problem.group_of[u] != problem.group_of[v]:
                graph.add_edge(problem.group_of[u], problem.group_of[v])
    condensed = nx.condensation(graph)
    order = list(nx.lexicographical_topological_sort(condensed, key=lambda c: min(condensed.nodes[c]["members"])))
    blocks = [sorted(condensed.nodes[c]["members"]) for c in order]
    block_of = [0] * len(problem.groups)
    for b, members in enumerate(blocks):
        for g in members:
            block_of[g] = b
    return blocks, block_of


def block_orders(problem: PlacementProblem, blocks: Sequence[Sequence[int]], block_of: Sequence[int],
                 seed: int = 0):
    """Distinct topological orders of the blocks, best bets first (a generator, as many as asked).

    The given order, depth-first (a branch finished before the next: what a cut wants),
    breadth-first, then depth-first orders with random sibling order. O(V + E) each.
    """
    succs = _block_successors(problem, block_of, len(blocks))
    seen: set[tuple[int, ...]] = set()
    rng = random.Random(seed)
    policies = [None, "depth", "breadth"]
    tries = 0
    while tries < 50 + 4 * len(seen):
        tries += 1
        policy = policies[tries - 1] if tries <= len(policies) else "random depth"
        order = list(range(len(blocks))) if policy is None else _kahn(succs, policy, rng)
        if tuple(order) not in seen:
            seen.add(tuple(order))
            yield order


def _block_successors(problem: PlacementProblem, block_of: Sequence[int], count: int) -> list[set[int]]:
    succs: list[set[int]] = [set() for _ in range(count)]
    for u, outs in enumerate(problem.successors):
        bu = block_of[problem.group_of[u]]
        for v, _ in outs:
            bv = block_of[problem.group_of[v]]
            if bu != bv:
                succs[bu].add(bv)
    return succs


def _kahn(succs: Sequence[set[int]], policy: str, rng: random.Random) -> list[int]:
    indegree = [0] * len(succs)
    for outs in succs:
        for w in outs:
            indegree[w] += 1
    ready = sorted((b for b, d in enumerate(indegree) if d == 0), reverse=True)
    order: list[int] = []
    while ready:
        b = ready.pop(0) if policy == "breadth" else ready.pop()
        order.append(b)
        released = [w for w in sorted(succs[b], reverse=True) if indegree[w] == 1]
        if policy == "random depth":
            rng.shuffle(released)
        for w in succs[b]:
            indegree[w] -= 1
        ready.extend(released)
    return order


def node_positions(problem: PlacementProblem, blocks: Sequence[Sequence[int]], order: Sequence[int]) -> list[int]:
    """Position (in `order`) of the block of every node."""
    position = [0] * len(problem.ids)
    for p, b in enumerate(order):
        for g in blocks[b]:
            for v in problem.groups[g]:
                position[v] = p
    return position


def segment_tables(problem: PlacementProblem, position: Sequence[int], segments: int,
                   objective: str, *, chain: bool = False) -> list[np.ndarray]:
    """Per device, the (segments+1)^2 matrix of segment [a, b)'s load (inf where it cannot go).

    Non-host: compute + copies in + copies out. Host: compute (throughput, or latency on a
    `chain`, where every node is on the one path) or the critical path of the segment's
    nodes (latency). Memory and support are checked. O(D * S^2 + S * E).
    """
    size = segments + 1
    comm = _segment_copies(problem, position, segments)
    critical = (_segment_critical_paths(problem, position, segments)
                if objective == "latency" and not chain else None)
    tables = []
    for d in range(len(problem.device_names)):
        compute = np.zeros(size)
        bad = np.zeros(size)
        memory = np.zeros(size)
        for v, p in enumerate(position):
            c = problem.cost[v][d]
            if c is None:
                bad[p + 1] += 1
            else:
                compute[p + 1] += c
            memory[p + 1] += problem.memory[v]
        compute, bad, memory = np.cumsum(compute), np.cumsum(bad), np.cumsum(memory)
        if problem.device_host[d]:
            table = critical.copy() if critical is not None else compute[None, :] - compute[:, None]
        else:
            table = compute[None, :] - compute[:, None] + comm
        table[(bad[None, :] - bad[:, None]) > 0] = INF
        cap = problem.capacity(d)
        if cap is not None:
            table[(memory[None, :] - memory[:, None]) > cap * (1 + 1e-12)] = INF
        table[np.tril_indices(size)] = INF
        tables.append(table)
    return tables


def _segment_copies(problem: PlacementProblem, position: Sequence[int], segments: int) -> np.ndarray:
    """copies[a, b]: what a non-host instance holding exactly segment [a, b) pays for copies."""
    size = segments + 1
    # out: node w inside pays the largest transfer among its edges to positions >= b
    leaving = np.zeros((size, size))  # leaving[p, b] = sum over nodes w at p of that largest transfer
    for w, outs in enumerate(problem.successors):
        row = np.zeros(size)
        for v, t in outs:
            if position[v] != position[w]:
                row[: position[v] + 1] = np.maximum(row[: position[v] + 1], t)
        row[: position[w] + 1] = 0.0
        leaving[position[w]] += row
    cumulative = np.vstack([np.zeros(size), np.cumsum(leaving, axis=0)])  # cumulative[x, b] = sum_{p<x}
    out = np.diagonal(cumulative)[None, :] - cumulative[:size, :]
    # in: node w before a pays the largest transfer among its edges into [a, b)
    incoming = np.zeros((size, size))
    edges = sorted((position[v], position[w], t, w) for w, outs in enumerate(problem.successors) for v, t in outs
                   if position[v] != position[w])
    for a in range(segments):
        step = np.zeros(size)
        seen: dict[int, float] = {}
        for pv, pw, t, w in edges:
            if pv < a or pw >= a:
                continue
            gain = t - seen.get(w, 0.0)
            if gain > 0:
                seen[w] = t
                step[pv + 1] += gain
        incoming[a] = np.cumsum(step)
    return out + incoming


def _segment_critical_paths(problem: PlacementProblem, position: Sequence[int], segments: int) -> np.ndarray:
    """critical[a, b]: the longest host path (host cost) through the nodes of segment [a, b)."""
    size = segments + 1
    host = [d for d in range(len(problem.device_names)) if problem.device_host[d]]
    cost = [min((problem.cost[v][d] for d in host if problem.cost[v][d] is not None), default=INF)
            for v in range(len(problem.ids))]
    by_position: list[list[int]] = [[] for _ in range(segments)]
    for v in problem.order:
        by_position[position[v]].append(v)
    table = np.full((size, size), INF)
    for a in range(segments):
        longest: dict[int, float] = {}
        best = 0.0
        for b in range(a, segments):
            for v in by_position[b]:
                start = max((longest[u] for u, _ in problem.predecessors[v] if u in longest), default=0.0)
                longest[v] = start + cost[v]
                best = max(best, longest[v])
            table[a, b + 1] = best
    return table


def segment_dp(tables: Sequence[np.ndarray], counts: Sequence[int], objective: str,
               free: Sequence[bool]) -> tuple[float, list[tuple[int, int, int]]]:
    """The best cut of positions 0..S into segments: (value, [(a, b, device), ...]).

    `counts[d]` bounds the segments of device d unless `free[d]`; for throughput the value
    is the largest segment load, for latency their sum. O(prod(counts+1) * D * S^2).
    """
    size = tables[0].shape[0]
    limited = [d for d in range(len(tables)) if counts[d] > 0 and not free[d]]
    unlimited = [d for d in range(len(tables)) if free[d] and counts[d] > 0]
    combine = np.maximum if objective == "throughput" else np.add
    states = list(itertools.product(*(range(counts[d] + 1) for d in limited)))
    best: dict[tuple, np.ndarray] = {}
    back: dict[tuple, list] = {}
    for state in states:  # product() yields every state after those it extends
        value = np.full(size, INF)
        link: list = [None] * size
        if not any(state):
            value[0] = 0.0
        for i, d in enumerate(limited):
            if state[i] == 0:
                continue
            prev_state = state[:i] + (state[i] - 1,) + state[i + 1:]
            _relax(value, link, best[prev_state], tables[d], combine, (prev_state, d))
        for d in unlimited:  # a free segment follows a limited one (two in a row would be one)
            _relax(value, link, value.copy(), tables[d], combine, (state, d))
        best[state], back[state] = value, link
    final = min(states, key=lambda s: best[s][-1])
    return float(best[final][-1]), _backtrack(back, final, size - 1)


def _relax(value: np.ndarray, link: list, prev: np.ndarray, table: np.ndarray, combine, tag) -> None:
    candidates = combine(prev[:, None], table)
    starts = np.argmin(candidates, axis=0)
    values = candidates[starts, np.arange(len(value))]
    better = values < value
    for b in np.nonzero(better)[0]:
        value[b] = values[b]
        link[b] = (int(starts[b]), tag)


def _backtrack(back: dict, state: tuple, end: int) -> list[tuple[int, int, int]]:
    cuts = []
    while end > 0:
        entry = back[state][end]
        if entry is None:
            return []
        start, (prev_state, d) = entry
        cuts.append((start, end, d))
        state, end = prev_state, start
    return cuts[::-1]
