"""`solve_placement`: the best placement found in the time limit, with a proven lower bound.

The steps, each keeping the best valid placement so far (there is always one, or the
problem is refused as infeasible with the device or node that cannot fit):

1. *Incumbent*: first fit by support and memory (`placement_search.first_fit`).
2. *Contiguous cuts*: the segment dynamic program over several topological orders of the
   blocks, plus the paper's next-fit greedy for latency (`placement_search.contiguous_cuts`).
3. *Local search*: move one colocation class at a time while the objective falls.
4. *Integer program* (`placement_milp`) with the time that is left, capped by the
   incumbent: exact when HiGHS finishes (``optimal=True``), else its proven bound.

The bound reported is the best of HiGHS' bound and a cheap one (total work over instances
for throughput, the critical path at each node's cheapest device for latency), so every
answer says how far from optimal it can be at most.
"""
from __future__ import annotations

import math
import time
from typing import Any

from xgraph.errors import PartitionError
from xgraph.partition import placement_milp as milp
from xgraph.partition import placement_objectives as objectives
from xgraph.partition import placement_search as search
from xgraph.partition.placement_problem import PlacementProblem, PlacementSolution

OBJECTIVES = ("latency", "throughput")
_CUTS_SHARE = 0.25  # of the time limit: contiguous cuts over more orders until then
_HEURISTIC_SHARE = 0.4  # local search until then; the integer program gets the rest
# instance slots x (nodes + edges) beyond which the integer program is not tried: HiGHS checks
# its time limit only between phases, and on a 3000-node DAG with 12 instances (108k) its
# root solve ran 45 s past a 10 s limit; the published workloads are below 15k
_MILP_SIZE_LIMIT = 30_000


def solve_placement(problem: PlacementProblem, objective: str = "latency", time_limit: float = 60.0) -> PlacementSolution:
    """Place every node on a device instance, minimising latency or time per sample (throughput).

    >>> p = PlacementProblem(
    ...     nodes=[{"id": 0, "cost": {"CPU": 4.0, "ACC": 1.0}, "memory": 6},
    ...            {"id": 1, "cost": {"CPU": 4.0, "ACC": 1.0}, "memory": 6},
    ...            {"id": 2, "cost": {"CPU": 1.0}}],
    ...     edges=[{"src": 0, "dst": 1, "transfer": 0.5}, {"src": 1, "dst": 2, "transfer": 0.5}],
    ...     devices=[{"name": "CPU", "instances": 2, "host": True},
    ...              {"name": "ACC", "instances": 2, "memory": 10}])
    >>> sol = solve_placement(p, "latency", time_limit=10)
    >>> sorted(sol.assignment.items()), sol.objective, sol.optimal
    ([(0, ('ACC', 0)), (1, ('ACC', 1)), (2, ('CPU', 0))], 4.5, True)

    Worst case exponential (an integer program), bounded by `time_limit`; the heuristics are
    O(orders * S^2 * states) for S blocks plus local search passes of O(G * K * (V + E)).
    """
    if objective not in OBJECTIVES:
        raise PartitionError(f"unknown placement objective {objective!r}; use 'latency' or 'throughput'")
    if not isinstance(time_limit, (int, float)) or not time_limit > 0:
        raise PartitionError(f"time_limit must be a positive number of seconds, got {time_limit!r}")
    if not isinstance(problem, PlacementProblem):
        raise PartitionError(f"solve_placement needs a PlacementProblem, got {type(problem).__name__}")
    started = time.monotonic()
    deadline = started + time_limit
    best, method, stats = _heuristic(problem, objective, started + _CUTS_SHARE * time_limit,
                                     started + _HEURISTIC_SHARE * time_limit)
    bound = max(_cheap_bound(problem, objective), _chain_bound(problem, objective, best is not None))
    optimal = False
    value = _value(problem, objective, best) if best is not None else math.inf
    if _milp_fits(problem) and (best is None or value > bound * (1 + 1e-9) + 1e-12):
        result = _run_milp(problem, objective, value, deadline - time.monotonic() - 0.05 * time_limit)
        stats["milp"] = "optimal" if result.optimal else "infeasible" if result.infeasible else "time limit"
        candidate = _usable(problem, objective, result.placement)
        if candidate is not None and _value(problem, objective, candidate) < value - 1e-12:
            best, value, method = candidate, _value(problem, objective, candidate), "integer program"
        if result.bound is not None:
            bound = max(bound, result.bound)
        optimal = result.optimal and best is not None and value <= (result.value or 0.0) * (1 + 1e-6) + 1e-9
        if best is None:
            raise PartitionError(_explain_infeasible(problem, result.infeasible))
    elif best is None:
        raise PartitionError(_explain_infeasible(problem, False))
    bound = min(bound, value)
    optimal = optimal or value <= bound * (1 + 1e-6) + 1e-12
    return PlacementSolution(assignment=problem.to_assignment(best), objective=float(value), bound=float(bound),
                             optimal=bool(optimal), seconds=time.monotonic() - started, method=method, stats=stats)


