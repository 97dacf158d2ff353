"""Placement solver on the published device-placement workloads (Tarnawski et al., NeurIPS 2020).

Reads every inference workload of `msr-fiddle/dnn-partitioning` (their JSON format, see
`problem_from_tarnawski`), solves it for the objective its folder is for (throughput/ or
latency/), and prints per workload, beside the paper's reference value:

* first fit: every node on the accelerator when it supports it and memory is left, else on
  the CPU (support-driven placement without costs, what `placement: first_fit` does);
* ours: `solve_placement`'s objective, its proven lower bound and the gap between them,
  whether it is proven optimal, the seconds, and the peak RSS of the child process that
  solved it (one child per workload and objective, so peaks do not mix);
* reference: throughput, the authors' exact DP over contiguous splits (our search space also
  has non-contiguous ones, so ours may be lower); latency, their greedy baseline.

The data is read from ``../shared/data/dnn-partitioning`` relative to the repository root
when present, else from ``shared/data/dnn-partitioning`` in the nearest folder above it (a
git worktree's checkout lives deeper), or ``--data DIR``; without it the script says where it looked and stops.

    python benchmarks/placement_solver.py [--data DIR] [--time-limit 60] [--only bert]
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from xgraph.partition import PlacementProblem, solve_placement
from xgraph.partition.placement_objectives import evaluate
from xgraph.partition.placement_search import first_fit, spread_host

ROOT = Path(__file__).resolve().parent.parent
DATA_IN_SHARED = Path("shared") / "data" / "dnn-partitioning"


def default_data() -> Path:
    """``../shared/data/dnn-partitioning`` from the repository root (or from a folder above a worktree)."""
    for folder in ROOT.parents:
        if (folder / DATA_IN_SHARED).is_dir():
            return folder / DATA_IN_SHARED
    return ROOT.parent / DATA_IN_SHARED

# (objective, workload) -> (what the reference is, value), from running the authors' code
REFERENCE: dict[tuple[str, str], tuple[str, float | None]] = {
    ("throughput", "LayerGraphs/bert24_inference.json"): ("DP optimum", 17.7899),
    ("throughput", "LayerGraphs/gnmt_inference.json"): ("DP optimum", 32.9107),
    ("throughput", "LayerGraphs/resnet50_inference.json"): ("DP optimum", 33.7747),
    ("throughput", "LayerGraphs/inceptionv3_inference.json"): ("DP: no result (>10 min, >11 GB)", None),
    ("throughput", "OperatorGraphs/bert_l-3_inference.json"): ("DP optimum", 27.9186),
    ("throughput", "OperatorGraphs/bert_l-6_inference.json"): ("DP optimum", 29.5795),
    ("throughput", "OperatorGraphs/resnet50_inference.json"): ("DP optimum", 124.349),
    ("latency", "LayerGraphs/bert24_inference.json"): ("greedy", 100.219),
    ("latency", "LayerGraphs/gnmt_inference.json"): ("greedy", 268.5),
    ("latency", "LayerGraphs/resnet50_inference.json"): ("greedy", 4197.06),
    ("latency", "OperatorGraphs/bert_l-3_inference.json"): ("greedy", 416.204),
    ("latency", "OperatorGraphs/bert_l-6_inference.json"): ("greedy", 494.135),
    ("latency", "OperatorGraphs/bert_l-12_inference.json"): ("greedy", 867.839),
    ("latency", "OperatorGraphs/resnet50_inference.json"): ("greedy", 839.536),
}


def problem_from_tarnawski(data: dict[str, Any]) -> PlacementProblem:
    """A `PlacementProblem` from the authors' JSON workload format.

    ``maxCPUs`` host instances named "CPU" (sharing one memory), ``maxFPGAs`` accelerator
    instances named "ACC" with ``maxSizePerFPGA`` bytes each; a node runs on "ACC" for
    ``fpgaLatency`` when ``supportedOnFpga``, on "CPU" for ``cpuLatency``, keeps ``size`` bytes
    resident, and nodes sharing ``colorClass`` are colocated; an edge's ``cost`` is its
    transfer. Fields the model has no use for (``name``, ``layerId``, edge ``size``,
    ``isBackwardNode`` of inference graphs) are ignored.

    >>> p = problem_from_tarnawski({"maxSizePerFPGA": 100.0, "maxFPGAs": 2, "maxCPUs": 1,
    ...     "nodes": [{"id": 1, "supportedOnFpga": 1, "cpuLatency": 2.0, "fpgaLatency": 0.5,
    ...                "size": 10.0, "colorClass": 1, "isBackwardNode": 0},
    ...               {"id": 2, "supportedOnFpga": 0, "cpuLatency": 1.0, "fpgaLatency": 0.0,
    ...                "size": 0.0, "isBackwardNode": 0}],
    ...     "edges": [{"sourceId": 1, "destId": 2, "cost": 0.25}]})
    >>> p.instances, p.cost
    ((('CPU', 0), ('ACC', 0), ('ACC', 1)), ((2.0, 0.5), (1.0, None)))
    """
    devices = [{"name": "CPU", "instances": int(data["maxCPUs"]), "host": True},
               {"name": "ACC", "instances": int(data["maxFPGAs"]), "memory": float(data["maxSizePerFPGA"])}]
    nodes = []
    for node in data["nodes"]:
        item = {"id": node["id"], "memory": float(node.get("size", 0.0)),
                "cost": {"CPU": node["cpuLatency"], "ACC": node["fpgaLatency"] if node["supportedOnFpga"] else None}}
        if "colorClass" in node:
            item["colocate"] = node["colorClass"]
        nodes.append(item)
    edges = [{"src": e["sourceId"], "dst": e["destId"], "transfer": e["cost"]} for e in data["edges"]]
    return PlacementProblem(nodes=nodes, edges=edges, devices=devices)


def solve_one(path: Path, objective: str, time_limit: float) -> dict[str, Any]:
    """First fit and the solver on one workload (run in a child process: its peak RSS is reported)."""
    problem = problem_from_tarnawski(json.loads(path.read_text()))
    baseline = first_fit(problem)
    if baseline is not None and objective == "latency":
        baseline = spread_host(problem, baseline)
    started = time.perf_counter()
    solution = solve_placement(problem, objective, time_limit=time_limit)
    return {"first_fit": None if baseline is None else evaluate(problem, baseline, objective),
            "objective": solution.objective, "bound": solution.bound, "optimal": solution.optimal,
            "seconds": time.perf_counter() - started, "method": solution.method,
            "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _child(path: Path, objective: str, time_limit: float) -> dict[str, Any]:
    out = subprocess.run([sys.executable, __file__, "--child", str(path), objective, str(time_limit)],
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return {"error": out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"}
    return json.loads(out.stdout.strip().splitlines()[-1])


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.6g}"


def main(argv: list[str] | None = None) -> int:
    """Run every workload (or those matching --only) and print one Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=default_data(), help="folder with throughput/ and latency/")
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per workload and objective")
    parser.add_argument("--only", default="", help="run only workloads whose path contains this text")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(solve_one(Path(args.child[0]), args.child[1], float(args.child[2]))))
        return 0
    if not args.data.is_dir():
        print(f"no workloads: {args.data} does not exist; pass --data DIR (the dnn-partitioning inputs)")
        return 2
    print(f"data: {args.data}  time limit: {args.time_limit:g} s per workload and objective\n")
    print("| objective | workload | reference | first fit | ours | bound | gap | ours/ref | optimal | s | peak MB |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for (objective, name), (kind, reference) in REFERENCE.items():
        path = args.data / objective / name
        if args.only not in f"{objective}/{name}" or not path.exists():
            continue
        row = _child(path, objective, args.time_limit)
        label = name.replace("_inference.json", "")
        if "error" in row:
            print(f"| {objective} | {label} | {kind} {_fmt(reference)} | error: {row['error']} |")
            continue
        gap = (row["objective"] - row["bound"]) / row["objective"] if row["bound"] and row["objective"] else 0.0
        ratio = f"{row['objective'] / reference:.4f}" if reference else "-"
        print(f"| {objective} | {label} | {kind} {_fmt(reference)} | {_fmt(row['first_fit'])} | "
              f"{_fmt(row['objective'])} | {_fmt(row['bound'])} | {gap:.1%} | {ratio} | "
              f"{'yes' if row['optimal'] else 'no'} | {row['seconds']:.1f} | {row['peak_mb']:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
