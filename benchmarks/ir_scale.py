"""IR scale: import, queries and .xmodel I/O on 1k/10k/100k-op chains and residual ladders.

Baseline: `onnx.load` + `onnx.shape_inference.infer_shapes` of the same file, measured in the
same run. Prints one table; every time is the best of `--repeat` runs (seconds).

    python benchmarks/ir_scale.py [--sizes 1000,10000,100000] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import onnx
from onnx import TensorProto, helper

from xgraph import Graph


def build_model(n: int, kind: str) -> onnx.ModelProto:
    """A chain (Relu/Add alternating) or a ladder (op i also reads op i-8, a residual edge)."""
    nodes, prev = [], "x"
    outs = ["x"]
    for i in range(n):
        name = f"t{i}"
        if kind == "ladder" and i >= 8 and i % 2 == 0:
            nodes.append(helper.make_node("Add", [prev, outs[-8]], [name], name=f"n{i}"))
        elif i % 2:
            nodes.append(helper.make_node("Relu", [prev], [name], name=f"n{i}"))
        else:
            nodes.append(helper.make_node("Neg", [prev], [name], name=f"n{i}"))
        outs.append(name)
        prev = name
    g = helper.make_graph(nodes, f"{kind}{n}", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])],
                          [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [1, 8])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def best(fn, repeat: int) -> tuple[float, object]:
    result, times = None, []
    for _ in range(repeat):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def measure(n: int, kind: str, repeat: int, folder: str) -> dict[str, float]:
    path = os.path.join(folder, f"{kind}{n}.onnx")
    onnx.save(build_model(n, kind), path)
    row: dict[str, float] = {}
    # baseline and from_onnx alternate, so a slow spell of a shared machine hits both alike
    base_times, own_times, g = [], [], None
    for _ in range(repeat):
        t, _ = best(lambda: onnx.shape_inference.infer_shapes(onnx.load(path)), 1)
        base_times.append(t)
        t, g = best(lambda: Graph.from_onnx(path), 1)
        own_times.append(t)
    row["onnx load+infer"], row["from_onnx"] = min(base_times), min(own_times)
    # re-declaring the outputs is a mutation that changes nothing but drops the cached order
    row["toposort"], _ = best(lambda: (g.set_outputs(g.get_output_tensors()), g.toposort()), repeat)
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    order = root.toposort_child_subgraph()
    half = root.merge_children(set(order[: len(order) // 2]))
    row["sg in/out"], _ = best(lambda: (half.get_input_tensors(), half.get_output_tensors()), repeat)
    xpath = os.path.join(folder, f"{kind}{n}.xmodel")
    row["serialize"], _ = best(lambda: g.serialize(xpath), repeat)
    row["deserialize"], _ = best(lambda: Graph.deserialize(xpath), repeat)
    return row


def main() -> None:
    """Run the benchmark and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    cols = ["onnx load+infer", "from_onnx", "toposort", "sg in/out", "serialize", "deserialize"]
    print(f"{'model':>14} " + " ".join(f"{c:>16}" for c in cols) + f" {'from_onnx/onnx':>15}")
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for kind in ("chain", "ladder"):
            for n in sizes:
                r = measure(n, kind, args.repeat, folder)
                rows[(kind, n)] = r
                print(f"{kind + str(n):>14} " + " ".join(f"{r[c]:>16.4f}" for c in cols)
                      + f" {r['from_onnx'] / r['onnx load+infer']:>14.2f}x", flush=True)
    if len(sizes) >= 2:
        a, b = sizes[-2], sizes[-1]
        print(f"\nscaling {a} -> {b} ops (x{b // a} ops; linear means ~x{b // a}):")
        for kind in ("chain", "ladder"):
            print(f"  {kind:>6}: " + "  ".join(f"{c} x{rows[(kind, b)][c] / max(rows[(kind, a)][c], 1e-9):.1f}" for c in cols))


if __name__ == "__main__":
    main()
