"""Partition scale: merge_subgraph on 1k/10k/100k-op graphs against two baselines, same run.

Graphs: chains (op i reads op i-1), residual ladders (op i reads op i-1 and op i-8) and, as
a harder case for wave grouping, random local DAGs (op i reads 1-2 of the 32 ops before it).
A seeded 1% or 25% of the ops are unsupported; the supported ones are merged.

Columns (times in seconds, best of --repeat, garbage collector paused for every contender):

* ours s: `merge_subgraph` end to end (checks, grouping, apply to the subgraph tree).
* group s: `group_children` alone, the part comparable to the baselines, which only group.
* wave: plain topological waves (group supported children by longest-path level, where the
  level grows at every supported/unsupported boundary), implemented below.
* naive: torch.fx CapabilityBasedPartitioner style: children in reverse topological order,
  each supported one tries to merge with every existing partition, checking reachability
  with a DFS on every merge. Skipped above --naive-max-ops or when it passes --naive-budget.
* #: number of merged subgraphs of the supported label; "#/wave" and "t/wave" compare ours
  with the wave baseline; check is "ok" when ours has no cycle and no more groups than waves.

    python benchmarks/partition_scale.py [--sizes 1000,10000,100000] [--repeat 1]
"""
from __future__ import annotations

import argparse
import gc
import random
import time
from collections.abc import Callable
from typing import Any

import networkx as nx

from xgraph import Graph, Subgraph
from xgraph.partition import group_children, merge_subgraph

FAMILIES = ("chain", "ladder", "random")
UNSUPPORTED = (0.01, 0.25)


class BudgetExceeded(Exception):
    """The naive baseline ran past its time budget."""


def build(family: str, n: int, seed: int = 0) -> Graph:
    """A graph of `n` ops of one family, with one leaf child per op."""
    rng = random.Random(seed)
    g = Graph(f"{family}{n}")
    g.create_input("x", [1, 8])
    for i in range(n):
        if i == 0:
            inputs = ["x"]
        elif family == "chain":
            inputs = [f"n{i - 1}"]
        elif family == "ladder":
            inputs = [f"n{i - 1}"] + ([f"n{i - 8}"] if i >= 8 else [])
        else:
            window = range(max(0, i - 32), i)
            inputs = [f"n{j}" for j in sorted(set(rng.choices(window, k=rng.randint(1, 2))))]
        g.create_op(f"n{i}", "Add" if len(inputs) > 1 else "Relu", inputs=inputs)
    g.get_root_subgraph().create_child_subgraph()
    return g


def supported_children(graph: Graph, fraction: float, seed: int = 1) -> set[Subgraph]:
    """The children of all ops except a seeded `fraction` of them."""
    ops = graph.get_ops()
    unsupported = set(random.Random(seed).sample(range(len(ops)), round(fraction * len(ops))))
    return {graph.get_leaf_subgraph(op) for i, op in enumerate(ops) if i not in unsupported}


def children_graph(graph: Graph) -> tuple[list[Subgraph], list[list[int]], list[list[int]]]:
    """Children in a topological order (Kahn), with predecessor and successor index lists."""
    root = graph.get_root_subgraph()
    child_of = {op: c for c in root.get_children() for op in c.get_ops()}
    index: dict[Subgraph, int] = {}
    for op in graph.get_ops():
        index.setdefault(child_of[op], len(index))
    preds: list[set[int]] = [set() for _ in index]
    for op in graph.get_ops():
        v = index[child_of[op]]
        preds[v].update(index[child_of[p]] for p in op.get_input_ops() if index[child_of[p]] != v)
    succs: list[list[int]] = [[] for _ in index]
    for v, sources in enumerate(preds):
        for u in sources:
            succs[u].append(v)
    waiting = [len(p) for p in preds]
    order = [v for v in range(len(index)) if not waiting[v]]
    for u in order:
        for v in succs[u]:
            waiting[v] -= 1
            if not waiting[v]:
                order.append(v)
    position = {v: i for i, v in enumerate(order)}
    children = list(index)
    return ([children[v] for v in order], [sorted(position[u] for u in preds[v]) for v in order],
            [sorted(position[w] for w in succs[v]) for v in order])


def wave_baseline(graph: Graph, supported: set[Subgraph]) -> list[list[Subgraph]]:
    """Plain topological waves: the level grows by one across every boundary; group by level."""
    children, preds, _ = children_graph(graph)
    is_supported = [c in supported for c in children]
    level = [0] * len(children)
    for v, sources in enumerate(preds):
        level[v] = max((level[u] + (not (is_supported[u] and is_supported[v])) for u in sources), default=0)
    groups: dict[int, list[Subgraph]] = {}
    for child, ok, lv in zip(children, is_supported, level):
        if ok:
            groups.setdefault(lv, []).append(child)
    return list(groups.values())