def _heuristic(problem: PlacementProblem, objective: str, cuts_deadline: float, deadline: float):
    """The best of first fit, contiguous cuts and local search: (placement or None, method, stats)."""
    stats: dict[str, Any] = {}
    incumbent = search.first_fit(problem) or search.memory_first_fit(problem)
    candidates: list[tuple[list[int], str]] = []
    if incumbent is not None:
        stats["first_fit"] = _value(problem, objective, incumbent, usable_only=False)
        if _usable(problem, objective, incumbent) is not None:
            candidates.append((_usable(problem, objective, incumbent), "first fit"))
    for placement in search.contiguous_cuts(problem, objective, cuts_deadline):
        usable = _usable(problem, objective, placement)
        if usable is not None:
            candidates.append((usable, "contiguous cut"))
    if not candidates:
        return None, "", stats
    best, method = min(candidates, key=lambda c: _value(problem, objective, c[0]))
    before = _value(problem, objective, best)
    if objective == "throughput":
        improved = search.improve_throughput(problem, best, deadline)
    else:
        improved, _ = search.improve_latency(problem, best, deadline)
    if _value(problem, objective, improved) < before - 1e-12:
        best, method = improved, method + " + local search"
    return best, method, stats


def _usable(problem: PlacementProblem, objective: str, placement: list[int] | None) -> list[int] | None:
    """The placement if valid for the objective (latency: contiguous, host spread), else None."""
    if placement is None or objectives.placement_violations(problem, placement):
        return None
    if objective == "latency":
        if not search.is_contiguous(problem, placement):
            return None
        placement = search.spread_host(problem, placement)
        if not math.isfinite(objectives.latency(problem, placement)):
            return None
    return placement


def _value(problem: PlacementProblem, objective: str, placement: list[int], usable_only: bool = True) -> float:
    if objective == "latency" and not usable_only:
        placement = search.spread_host(problem, placement)
    return objectives.evaluate(problem, placement, objective)


def _milp_fits(problem: PlacementProblem) -> bool:
    return len(problem.instances) * (len(problem.ids) + problem.edge_count) <= _MILP_SIZE_LIMIT


def _run_milp(problem: PlacementProblem, objective: str, incumbent: float, seconds: float) -> milp.MilpResult:
    cap = incumbent if math.isfinite(incumbent) else _loose_upper_bound(problem)
    if objective == "throughput":
        return milp.solve_throughput(problem, cap, seconds)
    return milp.solve_latency(problem, cap, seconds)


def _loose_upper_bound(problem: PlacementProblem) -> float:
    """A value no placement exceeds: every cost at its worst plus every transfer twice."""
    worst = sum(max(c for c in row if c is not None) for row in problem.cost)
    copies = sum(t for succs in problem.successors for _, t in succs)
    return worst + 2 * copies + 1.0


def _cheap_bound(problem: PlacementProblem, objective: str) -> float:
    """A lower bound without search: see the module docstring. O(V + E)."""
    cheapest = [min(problem.cost[v][problem.instance_device[k]] for k in problem.allowed_instances(problem.group_of[v]))
                for v in range(len(problem.ids))]
    if objective == "throughput":
        per_class = max(sum(cheapest[v] for v in members) for members in problem.groups)
        return max(per_class, sum(cheapest) / max(1, len(problem.instances)))
    finish = [0.0] * len(problem.ids)
    for v in problem.order:
        finish[v] = cheapest[v] + max((finish[u] for u, _ in problem.predecessors[v]), default=0.0)
    return max(finish)


def _chain_bound(problem: PlacementProblem, objective: str, feasible: bool) -> float:
    """Latency only: the best exact optimum over a few heaviest paths (`search.chain_bound`)."""
    if objective != "latency" or not feasible:
        return 0.0
    cheapest = [min(c for c in row if c is not None) for row in problem.cost]
    scale = max(problem.memory) or 1.0
    total = sum(cheapest) or 1.0
    weights = (cheapest, problem.memory, [c / total + m / scale for c, m in zip(cheapest, problem.memory)])
    paths = {tuple(search.heaviest_path(problem, w)) for w in weights}
    return max((b for b in (search.chain_bound(problem, path) for path in paths) if b is not None), default=0.0)


def _explain_infeasible(problem: PlacementProblem, proven: bool) -> str:
    """Name the device whose memory the classes that need it exceed, or the largest stuck class."""
    for d, name in enumerate(problem.device_names):
        cap = problem.capacity(d)
        if cap is None:
            continue
        only_here = [g for g in range(len(problem.groups))
                     if [e for e in range(len(problem.device_names))
                         if problem.group_cost[g][e] is not None and problem.device_instances[e]] == [d]]
        need = sum(problem.group_memory[g] for g in only_here)
        room = cap if problem.device_host[d] else cap * problem.device_instances[d]
        if need > room:
            return (f"placement is infeasible: nodes that only {name} can run need {need:.6g} bytes, but "
                    f"{name} has {room:.6g} ({problem.device_instances[d]} instance(s)); add instances or memory, "
                    "or give those nodes a cost on another device")
    largest = max(range(len(problem.groups)), key=lambda g: problem.group_memory[g])
    verdict = "is infeasible" if proven else "found no valid assignment within the time limit"
    return (f"placement {verdict}: the memory of the instances cannot hold every node (largest: "
            f"{problem.describe_group(largest)} with {problem.group_memory[largest]:.6g} bytes); add memory or "
            "instances, or allow more nodes on the host")
