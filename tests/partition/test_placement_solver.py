"""solve_placement: optimal on small DAGs (brute force), valid always, refuses what cannot fit.

The oracles here are independent of the code under test: a few-line throughput load, a
few-line latency of contiguous calls (networkx for the call order), a convexity test, and a
validity checker written from the model's rules.
"""
from __future__ import annotations

import doctest
import importlib.util
import itertools
import random
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

import xgraph.partition.placement_objectives as objectives_module
import xgraph.partition.placement_problem as problem_module
import xgraph.partition.placement_segments as segments_module
import xgraph.partition.placement_solver as solver_module
from xgraph.errors import PartitionError, XGraphError
from xgraph.partition import PlacementProblem, solve_placement

ROOT = Path(__file__).resolve().parents[2]


# -- independent oracles -----------------------------------------------------------------------
def memory_key(devices, where):
    """The memory an instance uses: 'host' for every host instance, else the instance itself."""
    host = {d["name"] for d in devices if d.get("host")}
    return "host" if where[0] in host else where


def oracle_throughput(nodes, edges, devices, assignment):
    """Largest load: compute, plus for a non-host instance each node's copy out and each copy in."""
    load = {}
    for n in nodes:
        load[assignment[n["id"]]] = load.get(assignment[n["id"]], 0.0) + n["cost"][assignment[n["id"]][0]]
    for n in nodes:
        u = n["id"]
        out = [(e["transfer"], assignment[e["dst"]]) for e in edges if e["src"] == u
               and memory_key(devices, assignment[e["dst"]]) != memory_key(devices, assignment[u])]
        if out and memory_key(devices, assignment[u]) != "host":
            load[assignment[u]] += max(t for t, _ in out)
        for where in {w for _, w in out if memory_key(devices, w) != "host"}:
            load[where] = load.get(where, 0.0) + max(t for t, w in out if w == where)
    return max(load.values())


def contiguous(edges, ids, members):
    """No path leaves `members` and comes back."""
    graph = nx.DiGraph([(e["src"], e["dst"]) for e in edges])
    graph.add_nodes_from(ids)
    return not any(nx.ancestors(graph, v) & members and nx.descendants(graph, v) & members
                   for v in ids if v not in members)


def oracle_latency(nodes, edges, devices, assignment):
    """One job's finish: host nodes alone (unlimited cores), each non-host instance one call."""
    host = {d["name"] for d in devices if d.get("host")}
    unit = {n["id"]: (n["id"],) if assignment[n["id"]][0] in host else assignment[n["id"]] for n in nodes}
    graph = nx.DiGraph()
    graph.add_nodes_from(set(unit.values()))
    graph.add_edges_from((unit[e["src"]], unit[e["dst"]]) for e in edges if unit[e["src"]] != unit[e["dst"]])
    if not nx.is_directed_acyclic_graph(graph):
        return float("inf")
    cost = {n["id"]: n["cost"][assignment[n["id"]][0]] for n in nodes}
    finish = {}
    for w in nx.topological_sort(graph):
        members = [v for v, x in unit.items() if x == w]
        start = max((finish[p] for p in graph.predecessors(w)), default=0.0)
        duration = sum(cost[v] for v in members)
        if assignment[members[0]][0] not in host:
            ins, outs = {}, {}
            for e in edges:
                if e["dst"] in members and e["src"] not in members:
                    ins[e["src"]] = max(ins.get(e["src"], 0.0), e["transfer"])
                if e["src"] in members and e["dst"] not in members:
                    outs[e["src"]] = max(outs.get(e["src"], 0.0), e["transfer"])
            duration += sum(ins.values()) + sum(outs.values())
        finish[w] = start + duration
    return max(finish.values())