def naive_baseline(graph: Graph, supported: set[Subgraph], budget: float) -> list[list[Subgraph]]:
    """torch.fx CapabilityBasedPartitioner style: merge with every partition, DFS cycle check per merge."""
    deadline = time.perf_counter() + budget
    children, _, succs = children_graph(graph)
    assignment: dict[int, int] = {}
    partitions: dict[int, set[int]] = {}
    for v in reversed(range(len(children))):
        if time.perf_counter() > deadline:
            raise BudgetExceeded
        if children[v] not in supported:
            continue
        partitions[v] = {v}
        assignment[v] = v
        for other in [p for p in partitions if p != v]:
            if not _merge_makes_cycle(partitions[v] | partitions[other], succs):
                for node in partitions[other]:
                    assignment[node] = v
                partitions[v] |= partitions.pop(other)
    return [[children[u] for u in sorted(nodes)] for nodes in partitions.values()]


def _merge_makes_cycle(merged: set[int], succs: list[list[int]]) -> bool:
    """True when a path leaves `merged` and comes back (a DFS from its outside successors)."""
    stack = [w for u in merged for w in succs[u] if w not in merged]
    seen = set(stack)
    while stack:
        for w in succs[stack.pop()]:
            if w in merged:
                return True
            if w not in seen:
                seen.add(w)
                stack.append(w)
    return False


def acyclic(graph: Graph) -> bool:
    """No cycle among the root's children (networkx on the contracted graph)."""
    root = graph.get_root_subgraph()
    child_of = {op: c for c in root.get_children() for op in c.get_ops()}
    q = nx.DiGraph()
    q.add_nodes_from(root.get_children())
    q.add_edges_from((child_of[p], child_of[op]) for op in graph.get_ops() for p in op.get_input_ops()
                     if child_of[p] is not child_of[op])
    return nx.is_directed_acyclic_graph(q)


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Run `fn` once with the garbage collector paused (the same conditions for every contender)."""
    gc.collect()
    gc.disable()
    try:
        start = time.perf_counter()
        result = fn()
        return time.perf_counter() - start, result
    finally:
        gc.enable()


def measure(family: str, n: int, fraction: float, repeat: int, naive_max_ops: int, naive_budget: float) -> dict:
    """One table row."""
    row: dict[str, Any] = {"family": family, "ops": n, "unsupported": f"{fraction:.0%}"}
    best: dict[str, float] = {}
    graph = ours = waves = None
    for _ in range(repeat):
        graph = build(family, n)
        supported = supported_children(graph, fraction)
        root = graph.get_root_subgraph()
        t_group, _ = timed(lambda: group_children(root, dict.fromkeys(supported, "AICORE")))
        t_wave, waves = timed(lambda: wave_baseline(graph, supported))
        t_ours, ours = timed(lambda: merge_subgraph(supported))
        for key, t in (("group", t_group), ("wave", t_wave), ("ours", t_ours)):
            best[key] = min(best.get(key, t), t)
    row.update({"ours s": best["ours"], "group s": best["group"], "ours #": len(ours),
                "wave s": best["wave"], "wave #": len(waves)})
    if n > naive_max_ops:
        row["naive s"] = row["naive #"] = "skipped"
    else:
        fresh = build(family, n)
        supported = supported_children(fresh, fraction)
        try:
            row["naive s"], naive = timed(lambda: naive_baseline(fresh, supported, naive_budget))
            row["naive #"] = len(naive)
        except BudgetExceeded:
            row["naive s"] = row["naive #"] = f"skipped (>{naive_budget:g}s)"
    row["#/wave"] = len(ours) / max(1, len(waves))
    row["t/wave"] = best["group"] / best["wave"]
    row["check"] = "ok" if len(ours) <= len(waves) and acyclic(graph) else "FAIL"
    return row


def print_table(rows: list[dict]) -> None:
    """Rows as an aligned text table."""
    columns = ["family", "ops", "unsupported", "ours s", "group s", "ours #", "wave s", "wave #",
               "naive s", "naive #", "#/wave", "t/wave", "check"]
    cells = [[_cell(row[c]) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths)))
    for r in cells:
        print("  ".join(c.rjust(w) for c, w in zip(r, widths)))


def _cell(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def main() -> None:
    """Parse arguments, measure every family x size x unsupported fraction, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--naive-max-ops", type=int, default=10_000)
    parser.add_argument("--naive-budget", type=float, default=10.0, help="seconds per naive run")
    args = parser.parse_args()
    rows = []
    for family in args.families.split(","):
        for n in (int(s) for s in args.sizes.split(",")):
            for fraction in UNSUPPORTED:
                rows.append(measure(family, n, fraction, args.repeat, args.naive_max_ops, args.naive_budget))
                print(f"  measured {family} {n} ops {fraction:.0%} unsupported", flush=True)
    print_table(rows)
    if any(row["check"] != "ok" for row in rows):
        raise SystemExit("check failed: see the check column")


if __name__ == "__main__":
    main()
