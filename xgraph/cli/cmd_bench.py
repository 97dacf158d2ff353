"""`xgraph bench`: latency percentiles, time per device, host/device copies and pipelined throughput.

    xgraph bench MODEL [--runs N] [--warmup N] [--jobs K] [--trace out.json]
                 [--mode run|sim|ref] [--kernels auto|numpy|onnxruntime] [--input NAME=FILE ...]
    xgraph bench DECODER --generate N     # tokens/s of a KV-cache greedy loop vs onnxruntime

One graph runner does everything: `--warmup` untimed runs, `--runs` timed runs one after
another (latency p50/p90/p99; time per device is the sum of its subgraphs' execute time, read
from the runner's stats; copies are the host<->device transfers the runtime performed), then
`--runs` jobs submitted with up to `--jobs` in flight (throughput, devices overlapping).
`--trace` records every span and writes Chrome trace-event JSON with one track per device and
per copy engine (open it in https://ui.perfetto.dev or chrome://tracing).
"""
from __future__ import annotations

import argparse
import time
import warnings
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from xgraph.cli.common import model_path, seed
from xgraph.cli.cmd_run import (MODES, add_compile_arguments, add_input_argument, add_kernels_argument,
                                complete_inputs, load_compiled, read_inputs)
from xgraph.cli.common import check_output_path
from xgraph.cli.gears import add_gear_argument, gear_title, gears_to_use
from xgraph.errors import RunnerError, XGraphError

if TYPE_CHECKING:
    from xgraph.ir import Graph
    from xgraph.runners.graph_runner import GraphRunner

PERCENTILES = (50, 90, 99)


def _positive(flag: str, value: int, minimum: int) -> int:
    if value < minimum:
        raise XGraphError(f"{flag} must be >= {minimum}, got {value}")
    return value


def _device_of(graph: "Graph") -> dict[str, str]:
    return {sg.name: str(sg.get_attr("device")) for sg in graph.get_root_subgraph().get_children()}


def per_device(graph: "Graph", before: dict[str, Any], after: dict[str, Any], runs: int) -> dict[str, dict[str, float]]:
    """Per device, per run: execute seconds, estimated device seconds (sim; None when no subgraph of the device
    has a cost profile to estimate from) and subgraph count."""
    devices: dict[str, dict[str, Any]] = defaultdict(lambda: {"seconds": 0.0, "estimated": None, "subgraphs": 0})
    for name, device in _device_of(graph).items():
        new, old = after["subgraphs"].get(name, {}), before["subgraphs"].get(name, {})
        entry = devices[device]
        entry["subgraphs"] += 1
        entry["seconds"] += (new.get("total_s", 0.0) - old.get("total_s", 0.0)) / runs
        if "estimated_device_s" in new:
            entry["estimated"] = (entry["estimated"] or 0.0) + \
                (new["estimated_device_s"] - old.get("estimated_device_s", 0.0)) / runs
    return dict(devices)


def timed_runs(runner: "GraphRunner", feeds: dict[str, Any], runs: int) -> np.ndarray:
    """Wall time of each of `runs` back-to-back runs (seconds)."""
    times = np.empty(runs)
    for i in range(runs):
        start = time.perf_counter()
        runner.run(feeds)
        times[i] = time.perf_counter() - start
    return times


def throughput(runner: "GraphRunner", feeds: dict[str, Any], runs: int) -> float:
    """Runs per second with up to the runner's max_jobs_in_flight jobs submitted at once."""
    start = time.perf_counter()
    jobs = [runner.execute_async(feeds) for _ in range(runs)]  # blocks while the runner is full
    for job in jobs:
        if runner.wait(job) != 0:
            error = runner.get_error(job)
            raise error if error is not None else RunnerError(f"bench: job {job[0]} failed")
    return runs / (time.perf_counter() - start)


def _megabytes(n: float) -> str:
    return f"{n / 1e6:.3f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