def check_valid(nodes, devices, assignment):
    """Every node placed on an existing instance of a device that runs it, classes together, memory kept."""
    count = {d["name"]: d.get("instances", 1) for d in devices}
    used = {}
    for n in nodes:
        name, index = assignment[n["id"]]
        assert n["cost"].get(name) is not None, f"{n['id']} on {name}, which cannot run it"
        assert name in count, f"{n['id']} on unknown device {name}"
        assert 0 <= index < count[name]
        key = memory_key(devices, (name, index))
        used[key] = used.get(key, 0.0) + n.get("memory", 0)
    for d in devices:
        if d.get("memory") is not None and not d.get("host"):
            for index in range(d.get("instances", 1)):
                assert used.get((d["name"], index), 0.0) <= d["memory"] + 1e-9
    classes = {}
    for n in nodes:
        if n.get("colocate") is not None:
            classes.setdefault(n["colocate"], set()).add(assignment[n["id"]])
    assert all(len(places) == 1 for places in classes.values())


def random_problem(seed, *, host_cores, host_pairs=True):
    """A random DAG of 4-6 nodes, some unsupported on ACC, memory that binds, maybe a colocation pair.

    Without `host_pairs` the pair runs on ACC only: on the host a class shares one core, so
    its nodes take turns, which the latency oracle's unlimited host cores do not model.
    """
    rng = random.Random(seed)
    n = rng.randint(4, 6)
    nodes = []
    for v in range(n):
        acc = None if rng.random() < 0.2 else round(rng.uniform(0.1, 2.0), 2)
        nodes.append({"id": v, "cost": {"CPU": round(rng.uniform(0.5, 5.0), 2), "ACC": acc},
                      "memory": rng.randint(1, 5)})
    if rng.random() < 0.4:
        a, b = rng.sample(range(n), 2)
        if nodes[a]["cost"]["ACC"] is not None and nodes[b]["cost"]["ACC"] is not None:
            nodes[a]["colocate"] = nodes[b]["colocate"] = "pair"
            if not host_pairs:
                nodes[a]["cost"]["CPU"] = nodes[b]["cost"]["CPU"] = None
                nodes[a]["memory"] = nodes[b]["memory"] = 2
    edges = [{"src": u, "dst": v, "transfer": round(rng.uniform(0.0, 1.0), 2)}
             for v in range(n) for u in range(v) if rng.random() < 0.4]
    devices = [{"name": "CPU", "instances": host_cores, "host": True},
               {"name": "ACC", "instances": 2, "memory": rng.randint(5, 9)}]
    return nodes, edges, devices


def all_assignments(nodes, devices, places):
    for choice in itertools.product(places, repeat=len(nodes)):
        assignment = {n["id"]: where for n, where in zip(nodes, choice)}
        try:
            check_valid(nodes, devices, assignment)
        except AssertionError:
            continue
        yield assignment


# -- optimal on small problems -------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_throughput_matches_brute_force(seed):
    nodes, edges, devices = random_problem(seed, host_cores=2)
    places = [("CPU", 0), ("CPU", 1), ("ACC", 0), ("ACC", 1)]
    best = min(oracle_throughput(nodes, edges, devices, a) for a in all_assignments(nodes, devices, places))
    sol = solve_placement(PlacementProblem(nodes, edges, devices), "throughput", time_limit=20)
    check_valid(nodes, devices, sol.assignment)
    assert sol.objective == pytest.approx(oracle_throughput(nodes, edges, devices, sol.assignment))
    assert sol.objective == pytest.approx(best, rel=1e-6)
    assert sol.optimal and sol.bound == pytest.approx(best, rel=1e-5)


@pytest.mark.parametrize("seed", range(12))
def test_latency_matches_brute_force(seed):
    nodes, edges, devices = random_problem(seed, host_cores=6, host_pairs=False)
    ids = [n["id"] for n in nodes]
    places = [("CPU", 0), ("ACC", 0), ("ACC", 1)]
    best = float("inf")
    for a in all_assignments(nodes, devices, places):
        calls = [{v for v in ids if a[v] == ("ACC", k)} for k in (0, 1)]
        if all(contiguous(edges, ids, c) for c in calls if c):
            best = min(best, oracle_latency(nodes, edges, devices, a))
    sol = solve_placement(PlacementProblem(nodes, edges, devices), "latency", time_limit=20)
    check_valid(nodes, devices, sol.assignment)
    for k in (0, 1):
        assert contiguous(edges, ids, {v for v in ids if sol.assignment[v] == ("ACC", k)})
    assert sol.objective == pytest.approx(oracle_latency(nodes, edges, devices, sol.assignment))
    assert sol.objective == pytest.approx(best, rel=1e-6)
    assert sol.optimal and sol.bound <= sol.objective + 1e-9


