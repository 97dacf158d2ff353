"""Runtime speed against onnxruntime, measured in the same run.

Per zoo model (random weights, compiled by `xgraph.compile` with default options):
  ort          onnxruntime on the whole model (default session options)
  numpy        the graph runner with xgraph's numpy kernels
  ort-backed   the graph runner with each subgraph in its own onnxruntime session
Times are the median of --runs runs, taken in alternating blocks (ms); ratios are against `ort`.
Int8 rows (benchmarks/qdq_models.py: QDQ ResNet50 and a small QDQ CNN, compiled the same way):
  ort          onnxruntime on the QDQ model itself (it fuses the units into QLinearConv/QGemm)
  auto         the graph runner with kernels="auto"
  numpy        the graph runner with xgraph's numpy kernels (integer units, xgraph/runners/int8_fusion.py)
  floor        the integer matrix products the int8 convolutions and Gemms need, alone, as the numpy
               kernels run them: float32 BLAS, exact (xgraph/kernels/integer_products.py; numpy has no
               int8 GEMM), best of 1 thread / split on the intra-op threads / BLAS threads
               (measured as benchmarks/gemm_floor.py does for float)
Then: dispatch overhead per subgraph hop (null runners, a chain of --hops subgraphs, on one
device and alternating two devices), throughput with 4 jobs in flight vs 1, and peak Python
heap of one numpy-kernel run (tracemalloc) beside the process's max RSS.

    python benchmarks/runtime_vs_ort.py [--models resnet50,squeezenet] [--int8-models qdq_resnet50,qdq_small_cnn]
                                        [--runs 10] [--hops 64]
"""
from __future__ import annotations

import argparse
import resource
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's xgraph and testing/
import xgraph  # noqa: E402
from xgraph import Graph  # noqa: E402

from testing.runtime import in_flight_rate, place, zoo_model  # noqa: E402


def median_time(fn, runs: int) -> float:
    """Median wall time of `fn()` over `runs` calls after one warm-up call (seconds)."""
    return median_times({"fn": fn}, runs)["fn"]


#: Runs of one contender back to back before the next takes over (see median_times).
BLOCK = 3
#: Pause between blocks: onnxruntime's pool keeps spinning after a run, which would slow the next contender.
SETTLE_S = 0.1


def median_times(fns: dict, runs: int) -> dict[str, float]:
    """Median and minimum ("<name> best") wall time per function.

    The contenders take turns in blocks of BLOCK runs, with a short pause between blocks, so a
    slow spell of a shared machine hits all alike while none runs against another's spinning
    threads. Each block starts with one untimed warm-up run.
    """
    times: dict[str, list[float]] = {name: [] for name in fns}
    while min(len(t) for t in times.values()) < runs:
        for name, fn in fns.items():
            time.sleep(SETTLE_S)
            fn()
            for _ in range(min(BLOCK, runs - len(times[name])) or 1):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    result = {name: statistics.median(t) for name, t in times.items()}
    result.update({f"{name} best": min(t) for name, t in times.items()})
    return result