def add_parser(subparsers) -> None:
    """Register the `bench` sub-command."""
    p = subparsers.add_parser("bench", help="latency percentiles, time per device, copies and throughput",
                              description="Benchmark a model through the graph runner: latency p50/p90/p99 over "
                              "--runs runs, time per device and host/device copies per run, throughput with --jobs "
                              "jobs in flight, and optionally a Chrome trace (--trace).")
    p.add_argument("model", metavar="MODEL", type=model_path, help="the model: an .xmodel (from xcompile) or an .onnx")
    p.add_argument("--runs", type=int, default=50, help="timed runs (and jobs for the throughput; default 50)")
    p.add_argument("--warmup", type=int, default=5, help="untimed runs first (default 5)")
    p.add_argument("--jobs", type=int, default=4, help="jobs in flight for the throughput (default 4)")
    p.add_argument("--trace", metavar="OUT.json", help="write a Chrome trace of every run (one track per device "
                   "and copy engine)")
    p.add_argument("--mode", choices=MODES, default="run", help="run (default), sim (device numerics and estimated "
                   "device time) or ref")
    add_kernels_argument(p)
    add_input_argument(p, "Inputs not given get seeded random values.")
    p.add_argument("--seed", type=seed, default=0, help="seed of the random inputs (default 0)")
    p.add_argument("--generate", type=int, metavar="N", default=0, help="instead: greedy-decode N tokens with a "
                   "KV-cache decoder (inputs input_ids, past_*; outputs logits, present_*) and report tokens/s "
                   "against onnxruntime's loop on the same graph")
    add_compile_arguments(p)
    add_gear_argument(p, "every gear in turn")
    p.set_defaults(func=run)


def _generate(args: argparse.Namespace, graph: "Graph") -> int:
    from xgraph.cli.bench_generate import bench_generate
    tokens = _positive("--generate", args.generate, 1)
    reference = graph.to_onnx()
    if graph.get_gears():  # each gear is one past length: onnxruntime's loop needs the dynamic original
        if Path(args.model).suffix.lower() == ".xmodel":
            raise XGraphError(f"bench --generate: {args.model} was compiled with gears, and onnxruntime's loop needs "
                              "the dynamic model: give the .onnx with the same --options")
        from xgraph.ir.onnx.safe_reader import read_model
        reference = read_model(args.model)[0]
    r = bench_generate(graph, reference, tokens, args.mode, args.kernels)
    print(f"bench {args.model} --generate {tokens}: mode {args.mode}, kernels {args.kernels}")
    print(f"  xgraph graph runner: {r['xgraph_tokens_per_s']:.1f} tokens/s  "
          f"(per step: {r['execute_ms_per_step']:.3f} ms in subgraphs, {r['dispatch_ms_per_step']:.3f} ms dispatch, "
          f"{r['copies_per_step']:.1f} host<->device copies, {r['saved_copies_per_step']:.1f} saved by keeping "
          f"the cache on the device)")
    print(f"  onnxruntime        : {r['onnxruntime_tokens_per_s']:.1f} tokens/s")
    print(f"  xgraph/onnxruntime : {r['ratio']:.2f}x; tokens {'equal' if r['equal'] else 'DIFFER'}")
    return 0 if r["equal"] else 1


def run(args: argparse.Namespace) -> int:
    """Benchmark and print the report (one per gear for a model compiled with gears)."""
    runs = _positive("--runs", args.runs, 1)
    warmup = _positive("--warmup", args.warmup, 0)
    jobs = _positive("--jobs", args.jobs, 1)
    trace = Path(args.trace) if args.trace else None
    check_output_path("--trace", trace)
    graph = load_compiled(args)
    if args.generate:
        return _generate(args, graph)
    given = read_inputs(args.input, graph.get_input_tensors())
    for gear in gears_to_use(graph, args, given, every=True):  # with gears: each gear's own partition in turn
        gear_trace = trace if gear is None or trace is None else \
            trace.with_name(f"{trace.stem}.{gear.name}{trace.suffix}")
        _bench(args, graph if gear is None else gear.graph, given, runs, warmup, jobs, gear_trace, gear_title(gear))
    return 0


