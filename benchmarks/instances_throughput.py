"""Throughput of one model split over device instances, against one instance, queues and onnxruntime.

ResNet50 (the light zoo model, seeded random weights), "run" mode with xgraph's numpy kernels,
4 jobs in flight, measured in one run:
  1 instance       compiled with {"placement": "throughput"} (the default: one AI Core)
  2 instances      {"devices": {"AICORE": {"instances": 2}}, "placement": "throughput"}: the solver
                   splits the model over AICORE:0 and AICORE:1, each its own stream (a pipeline)
  1 inst, 2 queues {"devices": {"AICORE": {"max_concurrency": 2}}, "placement": "throughput"}:
                   two workers serve the one AI Core stream, so two jobs run on it at once
  ort              onnxruntime on the whole model, one run at a time, 1 and 2 intra-op threads,
                   and 2 callers at once with 1 intra-op thread each
Each xgraph row is measured with the numpy kernels' intra-op pool off (1 thread) and at its
default (the CPUs this process may use). Per row: jobs/s, the ratio to "1 instance", the CPU
cores the process kept busy (CPU time / wall time), each device stream's busy share of the wall
time, and the copies per job. Then, in "sim" mode, the roofline estimate of device time per
instance (the device runners' own estimates): how well the split balances the pipeline.

    python benchmarks/instances_throughput.py [--jobs 16] [--in-flight 4]
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's xgraph and testing/
import xgraph  # noqa: E402
from xgraph.kernels.parallel import intra_op_threads, set_intra_op_threads  # noqa: E402

from testing.runtime import in_flight_rate, zoo_model  # noqa: E402

CONFIGS = {
    "1 instance": {"placement": "throughput"},
    "2 instances": {"devices": {"AICORE": {"instances": 2}}, "placement": "throughput"},
    "1 inst, 2 queues": {"devices": {"AICORE": {"max_concurrency": 2}}, "placement": "throughput"},
}


def measure(fn) -> tuple[float, float]:
    """(wall seconds, CPU cores busy on average) of `fn()`."""
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    wall = time.perf_counter() - wall
    return wall, (time.process_time() - cpu) / wall


def bench_graph(graph: xgraph.Graph, feeds: dict, jobs: int, in_flight: int) -> dict:
    """jobs/s, cores busy, each device stream's busy share and copies per job, with `in_flight` jobs."""
    with xgraph.create_graph_runner(graph, kernels="numpy", max_jobs_in_flight=in_flight) as runner:
        for _ in range(2):  # warm-up: plans, buffer frames, the intra-op pool
            runner.run(feeds)
        before = runner.get_stats()
        rate: list[float] = []
        wall, cores = measure(lambda: rate.append(in_flight_rate(runner, feeds, jobs, in_flight)))
        after = runner.get_stats()
    busy = {s: (e["total_s"] - before["streams"][s]["total_s"]) / wall for s, e in after["streams"].items()}
    copies = (after["copies"]["count"] - before["copies"]["count"]) / jobs
    copy_share = (after["copies"]["seconds"] - before["copies"]["seconds"]) / wall
    return {"rate": rate[0], "cores": cores, "busy": busy, "copies": copies, "copy_share": copy_share}


def bench_ort(model, feeds: dict, jobs: int, intra: int, callers: int) -> tuple[float, float]:
    """(jobs/s, cores busy) of onnxruntime with `intra` intra-op threads and `callers` threads calling run."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = intra
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    session = ort.InferenceSession(model.SerializeToString(), options)
    session.run(None, feeds)

    def work(n: int) -> None:
        for _ in range(n):
            session.run(None, feeds)

    def all_callers() -> None:
        threads = [threading.Thread(target=work, args=(jobs // callers,)) for _ in range(callers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    wall, cores = measure(all_callers)
    return (jobs // callers) * callers / wall, cores


def sim_estimates(graph: xgraph.Graph, feeds: dict) -> dict[str, float]:
    """Estimated device seconds per device stream for one job in "sim" mode."""
    with xgraph.create_graph_runner(graph, mode="sim") as runner:
        runner.run(feeds)
        return {s: e.get("estimated_device_s", 0.0) for s, e in runner.get_stats()["streams"].items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--in-flight", type=int, default=4)
    args = parser.parse_args()
    model = zoo_model(args.model)
    graphs = {label: xgraph.compile(model, options) for label, options in CONFIGS.items()}
    name = graphs["1 instance"].get_input_tensors()[0]
    x = np.random.default_rng(0).standard_normal(name.shape).astype(np.float32)
    feeds = {name.name: x}
    default_threads = intra_op_threads()
    print(f"{args.model}, numpy kernels, {args.jobs} jobs, {args.in_flight} in flight; {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"{'contender':<18}{'intra-op':>9}{'jobs/s':>9}{'x 1 inst':>10}{'cores':>7}{'copies/job':>12}"
          f"{'copy share':>12}  device streams busy (share of wall time)")
    for threads in sorted({1, default_threads}):
        set_intra_op_threads(threads)
        base = None
        for label, graph in graphs.items():
            r = bench_graph(graph, feeds, args.jobs, args.in_flight)
            base = base or r["rate"]
            busy = "  ".join(f"{s} {b:.0%}" for s, b in r["busy"].items())
            print(f"{label:<18}{threads:>9}{r['rate']:>9.2f}{r['rate'] / base:>10.2f}{r['cores']:>7.2f}"
                  f"{r['copies']:>12.1f}{r['copy_share']:>12.1%}  {busy}")
    set_intra_op_threads(default_threads)
    for intra, callers in ((1, 1), (2, 1), (1, 2)):
        rate, cores = bench_ort(model, feeds, args.jobs, intra, callers)
        label = f"ort {callers} caller{'s' if callers > 1 else ''}"
        print(f"{label:<18}{intra:>9}{rate:>9.2f}{'':>10}{cores:>7.2f}")

    print("\nsim mode: estimated device time per job per stream (ms); with jobs streaming through, the slowest")
    print("stream bounds the throughput (the host's CPU stream is a stage too)")
    slowest_one = None
    for label in ("1 instance", "2 instances"):
        estimates = sim_estimates(graphs[label], feeds)
        slowest = max(estimates.values(), default=0.0)
        slowest_one = slowest_one or slowest
        cells = "  ".join(f"{s} {t * 1e3:.2f}" for s, t in estimates.items())
        print(f"  {label:<14}{cells}   slowest {slowest * 1e3:.2f}: bound x{slowest_one / slowest:.2f} of 1 instance")

if __name__ == "__main__":
    main()
