"""The matrix-product floor of the numpy kernels, against onnxruntime, measured in the same run.

The numpy kernels lower every convolution (one group or several) and every Gemm/MatMul with
constant weights to matrix products on numpy's BLAS. This script runs just those products, with
the shapes the lowering gives them for one zoo model and nothing else (no im2col gather, no
epilogue, no other op), and sets them beside onnxruntime's time for the whole model and the
graph runner's time with the numpy kernels:

  ort             onnxruntime on the whole model (default session options)
  numpy kernels   the graph runner with xgraph's numpy kernels (what runtime_vs_ort.py measures)
  products 1T     the products one after another, BLAS on one thread
  products split  each product cut in two (the larger of its two sides) on xgraph's intra-op threads
  products BLAS   each product on BLAS's own threads (as many as the intra-op threads)

No kernel built on numpy's BLAS can be faster than the products it has to run, so the best of
the three `products` rows is the floor for the numpy kernels' ratio to onnxruntime. Depthwise
convolutions run as element-wise passes, not products, and are left out (the floor is lower).

    python benchmarks/gemm_floor.py [--models resnet50,vgg19] [--runs 9]
"""
from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

import numpy as np
import onnx
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # this tree's xgraph and testing/
import xgraph  # noqa: E402
from xgraph.kernels.parallel import chunks, intra_op_threads, run_parallel  # noqa: E402

from testing.runtime import zoo_model  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from runtime_vs_ort import contenders, median_times  # noqa: E402


def dims(value: onnx.ValueInfoProto) -> list[int]:
    return [d.dim_value for d in value.type.tensor_type.shape.dim]


def products(model: onnx.ModelProto) -> list[tuple[int, int, int, int]]:
    """(batch, M, K, N) of every matrix product the numpy kernels' lowering runs for `model` (batch 1 images)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {v.name: dims(v) for v in [*inferred.graph.value_info, *inferred.graph.output, *inferred.graph.input]}
    shapes.update({t.name: list(t.dims) for t in model.graph.initializer})
    found = []
    for node in model.graph.node:
        if node.op_type == "Conv":
            w, y = shapes[node.input[1]], shapes[node.output[0]]
            group = next((a.i for a in node.attribute if a.name == "group"), 1)
            if w[1] == 1 and group > 1:
                continue  # depthwise: element-wise passes in the numpy kernels
            found.append((group, w[0] // group, int(np.prod(w[1:])), int(np.prod(y[2:]))))
        elif node.op_type in ("Gemm", "MatMul") and node.input[1] in shapes and len(shapes[node.input[1]]) == 2:
            a, b = shapes[node.input[0]], shapes[node.input[1]]
            trans_b = any(x.name == "transB" and x.i for x in node.attribute)
            k, n = (b[1], b[0]) if trans_b else (b[0], b[1])
            found.append((1, int(np.prod(a[:-1])) if a else 1, k, n))
    return found


def operands(shapes: list[tuple[int, int, int, int]], seed: int = 0) -> list[tuple[np.ndarray, ...]]:
    """Fresh random operands and an output per product (each its own memory, as in a real run)."""
    rng = np.random.default_rng(seed)
    return [(rng.random((g, m, k), dtype=np.float32), rng.random((g, k, n), dtype=np.float32),
             np.empty((g, m, n), np.float32)) for g, m, k, n in shapes]


def run_all(mats) -> None:
    for a, b, c in mats:
        np.matmul(a, b, out=c)


def run_split(mats) -> None:
    parts = intra_op_threads()
    for a, b, c in mats:
        m, n = a.shape[1], b.shape[2]
        if m >= n:
            tasks = [partial(np.matmul, a[:, i:j], b, out=c[:, i:j]) for i, j in chunks(m, parts)]
        else:
            tasks = [partial(np.matmul, a, b[:, :, i:j], out=c[:, :, i:j]) for i, j in chunks(n, parts)]
        run_parallel(tasks)


def bench(name: str, runs: int) -> dict[str, float]:
    model = zoo_model(name)
    shapes = products(model)
    mats = operands(shapes)
    graph, feeds, session = contenders(model)

    def with_blas(threads: int, fn):
        def call():
            with threadpool_limits(limits=threads, user_api="blas"):
                fn(mats)
        return call

    with xgraph.create_graph_runner(graph, kernels="numpy") as runner:
        row = median_times({"ort": lambda: session.run(None, feeds), "numpy kernels": lambda: runner.run(feeds),
                            "products 1T": with_blas(1, run_all), "products split": with_blas(1, run_split),
                            "products BLAS": with_blas(intra_op_threads(), run_all)}, runs)
    row["gmac"] = sum(g * m * k * n for g, m, k, n in shapes) / 1e9
    row["count"] = len(shapes)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    names = ("ort", "numpy kernels", "products 1T", "products split", "products BLAS")
    print(f"median of {args.runs} runs, ms (x onnxruntime; GMAC/s of the products), {intra_op_threads()} threads")
    for model in args.models.split(","):
        r = bench(model, args.runs)
        print(f"\n{model}: {r['count']} products, {r['gmac']:.2f} GMAC")
        for key in names:
            ms, ratio = r[key] * 1e3, r[key] / r["ort"]
            print(f"  {key:<16}{ms:>8.1f}   x{ratio:<6.2f}{r['gmac'] / r[key]:>6.0f} GMAC/s"
                  f"   best x{r[key + ' best'] / r['ort best']:.2f}")
        floor = min(r[k] for k in names[2:]) / r["ort"]
        print(f"  floor for the numpy kernels: x{floor:.2f} onnxruntime")


if __name__ == "__main__":
    main()