def chain(length, *, transfer, acc_memory):
    nodes = [{"id": v, "cost": {"CPU": 10.0, "ACC": 1.0}, "memory": 1} for v in range(length)]
    edges = [{"src": v, "dst": v + 1, "transfer": transfer} for v in range(length - 1)]
    devices = [{"name": "CPU", "instances": 1, "host": True},
               {"name": "ACC", "instances": 3, "memory": acc_memory}]
    return nodes, edges, devices


def test_chain_optima_are_known():
    # 12 unit nodes on 3 ACCs: 4 + 4 + 4, the middle one paying a copy in and out: 5.0
    nodes, edges, devices = chain(12, transfer=0.5, acc_memory=100)
    sol = solve_placement(PlacementProblem(nodes, edges, devices), "throughput", time_limit=20)
    assert sol.objective == pytest.approx(5.0) and sol.optimal
    # latency: memory 4 forces three calls: 12 compute + 0.5 out + (0.5 in + 0.5 out) + 0.5 in
    nodes, edges, devices = chain(12, transfer=0.5, acc_memory=4)
    sol = solve_placement(PlacementProblem(nodes, edges, devices), "latency", time_limit=20)
    assert sol.objective == pytest.approx(14.0) and sol.optimal
    check_valid(nodes, devices, sol.assignment)
    # with room for all, latency keeps the chain on one ACC: no copies at all
    nodes, edges, devices = chain(12, transfer=0.5, acc_memory=100)
    sol = solve_placement(PlacementProblem(nodes, edges, devices), "latency", time_limit=20)
    assert sol.objective == pytest.approx(12.0) and len(set(sol.assignment.values())) == 1