def _bench(args: argparse.Namespace, graph: "Graph", given: dict[str, Any], runs: int, warmup: int, jobs: int,
           trace: Path | None, title: str) -> None:
    """Benchmark one (static) partition and print its report."""
    import xgraph
    inputs = graph.get_input_tensors()
    feeds, filled = complete_inputs(given, inputs, args.seed)
    with warnings.catch_warnings(), xgraph.create_graph_runner(
            graph, args.mode, args.kernels, max_jobs_in_flight=jobs, profile=trace is not None) as runner:
        warnings.simplefilter("ignore", RuntimeWarning)  # random inputs may overflow; that is not the point here
        for _ in range(warmup):
            runner.run(feeds)
        before = runner.get_stats()
        latencies = timed_runs(runner, feeds, runs)
        after = runner.get_stats()
        rate = throughput(runner, feeds, runs)
        backends = sorted({getattr(r, "backend", type(r).__name__) for r in runner.runners.values()})
        fallbacks = {name: r.backend_reason for name, r in runner.runners.items() if getattr(r, "backend_reason", "")}
        if trace is not None:
            runner.export_chrome_trace(trace)

    devices = per_device(graph, before, after, runs)
    copies = {k: (after["copies"][k] - before["copies"][k]) / runs for k in ("count", "bytes", "seconds")}
    ms = latencies * 1e3
    source = f"{len(filled)} random (seed {args.seed})" if filled else "from files"
    if filled and len(filled) < len(inputs):
        source = f"{len(inputs) - len(filled)} from files, {len(filled)} random (seed {args.seed})"
    count = len(_device_of(graph))
    print(f"bench {args.model}:{title} mode {args.mode}, kernels {args.kernels} ({', '.join(backends)}); "
          f"{count} subgraph{'s' if count != 1 else ''} on {', '.join(sorted(devices))}; inputs: {source}")
    if args.kernels != "numpy":
        for name, reason in sorted(fallbacks.items()):
            print(f"  {name}: xgraph's kernels, not onnxruntime: {reason}")
    stats = "  ".join(f"p{p} {v:.3f}" for p, v in zip(PERCENTILES, np.percentile(ms, PERCENTILES)))
    print(f"latency over {runs} runs (after {warmup} warm-up), ms: {stats}  mean {ms.mean():.3f}  "
          f"min {ms.min():.3f}  max {ms.max():.3f}")
    sim = args.mode == "sim"
    print("time per run by device, ms (its subgraphs' execute time" + (", and the estimated device time)" if sim
                                                                       else ")"))
    width = max([len(d) for d in devices] + [6])
    for device, entry in sorted(devices.items(), key=lambda kv: -kv[1]["seconds"]):
        n = int(entry["subgraphs"])
        known = entry["estimated"] is not None
        estimate = "" if not sim else f"  estimated on device {entry['estimated'] * 1e3:.3f}" if known else \
            "  estimated on device n/a (no cost profile)"
        print(f"  {device:<{width}}  {entry['seconds'] * 1e3:8.3f}  ({n} subgraph{'s' if n != 1 else ''}){estimate}")
    print(f"  {'copies':<{width}}  {copies['seconds'] * 1e3:8.3f}  ({copies['count']:g} host<->device copies, "
          f"{_megabytes(copies['bytes'])} per run)")
    single = 1.0 / latencies.mean()
    print(f"throughput: {rate:.1f} runs/s with {jobs} job{'s' if jobs != 1 else ''} in flight "
          f"(one at a time: {single:.1f} runs/s, x{rate / single:.2f})")
    if trace is not None:
        print(f"trace: {trace} (open in https://ui.perfetto.dev or chrome://tracing)")
