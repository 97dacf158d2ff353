"""Integer programs for both objectives, solved by HiGHS through `scipy.optimize.milp`.

Variables ``x[g, k]`` put colocation class g on instance k (only where g may run and
fits). Instances of one device are interchangeable, so the i-th class (in class order) that
may use a device is only offered its first i+1 instances: every placement can be renamed
into that form, and the search space shrinks by the factorial of the instance count.

* **throughput** (any placement): minimise ``L`` with, for every instance k,
  ``sum_g c(g, k) x[g, k] + sum_u (out[u, k] + in[u, k]) <= L``, where for an edge
  ``u -> v`` with transfer t and non-host k, ``out[u, k] >= t (x[u, k] - x[v, k])`` and
  ``in[u, k] >= t (x[v, k] - x[u, k])`` (host instances pay no copies).
* **latency** (one contiguous call per non-host instance, the paper's integer program with
  ``q = 1``): host classes are ``h[g, d]`` per host device with as many cores as needed;
  a call starts after every node feeding it (``start_k >= lat[u] - M (1 - in_k(u))``),
  finishes after compute and copies, and its nodes end with it
  (``lat[v] >= finish_k - M (1 - x[v, k])``); host nodes follow their predecessors;
  contiguity uses the paper's ``z`` variables; ``M`` is the incumbent's latency, which also
  caps the objective.

Both return the solver's placement (or None), its objective, HiGHS' proven lower bound and
whether HiGHS proved optimality. Building is O(K (V + E)) variables and constraints.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from xgraph.partition.placement_problem import HOST_MEMORY, PlacementProblem


@dataclass
class MilpResult:
    """What HiGHS found: a placement (None if none in time), its value, the bound, and proof."""

    placement: list[int] | None
    value: float | None
    bound: float | None
    optimal: bool
    infeasible: bool


class _Model:
    """Sparse rows built term by term; one column per variable."""

    def __init__(self) -> None:
        self.lower: list[float] = []
        self.upper: list[float] = []
        self.integer: list[int] = []
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.row_lower: list[float] = []
        self.row_upper: list[float] = []

    def var(self, low: float = 0.0, high: float = np.inf, integer: bool = False) -> int:
        self.lower.append(low)
        self.upper.append(high)
        self.integer.append(1 if integer else 0)
        return len(self.lower) - 1

    def row(self, terms, low: float = -np.inf, high: float = np.inf) -> None:
        r = len(self.row_lower)
        for col, val in terms:
            if val:
                self.rows.append(r)
                self.cols.append(col)
                self.vals.append(float(val))
        self.row_lower.append(low)
        self.row_upper.append(high)

    def solve(self, objective_col: int, seconds: float):
        c = np.zeros(len(self.lower))
        c[objective_col] = 1.0
        matrix = coo_array((self.vals, (self.rows, self.cols)), shape=(len(self.row_lower), len(self.lower)))
        return milp(c, integrality=np.array(self.integer), bounds=Bounds(self.lower, self.upper),
                    constraints=LinearConstraint(matrix.tocsr(), self.row_lower, self.row_upper),
                    options={"time_limit": max(seconds, 0.1), "mip_rel_gap": 1e-6, "disp": False})


def _class_variables(model: _Model, problem: PlacementProblem, instances) -> dict[tuple[int, int], int]:
    """x[g, k] for the instances each class may use, with the interchangeable-instance rule."""
    x: dict[tuple[int, int], int] = {}
    rank: dict[int, int] = {}
    for g in range(len(problem.groups)):
        seen_devices = set()
        for k in problem.allowed_instances(g):
            if k not in instances:
                continue
            d = problem.instance_device[k]
            first = problem.instances.index((problem.device_names[d], 0))
            if k - first > rank.get(d, 0):
                continue
            seen_devices.add(d)
            x[g, k] = model.var(0, 1, integer=True)
        for d in seen_devices:
            rank[d] = rank.get(d, 0) + 1
    return x


def _memory_rows(model: _Model, problem: PlacementProblem, x) -> None:
    by_memory: dict[int, list] = {}
    for (g, k), col in x.items():
        by_memory.setdefault(problem.memory_of[k], []).append((col, problem.group_memory[g]))
    for memory, terms in by_memory.items():
        cap = problem.host_memory if memory == HOST_MEMORY else problem.capacity(problem.instance_device[memory])
        if cap is not None:
            model.row(terms, high=cap)


def _difference(scale: float, plus: int | None, minus: int | None) -> list[tuple[int, float]]:
    """Terms of ``scale * (plus - minus)``, a missing column being a zero variable."""
    terms = []
    if plus is not None:
        terms.append((plus, -scale))
    if minus is not None:
        terms.append((minus, scale))
    return terms


def _copy_variables(model, problem, member, k, flags: bool = False):
    """Copy variables of non-host instance k (member(u): u's x column on k, or None).

    Returns (out terms, in terms, {u: in-flag column}) where ``out >= t (x_u - x_v)`` and
    ``in >= t (x_v - x_u)`` per edge; flags (for latency) are the same without the t.
    """
    out_terms, in_terms, incoming = [], [], {}
    for u, succs in enumerate(problem.successors):
        pairs = [(v, t) for v, t in succs if problem.group_of[v] != problem.group_of[u]
                 and (member(u) is not None or member(v) is not None)]
        if not pairs:
            continue
        if member(u) is not None:
            out = model.var()
            out_terms.append((out, 1.0))
            for v, t in pairs:
                model.row([(out, 1.0)] + _difference(t, member(u), member(v)), low=0.0)
        receiving = [(v, t) for v, t in pairs if member(v) is not None]
        if receiving:
            cost = model.var()
            in_terms.append((cost, 1.0))
            flag = model.var(0, 1) if flags else None
            if flags:
                incoming[u] = flag
            for v, t in receiving:
                model.row([(cost, 1.0)] + _difference(t, member(v), member(u)), low=0.0)
                if flags:
                    model.row([(flag, 1.0)] + _difference(1.0, member(v), member(u)), low=0.0)
    return out_terms, in_terms, incoming


def solve_throughput(problem: PlacementProblem, incumbent: float, seconds: float) -> MilpResult:
    """Minimise the largest instance load exactly (any placement)."""
    model = _Model()
    x = _class_variables(model, problem, set(range(len(problem.instances))))
    load = model.var(0.0, incumbent * (1 + 1e-9) + 1e-12)
    _assignment_rows(model, problem, x, extra={})
    _memory_rows(model, problem, x)
    for k, d in enumerate(problem.instance_device):
        def member(u, k=k):
            return x.get((problem.group_of[u], k))
        terms = [(col, problem.group_cost[g][d]) for (g, kk), col in x.items() if kk == k]
        if problem.memory_of[k] != HOST_MEMORY:
            out_terms, in_terms, _ = _copy_variables(model, problem, member, k)
            terms += out_terms + in_terms
        if terms:
            model.row(terms + [(load, -1.0)], high=0.0)
    result = model.solve(load, seconds)
    placement = _read_placement(problem, x, {}, result)
    return _result(result, placement)


def solve_latency(problem: PlacementProblem, incumbent: float, seconds: float) -> MilpResult:
    """Minimise one job's finishing time over contiguous placements (host cores unlimited)."""
    model = _Model()
    big = incumbent * (1 + 1e-6) + 1e-9
    non_host = {k for k, d in enumerate(problem.instance_device) if not problem.device_host[d]}
    x = _class_variables(model, problem, non_host)
    host = {(g, d): model.var(0, 1, integer=True) for g in range(len(problem.groups))
            for d in range(len(problem.device_names))
            if problem.device_host[d] and problem.device_instances[d] and problem.group_cost[g][d] is not None
            and problem.fits(g, d)}
    _assignment_rows(model, problem, x, extra=host)
    _memory_rows(model, problem, x)
    total = model.var(0.0, big)
    lat = [model.var(0.0, big) for _ in problem.ids]
    for v in range(len(problem.ids)):
        model.row([(total, 1.0), (lat[v], -1.0)], low=0.0)
        on_host = [(host[problem.group_of[v], d], -problem.cost[v][d]) for d in range(len(problem.device_names))
                   if (problem.group_of[v], d) in host]
        model.row([(lat[v], 1.0)] + on_host, low=0.0)
        for u, _ in problem.predecessors[v]:
            model.row([(lat[v], 1.0), (lat[u], -1.0)] + on_host, low=0.0)
    _path_rows(model, problem, x, host, total, big)
    for k in sorted(non_host):
        _call_rows(model, problem, x, lat, k, big)
    result = model.solve(total, seconds)
    placement = _read_placement(problem, x, host, result)
    return _result(result, placement)


def _path_rows(model, problem, x, host, total, big) -> None:
    """Every path's compute fits in the latency: ``T >= e[v] >= e[u] + c(v)`` (a tight LP cut).

    Valid because a path crosses each contiguous call once, inside one call its nodes
    take part of the call's time, and a call starts after the previous one on the path.
    """
    cost_terms: dict[int, list] = {}
    places: dict[int, set[int]] = {}
    for (g, k), col in x.items():
        cost_terms.setdefault(g, []).append((col, problem.instance_device[k]))
        places.setdefault(g, set()).add(k)
    for (g, d), col in host.items():
        cost_terms.setdefault(g, []).append((col, d))
    early = [model.var(0.0, big) for _ in problem.ids]
    for v in range(len(problem.ids)):
        own = [(col, -problem.cost[v][d]) for col, d in cost_terms.get(problem.group_of[v], [])]
        model.row([(early[v], 1.0)] + own, low=0.0)
        model.row([(total, 1.0), (early[v], -1.0)], low=0.0)
        for u, transfer in problem.predecessors[v]:
            model.row([(early[v], 1.0), (early[u], -1.0)] + own, low=0.0)
            if not transfer or problem.group_of[u] == problem.group_of[v]:
                continue
            for k in places.get(problem.group_of[u], set()) | places.get(problem.group_of[v], set()):
                # a copy out of k (u there, v not) or into k (v there, u not) lies on the path too
                xu, xv = x.get((problem.group_of[u], k)), x.get((problem.group_of[v], k))
                base = [(early[v], 1.0), (early[u], -1.0)] + own
                model.row(base + _difference(transfer, xu, xv), low=0.0)
                model.row(base + _difference(transfer, xv, xu), low=0.0)


def _call_rows(model, problem, x, lat, k, big) -> None:
    """Contiguity, start, finish and node latencies of non-host instance k's call."""
    d = problem.instance_device[k]

    def member(u):
        return x.get((problem.group_of[u], k))
    if not any(member(u) is not None for u in range(len(problem.ids))):
        return
    start, finish = model.var(), model.var()
    z = [model.var(0.0, 1.0) for _ in problem.ids]
    for v in range(len(problem.ids)):
        if member(v) is not None:
            model.row([(z[v], 1.0), (member(v), -1.0)], low=0.0)
            model.row([(lat[v], 1.0), (finish, -1.0), (member(v), -big)], low=-big)
        for u, _ in problem.predecessors[v]:
            model.row([(z[v], 1.0), (z[u], -1.0)], high=0.0)
            terms = [(z[v], 1.0)]
            if member(v) is not None:
                terms.append((member(v), -1.0))
            if member(u) is not None:
                terms.append((member(u), 1.0))
            model.row(terms, high=1.0)
    out_terms, in_terms, incoming = _copy_variables(model, problem, member, k, flags=True)
    for u, flag in incoming.items():
        model.row([(start, 1.0), (lat[u], -1.0), (flag, -big)], low=-big)
    compute = [(col, -problem.group_cost[g][d]) for (g, kk), col in x.items() if kk == k]
    copies = [(col, -1.0) for col, _ in out_terms + in_terms]
    model.row([(finish, 1.0), (start, -1.0)] + compute + copies, low=0.0, high=0.0)


def _assignment_rows(model, problem, x, extra) -> None:
    columns: dict[int, list[int]] = {}
    for (g, _), col in list(x.items()) + list(extra.items()):
        columns.setdefault(g, []).append(col)
    for g in range(len(problem.groups)):
        model.row([(col, 1.0) for col in columns.get(g, [])], low=1.0, high=1.0)


def _read_placement(problem, x, host, result) -> list[int] | None:
    if result.x is None:
        return None
    chosen: dict[int, int] = {}
    for (g, k), col in x.items():
        if result.x[col] > 0.5:
            chosen[g] = k
    for (g, d), col in host.items():
        if result.x[col] > 0.5:
            chosen[g] = problem.instances.index((problem.device_names[d], 0))
    if len(chosen) != len(problem.groups):
        return None
    return [chosen[problem.group_of[v]] for v in range(len(problem.ids))]


def _result(result, placement) -> MilpResult:
    bound = getattr(result, "mip_dual_bound", None)
    if bound is not None and not np.isfinite(bound):
        bound = None
    return MilpResult(placement=placement, value=None if result.x is None else float(result.fun),
                      bound=None if bound is None else float(bound), optimal=result.status == 0,
                      infeasible=result.status == 2)