def test_rules_hold_on_larger_random_problems():
    """Beyond brute force: colocation, memory, support and instance counts still hold, bound <= objective."""
    for seed in range(2):
        rng = random.Random(100 + seed)
        n = 30
        nodes = [{"id": f"n{v}", "cost": {"CPU": rng.uniform(1, 9), "ACC": None if v % 7 == 3 else rng.uniform(0.1, 1)},
                  "memory": rng.randint(1, 10), "colocate": (v // 4) if v % 5 == 0 else None} for v in range(n)]
        for v in range(n):  # colocated nodes must share a device
            if nodes[v]["colocate"] is not None:
                nodes[v]["cost"]["ACC"] = nodes[v]["cost"]["ACC"] or 0.5
        edges = [{"src": f"n{u}", "dst": f"n{v}", "transfer": rng.uniform(0, 0.5)}
                 for v in range(1, n) for u in rng.sample(range(v), min(v, 2))]
        devices = [{"name": "CPU", "instances": 4, "host": True}, {"name": "ACC", "instances": 3, "memory": 60}]
        problem = PlacementProblem(nodes, edges, devices)
        for objective, oracle in (("throughput", oracle_throughput), ("latency", None)):
            sol = solve_placement(problem, objective, time_limit=0.5)
            check_valid(nodes, devices, sol.assignment)
            assert sol.bound <= sol.objective + 1e-9
            if oracle is not None:
                assert sol.objective == pytest.approx(oracle(nodes, edges, devices, sol.assignment))


# -- refusals ---------------------------------------------------------------------------------------
DEVICES = [{"name": "CPU", "instances": 1, "host": True}, {"name": "ACC", "instances": 2, "memory": 10}]


@pytest.mark.parametrize("nodes, edges, devices, words", [
    ([{"id": 0, "cost": {"GPU": 1.0}}], [], DEVICES, ["node 0", "unknown device 'GPU'"]),
    ([{"id": 0, "cost": {"CPU": 1.0}}, {"id": 0, "cost": {"CPU": 1.0}}], [], DEVICES, ["node id 0", "twice"]),
    ([{"id": 0, "cost": {"CPU": 1.0}}], [{"src": 0, "dst": 9}], DEVICES, ["dst 9", "not a node id"]),
    ([{"id": v, "cost": {"CPU": 1.0}} for v in range(3)],
     [{"src": 0, "dst": 1}, {"src": 1, "dst": 2}, {"src": 2, "dst": 1}], DEVICES, ["cycle (", "1 -> 2"]),
    ([{"id": 0, "cost": {"CPU": -1.0}}], [], DEVICES, ["node 0", "negative"]),
    ([{"id": 0, "cost": {"CPU": 1.0}}], [{"src": 0, "dst": 0}], DEVICES, ["self-loop"]),
    ([{"id": 0, "cost": {"ACC": 1.0}, "memory": 11}], [], DEVICES, ["node 0", "11", "ACC: 10"]),
    ([{"id": 0, "cost": {"ACC": 1.0}, "colocate": "c"}, {"id": 1, "cost": {"CPU": 1.0}, "colocate": "c"}], [],
     DEVICES, ["colocate class 'c'", "no device every member"]),
    ([{"id": 0, "cost": {"CPU": None}}], [], DEVICES, ["node 0", "cannot run anywhere"]),
    ([{"id": 0, "cost": {"CPU": 1.0}, "size": 3}], [], DEVICES, ["unknown keys ['size']"]),
    ([{"id": 0, "cost": {"CPU": 1.0}}], [], DEVICES + [{"name": "CPU"}], ["device 'CPU'", "twice"]),
])
def test_bad_problems_are_refused_naming_the_culprit(nodes, edges, devices, words):
    with pytest.raises(PartitionError) as info:
        PlacementProblem(nodes, edges, devices)
    for word in words:
        assert word in str(info.value)


def test_infeasible_packing_names_the_device():
    nodes = [{"id": v, "cost": {"ACC": 1.0}, "memory": 6} for v in range(4)]  # 24 bytes, ACC holds 2 x 10
    problem = PlacementProblem(nodes, [], DEVICES)
    with pytest.raises(PartitionError, match=r"only ACC can run need 24 bytes.*ACC has 20"):
        solve_placement(problem, "throughput", time_limit=5)


def test_bad_objective_and_time_limit_are_refused():
    problem = PlacementProblem([{"id": 0, "cost": {"CPU": 1.0}}], [], DEVICES)
    with pytest.raises(XGraphError, match="unknown placement objective 'speed'"):
        solve_placement(problem, "speed")
    with pytest.raises(XGraphError, match="time_limit"):
        solve_placement(problem, "latency", time_limit=0)


# -- objectives reproduce the model's definitions ------------------------------------------------
def test_copies_go_through_the_host_and_host_instances_share_memory():
    nodes = [{"id": "a", "cost": {"CPU": 1.0, "ACC": 1.0}}, {"id": "b", "cost": {"CPU": 1.0, "ACC": 1.0}},
             {"id": "c", "cost": {"CPU": 1.0, "ACC": 1.0}}]
    edges = [{"src": "a", "dst": "b", "transfer": 0.5}, {"src": "a", "dst": "c", "transfer": 0.5}]
    devices = [{"name": "CPU", "instances": 2, "host": True}, {"name": "ACC", "instances": 2}]
    problem = PlacementProblem(nodes, edges, devices)
    # a on ACC:0 sends once (0.5) although two memories receive; ACC:1 pays its copy in; the host pays nothing
    placement = problem.from_assignment({"a": ("ACC", 0), "b": ("ACC", 1), "c": ("CPU", 1)})
    assert objectives_module.instance_loads(problem, placement) == [0.0, 1.0, 1.5, 1.5]
    # two host instances: no copy between them
    placement = problem.from_assignment({"a": ("CPU", 0), "b": ("CPU", 1), "c": ("CPU", 1)})
    assert objectives_module.instance_loads(problem, placement) == [1.0, 2.0, 0.0, 0.0]


TINY_WORKLOAD = {  # the authors' input format; branches, a colour class, a node the accelerator cannot run
    "maxSizePerFPGA": 10.0, "maxFPGAs": 2, "maxCPUs": 1,
    "nodes": [{"id": i, "supportedOnFpga": int(i != 4), "cpuLatency": c, "fpgaLatency": f, "size": m,
               "colorClass": 5 if i == 6 else i, "isBackwardNode": 0}
              for i, c, f, m in [(1, 4.0, 1.0, 4.0), (2, 6.0, 1.5, 5.0), (3, 3.0, 0.5, 3.0), (4, 2.0, 0.0, 0.0),
                                 (5, 8.0, 2.0, 6.0), (6, 5.0, 1.0, 2.0), (7, 2.0, 0.5, 1.0)]],
    "edges": [{"sourceId": u, "destId": v, "cost": t} for u, v, t in
              [(1, 2, 0.5), (1, 3, 0.5), (2, 4, 0.25), (3, 5, 0.75), (4, 6, 0.1), (5, 6, 0.3), (6, 7, 0.2),
               (2, 7, 0.25)]]}


@pytest.mark.parametrize("cpu_nodes, fpga_nodes, max_load, latency", [
    # values printed by the authors' code for these splits of TINY_WORKLOAD:
    # `dp -expert split.json` (max-load) and `greedy -computeLatency split.json` (latency, 3 decimals);
    # contiguous splits, where their latency (pieces as separate devices) and ours (one call) agree
    ([3, 4], [[1, 2], [5, 6, 7]], 5.0, 10.850),
    ([4, 7], [[1, 2, 3], [5, 6]], 4.05, 12.050),
])
def test_objectives_reproduce_the_authors_values(cpu_nodes, fpga_nodes, max_load, latency):
    spec = importlib.util.spec_from_file_location("placement_benchmark", ROOT / "benchmarks" / "placement_solver.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    problem = bench.problem_from_tarnawski(TINY_WORKLOAD)
    assignment = {v: ("CPU", 0) for v in cpu_nodes}
    assignment.update({v: ("ACC", k) for k, members in enumerate(fpga_nodes) for v in members})
    assert objectives_module.throughput(problem, problem.from_assignment(assignment)) == pytest.approx(max_load)
    # the authors' latency gives the host a core per node: so do we, with enough instances
    wide = bench.problem_from_tarnawski(dict(TINY_WORKLOAD, maxCPUs=len(cpu_nodes)))
    assignment.update({v: ("CPU", i) for i, v in enumerate(cpu_nodes)})
    assert objectives_module.latency(wide, wide.from_assignment(assignment)) == pytest.approx(latency, abs=5e-4)


def test_importing_partition_does_not_import_scipy():
    code = "import sys, xgraph.partition; assert 'scipy' not in sys.modules; xgraph.partition.solve_placement"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


@pytest.mark.parametrize("module", [problem_module, objectives_module, segments_module, solver_module])
def test_doctests(module):
    assert doctest.testmod(module).failed == 0


def test_benchmark_adapter_reads_the_published_format():
    spec = importlib.util.spec_from_file_location("placement_benchmark", ROOT / "benchmarks" / "placement_solver.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    data = {"maxSizePerFPGA": 10.0, "maxFPGAs": 2, "maxCPUs": 1,
            "nodes": [{"id": 1, "supportedOnFpga": 1, "cpuLatency": 4.0, "fpgaLatency": 1.0, "size": 6.0,
                       "colorClass": 7, "isBackwardNode": 0},
                      {"id": 2, "supportedOnFpga": True, "cpuLatency": 4.0, "fpgaLatency": 1.0, "size": 6.0,
                       "colorClass": 7, "isBackwardNode": 0},
                      {"id": 3, "supportedOnFpga": 0, "cpuLatency": 2.0, "fpgaLatency": 0.0, "size": 0.0,
                       "isBackwardNode": 0}],
            "edges": [{"sourceId": 1, "destId": 2, "cost": 0.5}, {"sourceId": 2, "destId": 3, "cost": 0.25}]}
    problem = bench.problem_from_tarnawski(data)
    assert problem.instances == (("CPU", 0), ("ACC", 0), ("ACC", 1))
    assert problem.cost == ((4.0, 1.0), (4.0, 1.0), (2.0, None))
    assert problem.groups[problem.group_of[0]] == (0, 1)  # colorClass 7 colocates nodes 1 and 2
    # 12 bytes of class 7 do not fit one 10-byte ACC: the class goes to the CPU, node 3 too
    sol = solve_placement(problem, "throughput", time_limit=5)
    assert sol.assignment[1] == sol.assignment[2] == ("CPU", 0) and sol.objective == pytest.approx(10.0)