def feeds_for(graph: Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {t.name: rng.standard_normal(t.shape).astype(np.float32) for t in graph.get_input_tensors()}


def contenders(model) -> tuple[Graph, dict[str, np.ndarray], ort.InferenceSession]:
    """The model compiled by `xgraph.compile` (default options), its random inputs, and an
    onnxruntime session on the model itself (default session options)."""
    graph = xgraph.compile(model)
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return graph, feeds_for(graph), ort.InferenceSession(model.SerializeToString(), options)


def bench_model(name: str, runs: int) -> dict[str, float]:
    """Latencies of onnxruntime and the graph runner's two kernel choices on one zoo model."""
    graph, feeds, session = contenders(zoo_model(name))
    with xgraph.create_graph_runner(graph, kernels="numpy") as numpy_runner, \
            xgraph.create_graph_runner(graph, kernels="onnxruntime") as ort_runner:
        row = median_times({"ort": lambda: session.run(None, feeds), "numpy": lambda: numpy_runner.run(feeds),
                            "ort-backed": lambda: ort_runner.run(feeds)}, runs)
        tracemalloc.start()
        numpy_runner.run(feeds)
        row["heap_peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
    row["subgraphs"] = graph.get_root_subgraph().get_children_num()
    return row


def bench_int8(name: str, runs: int) -> dict[str, float]:
    """Latencies of onnxruntime, the graph runner (auto, numpy) and the integer-product floor on one QDQ model."""
    from threadpoolctl import ThreadpoolController

    from gemm_floor import operands, products, run_all, run_split
    from qdq_models import QDQ_MODELS
    from xgraph.kernels.parallel import intra_op_threads
    model = QDQ_MODELS[name]()
    graph, feeds, session = contenders(model)
    mats = operands(products(model))
    blas = ThreadpoolController()  # found once: a small model's products take less than the library scan

    def with_blas(threads: int, fn):
        def call():
            with blas.limit(limits=threads, user_api="blas"):
                fn(mats)
        return call

    with xgraph.create_graph_runner(graph, kernels="auto") as auto_runner, \
            xgraph.create_graph_runner(graph, kernels="numpy") as numpy_runner:
        row = median_times({"ort": lambda: session.run(None, feeds), "auto": lambda: auto_runner.run(feeds),
                            "numpy": lambda: numpy_runner.run(feeds), "products 1T": with_blas(1, run_all),
                            "products split": with_blas(1, run_split),
                            "products BLAS": with_blas(intra_op_threads(), run_all)}, runs)
    for key in ("", " best"):
        row["floor" + key] = min(row[f"products {k}{key}"] for k in ("1T", "split", "BLAS"))
    row["subgraphs"] = graph.get_root_subgraph().get_children_num()
    row["gmac"] = sum(g * m * k * n for g, m, k, n in products(model)) / 1e9
    return row


def print_int8_rows(names: list[str], runs: int) -> None:
    """The int8 table: each contender's median (ms) and its ratio to onnxruntime (best runs' ratio in brackets)."""
    print(f"\nint8 (QDQ) models, median of {runs} runs (ratios of the best runs in brackets)")
    print(f"{'model':<15}{'subgraphs':>10}{'GMAC':>7}{'ort ms':>9}{'auto ms':>9}{'x ort':>14}{'numpy ms':>10}"
          f"{'x ort':>14}{'floor ms':>10}{'x ort':>14}")
    for name in names:
        r = bench_int8(name, runs)
        cells = [f"{r[k] * 1e3:.2f}" for k in ("ort", "auto", "numpy", "floor")]
        ratios = [f"{r[k] / r['ort']:.2f} ({r[k + ' best'] / r['ort best']:.2f})" for k in ("auto", "numpy", "floor")]
        print(f"{name:<15}{r['subgraphs']:>10}{r['gmac']:>7.3f}{cells[0]:>9}{cells[1]:>9}{ratios[0]:>14}"
              f"{cells[2]:>10}{ratios[1]:>14}{cells[3]:>10}{ratios[2]:>14}")
    print("  numpy kernels: integer products on float32 BLAS, exact while max|x - x_zp| * sum|w - w_zp| <= 2^24,"
          " wider reductions in chunks summed in float64 (numpy has no int8 GEMM); floor = those products alone")


def null_chain(hops: int, devices: tuple[str, ...]) -> Graph:
    nodes = [helper.make_node("Relu", ["x" if i == 0 else f"t{i - 1}"], [f"t{i}" if i < hops - 1 else "y"],
                              name=f"op{i:04d}") for i in range(hops)]
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    graph = Graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    device_of = {f"op{i:04d}": devices[i % len(devices)] for i in range(hops)}
    return place(graph, device_of, runner="null", merge=False)


def bench_dispatch(hops: int, runs: int) -> dict[str, float]:
    """Microseconds per subgraph hop for null-runner chains, and the bare runner call it wraps."""
    x = {"x": np.zeros((1, 4), np.float32)}
    result = {}
    for label, devices in (("same device", ("AICORE",)), ("alternating devices", ("AICORE", "AICPU"))):
        with xgraph.create_graph_runner(null_chain(hops, devices)) as runner:
            result[label] = median_time(lambda: runner.run(x), runs) / hops * 1e6
            runners = list(runner.runners.values())
            arg = [x["x"]]
            result["bare execute"] = median_time(lambda: [r.execute(arg) for r in runners], runs) / hops * 1e6
    return result


def bench_throughput(name: str, kernels: str, jobs: int) -> dict[str, float]:
    """Jobs per second with 1 and with 4 jobs in flight."""
    graph = xgraph.compile(zoo_model(name))
    feeds = feeds_for(graph)
    result = {}
    for in_flight in (1, 4):
        with xgraph.create_graph_runner(graph, kernels=kernels, max_jobs_in_flight=in_flight) as runner:
            runner.run(feeds)
            result[in_flight] = in_flight_rate(runner, feeds, jobs, in_flight)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,squeezenet,inception_v1")
    parser.add_argument("--int8-models", default="qdq_resnet50,qdq_small_cnn",
                        help="QDQ models of benchmarks/qdq_models.py ('' for none)")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--hops", type=int, default=64)
    parser.add_argument("--jobs", type=int, default=16)
    parser.add_argument("--only-int8", action="store_true", help="only the int8 rows")
    args = parser.parse_args()
    if args.only_int8:
        print_int8_rows(args.int8_models.split(","), args.runs)
        return

    print(f"median of {args.runs} runs (ratios of the best runs in brackets)")
    print(f"{'model':<14}{'subgraphs':>10}{'ort ms':>9}{'numpy ms':>10}{'x ort':>14}{'ort-backed ms':>15}"
          f"{'x ort':>14}{'heap peak MB':>14}")
    for name in args.models.split(","):
        r = bench_model(name, args.runs)
        numpy_ratio = f"{r['numpy'] / r['ort']:.2f} ({r['numpy best'] / r['ort best']:.2f})"
        backed_ratio = f"{r['ort-backed'] / r['ort']:.2f} ({r['ort-backed best'] / r['ort best']:.2f})"
        print(f"{name:<14}{r['subgraphs']:>10}{r['ort'] * 1e3:>9.1f}{r['numpy'] * 1e3:>10.1f}{numpy_ratio:>14}"
              f"{r['ort-backed'] * 1e3:>15.1f}{backed_ratio:>14}{r['heap_peak_mb']:>14.1f}")

    if args.int8_models:
        print_int8_rows(args.int8_models.split(","), args.runs)

    print(f"\ndispatch overhead, null runners, chain of {args.hops} subgraphs (us per hop):")
    for label, us in bench_dispatch(args.hops, max(args.runs, 20)).items():
        print(f"  {label:<22}{us:>8.1f}")

    name = args.models.split(",")[0]
    print(f"\nthroughput, {name}, {args.jobs} jobs (jobs/s):")
    for kernels in ("onnxruntime", "numpy"):
        t = bench_throughput(name, kernels, args.jobs)
        print(f"  {kernels:<12} 1 in flight {t[1]:>7.2f}   4 in flight {t[4]:>7.2f}   x{t[4] / t[1]:.2f}")

    print(f"\nprocess max RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")


if __name__ == "__main__":
    main()
