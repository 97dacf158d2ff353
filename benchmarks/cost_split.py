"""Does a measured, cost-chosen split between two backends beat each backend alone?

Two real backends on this host: xgraph's numpy kernels (the built-in devices, AI Core / AI CPU /
CPU, run mode) and OpenVINO (the reference plugin, `plugins/openvino`). One model, run-mode
latency of each configuration, median of --runs runs after 3 warm-up runs, one configuration
after the other (OpenVINO's worker threads spin for a while after a call, so configurations
taking turns would charge that to each other):

  A: built-ins      no plugin: every op on xgraph's numpy kernels (first fit)
  B: openvino       the plugin claims every op it supports, merged (first fit)
  C: split (ops)    the plugin offers one subgraph per op ({"claims": "prefer", "merge": false});
                    `xgraph profile-costs` measures every op on every accepting device and every
                    offer on OpenVINO; {"placement": "latency", "costs": table} lets the solver
                    take or decline each offer
  D: split (whole)  the same with the plugin's merged subgraphs offered whole

It prints per configuration: measured latency, the ratio to the best single backend, the
solver's estimate (for C and D) and where the ops went. Collage (Jeon et al., 2022) reports
1.26-1.43x over the best single backend on GPUs; the numbers here are what this host measures.

    python benchmarks/cost_split.py [--model squeezenet] [--runs 20] [--repeat 10]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
import onnx

import xgraph
from xgraph.profiling import profile_costs

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the repository root: testing/
from testing.runtime import zoo_model  # noqa: E402
PLUGINS = [str(ROOT / "plugins")]


def _offer(merge: bool) -> dict:
    return {"plugins": "openvino", "plugin_options": {"openvino": {"claims": "prefer", "merge": merge}}}


def configurations(model: str, table_ops: str, table_whole: str) -> dict[str, dict]:
    """Configuration name -> compile options."""
    return {"A: built-ins": {},
            "B: openvino": {"plugins": "openvino"},
            "C: split (ops)": {**_offer(False), "placement": "latency", "costs": table_ops},
            "D: split (whole)": {**_offer(True), "placement": "latency", "costs": table_whole}}


def _where(compiled: xgraph.Graph) -> str:
    ops = Counter(op["device"] for op in xgraph.report(compiled)["ops"])
    subgraphs = len(xgraph.report(compiled)["subgraphs"])
    return ", ".join(f"{device} {n}" for device, n in ops.most_common()) + f"; {subgraphs} subgraphs"


def main() -> int:
    """Profile, compile the four configurations, time them in turns, print the table."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="squeezenet", help="a light zoo model (default squeezenet)")
    parser.add_argument("--runs", type=int, default=20, help="timed runs per configuration (median)")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per profiled op (median)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"{args.model}.onnx"
        proto = zoo_model(args.model)
        onnx.save(proto, path)
        tables = {}
        for merge in (False, True):
            started = time.perf_counter()
            table = profile_costs(str(path), _offer(merge), PLUGINS, repeat=args.repeat, kernels="numpy")
            tables[merge] = Path(folder) / f"costs_{'whole' if merge else 'ops'}.json"
            tables[merge].write_text(json.dumps(table))
            print(f"profile-costs ({'whole' if merge else 'per op'}): {len(table['ops'])} ops, "
                  f"{len(table['candidates'])} offers, {time.perf_counter() - started:.1f} s", file=sys.stderr)
        configs = configurations(str(path), str(tables[False]), str(tables[True]))
        compiled = {name: xgraph.compile(str(path), options, plugin_path=PLUGINS) for name, options in configs.items()}
        runners = {name: xgraph.create_graph_runner(g, "run", kernels="numpy", plugin_path=PLUGINS)
                   for name, g in compiled.items()}
        graph_input = compiled["A: built-ins"].get_input_tensors()[0]
        x = np.random.default_rng(0).standard_normal([d if isinstance(d, int) else 1 for d in graph_input.shape])
        feeds = {graph_input.name: x.astype(graph_input.dtype)}
        times: dict[str, list[float]] = {name: [] for name in runners}
        for name, runner in runners.items():  # in blocks: OpenVINO's worker threads stay busy for a while after
            for _ in range(3):                 # a call, which taking turns would charge to the next configuration
                runner.run(feeds)
            for _ in range(args.runs):
                started = time.perf_counter()
                runner.run(feeds)
                times[name].append(time.perf_counter() - started)
        medians = {name: statistics.median(t) for name, t in times.items()}
        best_single = min(medians["A: built-ins"], medians["B: openvino"])
        print(f"{args.model}, run mode, median of {args.runs} runs (ratio: best single backend / this)")
        for name, seconds in medians.items():
            cost = xgraph.report(compiled[name]).get("cost", {})
            estimate = f"est {cost['chosen']['latency_seconds'] * 1e3:8.2f} ms" if "solver" in cost else " " * 15
            print(f"  {name:18s} {seconds * 1e3:8.2f} ms  {best_single / seconds:5.2f}x  {estimate}  "
                  f"{_where(compiled[name])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
